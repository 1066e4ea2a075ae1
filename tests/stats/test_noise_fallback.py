"""The exact fallback path of the samplers.

A float filter settles almost every draw; the draws it cannot settle (a fraction of about
``t·2^-45`` in production) are decided by :class:`~deniable.noise.exact.LazyUniform`, which
refines the uniform with more random bits and compares it with certified bounds of the
threshold (:func:`~deniable.noise.exact.exp_neg_bounds`). A bug there would hide in the normal
tests, so these tests

* widen the filter's slack ``REL`` (in every ``deniable.noise`` module that holds a copy) so
  that a large share of the draws — most of them at ``REL = 0.5`` — go through the exact path,
  count the exact comparisons to prove it, and check the full distribution as usual;
* check ``LazyUniform`` alone on a uniform whose first bits put it right on a threshold ``v``:
  then ``P[U' < v]`` is the fractional part of ``v·2^B``, e.g. exactly 1/3 for ``v = 1/3``,
  ``B = 64``, which only an exact refinement gets right.

Thresholds: chi-square and binomial quantiles at 1e-7 per check (``_noise_stats``), at most
three checks per test, so a correct sampler fails a test with probability below 1e-6. The
negative controls (a fallback that truncates instead of refining; certified bounds of the
wrong threshold) must be rejected by the very same checks.
"""

from __future__ import annotations

import importlib
import math
import sys
import zlib
from collections.abc import Callable, Iterator
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from _noise_stats import (
    binomial_check,
    check_distribution,
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    geometric_pmf,
)

import deniable.noise  # noqa: F401  (loads every submodule that may hold a copy of REL)
from deniable.noise import (
    bernoulli_exp_neg,
    discrete_gaussian,
    discrete_laplace,
    geometric,
)
from deniable.noise.exact import Bounds, LazyUniform, exp_neg_bound_fn, rational_bounds
from deniable.noise.source import default_source
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.stats


class Counter:
    """Counts the exact comparisons made by :class:`LazyUniform`."""

    def __init__(self) -> None:
        self.calls = 0


def _patch_everywhere(monkeypatch: pytest.MonkeyPatch, name: str, value: object) -> int:
    """Set ``name`` to ``value`` in every loaded ``deniable.noise`` module that has it."""
    patched = 0
    for modname, module in list(sys.modules.items()):
        if modname.startswith("deniable.noise") and hasattr(module, name):
            monkeypatch.setattr(module, name, value)
            patched += 1
    return patched


@pytest.fixture
def exact_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    counter = Counter()
    original = LazyUniform.less_than

    def counting(self: LazyUniform, bounds: Bounds) -> bool:
        counter.calls += 1
        return original(self, bounds)

    monkeypatch.setattr(LazyUniform, "less_than", counting)
    yield counter


FILTER_SLACKS = ("REL", "REL_Y", "_MARGIN")
"""Names of the float filters' relative slack: ``REL`` and ``REL_Y`` (uniform, Laplace,
Bernoulli, CKS Gaussian) and ``_MARGIN`` (the Gaussian alias table, baked into its cached
tables)."""


def _clear_noise_caches() -> None:
    for modname, module in list(sys.modules.items()):
        if modname.startswith("deniable.noise"):
            for name, value in vars(module).items():
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
                elif name == "clear_tables" and callable(value):
                    value()


def _widen_filter(monkeypatch: pytest.MonkeyPatch, rel: float) -> None:
    """Set every float filter's slack to ``rel``; cached tables are rebuilt with it."""
    patched = sum(_patch_everywhere(monkeypatch, name, rel) for name in FILTER_SLACKS)
    assert patched >= 1, "no float filter slack found"
    _clear_noise_caches()


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    # Tables built with a widened slack are exact but slow: never leave them behind.
    yield
    _clear_noise_caches()


def _cks_gaussian(sigma2: Fraction, n: int) -> np.ndarray:
    """The Canonne–Kamath–Steinke rejection path, which the public function uses only for
    large σ² (smaller ones go through the alias table)."""
    module = importlib.import_module("deniable.noise.discrete_gaussian")
    rejection = module._discrete_gaussian
    return rejection(sigma2, n, default_source())  # type: ignore[no-any-return]


