"""The unsafe baselines behave as the demonstrations need (they are not private: by design)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from deniable.attacks.inference import log_likelihood, success_bound
from deniable.attacks.naive import (
    UnsafeExactSystem,
    UnsafeFreshNoiseSystem,
    UnsafeStickyNoiseSystem,
    unsafe_mondrian,
)
from deniable.errors import InvalidParameter
from deniable.noise.testing import SeededRandom

FRAME = pd.DataFrame({"id": range(50), "x": [i % 3 for i in range(50)]})
SQL = "SELECT COUNT(*) FROM t WHERE x = 1"


def test_exact_system_answers_exactly() -> None:
    s = UnsafeExactSystem({"t": FRAME})
    assert s.count(SQL) == 17
    assert s.histogram("SELECT x, COUNT(*) FROM t GROUP BY x ORDER BY x") == {0: 17, 1: 17, 2: 16}
    s.close()


def test_fresh_noise_changes_every_time_and_sticky_noise_only_with_the_text() -> None:
    fresh = UnsafeFreshNoiseSystem({"t": FRAME}, scale=5, source=SeededRandom(1))
    answers = {fresh.count(SQL) for _ in range(20)}
    assert len(answers) > 3  # P[≤ 3 distinct of 20 draws at scale 5] is astronomically small
    sticky = UnsafeStickyNoiseSystem({"t": FRAME}, scale=5, seed=1)
    same = {sticky.count(SQL) for _ in range(20)}
    assert len(same) == 1
    assert sticky.count("select  count(*) from t where x = 1") in same  # normalised text
    rewrites = {sticky.count(f"{SQL} AND id <> {-j}") for j in range(1, 21)}
    assert len(rewrites) > 3  # fresh noise per rewrite: what the differencing attack exploits
    for s in (fresh, sticky):
        s.close()
    with pytest.raises(InvalidParameter):
        UnsafeFreshNoiseSystem({"t": FRAME}, scale=0)


def test_mondrian_is_k_anonymous_and_shows_the_extreme_value() -> None:
    frame = pd.DataFrame({"age": np.arange(40) % 30 + 20, "worth": np.arange(40) * 1000})
    frame.loc[39, "worth"] = 35_000_000
    out = unsafe_mondrian(frame, ["age", "worth"], k=5).frame
    assert out.groupby("cluster").size().min() >= 5
    assert out["worth_high"].max() == 35_000_000  # the leak
    with pytest.raises(InvalidParameter):
        unsafe_mondrian(frame, ["nope"], k=5)


def test_likelihoods_are_distributions() -> None:
    ks = np.arange(-400, 400)
    assert math.isclose(float(np.exp(log_likelihood(ks, 3, 2.0)).sum()), 1.0, rel_tol=1e-12)
    ys = np.arange(0, 400)
    for c in (0, 1, 7):
        total = float(np.exp(log_likelihood(ys, c, 2.0, clamped=True)).sum())
        assert math.isclose(total, 1.0, rel_tol=1e-12)
    # one count of sensitivity 1 at scale 1/ε: the likelihood ratio is exactly e^±ε
    ratio = log_likelihood(ks, 1, 2.0) - log_likelihood(ks, 0, 2.0)
    assert np.allclose(np.abs(ratio), 0.5)
    assert math.isclose(success_bound(0.5, math.log(3)), 0.75)
