"""Composition of privacy losses: sequential, parallel and advanced.

* **Sequential** (:func:`compose`): running mechanisms one after the other on the same data,
  each possibly chosen after seeing the previous answers, costs the *sum* of their losses
  (``ε₁ + ε₂``; ``(ε₁ + ε₂, δ₁ + δ₂)``; ``ρ₁ + ρ₂``).
* **Parallel** (:func:`compose_parallel`): mechanisms on *disjoint* sets of privacy units cost
  the *maximum* (component-wise for ``(ε, δ)``).
* **Advanced** (:func:`advanced_composition`): ``k`` runs of an ``(ε, δ)`` mechanism are
  ``(√(2k ln(1/δ'))·ε + kε(e^ε − 1), kδ + δ')``-DP for any slack ``δ' > 0`` (Dwork–Rothblum–
  Vadhan 2010), which beats ``kε`` when ``k`` is large and ε small.

Mixed kinds are combined when that is unambiguous (see :func:`common_kind`): pure ε joins
``(ε, δ)`` as ``(ε, 0)`` and joins ρ-zCDP as ``ε²/2``. ρ-zCDP and ``(ε, δ)`` with ``δ > 0`` are
never mixed implicitly, because turning ρ into ``(ε, δ)`` needs a δ only the caller can choose.
All arithmetic is exact; only the irrational advanced-composition ε is rounded, upwards.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from fractions import Fraction
from typing import overload

from deniable.accounting.bounds import expm1_interval, ln_interval, round_up, sqrt_interval
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss, Rho, exact
from deniable.errors import InvalidParameter

_LOSS_TYPES = (Epsilon, EpsilonDelta, Rho)


def _checked(losses: Iterable[PrivacyLoss]) -> list[PrivacyLoss]:
    items = list(losses)
    for item in items:
        if not isinstance(item, _LOSS_TYPES):
            raise InvalidParameter(
                f"expected Epsilon, EpsilonDelta or Rho losses, got {type(item).__name__}"
            )
    return items


def common_kind(losses: Iterable[PrivacyLoss]) -> type[PrivacyLoss]:
    """Return the loss kind in which ``losses`` can all be expressed without a free parameter.

    ``Epsilon`` if all are pure (an ``EpsilonDelta`` with ``δ = 0`` counts as pure), else
    ``Rho`` if any is ρ-zCDP, else ``EpsilonDelta``. An empty input gives ``Epsilon``.

    Raises:
        InvalidParameter: when ρ-zCDP meets ``(ε, δ)`` with ``δ > 0``; the message says to
            convert the ρ losses explicitly with ``zcdp_to_approx(loss, delta=...)``.

    Examples:
        >>> common_kind([Epsilon(epsilon=1), Rho(rho=0.1)]).__name__
        'Rho'
    """
    items = _checked(losses)
    has_rho = any(isinstance(x, Rho) for x in items)
    has_delta = any(isinstance(x, EpsilonDelta) and x.delta > 0 for x in items)
    has_approx = any(isinstance(x, EpsilonDelta) for x in items)
    if has_rho and has_delta:
        raise InvalidParameter(
            "cannot combine ρ-zCDP losses with (ε, δ) losses with δ > 0: convert the ρ-zCDP "
            "losses explicitly with a δ of your choice, "
            "deniable.accounting.zcdp_to_approx(loss, delta=...)"
        )
    if has_rho:
        return Rho
    if has_approx:
        return EpsilonDelta
    return Epsilon


def components(loss: PrivacyLoss) -> tuple[Fraction, ...]:
    """The exact numbers of a loss: ``(ε,)``, ``(ε, δ)`` or ``(ρ,)``."""
    if isinstance(loss, Epsilon):
        return (loss.epsilon,)
    if isinstance(loss, EpsilonDelta):
        return (loss.epsilon, loss.delta)
    return (loss.rho,)


def from_components(kind: type[PrivacyLoss], values: tuple[Fraction, ...]) -> PrivacyLoss:
    """Inverse of :func:`components` for ``kind`` (validates the values)."""
    if kind is Epsilon:
        return Epsilon(epsilon=values[0])
    if kind is EpsilonDelta:
        return approx(values[0], values[1])
    return Rho(rho=values[0])


def approx(epsilon: Fraction, delta: Fraction) -> EpsilonDelta:
    """``EpsilonDelta(epsilon, delta)``, refusing a δ that reaches 1 with a clear message."""
    if delta >= 1:
        raise InvalidParameter("the resulting delta reaches 1: the guarantee would be vacuous")
    return EpsilonDelta(epsilon=epsilon, delta=delta)


@overload
def compose(losses: Iterable[Epsilon]) -> Epsilon: ...
@overload
def compose(losses: Iterable[EpsilonDelta]) -> EpsilonDelta: ...
@overload
def compose(losses: Iterable[Rho]) -> Rho: ...
@overload
def compose(losses: Iterable[PrivacyLoss]) -> PrivacyLoss: ...
def compose(losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
    """Sequential composition: the exact sum of ``losses``, in their :func:`common_kind`.

    The total holds even when each mechanism is chosen after seeing the previous answers.
    The empty composition is ``Epsilon(epsilon=0)``, the zero of every kind.

    With ρ-zCDP in the mix each pure ε is converted on its own (``ε²/2``) before summing,
    which is tighter than converting a sum of ε's (``ε₁²/2 + ε₂²/2 ≤ (ε₁ + ε₂)²/2``). So
    ``compose`` is associative within a kind and across pure/``(ε, δ)``, but nesting pure
    losses before they meet ρ gives a valid, looser total: pass one flat list.

    Raises:
        InvalidParameter: for a non-loss item, for ρ-zCDP mixed with ``(ε, δ)`` (convert
            with ``zcdp_to_approx`` first), or when the summed δ reaches 1.

    Examples:
        >>> compose([Epsilon(epsilon=0.5), EpsilonDelta(epsilon=1, delta=1e-6)])
        EpsilonDelta(epsilon=1.5, delta=1e-06)
        >>> compose([Epsilon(epsilon=1), Rho(rho=0.25)])
        Rho(rho=0.75)
    """
    items = _checked(losses)
    kind = common_kind(items)
    totals: list[Fraction] | None = None
    for item in items:
        values = components(convert(item, kind))
        totals = (
            list(values) if totals is None else [t + v for t, v in zip(totals, values, strict=True)]
        )
    if totals is None:
        return Epsilon(epsilon=0)
    return from_components(kind, tuple(totals))


@overload
def compose_parallel(losses: Iterable[Epsilon]) -> Epsilon: ...
@overload
def compose_parallel(losses: Iterable[EpsilonDelta]) -> EpsilonDelta: ...
@overload
def compose_parallel(losses: Iterable[Rho]) -> Rho: ...
@overload
def compose_parallel(losses: Iterable[PrivacyLoss]) -> PrivacyLoss: ...
def compose_parallel(losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
    """Parallel composition: the component-wise maximum of ``losses``, in their common kind.

    Valid only when each mechanism reads a *disjoint* set of privacy units (e.g. one noisy
    count per group when every unit is in at most one group). The empty composition is
    ``Epsilon(epsilon=0)``.

    Raises:
        InvalidParameter: as for :func:`compose`.

    Examples:
        >>> compose_parallel(
        ...     [EpsilonDelta(epsilon=1, delta=0), EpsilonDelta(epsilon=0.5, delta=1e-6)]
        ... )
        EpsilonDelta(epsilon=1, delta=1e-06)
    """
    items = _checked(losses)
    kind = common_kind(items)
    maxima: list[Fraction] | None = None
    for item in items:
        values = components(convert(item, kind))
        maxima = (
            list(values)
            if maxima is None
            else [max(m, v) for m, v in zip(maxima, values, strict=True)]
        )
    if maxima is None:
        return Epsilon(epsilon=0)
    return from_components(kind, tuple(maxima))


def positive_count(k: int, name: str = "k") -> int:
    """Validate a count: an integer ``≥ 1`` (bools refused)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidParameter(f"{name} must be an integer, got {type(k).__name__}")
    if k < 1:
        raise InvalidParameter(f"{name} must be ≥ 1, got {int(k)}")
    return int(k)