# (sampler, exact pmf, n, REL, minimum share of draws that reach the exact path)
FORCED: list[tuple[str, Callable[[int], np.ndarray], Callable[[], object], int, float, float]] = [
    ("laplace(1)", lambda n: discrete_laplace(1, n), lambda: discrete_laplace_pmf(1.0),
     10_000, 0.5, 0.5),
    ("laplace(7/3)", lambda n: discrete_laplace(Fraction(7, 3), n),
     lambda: discrete_laplace_pmf(7 / 3), 5_000, 0.5, 0.5),
    ("laplace(100)", lambda n: discrete_laplace(100, n), lambda: discrete_laplace_pmf(100.0),
     4_000, 1e-2, 0.5),
    ("geometric(1)", lambda n: geometric(1, n), lambda: geometric_pmf(1.0), 10_000, 0.5, 0.5),
    ("geometric(7/3)", lambda n: geometric(Fraction(7, 3), n), lambda: geometric_pmf(7 / 3),
     5_000, 0.5, 0.5),
    ("gaussian(1) table", lambda n: discrete_gaussian(1, n), lambda: discrete_gaussian_pmf(1.0),
     20_000, 0.3, 0.3),
    ("gaussian(7/3) table", lambda n: discrete_gaussian(Fraction(7, 3), n),
     lambda: discrete_gaussian_pmf(7 / 3), 10_000, 0.3, 0.3),
    ("gaussian(100) table", lambda n: discrete_gaussian(100, n),
     lambda: discrete_gaussian_pmf(100.0), 10_000, 0.3, 0.3),
    ("gaussian(1) CKS", lambda n: _cks_gaussian(Fraction(1), n),
     lambda: discrete_gaussian_pmf(1.0), 8_000, 1e-2, 0.3),
    ("gaussian(7/3) CKS", lambda n: _cks_gaussian(Fraction(7, 3), n),
     lambda: discrete_gaussian_pmf(7 / 3), 8_000, 1e-2, 0.3),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "sample", "pmf", "n", "rel", "share"), FORCED, ids=[f[0] for f in FORCED]
)
def test_forced_fallback_is_exact(
    monkeypatch: pytest.MonkeyPatch,
    exact_calls: Counter,
    name: str,
    sample: Callable[[int], np.ndarray],
    pmf: Callable[[], object],
    n: int,
    rel: float,
    share: float,
) -> None:
    _widen_filter(monkeypatch, rel)
    draws = sample(n)
    assert exact_calls.calls >= share * n, (
        f"{name}: only {exact_calls.calls} exact comparisons for {n} draws; the fallback "
        "was not exercised (did the float filter's slack move?)"
    )
    failures = check_distribution(draws, pmf())  # type: ignore[arg-type]
    assert not failures, f"{name} through the exact path: " + "; ".join(failures)


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(5, 2), Fraction(1, 1000)], ids=str)
def test_forced_fallback_bernoulli_exp_neg(
    monkeypatch: pytest.MonkeyPatch, exact_calls: Counter, gamma: Fraction
) -> None:
    _widen_filter(monkeypatch, 0.5)
    n = 20_000
    draws = bernoulli_exp_neg(gamma, n)
    assert exact_calls.calls >= 0.2 * n
    result = binomial_check(int(draws.sum()), n, math.exp(-float(gamma)))
    assert not result.rejected, f"bernoulli_exp_neg({gamma}) through the exact path: {result}"


def _wrong_bounds(real: Callable[[Fraction, int], tuple[int, int]]) -> Callable[..., object]:
    """Certified bounds of the wrong threshold: ``e^(−2x)`` instead of ``e^(−x)``."""

    def broken(x: Fraction, k: int) -> tuple[int, int]:
        return real(2 * x, k)

    return broken


