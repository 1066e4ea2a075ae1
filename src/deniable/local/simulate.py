"""A survey simulator: respondents with a known true distribution → reports → estimates.

The population is built with *exactly* the stated composition (``n·truth`` respondents per
category, rounded by largest remainders), so the truth the estimate is compared with is the
respondents' own frequency, the quantity the estimators are unbiased for. Each respondent
then randomises locally and the server estimates. This is a teaching and testing tool: no
real data goes through it, so it may be driven by a seeded source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.local.estimators import FrequencyEstimate
from deniable.local.randomizers import LocalRandomizer
from deniable.noise.exact import RationalLike, to_fraction
from deniable.noise.source import RandomSource, resolve

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class SurveyResult:
    """The outcome of one simulated survey.

    Attributes:
        labels: the categories.
        true_counts: respondents per category.
        estimate: the server's estimate from the randomised reports.
        loss: the ε-LDP each respondent spent (one report each).
    """

    labels: tuple[Any, ...]
    true_counts: I64
    estimate: FrequencyEstimate
    loss: Epsilon

    @property
    def n(self) -> int:
        """Number of respondents."""
        return int(self.true_counts.sum())

    @property
    def truth(self) -> F64:
        """The respondents' true frequencies."""
        return self.true_counts / self.n

    def covered(self, level: float = 0.95) -> npt.NDArray[np.bool_]:
        """Whether each category's normal-approximation interval contains the truth."""
        lo, hi = self.estimate.interval(level)
        t = self.truth
        return (lo <= t) & (t <= hi)


def population_counts(truth: Sequence[RationalLike], n: int) -> I64:
    """Split ``n`` respondents by ``truth`` exactly (largest remainders; ties to the first).

    Examples:
        >>> population_counts([0.7, 0.3], 10).tolist()
        [7, 3]
        >>> population_counts([Fraction(1, 3)] * 3, 10).tolist()
        [4, 3, 3]
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameter("n must be an integer ≥ 1")
    fr = [to_fraction(t, "truth") for t in truth]
    if not fr or any(t < 0 for t in fr):
        raise InvalidParameter("truth must be a non-empty list of frequencies ≥ 0")
    total = sum(fr, Fraction(0))
    if abs(total - 1) > Fraction(1, 10**9):
        raise InvalidParameter("the true frequencies must sum to 1")
    exact = [t / total * n for t in fr]
    counts = [int(e) for e in exact]
    order = sorted(range(len(fr)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return np.array(counts, dtype=np.int64)


def simulate_survey(
    randomizer: LocalRandomizer[Any],
    truth: RationalLike | Sequence[RationalLike],
    n: int,
    *,
    domain: Sequence[Any] | None = None,
    source: RandomSource | None = None,
) -> SurveyResult:
    """Simulate ``n`` respondents with true distribution ``truth`` answering once each.

    Args:
        randomizer: the local randomiser every respondent uses.
        truth: one frequency per category of the randomiser's domain; for a yes/no
            randomiser a single number is the fraction of "yes".
        n: number of respondents.
        domain: the categories, required for an open-domain randomiser (the Bloom encoder:
            the candidate strings); defaults to the randomiser's own domain.
        source: randomness of the respondents' randomisers (CSPRNG by default).

    Examples:
        >>> from deniable.local.randomizers import CoinRandomizedResponse
        >>> from deniable.noise.testing import SeededRandom
        >>> r = simulate_survey(CoinRandomizedResponse(q=0.5), 0.3, 10_000,
        ...                     source=SeededRandom(1))
        >>> r.truth.tolist(), abs(r.estimate.fraction - 0.3) < 0.06
        ([0.7, 0.3], True)
    """
    labels = tuple(domain) if domain is not None else randomizer.domain
    if labels is None:
        raise InvalidParameter("this randomiser has an open domain: pass domain=[...]")
    if isinstance(truth, int | float | Fraction) and not isinstance(truth, bool):
        if len(labels) != 2:
            raise InvalidParameter("a single truth value needs a yes/no randomiser")
        yes = to_fraction(truth, "truth")
        if not 0 <= yes <= 1:
            raise InvalidParameter("the true fraction must be in [0, 1]")
        freqs: Sequence[RationalLike] = [1 - yes, yes]
    else:
        freqs = list(truth)  # type: ignore[arg-type]
    if len(freqs) != len(labels):
        raise InvalidParameter(f"need one true frequency per category ({len(labels)})")
    counts = population_counts(freqs, n)
    index = np.repeat(np.arange(len(labels), dtype=np.int64), counts)
    values: Any = index if randomizer.domain is not None else [labels[i] for i in index]
    reports = randomizer.randomize(values, source=resolve(source))
    estimate = randomizer.estimate(reports, domain=labels)
    return SurveyResult(labels=labels, true_counts=counts, estimate=estimate, loss=randomizer.loss)
