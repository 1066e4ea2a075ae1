"""Rényi and zCDP privacy filters: spend an ``(ε, δ)`` cap through ρ-zCDP composition.

Plain addition of ``(ε, δ)`` losses (:class:`~deniable.accounting.filter.BudgetFilter`) is
loose for many small releases: ``k`` Gaussian answers cost ``k`` times their ε, whereas their
zCDP losses add up and are converted to ``(ε, δ)`` once, which grows like ``√k``. This module
admits charges against an ``(ε, δ)`` cap by adding their zCDP losses instead, and does so
soundly when every charge (its mechanism *and* its privacy parameter) is chosen adaptively,
after seeing the answers to the previous ones.

Admission rules and the theorem behind each
-------------------------------------------

Sources, by the numbers they carry where published: Bun & Steinke 2016, *Concentrated
Differential Privacy: Simplifications, Extensions, and Lower Bounds* (TCC; arXiv:1605.02065);
Feldman & Zrnic, *Individual Privacy Accounting via a Rényi Filter* (NeurIPS 2021;
arXiv:2008.11193, numbering of v4); Whitehouse, Ramdas, Rogers & Wu, *Fully-Adaptive
Composition in Differential Privacy* (ICML 2023, PMLR 202; arXiv:2203.05481); Kairouz, Oh &
Viswanath 2015, *The Composition Theorem for Differential Privacy* (ICML).

:class:`RenyiFilter` — one Rényi order ``α`` fixed in advance and a bound ``B``. It admits a
charge whose RDP loss at ``α`` is ``εᵢ(α)`` while ``Σ εᵢ(α) ≤ B``. Feldman–Zrnic's Rényi
filter (Theorem 3.1: adaptive composition when the running sum of the conditional RDP
losses stays at most ``B`` on every path; the filter, Theorem 4.3 and Remark 4.4): if each
mechanism is ``(α, εᵢ(α))``-RDP given the past outputs, its ``εᵢ(α)`` chosen from them, and
the filter refuses before the sum would exceed ``B``, the whole interaction is
``(α, B)``-RDP. The loss of a charge at ``α``: ρ-zCDP → ``αρ`` (Bun–Steinke Def. 1.1: zCDP
*is* RDP at every order with ``ε(α) = αρ``); pure ε-DP → ``min(ε, αε²/2)`` (ε-DP is
``(α, ε)``-RDP for every α, and ε²/2-zCDP by Bun–Steinke Prop. 1.4). Charges with
``δ > 0`` are refused: RDP has no δ.

:class:`ZCDPFilter` — an ``(ε, δ)`` cap spent as zCDP. The cap's δ is split *before the first
charge* into ``δ_conv`` (pays the final ρ → (ε, δ) conversion) and ``δ_pool = share·δ`` (spent
additively by charges with δ > 0, e.g. private partition selection). From ``(ε, δ_conv)`` a ρ
cap ``ρ_max`` is computed once (see below). A charge ``(ρᵢ, δᵢ)`` is admitted iff
``Σρᵢ ≤ ρ_max`` and ``Σδᵢ ≤ δ_pool``; everything else is refused and changes nothing. The cap
itself is fixed too: the ledger refuses to raise the cap of a zCDP dataset once it has a
charge (lowering it only stops the filter earlier).

*Approximate zCDP* is meant in the mixture sense: ``M`` is δ-approximately ρ-zCDP if for all
neighbours ``x, x′`` the output laws split as ``M(x) = (1 − δ)P′ + δE`` and
``M(x′) = (1 − δ)Q′ + δE′`` with ``D_α(P′‖Q′) ≤ αρ`` and ``D_α(Q′‖P′) ≤ αρ`` for every
``α > 1`` (Bun–Steinke Def. 8.1: a mixture of the output law, i.e. its events are events of
the mechanism's own randomness — *not* sets of outputs, a reading under which the next
bullet is false). A weight ``1 − δ′ ≥ 1 − δ`` can always be written as ``1 − δ`` by moving
mass of ``P′`` into ``E``.

* ρ-zCDP charges (Gaussian / discrete Gaussian answers) count ``ρᵢ``.
* Pure ε-DP charges count ``ρᵢ = εᵢ²/2`` (Bun–Steinke Prop. 1.4), ``δᵢ = 0``.
* ``(εᵢ, δᵢ)`` charges count ``ρᵢ = εᵢ²/2`` and ``δᵢ``: an ``(ε, δ)``-DP mechanism is
  δ-approximately ``ε²/2``-zCDP in the mixture sense. Proof: for neighbours ``x, x′`` the
  pair ``(M(x), M(x′))`` is a post-processing ``T`` of the pair of ``(ε, δ)`` randomized
  response (Kairouz–Oh–Viswanath 2015, §2: every ``(ε, δ)``-DP pair is), whose two laws
  put mass ``δ`` on an output that names the input and ``1 − δ`` on an ε-randomized-response
  pair. Pushing the two parts through ``T`` splits ``M(x) = (1 − δ)P′ + δE`` and
  ``M(x′) = (1 − δ)Q′ + δE′`` with ``P′ = T(RR_ε(0))``, ``Q′ = T(RR_ε(1))``; their likelihood
  ratio stays within ``e^±ε`` (post-processing), and Bun–Steinke's bound for such a pair
  (Prop. 1.4; its proof bounds ``D_α(P′‖Q′) ≤ αε²/2`` for any two distributions whose
  likelihood ratio lies in ``[e^−ε, e^ε]``) gives the zCDP part. Dwork–Roth Lemma 3.17
  does *not* give this: it yields ε-indistinguishable laws within total-variation distance
  δ of ``M(x)`` and ``M(x′)``, not a common-weight mixture; and with the events read as
  sets of outputs the claim is false — ``P = (0.6, 0.4)`` and ``Q = (0.5, 0.5)`` are
  ``(0.001, 0.1)``-indistinguishable, every output set of probability ≥ 0.9 is the whole
  space, and ``D₂(P‖Q) = ln 1.04 ≈ 0.039``, far above ``2·0.001²/2``
  (``tests/unit/test_accounting_soundness_items.py`` checks all three).
* Adaptivity, δ = 0 charges only: ``Σρᵢ ≤ ρ_max`` holds with probability one, hence at every
  order ``Σ αρᵢ ≤ αρ_max``, and the Feldman–Zrnic filter at each α makes the whole
  interaction ``(α, αρ_max)``-RDP for every α, i.e. ``ρ_max``-zCDP.
* Adaptivity, with δ-charges: Whitehouse–Ramdas–Rogers–Wu, Theorem 1 (their filter for
  approximate zCDP): when each mechanism is δᵢ-approximately ρᵢ-zCDP given the past, with
  ``(ρᵢ, δᵢ)`` chosen adaptively, and the filter stops before ``Σρᵢ > ρ`` or ``Σδᵢ > δ``
  (``ρ`` and ``δ`` fixed in advance), the interaction is δ-approximately ρ-zCDP. Here
  ``ρ = ρ_max``, ``δ = δ_pool``.
* Conversion: δ-approximate ρ-zCDP implies ``(ε(ρ, δ′), δ + δ′)``-DP for the ε of any
  ρ-zCDP → ``(ε, δ′)`` conversion: for any output set ``S``,
  ``P(S) ≤ (1 − δ)P′(S) + δ ≤ (1 − δ)(e^ε Q′(S) + δ′) + δ ≤ e^ε Q(S) + δ′ + δ``, the last step
  because ``(1 − δ)Q′ ≤ Q`` (the common weight of the mixture is what makes it work). The
  conversion used is the minimum of two valid bounds: Bun–Steinke Prop. 1.3,
  ``ε = ρ + 2√(ρ ln(1/δ′))``, and the RDP bound of Canonne–Kamath–Steinke 2020 Prop. 12 /
  Asoodeh et al. 2021 at an order α chosen in advance,
  ``ε = αρ + ln(1 − 1/α) − (ln δ′ + ln α)/(α − 1)``. So everything the filter admitted is
  ``(ε_cap, δ_conv + δ_pool) = (ε_cap, δ_cap)``-DP.

Exactness and rounding: losses are exact Fractions and the sums are exact. ``ρ_max`` is
irrational; it is a Fraction *below* the true supremum (logarithms and roots are taken at the
safe ends of the certified intervals of :mod:`deniable.accounting.bounds`, then rounded down
to 53 bits), and the ε reported for a spent ρ is rounded *up*. The order α of the RDP bound is
picked by a floating-point search, then used as an exact rational: any α > 1 gives a valid
bound, so the search affects tightness only, never soundness. Nothing admitted is ever
understated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from deniable.accounting.bounds import ln_interval, round_down, round_up, sqrt_interval
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss, Rho, exact, show
from deniable.errors import BudgetExceeded, InvalidParameter

__all__ = [
    "DEFAULT_DELTA_SHARE",
    "RenyiFilter",
    "ZCDPAccountant",
    "ZCDPFilter",
    "ZCDPSpent",
    "rdp_loss",
    "zcdp_charge",
    "zcdp_epsilon",
    "zcdp_rho_cap",
]

DEFAULT_DELTA_SHARE = Fraction(1, 2)
"""Default share of the cap's δ kept for charges with δ > 0 (the rest pays the conversion)."""


