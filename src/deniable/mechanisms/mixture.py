"""Mixtures of mechanisms: run one of several, chosen at random with a public distribution.

A release that picks mechanism ``Mᵢ`` with public probability ``wᵢ`` and runs only it costs
the *largest* of their losses, not their sum (thesis Proposition 3; the convexity argument
of Li–Qardaji–Su). The reason, for neighbouring ``D, D'`` and the output ``(i, Mᵢ(D))``
*with the choice revealed* (which is stronger than hiding it: dropping ``i`` is
post-processing):

* ``(ε, δ)``-DP (pure ε is ``δ = 0``): for every event ``S``, writing ``Sᵢ`` for its slice at
  choice ``i``, ``P[(I, M_I(D)) ∈ S] = Σ wᵢ P[Mᵢ(D) ∈ Sᵢ] ≤ Σ wᵢ (e^εᵢ P[Mᵢ(D') ∈ Sᵢ] + δᵢ)
  ≤ e^(max ε) P[(I, M_I(D')) ∈ S] + max δ``: the DP inequality is linear in the output
  law, so it survives convex combinations with the largest constants.
* ρ-zCDP: the output laws are ``P = Σ wᵢ (eᵢ ⊗ Pᵢ)`` and ``Q = Σ wᵢ (eᵢ ⊗ Qᵢ)`` with the same
  public weights, and ``e^((λ−1) D_λ(P‖Q)) = Σ wᵢ e^((λ−1) D_λ(Pᵢ‖Qᵢ))`` (the choice is a
  disjoint label), which is at most ``e^((λ−1) max_i D_λ(Pᵢ‖Qᵢ))``: Rényi divergence is
  jointly quasi-convex, so ``D_λ(P‖Q) ≤ max ρᵢ λ`` for every λ > 1.

Losses of different kinds are first expressed in one kind where that needs no free
parameter (pure ε joins ``(ε, δ)`` as ``(ε, 0)`` and ρ-zCDP as ``ε²/2``;
:func:`deniable.accounting.composition.common_kind`), then the component-wise maximum is
taken — the same arithmetic as parallel composition, for a different reason.

The choice is drawn exactly (a chain of exact Bernoulli draws of rationals from
:mod:`deniable.noise`, no floats), then only the chosen mechanism runs. Which mechanism ran
may show (timing, the output's grid): the guarantee above holds with the choice revealed,
and :attr:`MixtureRelease.chosen` reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from deniable.accounting.composition import compose_parallel
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InvalidParameter
from deniable.mechanisms.release import Release
from deniable.noise.bernoulli import bernoulli
from deniable.noise.exact import RationalLike, to_fraction
from deniable.noise.source import RandomSource, resolve

Runner = Callable[[RandomSource], Release]
"""Runs one candidate mechanism with the given randomness and returns its release."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One mechanism a mixture may run.

    Attributes:
        run: called with the mixture's random source when (and only when) this candidate is
            chosen, e.g. ``lambda src: laplace(x, sensitivity=1, epsilon=1, source=src)``.
        loss: the candidate's privacy loss, declared up front (the mixture is charged before
            anything runs); the release it returns must not report more.
        weight: its probability of being chosen, an exact rational in ``(0, 1]`` (floats are
            read as the decimal they print as: ``0.1`` is 1/10).
        name: a label for messages (default ``"candidate i"``).
    """

    run: Runner
    loss: PrivacyLoss
    weight: RationalLike
    name: str = ""


@dataclass(frozen=True, slots=True)
class MixtureRelease(Release):
    """The release of the chosen candidate, charged the mixture's loss.

    ``value``, ``scale``, ``granularity`` and ``noise`` are the chosen candidate's, so
    :meth:`interval` is the chosen mechanism's exact interval: it covers the true value with
    probability ≥ ``level`` given the choice, hence also overall.

    Attributes:
        chosen: index of the candidate that ran (public: the loss holds with it revealed).
        weights: the public distribution of the choice.
        component: the chosen candidate's own release (its own, smaller, loss).
    """

    chosen: int = 0
    weights: tuple[Fraction, ...] = ()
    component: Release | None = field(default=None)


def mixture_loss(losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
    """Privacy map of a mixture: the component-wise maximum of the candidates' losses.

    Valid for any public distribution over the candidates, even with the choice revealed
    (module docstring: convexity of the ``(ε, δ)`` inequality; joint quasi-convexity of Rényi
    divergence for ρ-zCDP). Mixed kinds are expressed in their common kind first.

    Raises:
        InvalidParameter: no loss, or ρ-zCDP mixed with ``(ε, δ)`` with ``δ > 0`` (convert the
            ρ losses with ``zcdp_to_approx(loss, delta=...)`` first).

    Examples:
        >>> mixture_loss([Epsilon(epsilon=1), Epsilon(epsilon=0.5)])
        Epsilon(epsilon=1)
        >>> mixture_loss([Epsilon(epsilon=1), Rho(rho=0.25)])
        Rho(rho=0.5)
    """
    items = list(losses)
    if not items:
        raise InvalidParameter("a mixture needs at least one candidate")
    return compose_parallel(items)


def mixture_weights(weights: Sequence[RationalLike]) -> tuple[Fraction, ...]:
    """Validate a public distribution: exact positive rationals that sum to exactly 1.

    Raises:
        InvalidParameter: no weight, a weight ≤ 0 (drop that candidate instead), or a total
            other than 1.

    Examples:
        >>> mixture_weights([0.1, 0.2, 0.7])
        (Fraction(1, 10), Fraction(1, 5), Fraction(7, 10))
    """
    out = tuple(to_fraction(w, "weight") for w in weights)
    if not out:
        raise InvalidParameter("a mixture needs at least one candidate")
    if any(w <= 0 for w in out):
        raise InvalidParameter("mixture weights must be > 0: drop a candidate that is never chosen")
    total = sum(out, Fraction(0))
    if total != 1:
        raise InvalidParameter(
            f"mixture weights must sum to exactly 1, got {float(total):.6g}: pass exact "
            "fractions such as Fraction(1, 3)"
        )
    return out


def choose(weights: Sequence[Fraction], *, source: RandomSource | None = None) -> int:
    """Draw index ``i`` with probability exactly ``weights[i]`` (a validated distribution).

    Coin ``i`` is Bernoulli(``wᵢ / (wᵢ + … + w_last)``), all drawn at once, and the first
    heads wins (the last candidate if none): ``P[i] = wᵢ/Rᵢ · ∏_{j<i} (1 − wⱼ/Rⱼ) = wᵢ``
    with ``Rᵢ = Σ_{j≥i} wⱼ``, since ``1 − wⱼ/Rⱼ = Rⱼ₊₁/Rⱼ`` telescopes. Exact rationals only.
    """
    src = resolve(source)
    remaining = Fraction(1)
    heads: list[bool] = []
    for w in weights[:-1]:
        heads.append(bool(bernoulli(w / remaining, 1, source=src)[0]))
        remaining -= w
    return heads.index(True) if True in heads else len(weights) - 1


def mixture(
    candidates: Sequence[Candidate], *, source: RandomSource | None = None
) -> MixtureRelease:
    """Run one candidate mechanism, chosen with the candidates' public weights.

    Privacy loss: :func:`mixture_loss` of the candidates' declared losses — their
    component-wise maximum, not their sum — whichever one runs, and even though
    :attr:`MixtureRelease.chosen` reveals which.

    Args:
        candidates: the mechanisms, each with its declared loss and weight (the weights must
            be positive and sum to exactly 1).
        source: randomness for the choice and for the chosen mechanism (default: the OS
            CSPRNG).

    Returns:
        A :class:`MixtureRelease`: the chosen candidate's value, noise and interval, with
        ``loss`` the mixture's and ``mechanism`` ``"mixture:<name>"``.

    Raises:
        InvalidParameter: bad weights, losses that have no common kind, or a candidate
            whose release reports more than it declared (nothing is returned then).

    Examples:
        >>> from deniable.mechanisms import geometric
        >>> from deniable.noise.testing import SeededRandom
        >>> r = mixture(
        ...     [
        ...         Candidate(lambda s: geometric([5], sensitivity=1, epsilon=1, source=s),
        ...                   Epsilon(epsilon=1), Fraction(1, 3)),
        ...         Candidate(lambda s: geometric([5], sensitivity=1, epsilon=0.5, source=s),
        ...                   Epsilon(epsilon=0.5), Fraction(2, 3)),
        ...     ],
        ...     source=SeededRandom(3),
        ... )
        >>> r.loss, r.chosen in (0, 1)
        (Epsilon(epsilon=1), True)
    """
    items = list(candidates)
    for c in items:
        if not isinstance(c, Candidate):
            raise InvalidParameter("mixture() takes a sequence of Candidate(run, loss, weight)")
        if not isinstance(c.loss, Epsilon | EpsilonDelta | Rho):
            raise InvalidParameter("a candidate's loss must be an Epsilon, EpsilonDelta or Rho")
        if not callable(c.run):
            raise InvalidParameter("a candidate's run must be callable with a random source")
    weights = mixture_weights([c.weight for c in items])
    loss = mixture_loss(c.loss for c in items)
    src = resolve(source)
    i = choose(weights, source=src)
    chosen = items[i]
    rel = chosen.run(src)
    name = chosen.name or f"candidate {i}"
    if not isinstance(rel, Release):
        raise InvalidParameter(f"mixture {name} returned no Release")
    declared = convert(chosen.loss, type(loss))
    if not convert(rel.loss, type(loss)) <= declared:  # type: ignore[operator]
        raise InvalidParameter(
            f"mixture {name} released more than its declared loss; declare its true loss "
            "(nothing was returned)"
        )
    return MixtureRelease(
        value=rel.value,
        loss=loss,
        mechanism=f"mixture:{rel.mechanism}",
        scale=rel.scale,
        granularity=rel.granularity,
        noise=rel.noise,
        chosen=i,
        weights=weights,
        component=rel,
    )
