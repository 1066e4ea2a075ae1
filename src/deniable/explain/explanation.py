"""One object that explains a privacy loss: the sentence, the numbers and the figure.

``explain(epsilon, delta=…, prior=…)`` is what a notebook user calls: the object prints as
the sentence, renders inline as the posterior figure (``_repr_png_``) with the sentence under
it (``_repr_markdown_``), and carries the numbers. Nothing here reads data or spends budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from deniable.accounting.loss import Number, PrivacyLoss
from deniable.explain.posterior import (
    DEFAULT_EVIDENCE,
    approx_posterior_bounds,
    effective_epsilon,
    split_loss,
)
from deniable.explain.text import explain_loss

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Explanation:
    """What a loss ``(epsilon, delta)`` lets an attacker with ``prior`` conclude.

    Attributes:
        epsilon: ε (exact).
        delta: δ (exact; 0 for pure ε).
        prior: the attacker's initial suspicion that the target is in the data.
        evidence: with δ > 0, the least probability of the evidence the bounds cover.
        low: the least posterior suspicion.
        high: the greatest posterior suspicion.
        effective_epsilon: the pure ε with the same bounds for such evidence (= ε if δ = 0).
        text: the plain-language sentence.
    """

    epsilon: Fraction
    delta: Fraction
    prior: float
    evidence: float
    low: float
    high: float
    effective_epsilon: float
    text: str

    def figure(self) -> Figure:
        """The posterior bounds against the prior, this prior marked (thesis Figure 2.1)."""
        from deniable.explain.plots import posterior_figure  # matplotlib only when drawing

        return posterior_figure(
            self.epsilon, delta=self.delta, evidence=self.evidence, prior=self.prior
        )

    def __str__(self) -> str:
        return self.text

    def _repr_png_(self) -> bytes:
        from deniable.explain.plots import png_bytes

        return png_bytes(self.figure())

    def _repr_markdown_(self) -> str:
        return self.text


def explain(
    epsilon: Number | PrivacyLoss,
    delta: Number | None = None,
    prior: Number = Fraction(1, 2),
    *,
    evidence: Number = DEFAULT_EVIDENCE,
) -> Explanation:
    """Explain ``epsilon`` (or an ``(ε, δ)`` loss) for an attacker with ``prior``.

    Raises:
        InvalidParameter: ε negative or not finite, δ outside [0, 1), a prior outside (0, 1),
            evidence outside (0, 1].

    Examples:
        >>> e = explain(1, prior=0.5)
        >>> round(e.high, 3), round(e.low, 3)
        (0.731, 0.269)
        >>> e.text.startswith("With ε = 1,")
        True
    """
    eps, d = split_loss(epsilon, delta)
    low, high = approx_posterior_bounds(prior, eps, d, evidence=evidence)
    return Explanation(
        epsilon=eps,
        delta=d,
        prior=float(prior),
        evidence=float(evidence),
        low=low,
        high=high,
        effective_epsilon=effective_epsilon(eps, d, evidence=evidence),
        text=explain_loss(eps, d, prior, evidence=evidence),
    )