def advanced_composition(
    loss: Epsilon | EpsilonDelta, *, k: int, delta_slack: Number
) -> EpsilonDelta:
    """The k-fold adaptive composition of one ``(ε, δ)`` loss by the advanced theorem.

    Returns ``(ε', kδ + δ')`` with ``ε' = √(2k ln(1/δ'))·ε + kε(e^ε − 1)`` rounded up, or
    the plain sum ``(kε, kδ)`` when that is no larger in ε (it is then better in both
    components, so it is the guarantee to use).

    Args:
        loss: the loss of each of the ``k`` runs (pure ε counts as ``(ε, 0)``).
        k: the number of runs, ``≥ 1``.
        delta_slack: the extra ``δ' ∈ (0, 1)`` traded for the smaller ε.

    Raises:
        InvalidParameter: for a ρ-zCDP loss (compose those with :func:`compose`, which is
            already tight for zCDP), a bad ``k`` or ``δ'``, or a total δ reaching 1.

    Examples:
        >>> out = advanced_composition(Epsilon(epsilon=0.01), k=10_000, delta_slack=1e-6)
        >>> round(float(out.epsilon), 4), float(out.delta)
        (6.2615, 1e-06)
    """
    if not isinstance(loss, Epsilon | EpsilonDelta):
        raise InvalidParameter(
            "advanced composition takes an Epsilon or EpsilonDelta loss; "
            "ρ-zCDP losses compose tightly by plain addition (use compose)"
        )
    count = positive_count(k)
    slack = exact(delta_slack, "delta_slack")
    if not 0 < slack < 1:
        raise InvalidParameter("delta_slack must be in (0, 1)")
    per = convert(loss, EpsilonDelta)
    eps, delta = per.epsilon, per.delta
    basic_eps = count * eps
    if eps >= 1:  # then kε(e^ε − 1) > kε already: the plain sum wins without computing
        return approx(basic_eps, count * delta)
    _, ln_hi = ln_interval(1 / slack)
    _, root_hi = sqrt_interval(2 * count * ln_hi)
    _, expm1_hi = expm1_interval(eps)
    advanced_eps = round_up(root_hi * eps + count * eps * expm1_hi)
    if basic_eps <= advanced_eps:
        return approx(basic_eps, count * delta)
    return approx(advanced_eps, count * delta + slack)
