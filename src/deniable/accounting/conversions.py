"""Conversions between privacy-loss kinds: pure ε, (ε, δ) and ρ-zCDP.

* ``ε``-DP is ``(ε, 0)``-DP, exactly.
* ``ε``-DP implies ``ε²/2``-zCDP (Bun–Steinke 2016, Prop. 1.4), exactly in rationals.
* ``ρ``-zCDP implies ``(ρ + 2√(ρ ln(1/δ)), δ)``-DP for every ``δ ∈ (0, 1)`` (Bun–Steinke
  2016, Prop. 1.3). The ε is irrational in general; it is rounded *up* to a short Fraction
  using the certified bounds of :mod:`deniable.accounting.bounds`.

:func:`convert` moves a loss into a target kind when that loses nothing or follows one of the
implications above without a free parameter; ``ρ → (ε, δ)`` needs a δ, so it is never
implicit: call :func:`zcdp_to_approx`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TypeVar, cast

from deniable.accounting.bounds import ln_interval, round_up, sqrt_interval
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss, Rho, exact
from deniable.errors import InvalidParameter

L = TypeVar("L", bound=Epsilon | EpsilonDelta | Rho)

KIND_NAMES: dict[type, str] = {
    Epsilon: "pure ε",
    EpsilonDelta: "(ε, δ)",
    Rho: "ρ-zCDP",
}


def pure_to_approx(loss: Epsilon) -> EpsilonDelta:
    """Return ``(ε, 0)`` for an ε-DP loss (exact).

    Examples:
        >>> pure_to_approx(Epsilon(epsilon=1))
        EpsilonDelta(epsilon=1, delta=0)
    """
    if not isinstance(loss, Epsilon):
        raise InvalidParameter(f"pure_to_approx needs an Epsilon, got {type(loss).__name__}")
    return EpsilonDelta(epsilon=loss.epsilon, delta=0)


def pure_to_zcdp(loss: Epsilon) -> Rho:
    """Return ``ρ = ε²/2``: an ε-DP mechanism is ``ε²/2``-zCDP (exact).

    Examples:
        >>> pure_to_zcdp(Epsilon(epsilon=1))
        Rho(rho=0.5)
    """
    if not isinstance(loss, Epsilon):
        raise InvalidParameter(f"pure_to_zcdp needs an Epsilon, got {type(loss).__name__}")
    return Rho(rho=loss.epsilon**2 / 2)


def zcdp_epsilon_upper(rho: Fraction, delta: Fraction) -> Fraction:
    """Return a Fraction ``≥ ρ + 2√(ρ ln(1/δ))`` within about one part in 2^52 of it.

    The bound is certified: ``ln`` and ``√`` are taken at their upper interval ends, and the
    sum is rounded up to 53 significant bits.
    """
    if rho == 0:
        return Fraction(0)
    _, ln_hi = ln_interval(1 / delta)
    _, root_hi = sqrt_interval(rho * ln_hi)
    return round_up(rho + 2 * root_hi)


def zcdp_to_approx(loss: Rho, *, delta: Number) -> EpsilonDelta:
    """Convert ρ-zCDP to ``(ρ + 2√(ρ ln(1/δ)), δ)``-DP, with ε rounded up (safe).

    Args:
        loss: the ρ-zCDP loss.
        delta: the δ to pay, in ``(0, 1)``.

    Raises:
        InvalidParameter: if ``loss`` is not a ``Rho`` or δ is not in ``(0, 1)``.

    Examples:
        >>> out = zcdp_to_approx(Rho(rho=0.5), delta=1e-6)
        >>> round(float(out.epsilon), 6), float(out.delta)
        (5.756522, 1e-06)
    """
    if not isinstance(loss, Rho):
        raise InvalidParameter(f"zcdp_to_approx needs a Rho, got {type(loss).__name__}")
    d = exact(delta, "delta")
    if not 0 < d < 1:
        raise InvalidParameter("delta must be in (0, 1) to convert ρ-zCDP to (ε, δ)")
    return EpsilonDelta(epsilon=zcdp_epsilon_upper(loss.rho, d), delta=d)


def convert(loss: PrivacyLoss, kind: type[L]) -> L:
    """Express ``loss`` as a loss of ``kind``, when that needs no free parameter.

    Allowed: any kind to itself; ``Epsilon`` to ``EpsilonDelta`` (δ = 0) and to ``Rho``
    (``ε²/2``); an ``EpsilonDelta`` with ``δ = 0`` is pure, so it converts like an
    ``Epsilon``. Everything else is refused: ``Rho`` to ``(ε, δ)`` needs a δ
    (:func:`zcdp_to_approx`), and neither ``Rho`` nor an ``(ε, δ)`` with ``δ > 0`` implies
    pure ε-DP.

    Raises:
        InvalidParameter: naming both kinds and what to do instead.

    Examples:
        >>> convert(Epsilon(epsilon=1), Rho)
        Rho(rho=0.5)
        >>> convert(EpsilonDelta(epsilon=1, delta=0), Epsilon)
        Epsilon(epsilon=1)
    """
    if isinstance(loss, kind):
        return loss
    pure: Epsilon | None = None
    if isinstance(loss, Epsilon):
        pure = loss
    elif isinstance(loss, EpsilonDelta) and loss.delta == 0:
        pure = Epsilon(epsilon=loss.epsilon)
    if pure is not None:
        if kind is Epsilon:
            return cast(L, pure)
        if kind is EpsilonDelta:
            return cast(L, pure_to_approx(pure))
        if kind is Rho:
            return cast(L, pure_to_zcdp(pure))
    raise InvalidParameter(incompatible_message(loss, kind))


def incompatible_message(loss: PrivacyLoss, kind: type) -> str:
    """Explain why ``loss`` cannot be expressed as ``kind`` and what to do instead."""
    have, want = KIND_NAMES[type(loss)], KIND_NAMES[kind]
    if isinstance(loss, Rho) and kind is EpsilonDelta:
        hint = (
            "convert it explicitly with a δ of your choice, "
            "deniable.accounting.zcdp_to_approx(loss, delta=...)"
        )
    elif kind is Epsilon:
        hint = "only Epsilon losses and EpsilonDelta losses with δ = 0 are pure"
    else:
        hint = (
            "an (ε, δ) loss with δ > 0 does not imply ρ-zCDP; account in (ε, δ) instead "
            "and convert the ρ-zCDP losses with deniable.accounting.zcdp_to_approx(loss, delta=...)"
        )
    return f"cannot express a {have} loss as {want}: {hint}"