# -- conversions --------------------------------------------------------------------------


def _argmin_alpha(f: Callable[[float], float]) -> float:
    """The order ``α`` in ``(1 + 10⁻⁶, 1 + 10⁸)`` minimising ``f(α)`` (float search).

    Golden-section search on ``ln(α − 1)``. Only tightness depends on it: the callers certify
    their bound at the (rational) order found, and every α > 1 gives a valid bound.
    """
    lo, hi = math.log(1e-6), math.log(1e8)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(1 + math.exp(a)), f(1 + math.exp(b))
    for _ in range(80):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(1 + math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(1 + math.exp(b))
    return 1 + math.exp((lo + hi) / 2)


def _float_best_alpha(rho: float, log_inv_delta: float) -> float:
    """The order minimising ``αρ + ln(1 − 1/α) + (ln(1/δ) − ln α)/(α − 1)`` (float search).

    The optimum is near ``1 + √(ln(1/δ)/ρ)``. Only tightness depends on it.
    """
    if rho <= 0:
        return 1e6

    def eps(a: float) -> float:
        return a * rho + math.log1p(-1 / a) + (log_inv_delta - math.log(a)) / (a - 1)

    return _argmin_alpha(eps)


def _rational_alpha(alpha: float) -> Fraction:
    """A short rational order ``> 1`` near ``alpha``."""
    q = Fraction(alpha).limit_denominator(1 << 20)
    return q if q > 1 else Fraction(1) + Fraction(1, 1 << 20)


def _rdp_epsilon_upper(rho: Fraction, delta: Fraction, alpha: Fraction) -> Fraction:
    """Upper bound on ``αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)`` (CKS 2020, Prop. 12)."""
    _, ln_ratio_hi = ln_interval((alpha - 1) / alpha)  # ln(1 − 1/α) < 0
    _, ln_inv_delta_hi = ln_interval(1 / delta)
    ln_alpha_lo, _ = ln_interval(alpha)
    return alpha * rho + ln_ratio_hi + (ln_inv_delta_hi - ln_alpha_lo) / (alpha - 1)


def _bs_epsilon_upper(rho: Fraction, delta: Fraction) -> Fraction:
    """Upper bound on ``ρ + 2√(ρ ln(1/δ))`` (Bun–Steinke 2016, Prop. 1.3)."""
    _, ln_hi = ln_interval(1 / delta)
    _, root_hi = sqrt_interval(rho * ln_hi)
    return rho + 2 * root_hi


def _log_inv(delta: Fraction) -> float:
    """``ln(1/δ)`` as a float, for the order search only (δ may be below doubles' range)."""
    return float(ln_interval(1 / delta)[1])


def _check_delta(delta: Number) -> Fraction:
    d = exact(delta, "delta")
    if not 0 < d < 1:
        raise InvalidParameter("delta must be in (0, 1) to convert ρ-zCDP to (ε, δ)")
    return d


@lru_cache(maxsize=256)
def _zcdp_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    if rho == 0:
        return Fraction(0)
    alpha = _rational_alpha(_float_best_alpha(float(rho), _log_inv(delta)))
    bound = min(_bs_epsilon_upper(rho, delta), _rdp_epsilon_upper(rho, delta, alpha))
    return round_up(max(bound, Fraction(0)))


def zcdp_epsilon(rho: Number, delta: Number) -> Fraction:
    """Return an ε such that ρ-zCDP implies ``(ε, δ)``-DP: the tighter of two bounds, rounded up.

    The bounds are Bun–Steinke 2016 Prop. 1.3 (``ρ + 2√(ρ ln(1/δ))``) and
    Canonne–Kamath–Steinke 2020 Prop. 12 at a searched order α (any α is valid). The result
    is certified: never below the bound it stands for.

    Raises:
        InvalidParameter: ρ negative or δ not in ``(0, 1)``.

    Examples:
        >>> eps = zcdp_epsilon(Fraction(1, 2), 1e-6)
        >>> 5.2 < float(eps) < 5.756522  # below Bun–Steinke's 5.7565
        True
    """
    return _zcdp_epsilon(exact(rho, "rho"), _check_delta(delta))


@lru_cache(maxsize=256)
def _zcdp_rho_cap(epsilon: Fraction, delta: Fraction) -> Fraction:
    if epsilon == 0:
        return Fraction(0)
    # Bun–Steinke: ρ + 2√(ρL) ≤ ε  ⇔  √ρ ≤ √(L + ε) − √L, with L = ln(1/δ) taken high.
    _, big_l = ln_interval(1 / delta)
    root_lo, _ = sqrt_interval(big_l + epsilon)
    _, root_l_hi = sqrt_interval(big_l)
    best = max(root_lo - root_l_hi, Fraction(0)) ** 2
    # CKS at a fixed α: αρ + ln(1 − 1/α) + (ln(1/δ) − ln α)/(α − 1) ≤ ε is linear in ρ.
    # Search α for the largest ρ in floats, then certify at that (rational) α.
    eps_f, lid = float(epsilon), _log_inv(delta)

    def minus_rho_at(a: float) -> float:
        return -(eps_f - math.log1p(-1 / a) - (lid - math.log(a)) / (a - 1)) / a

    alpha = _rational_alpha(_argmin_alpha(minus_rho_at))
    # ρ ≤ (ε − [ln(1 − 1/α) + (ln(1/δ) − ln α)/(α − 1)])/α, the bracket taken high: it is
    # the CKS ε at ρ = 0.
    cks = (epsilon - _rdp_epsilon_upper(Fraction(0), delta, alpha)) / alpha
    return round_down(max(best, cks, Fraction(0)))


def zcdp_rho_cap(epsilon: Number, delta: Number) -> Fraction:
    """Return a ρ such that ρ-zCDP implies ``(ε, δ)``-DP (as large as certifiably possible).

    The largest ρ allowed by either Bun–Steinke 2016 Prop. 1.3 or Canonne–Kamath–Steinke
    2020 Prop. 12 (at an order chosen in advance), rounded *down*: admitting up to this ρ
    never admits more than ``(ε, δ)``.

    Raises:
        InvalidParameter: ε negative or δ not in ``(0, 1)``.

    Examples:
        >>> rho = zcdp_rho_cap(1, 1e-6)
        >>> 0.0182 < float(rho) < 0.03 and zcdp_epsilon(rho, 1e-6) <= 1
        True
    """
    return _zcdp_rho_cap(exact(epsilon, "epsilon"), _check_delta(delta))


# -- the zCDP filter ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZCDPSpent:
    """What a zCDP filter has spent: ``Σρᵢ`` and the ``Σδᵢ`` of charges with δ > 0 (exact).

    Examples:
        >>> ZCDPSpent(rho=Fraction(1, 8)) + zcdp_charge(Epsilon(epsilon=Fraction(1, 2)))
        ZCDPSpent(rho=0.25, delta=0)
    """

    rho: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", exact(self.rho, "rho"))
        object.__setattr__(self, "delta", exact(self.delta, "delta"))

    def __add__(self, other: ZCDPSpent) -> ZCDPSpent:
        if not isinstance(other, ZCDPSpent):
            return NotImplemented
        return ZCDPSpent(rho=self.rho + other.rho, delta=self.delta + other.delta)

    def __repr__(self) -> str:
        return f"ZCDPSpent(rho={show(self.rho)}, delta={show(self.delta)})"


def zcdp_charge(loss: PrivacyLoss) -> ZCDPSpent:
    """What one charge counts in a zCDP filter (exact; see the module docstring).

    ``Rho(ρ)`` → ``(ρ, 0)``; ``Epsilon(ε)`` → ``(ε²/2, 0)``; ``EpsilonDelta(ε, δ)`` →
    ``(ε²/2, δ)``: an ``(ε, δ)``-DP mechanism is δ-approximately ε²/2-zCDP in the mixture
    sense (Kairouz–Oh–Viswanath's decomposition with Bun–Steinke Prop. 1.4; the module
    docstring has the proof and why Dwork–Roth Lemma 3.17 is not it).

    Raises:
        InvalidParameter: not a privacy loss.

    Examples:
        >>> zcdp_charge(EpsilonDelta(epsilon=1, delta=1e-9))
        ZCDPSpent(rho=0.5, delta=1e-09)
    """
    if isinstance(loss, Rho):
        return ZCDPSpent(rho=loss.rho)
    if isinstance(loss, Epsilon):
        return ZCDPSpent(rho=loss.epsilon**2 / 2)
    if isinstance(loss, EpsilonDelta):
        return ZCDPSpent(rho=loss.epsilon**2 / 2, delta=loss.delta)
    raise InvalidParameter(
        f"a charge must be an Epsilon, EpsilonDelta or Rho, got {type(loss).__name__}"
    )


@dataclass(frozen=True, slots=True)
class ZCDPAccountant:
    """The choice "spend this ``(ε, δ)`` cap through a ρ-zCDP filter", with its δ split.

    Attributes:
        delta_share: the share of the cap's δ kept for charges with δ > 0 (partition
            selection), in ``[0, 1)``; the rest pays the ρ → (ε, δ) conversion. Fixed with
            the cap, before any charge (the split must not depend on the answers).

    Examples:
        >>> ZCDPAccountant().spec
        'zcdp'
        >>> ZCDPAccountant.parse("zcdp:delta_share=1/10").delta_share
        Fraction(1, 10)
    """

    delta_share: Fraction = DEFAULT_DELTA_SHARE

    def __post_init__(self) -> None:
        share = exact(self.delta_share, "delta_share")
        if not share < 1:
            raise InvalidParameter(
                "delta_share must be in [0, 1): part of the cap's δ must pay the conversion"
            )
        object.__setattr__(self, "delta_share", share)

    @property
    def spec(self) -> str:
        """The canonical text of this choice (stored by the ledger)."""
        if self.delta_share == DEFAULT_DELTA_SHARE:
            return "zcdp"
        return f"zcdp:delta_share={self.delta_share.numerator}/{self.delta_share.denominator}"

    @classmethod
    def parse(cls, spec: str) -> ZCDPAccountant:
        """Read :attr:`spec` back (``"zcdp"`` or ``"zcdp:delta_share=<p/q or decimal>"``).

        Raises:
            InvalidParameter: anything else.
        """
        if spec == "zcdp":
            return cls()
        prefix = "zcdp:delta_share="
        if isinstance(spec, str) and spec.startswith(prefix):
            try:
                share = Fraction(spec[len(prefix) :])
            except (ValueError, ZeroDivisionError):
                share = Fraction(-1)
            if 0 <= share < 1:
                return cls(delta_share=share)
        raise InvalidParameter(
            f"unknown accountant {spec!r}: use 'basic', 'zcdp' or 'zcdp:delta_share=<p/q>' "
            "with a share in [0, 1)"
        )


class ZCDPFilter:
    """An ``(ε, δ)`` cap spent through a ρ-zCDP filter (sound under adaptive charges).

    Admits a charge iff ``Σρᵢ ≤ ρ_max`` and ``Σδᵢ ≤ δ_pool`` after it, where
    ``δ_pool = delta_share·δ_cap`` and ``ρ_max = zcdp_rho_cap(ε_cap, δ_cap − δ_pool)``;
    everything admitted is then together ``(ε_cap, δ_cap)``-DP (module docstring: the
    theorem behind each rule). A refused charge raises
    :class:`~deniable.errors.BudgetExceeded` and changes nothing. Pure in-memory arithmetic,
    not thread-safe; the ledger's transaction serialises charges.

    Args:
        cap: the ``(ε, δ)`` cap, with ``δ > 0``.
        delta_share: the share of δ kept for charges with δ > 0, in ``[0, 1)``.
        spent: what was already spent (may exceed the cap: every charge is then refused).

    Examples:
        >>> budget = ZCDPFilter(EpsilonDelta(epsilon=1, delta=1e-6))
        >>> n = 0
        >>> while budget.can_charge(Rho(rho=Fraction(1, 2000))):
        ...     _ = budget.charge(Rho(rho=Fraction(1, 2000)))
        ...     n += 1
        >>> n  # counts with Gaussian noise of σ ≈ 31.6 under (ε = 1, δ = 10⁻⁶)
        45
    """

    __slots__ = ("_cap", "_delta_pool", "_history", "_rho_max", "_share", "_spent")

    def __init__(
        self,
        cap: EpsilonDelta,
        *,
        delta_share: Number = DEFAULT_DELTA_SHARE,
        spent: ZCDPSpent | None = None,
    ) -> None:
        if not isinstance(cap, EpsilonDelta) or cap.delta <= 0:
            raise InvalidParameter(
                "the zCDP accountant needs an EpsilonDelta cap with δ > 0 (a ρ-zCDP cap already "
                "adds ρ; a pure ε cap cannot pay a ρ → (ε, δ) conversion): use the basic "
                "accountant for it"
            )
        self._share = ZCDPAccountant(delta_share=exact(delta_share, "delta_share")).delta_share
        self._cap = cap
        self._delta_pool = cap.delta * self._share
        self._rho_max = zcdp_rho_cap(cap.epsilon, cap.delta - self._delta_pool)
        self._spent = ZCDPSpent() if spent is None else spent
        if not isinstance(self._spent, ZCDPSpent):
            raise InvalidParameter("spent must be a ZCDPSpent")
        self._history: list[PrivacyLoss] = []

    @property
    def cap(self) -> EpsilonDelta:
        """The cap, as given."""
        return self._cap

    @property
    def accountant(self) -> ZCDPAccountant:
        """The accountant choice this filter implements (its δ split)."""
        return ZCDPAccountant(delta_share=self._share)

    @property
    def rho_max(self) -> Fraction:
        """The ρ cap: the most ``Σρᵢ`` may reach (certified below the exact supremum)."""
        return self._rho_max

    @property
    def delta_pool(self) -> Fraction:
        """The part of δ that charges with δ > 0 may spend, additively."""
        return self._delta_pool

    @property
    def conversion_delta(self) -> Fraction:
        """The part of δ that pays the final ρ → (ε, δ) conversion."""
        return self._cap.delta - self._delta_pool

    @property
    def used(self) -> ZCDPSpent:
        """The exact ``(Σρᵢ, Σδᵢ)`` spent."""
        return self._spent

    @property
    def spent(self) -> EpsilonDelta:
        """The ``(ε, δ)`` guarantee of everything spent so far (ε rounded up).

        ``(ε(Σρᵢ, δ_conv), δ_conv + Σδᵢ)``, or ``(0, Σδᵢ)`` while no ρ has been spent.
        Never above the cap unless built with a ``spent`` beyond it.
        """
        rho, delta = self._spent.rho, self._spent.delta
        if rho == 0:
            return EpsilonDelta(epsilon=0, delta=delta)
        eps = zcdp_epsilon(rho, self.conversion_delta)
        if rho <= self._rho_max:  # ρ_max was certified to convert within ε_cap
            eps = min(eps, self._cap.epsilon)
        return EpsilonDelta(
            epsilon=eps,
            delta=min(self.conversion_delta + delta, Fraction(1) - Fraction(1, 2**64)),
        )

    @property
    def remaining_rho(self) -> Rho:
        """The ρ still admissible: ``ρ_max − Σρᵢ`` (at least 0)."""
        return Rho(rho=max(self._rho_max - self._spent.rho, Fraction(0)))

    @property
    def remaining_delta(self) -> Fraction:
        """The δ still admissible for charges with δ > 0."""
        return max(self._delta_pool - self._spent.delta, Fraction(0))

    @property
    def remaining(self) -> EpsilonDelta:
        """The largest ``(ε, δ)`` charge that still fits: ``(√(2·ρ_left), δ_pool_left)``.

        ε is rounded down, so a charge of exactly this is admitted.
        """
        left = self.remaining_rho.rho
        root_lo, _ = sqrt_interval(2 * left)
        eps = round_down(root_lo)
        while eps * eps > 2 * left:  # pragma: no cover - defensive, rounding is downwards
            eps = round_down(eps * (1 - Fraction(1, 2**50)))
        return EpsilonDelta(epsilon=eps, delta=self.remaining_delta)

    @property
    def history(self) -> tuple[PrivacyLoss, ...]:
        """The charges accepted by this filter object, as they were given, in order."""
        return tuple(self._history)

    def _after(self, loss: PrivacyLoss) -> tuple[ZCDPSpent, ZCDPSpent]:
        charge = zcdp_charge(loss)
        return charge, self._spent + charge

    def _fits(self, total: ZCDPSpent) -> bool:
        return total.rho <= self._rho_max and total.delta <= self._delta_pool

    def can_charge(self, loss: PrivacyLoss) -> bool:
        """Return whether :meth:`charge` would accept ``loss`` now (a dry run)."""
        return self._fits(self._after(loss)[1])

    def remaining_for(self, loss: PrivacyLoss) -> PrivacyLoss:
        """What is left, in the kind of ``loss`` (ρ for a ρ charge, else ``(ε, δ)``)."""
        return self.remaining_rho if isinstance(loss, Rho) else self.remaining

    def charge(self, loss: PrivacyLoss) -> ZCDPSpent:
        """Spend ``loss`` if the filter admits it, else raise and change nothing.

        Returns:
            What the charge counts: ``(ρᵢ, δᵢ)``.

        Raises:
            BudgetExceeded: ``Σρ`` would pass ``ρ_max`` or ``Σδ`` the δ pool; ``requested`` is
                ``loss``, ``remaining`` what is left in its kind.
            InvalidParameter: ``loss`` is not a privacy loss.
        """
        charge, total = self._after(loss)
        if not self._fits(total):
            left_rho, left_delta = self.remaining_rho.rho, self.remaining_delta
            digits = 17 if show(charge.rho) == show(left_rho) else 6
            raise BudgetExceeded(
                "privacy budget exceeded (zCDP accountant): this release needs "
                f"ρ = {show(charge.rho, digits)}, δ = {show(charge.delta, digits)} but only "
                f"ρ = {show(left_rho, digits)}, δ = {show(left_delta, digits)} is left "
                f"(cap ε = {show(self._cap.epsilon)}, δ = {show(self._cap.delta)}: "
                f"ρ ≤ {show(self._rho_max)} and δ ≤ {show(self._delta_pool)} for δ-charges); "
                "nothing was charged",
                requested=loss,
                remaining=self.remaining_for(loss),
            )
        self._spent = total
        self._history.append(loss)
        return charge

    def __repr__(self) -> str:
        return (
            f"ZCDPFilter(cap={self._cap!r}, delta_share={show(self._share)}, spent={self._spent!r})"
        )


# -- the Rényi filter at one order --------------------------------------------------------


def rdp_loss(loss: PrivacyLoss, alpha: Number) -> Fraction:
    """The RDP loss of ``loss`` at order ``α`` (exact): ``αρ``, or ``min(ε, αε²/2)``.

    Raises:
        InvalidParameter: α ≤ 1, or an ``(ε, δ)`` loss with δ > 0 (RDP has no δ).

    Examples:
        >>> rdp_loss(Rho(rho=Fraction(1, 10)), 10)
        Fraction(1, 1)
        >>> rdp_loss(Epsilon(epsilon=1), 3)
        Fraction(1, 1)
    """
    a = exact(alpha, "alpha")
    if a <= 1:
        raise InvalidParameter("the Rényi order alpha must be > 1")
    if isinstance(loss, Rho):
        return a * loss.rho
    if isinstance(loss, EpsilonDelta) and loss.delta == 0:
        loss = Epsilon(epsilon=loss.epsilon)
    if isinstance(loss, Epsilon):
        return min(loss.epsilon, a * loss.epsilon**2 / 2)
    raise InvalidParameter(
        "an (ε, δ) loss with δ > 0 has no Rényi-DP bound; use ZCDPFilter, which spends δ separately"
    )


class RenyiFilter:
    """Feldman–Zrnic's Rényi filter at one order ``α``: admit while ``Σ εᵢ(α) ≤ B``.

    Valid under fully adaptive choice of the charges (Feldman & Zrnic, arXiv:2008.11193v4,
    Theorem 3.1 with the filter of Theorem 4.3 and Remark 4.4): everything admitted is
    together ``(α, B)``-RDP. ``α`` and ``B`` are fixed in advance.

    Args:
        alpha: the order, > 1.
        bound: ``B``, the RDP budget at ``α``.

    Examples:
        >>> f = RenyiFilter(alpha=10, bound=1)
        >>> f.charge(Rho(rho=Fraction(1, 20)))
        Fraction(1, 2)
        >>> f.can_charge(Rho(rho=Fraction(1, 15)))
        False
    """

    __slots__ = ("_alpha", "_bound", "_spent")

    def __init__(self, *, alpha: Number, bound: Number) -> None:
        self._alpha = exact(alpha, "alpha")
        if self._alpha <= 1:
            raise InvalidParameter("the Rényi order alpha must be > 1")
        self._bound = exact(bound, "bound")
        self._spent = Fraction(0)

    @property
    def alpha(self) -> Fraction:
        """The order α."""
        return self._alpha

    @property
    def bound(self) -> Fraction:
        """The RDP budget ``B`` at α."""
        return self._bound

    @property
    def spent(self) -> Fraction:
        """``Σ εᵢ(α)`` admitted so far (exact)."""
        return self._spent

    def epsilon(self, delta: Number) -> Fraction:
        """The ε of the ``(ε, δ)``-DP guarantee that ``(α, B)``-RDP implies (rounded up)."""
        d = _check_delta(delta)
        bound = _rdp_epsilon_upper(Fraction(0), d, self._alpha) + self._bound
        return round_up(max(bound, Fraction(0)))

    def can_charge(self, loss: PrivacyLoss) -> bool:
        """Whether :meth:`charge` would admit ``loss`` now (a dry run)."""
        return self._spent + rdp_loss(loss, self._alpha) <= self._bound

    def charge(self, loss: PrivacyLoss) -> Fraction:
        """Spend ``loss`` at α if the sum stays within ``B``; return its RDP loss at α.

        Raises:
            BudgetExceeded: the sum would exceed ``B``; nothing changes.
            InvalidParameter: a loss with no RDP bound (``δ > 0``).
        """
        cost = rdp_loss(loss, self._alpha)
        if self._spent + cost > self._bound:
            raise BudgetExceeded(
                f"Rényi budget exceeded at α = {show(self._alpha)}: this release needs "
                f"{show(cost)} but only {show(self._bound - self._spent)} is left; nothing was "
                "charged",
                requested=loss,
                remaining=self._bound - self._spent,
            )
        self._spent += cost
        return cost

    def __repr__(self) -> str:
        return (
            f"RenyiFilter(alpha={show(self._alpha)}, bound={show(self._bound)}, "
            f"spent={show(self._spent)})"
        )
