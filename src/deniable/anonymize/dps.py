"""The privacy of safe k-anonymization: ``d(k, β, ε)`` and the guarantees built on it.

Li, Qardaji and Su ("On Sampling, Anonymization, and Differential Privacy: Or,
k-Anonymization Meets Differential Privacy", ASIACCS 2012, arXiv:1101.2604) show that
sampling each row with probability ``β`` and then k-anonymizing *safely* satisfies
differential privacy. The definitions this module implements, reconstructed from the paper's
text and its proofs (the seed copy lost its symbols):

* **Theorem 3.9** (strongly safe: the recoding ``g`` is fixed independently of the data).
  For every ``0 < β < 1``, ``ε ≥ −ln(1 − β)`` and ``δ = d(k, β, ε)`` the algorithm is
  ``(β, ε, δ)``-DPS, i.e. sampling + anonymizing is ``(ε, δ)``-DP, where::

      γ = (e^ε − 1 + β) / e^ε = 1 − (1 − β)·e^(−ε)
      n_m = ⌈k/γ − 1⌉
      d(k, β, ε) = max_{n ≥ n_m}  Σ_{γn < j ≤ n}  f(j; n, β)

  with ``f(j; n, β)`` the binomial pmf. Here ``n`` is the number of rows of the *larger*
  neighbour that ``g`` maps to the target's class and ``j`` the number of them sampled; the
  output is "bad" (the likelihood ratio exceeds ``e^ε``) exactly when ``j ≥ k`` (the class
  is published) and ``(1 − β)·n/(n − j) > e^ε``, i.e. ``j > γn``. For ``n < n_m`` the bad
  set is ``j ≥ k``, whose probability grows with ``n``; at ``n = n_m`` (the largest integer
  below ``k/γ``) the two conditions coincide, and for ``n ≥ n_m`` the condition ``j ≥ k`` is
  implied by ``j > γn``. So the paper's ``max_{n ≥ n_m} Σ_{j>γn}`` equals
  ``max_{n ≥ 1} Σ_{j>γn, j≥k}``: this module implements exactly that quantity.
  The condition ``ε ≥ −ln(1 − β)`` covers the case where the class is suppressed (the ratio
  of "suppressed" probabilities is at most ``1/(1 − β)``).

* **Theorem 3.11** (ε-safe: the recoding is chosen by an ``ε₁``-DP procedure). The algorithm
  satisfies ``(β, ε₁ + ε₂, d(k, β, ε₂))``-DPS for every ``ε₂ ≥ −ln(1 − β)``. Its proof
  factorises ``P[output] = Σ_g P[choose g]·P[g(sample) = output]``, which needs the choice to
  be independent of the sample that is published (see :mod:`deniable.anonymize.safe`).

**Finding the maximum over n.** ``d_n = P[Bin(n, β) ≥ T_n]`` with ``T_n = max(k, ⌊γn⌋+1)``.
``T_n`` steps up by 0 or 1 as ``n`` grows, and between steps ``d_n`` grows with ``n``, so the
only candidates are the last ``n`` before each step: ``m_t = ⌈t/γ⌉ − 1`` for ``t = k, k+1, …``
(``T_{m_t} = t`` exactly). The maximum is *not* always at ``t = k`` (the paper's remark;
see the tests). The scan stops by a proof: every ``n > m_t`` has ``T_n > γn`` and, by the
Chernoff–Hoeffding bound ``P[Bin(n, β) ≥ an] ≤ exp(−n·KL(a‖β))`` for ``a ≥ β``,
``d_n ≤ exp(−(m_t + 1)·KL(γ‖β))``; once that is below the best value found, no later ``n``
can win. Since ``γ ≥ β(2 − β) > β`` on the theorem's domain, ``KL(γ‖β) > 0`` and the scan
ends after ``O(γ·log(n)/KL(γ‖β))`` candidates (tens, even for ``k = 10⁴``).

**Arithmetic.** Everything is in log space (``math.lgamma``, log-sum-exp), so ``δ`` far below
the smallest double (``e^(−14000)``) is still computed. Each binomial tail is summed until a
geometric bound on the rest is below ``2^-60`` of the sum, and the bound is *added*;
``m_t`` is rounded up (so where ``t/γ`` lies within ``10⁻¹²`` of an integer the boundary
term is counted: the safe direction); the log is raised by ``10⁻¹³`` of the magnitude of its
terms, about ten times the rounding error of ``lgamma``. The returned ``δ`` is therefore an
upper bound on ``d(k, β, ε)``, above it by a relative ``≈ 10⁻¹³·n ln n`` at most (``10⁻⁹``
for ``n = 10³``, ``10⁻⁶`` for ``n = 10⁶``).

The neighbouring relation is add/remove one row (unbounded DP); when one person owns several
rows, the guarantee is per row and group privacy applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from deniable.accounting.amplification import amplify_bernoulli
from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.errors import InternalError, InvalidParameter

_CHUNK = 128  # tail terms summed per step; r ≤ 1/2 on the theorem's domain, so one suffices
_TAIL_REL = 2.0**-60  # the tail is summed until the rest is below this fraction of it
_REL_ROUND = 1e-12  # relative widening of t/γ (float error is ~1e-16)
_MAX_CANDIDATES = 10_000_000  # a bug guard: the proof bounds the scan far below this
_MIN_LOG = math.log(5e-324)  # below this, δ is reported as the smallest positive double


def min_epsilon(beta: float) -> float:
    """Return ``−ln(1 − β)``, the smallest ε Theorems 3.9 and 3.11 allow for rate ``β``.

    Examples:
        >>> round(min_epsilon(0.5), 6)
        0.693147
    """
    b = _check_beta(beta)
    return -math.log1p(-b)


def gamma(beta: float, epsilon: float) -> float:
    """Return ``γ = (e^ε − 1 + β)/e^ε``, the fraction of a class above which a sample is bad.

    Examples:
        >>> round(gamma(0.5, math.log(2)), 12)
        0.75
    """
    b, e = _check_beta(beta), _check_epsilon(epsilon, beta)
    return 1.0 - _q(b, e)


@dataclass(frozen=True, slots=True)
class DeltaSearch:
    """The evaluation of ``d(k, β, ε)`` and where its maximum is.

    Attributes:
        log_delta: natural log of the upper bound on ``d(k, β, ε)``.
        delta: the bound as a float (the smallest positive double if it underflows).
        n_star: the class size ``n`` at which the maximum is reached.
        t_star: the threshold ``T_n`` (smallest bad sample count) at ``n_star``.
        n_min: ``n_m = ⌈k/γ − 1⌉``, the paper's first candidate.
        candidates: how many candidates ``m_t`` were evaluated before the stopping rule.
    """

    log_delta: float
    delta: float
    n_star: int
    t_star: int
    n_min: int
    candidates: int


def dps_search(k: int, *, beta: float, epsilon: float) -> DeltaSearch:
    """Evaluate ``d(k, β, ε)`` of Theorem 3.9 and report where the maximum over ``n`` is.

    Args:
        k: the suppression threshold (classes seen fewer than ``k`` times are dropped), ≥ 2.
        beta: the sampling rate, in (0, 1).
        epsilon: the ε of the guarantee, ``≥ −ln(1 − β)``.

    Returns:
        The :class:`DeltaSearch`. This is a pure function of public parameters: it spends no
        privacy.

    Examples:
        >>> s = dps_search(10, beta=0.1, epsilon=1.0)
        >>> s.n_star >= s.n_min
        True
    """
    k = _check_k(k)
    b = _check_beta(beta)
    e = _check_epsilon(epsilon, beta)
    q = _q(b, e)  # 1 − γ, computed without cancellation
    kl_low = _kl_gamma_beta(b, e, q) * (1.0 - 1e-9) - 1e-300
    if not kl_low > 0:
        raise InternalError("KL(γ‖β) must be positive on the theorem's domain")
    best = -math.inf
    best_n = best_t = 0
    n_min = _m_t(k, q)
    t = k
    count = 0
    while True:
        m = _m_t(t, q)
        value = _log_binom_tail(m, t, b)
        count += 1
        if value > best:
            best, best_n, best_t = value, m, t
        # Every n > m_t (true m_t ≥ m − 1) has d_n ≤ exp(−m·KL(γ‖β)).
        if m * kl_low >= -best:
            break
        if count >= _MAX_CANDIDATES:
            raise InternalError("the search for the maximum over n did not stop")
        t += 1
    delta = math.exp(best) if best > _MIN_LOG else 5e-324
    return DeltaSearch(
        log_delta=best,
        delta=min(delta, 1.0),
        n_star=best_n,
        t_star=best_t,
        n_min=n_min,
        candidates=count,
    )


def dps_delta(k: int, *, beta: float, epsilon: float) -> float:
    """Return ``δ = d(k, β, ε)`` of Li–Qardaji–Su Theorem 3.9 (an upper bound, see module).

    Sampling at rate ``β`` then strongly-safe k-anonymization is ``(ε, δ)``-DP with this δ.
    Pure function of public parameters; spends no privacy.

    Examples:
        >>> dps_delta(20, beta=0.1, epsilon=1.0) < 1e-9
        True
    """
    return dps_search(k, beta=beta, epsilon=epsilon).delta


def log_dps_delta(k: int, *, beta: float, epsilon: float) -> float:
    """Return ``ln d(k, β, ε)`` (useful when δ underflows a double, e.g. ``k = 10⁴``).

    Examples:
        >>> log_dps_delta(10_000, beta=0.1, epsilon=1.0) < -1000
        True
    """
    return dps_search(k, beta=beta, epsilon=epsilon).log_delta


def smallest_k(*, beta: float, epsilon: float, delta: float, k_max: int = 10**9) -> int:
    """Return the smallest ``k ≥ 2`` with ``d(k, β, ε) ≤ δ``.

    ``d`` does not increase with ``k`` (every term of the maximum loses summands), so
    doubling then bisection finds it. Raises InvalidParameter if no ``k ≤ k_max`` works.

    Examples:
        >>> k = smallest_k(beta=0.1, epsilon=1.0, delta=1e-6)
        >>> dps_delta(k, beta=0.1, epsilon=1.0) <= 1e-6 < dps_delta(k - 1, beta=0.1, epsilon=1.0)
        True
    """
    _check_beta(beta)
    _check_epsilon(epsilon, beta)
    log_target = math.log(_check_delta(delta))

    def ok(k: int) -> bool:
        return log_dps_delta(k, beta=beta, epsilon=epsilon) <= log_target

    lo, hi = 1, 2  # invariant: ok(hi) once found; lo is known bad (k = 1 is not allowed)
    while not ok(hi):
        lo = hi
        hi *= 2
        if hi > k_max:
            if ok(k_max):
                hi = k_max
                break
            raise InvalidParameter(
                f"no k ≤ {k_max} reaches δ = {delta:g} at β = {beta:g}, ε = {epsilon:g}"
            )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def epsilon_for(k: int, *, beta: float, delta: float, rel_tol: float = 1e-9) -> float:
    """Return (within ``rel_tol``, from above) the smallest ε with ``d(k, β, ε) ≤ δ``.

    ``d`` does not increase with ε (``γ`` grows, so every threshold ``T_n`` does), and tends
    to ``β^k`` (the ``n = k`` term, all rows sampled) as ε grows; a ``δ < β^k`` is refused.
    The returned ε always satisfies ``d(k, β, ε) ≤ δ`` and is ``≥ −ln(1 − β)``.

    Examples:
        >>> eps = epsilon_for(10, beta=0.1, delta=1e-6)
        >>> dps_delta(10, beta=0.1, epsilon=eps) <= 1e-6
        True
    """
    k = _check_k(k)
    b = _check_beta(beta)
    log_target = math.log(_check_delta(delta))
    if log_target < k * math.log(b):
        raise InvalidParameter(
            f"δ = {delta:g} is below β^k = {b:g}^{k}, which no ε reaches: increase k or decrease β"
        )
    lo = min_epsilon(b)

    def ok(e: float) -> bool:
        return log_dps_delta(k, beta=b, epsilon=e) <= log_target

    if ok(lo):
        return lo
    hi = max(2 * lo, lo + 1.0)
    while not ok(hi):
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise InvalidParameter(f"no finite ε reaches δ = {delta:g} with k = {k}")
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def amplified_epsilon(epsilon: float, beta: float) -> float:
    """Return ``ln(1 + β(e^ε − 1))``: an ε-DP step run on a β-sample is this DP (LQS Thm 1).

    Delegates to :func:`deniable.accounting.amplification.amplify_bernoulli` (certified,
    rounded up) and rounds the float up once more, so it is never below the exact value.

    Examples:
        >>> round(amplified_epsilon(1.0, 0.1), 6)
        0.158565
    """
    b = _check_beta(beta)
    if isinstance(epsilon, bool) or not (
        isinstance(epsilon, float | int) and math.isfinite(epsilon) and epsilon >= 0
    ):
        raise InvalidParameter("epsilon must be a finite number ≥ 0")
    exact = amplify_bernoulli(Epsilon(epsilon=epsilon), b).epsilon
    return math.nextafter(float(exact), math.inf)


@dataclass(frozen=True, slots=True)
class DPSGuarantee:
    """The ``(β, ε, δ)``-DPS guarantee of one safe k-anonymization release.

    The release (sampling at rate ``β`` included) is ``(ε, δ)``-DP for adding or removing one
    row of the input table. It holds for *one* release from a fresh sample that is used for
    nothing else: DPS guarantees do not compose with other uses of the same sample (LQS §2.6).

    Attributes:
        k: the suppression threshold.
        beta: the sampling rate.
        epsilon: the total ε (``epsilon_selection + epsilon_anonymization``).
        delta: δ, an upper bound on ``d(k, β, epsilon_anonymization)``.
        log_delta: ``ln δ`` (exact even when ``delta`` underflows).
        epsilon_anonymization: the ε given to Theorem 3.9's part (``ε₂`` of Thm 3.11).
        epsilon_selection: the loss of choosing the recoding, w.r.t. the input table (0 for
            a strongly safe release).
        theorem: which theorem gives the guarantee.
    """

    k: int
    beta: float
    epsilon: float
    delta: float
    log_delta: float
    epsilon_anonymization: float
    epsilon_selection: float
    theorem: str

    def loss(self) -> EpsilonDelta:
        """Return the guarantee as an :class:`EpsilonDelta` (refused if δ ≥ 1: vacuous)."""
        # ε: the larger of the decimal and binary readings (it may be computed); δ is a computed
        # bound, rounded up past its float error.
        eps = max(Fraction(repr(float(self.epsilon))), Fraction(self.epsilon))
        delta = Fraction(self.delta) * (1 + Fraction(1, 2**50))
        return EpsilonDelta(epsilon=eps, delta=delta)

    def describe(self) -> str:
        """One line a person can read.

        Examples:
            >>> strongly_safe_guarantee(10, beta=0.1, epsilon=1.0).describe()[:28]
            '(β=0.1, ε=1, δ=6.84e-08)-DPS'
        """
        return (
            f"(β={self.beta:g}, ε={self.epsilon:.6g}, δ={_fmt_delta(self.log_delta)})-DPS"
            f" by Li–Qardaji–Su {self.theorem}, k={self.k}: (ε, δ)-DP for adding or removing"
            " one input row, for this one release"
        )


def strongly_safe_guarantee(
    k: int, *, beta: float, epsilon: float | None = None, delta: float | None = None
) -> DPSGuarantee:
    """Return the Theorem 3.9 guarantee: give ``epsilon`` (δ is derived) or ``delta`` (ε is).

    Examples:
        >>> g = strongly_safe_guarantee(10, beta=0.1, delta=1e-6)
        >>> g.delta <= 1e-6
        True
    """
    e = _resolve_epsilon(k, beta, epsilon, delta)
    s = dps_search(k, beta=beta, epsilon=e)
    return DPSGuarantee(
        k=k,
        beta=beta,
        epsilon=e,
        delta=s.delta,
        log_delta=s.log_delta,
        epsilon_anonymization=e,
        epsilon_selection=0.0,
        theorem="Theorem 3.9 (strongly safe)",
    )


def epsilon_safe_guarantee(
    k: int,
    *,
    beta: float,
    selection_epsilon: float,
    epsilon: float | None = None,
    delta: float | None = None,
) -> DPSGuarantee:
    """Return the Theorem 3.11 guarantee ``(ε₁ + ε₂, d(k, β, ε₂))``.

    Args:
        k: the suppression threshold.
        beta: the sampling rate of the published sample.
        selection_epsilon: ``ε₁``, the privacy loss of choosing the recoding, measured with
            respect to the input table (e.g. :func:`amplified_epsilon` of the exponential
            mechanism's ε when it runs on an independent β-sample).
        epsilon: ``ε₂``, the anonymization part (δ is derived), or
        delta: the target δ (``ε₂`` is derived).

    Examples:
        >>> g = epsilon_safe_guarantee(10, beta=0.1, selection_epsilon=0.1, epsilon=1.0)
        >>> round(g.epsilon, 6)
        1.1
    """
    if not (isinstance(selection_epsilon, float | int) and math.isfinite(selection_epsilon)):
        raise InvalidParameter("selection_epsilon must be a finite number")
    if selection_epsilon < 0:
        raise InvalidParameter("selection_epsilon must be ≥ 0")
    e2 = _resolve_epsilon(k, beta, epsilon, delta)
    s = dps_search(k, beta=beta, epsilon=e2)
    return DPSGuarantee(
        k=k,
        beta=beta,
        epsilon=float(selection_epsilon) + e2,
        delta=s.delta,
        log_delta=s.log_delta,
        epsilon_anonymization=e2,
        epsilon_selection=float(selection_epsilon),
        theorem="Theorem 3.11 (ε-safe)",
    )


# --------------------------------------------------------------------------- internals


def _resolve_epsilon(k: int, beta: float, epsilon: float | None, delta: float | None) -> float:
    if (epsilon is None) == (delta is None):
        raise InvalidParameter("give exactly one of epsilon (δ is derived) or delta (ε is)")
    if epsilon is not None:
        return _check_epsilon(epsilon, beta)
    assert delta is not None  # for mypy; guarded just above
    return epsilon_for(k, beta=beta, delta=delta)


def _q(beta: float, epsilon: float) -> float:
    """``1 − γ = (1 − β)e^(−ε)``, exact to a few ulps even when γ is close to 1."""
    return (1.0 - beta) * math.exp(-epsilon)


def _m_t(t: int, q: float) -> int:
    """``⌈t/γ⌉ − 1``, rounded up: the largest class size whose threshold is ``t``.

    ``t/γ = t + t·q/(1 − q)`` with ``q = 1 − γ``, so ``⌈t/γ⌉ − 1 = t − 1 + ⌈t·q/(1 − q)⌉``;
    widening ``t·q/(1 − q)`` by a relative 10⁻¹² can only give a larger ``m``, whose tail is
    larger (safe).
    """
    y = t * q / (1.0 - q) * (1.0 + _REL_ROUND)
    return t - 1 + max(1, math.ceil(y))


def _kl_gamma_beta(beta: float, epsilon: float, q: float) -> float:
    """``KL(γ‖β)`` with ``γ = 1 − q``; ``(1 − γ)·ln((1 − γ)/(1 − β)) = −q·ε`` exactly."""
    return (1.0 - q) * (math.log1p(-q) - math.log(beta)) - q * epsilon


def _log_binom_tail(n: int, t: int, beta: float) -> float:
    """An upper bound on ``ln P[Bin(n, β) ≥ t]`` for ``t ≥ nβ`` (terms fall from ``t`` on).

    Terms are generated from ``f(t)`` by their ratios ``(n − j)β/((j + 1)(1 − β))`` in
    chunks; summing stops when a geometric bound on the rest (ratios only fall) is below
    ``2^-60`` of the sum, and that bound is added. The result is raised by a margin covering
    the rounding of ``lgamma`` and of the products.
    """
    if t > n:
        return -math.inf
    log_b, log_1b = math.log(beta), math.log1p(-beta)
    magnitude = math.lgamma(n + 1) + t * abs(log_b) + (n - t) * abs(log_1b)
    log_ft = (
        math.lgamma(n + 1)
        - math.lgamma(t + 1)
        - math.lgamma(n - t + 1)
        + t * log_b
        + (n - t) * log_1b
    )
    log_odds = log_b - log_1b
    total_logs: list[float] = []
    start, log_start = t, log_ft
    rest_log = -math.inf
    while True:
        stop = min(n, start + _CHUNK - 1)
        js = np.arange(start, stop, dtype=np.float64)  # ratios from j to j + 1
        ratios = np.log(n - js) - np.log(js + 1.0) + log_odds
        logs = log_start + np.concatenate(([0.0], np.cumsum(ratios)))
        mx = float(logs.max())
        total_logs.append(mx + math.log(float(np.exp(logs - mx).sum())))
        if stop >= n:
            break
        last_log = float(logs[-1])
        log_r = math.log(n - stop) - math.log(stop + 1.0) + log_odds  # ratio from stop on
        if log_r < 0:
            so_far = _logsumexp(total_logs)
            bound = last_log + log_r - math.log(-math.expm1(log_r))  # f·r/(1 − r)
            if bound - so_far < math.log(_TAIL_REL):
                rest_log = bound
                break
        start, log_start = stop + 1, last_log + log_r
    total = _logsumexp([*total_logs, rest_log])
    margin = 1e-13 * magnitude + 1e-12 + 1e-13 * _CHUNK
    return min(total + margin, 0.0)


def _logsumexp(values: list[float]) -> float:
    finite = [v for v in values if v != -math.inf]
    if not finite:
        return -math.inf
    mx = max(finite)
    return mx + math.log(sum(math.exp(v - mx) for v in finite))


def _fmt_delta(log_delta: float) -> str:
    if log_delta > _MIN_LOG:
        return f"{math.exp(log_delta):.3g}"
    exponent = log_delta / math.log(10)
    return f"10^{exponent:.1f}"


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise InvalidParameter("k must be an integer ≥ 2")
    if k < 2:
        raise InvalidParameter(
            f"k must be ≥ 2 (classes seen fewer than k times are dropped), got {k}"
        )
    return int(k)


def _check_beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, float | int):
        raise InvalidParameter("beta (the sampling rate) must be a number in (0, 1)")
    b = float(beta)
    if not (0.0 < b < 1.0):
        raise InvalidParameter(f"beta (the sampling rate) must be in (0, 1), got {b!r}")
    return b


def _check_epsilon(epsilon: float, beta: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, float | int):
        raise InvalidParameter("epsilon must be a number")
    e = float(epsilon)
    if not math.isfinite(e):
        raise InvalidParameter("epsilon must be finite")
    floor = min_epsilon(beta)
    if e < floor:
        raise InvalidParameter(
            f"epsilon must be ≥ −ln(1 − β) = {floor:.6g} for β = {float(beta):g}: below it the"
            " theorem gives no guarantee (a suppressed class alone shifts the odds by 1/(1 − β))"
        )
    return e


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, float | int):
        raise InvalidParameter("delta must be a number in (0, 1)")
    d = float(delta)
    if not (0.0 < d < 1.0):
        raise InvalidParameter(f"delta must be in (0, 1), got {d!r}")
    return d