@pytest.mark.parametrize(
    ("name", "sample", "pmf"),
    [
        ("laplace(1)", lambda n: discrete_laplace(1, n), lambda: discrete_laplace_pmf(1.0)),
        ("geometric(7/3)", lambda n: geometric(Fraction(7, 3), n), lambda: geometric_pmf(7 / 3)),
        (
            "gaussian(1) table",
            lambda n: discrete_gaussian(1, n),
            lambda: discrete_gaussian_pmf(1.0),
        ),
        (
            "gaussian(1) CKS",
            lambda n: _cks_gaussian(Fraction(1), n),
            lambda: discrete_gaussian_pmf(1.0),
        ),
    ],
    ids=["laplace(1)", "geometric(7/3)", "gaussian(1) table", "gaussian(1) CKS"],
)
def test_forced_fallback_control_rejects_wrong_threshold(
    monkeypatch: pytest.MonkeyPatch,
    exact_calls: Counter,
    name: str,
    sample: Callable[[int], np.ndarray],
    pmf: Callable[[], object],
) -> None:
    """Negative control: the exact path comparing against ``e^(−2k/t)`` must be caught."""
    import deniable.noise.exact as exact

    _widen_filter(monkeypatch, 0.3)
    assert _patch_everywhere(monkeypatch, "exp_neg_bounds", _wrong_bounds(exact.exp_neg_bounds))
    draws = sample(5_000)
    assert exact_calls.calls >= 0.3 * 5_000
    # Observed chi-square statistics are in the thousands against thresholds near 40-60.
    assert check_distribution(draws, pmf()), f"broken exact path of {name} was accepted"  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- LazyUniform alone


def _frac_bits(bounds: Bounds, bits: int, extra: int = 80) -> tuple[int, float]:
    """``(w, f)``: ``w = floor(v·2^bits)`` and ``f = v·2^bits − w`` to ``extra`` bits."""
    lo, hi = bounds(bits + extra)
    assert hi - lo <= 8
    w = lo >> extra
    assert (hi >> extra) == w, "threshold too close to a multiple of 2^-bits for this test"
    return w, (lo - (w << extra)) / 2.0**extra


Decide = Callable[[int, int, Bounds, SeededRandom], bool]


def _lazy(word: int, bits: int, bounds: Bounds, src: SeededRandom) -> bool:
    return LazyUniform(word, src, bits).less_than(bounds)


def _truncated(word: int, bits: int, bounds: Bounds, src: SeededRandom) -> bool:
    """A broken fallback: decides from the first ``bits`` bits only (threshold rounded down)."""
    lo, _ = bounds(bits)
    return word + 1 <= lo


THRESHOLDS: list[tuple[str, Bounds, int]] = [
    ("1/3 @64", rational_bounds(Fraction(1, 3)), 64),
    ("2/7 @32", rational_bounds(Fraction(2, 7)), 32),
    ("e^-1/3 @64", exp_neg_bound_fn(Fraction(1, 3)), 64),
    ("e^-1 @31", exp_neg_bound_fn(Fraction(1)), 31),
    ("e^-5/2 @53", exp_neg_bound_fn(Fraction(5, 2)), 53),
    ("e^-100 @200", exp_neg_bound_fn(Fraction(100)), 200),
]


@pytest.mark.parametrize(
    ("decide", "must_reject"), [(_lazy, False), (_truncated, True)], ids=["exact", "truncated"]
)
@pytest.mark.parametrize(("label", "bounds", "bits"), THRESHOLDS, ids=[t[0] for t in THRESHOLDS])
def test_lazy_uniform_on_the_threshold(
    label: str, bounds: Bounds, bits: int, decide: Decide, must_reject: bool
) -> None:
    """A uniform whose first bits straddle ``v`` is below ``v`` w.p. ``frac(v·2^bits)``."""
    word, frac = _frac_bits(bounds, bits)
    assert 0.05 < frac < 0.95  # the thresholds above are chosen so: a truncation is visible
    src = SeededRandom(zlib.crc32(label.encode()))
    n = 6_000
    hits = sum(decide(word, bits, bounds, src) for _ in range(n))
    result = binomial_check(hits, n, frac)
    if must_reject:
        assert result.rejected, f"truncated fallback accepted at {label}: {result}"
    else:
        assert not result.rejected, f"LazyUniform at {label}: {result}"


def test_frac_reference_matches_decimal() -> None:
    # The reference fractional part itself, recomputed independently with decimal.
    word, frac = _frac_bits(exp_neg_bound_fn(Fraction(100)), 200)
    with localcontext() as ctx:
        ctx.prec = 120
        v = Decimal(-100).exp() * (Decimal(2) ** 200)
    assert int(v) == word
    assert abs(float(v - int(v)) - frac) < 1e-15
