"""Nothing the data decides before the charge (DESIGN §6.5), for synthetic releases and clamp
tuning: ``D`` and ``D′ = D`` plus one person whose rows hold extreme values (NaN, ±inf,
±1e308, −0.0, NULL, values beyond the declared bounds, a 100,000-character key not among the
public keys) both release and are both charged exactly once — no exception, refusal or
different outcome on either. Also with a domain measured with DP (quantile bins and selected
keys, :mod:`deniable.synth.learn`), whose statistics are read from the engine before the
charge."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.curator.session import Session
from deniable.errors import UnsafeQuery
from deniable.synth import Quantiles, SelectKeys

EXTREME = [math.nan, math.inf, -math.inf, 1e308, -1e308, -0.0, None, 5e9, -5e9]


def _tables(extra: bool) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame(
        {
            "uid": np.arange(n) // 2,
            "v": rng.uniform(0, 100, n),
            "k": rng.choice(["a", "b", "c"], n).astype(object),
        }
    )
    if extra:
        person = pd.DataFrame({"uid": 10_000, "v": EXTREME, "k": ["x" * 100_000, None, "a"] * 3})
        frame = pd.concat([frame, person], ignore_index=True)
    return frame


@pytest.mark.parametrize("method", ["mst", "aim"])
def test_a_synthetic_release_has_the_same_outcome_on_neighbours(
    tmp_path: Path, method: str
) -> None:
    outcomes = []
    for extra in (False, True):
        s = Session(
            budget=EpsilonDelta(epsilon=10, delta=1e-5), ledger=tmp_path / f"{method}{extra}.db"
        )
        s.add_table("t", _tables(extra), privacy_unit="uid", max_groups=1, max_rows=2,
                    bounds={"v": (0, 100)}, public_keys={"k": ["a", "b", "c"]})  # fmt: skip
        out = s.synthesize("t", columns=["v", "k"], epsilon=1, delta=1e-6, method=method,
                           rows=50, bins=8)  # fmt: skip
        outcomes.append((out.table.num_rows, out.table.column_names, len(s.budget.history)))
    assert outcomes[0] == outcomes[1] == (50, ["v", "k"], 1)


def test_clamp_tuning_has_the_same_outcome_on_neighbours(tmp_path: Path) -> None:
    outcomes = []
    for extra in (False, True):
        s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / f"tune{extra}.db")
        s.add_table("t", _tables(extra), privacy_unit="uid", max_groups=1, max_rows=1)
        report = s.tune("t", epsilon=1, clamps={"v": (0, 1000)})
        low, high = report.clamps["v"]
        outcomes.append((0 <= low < high <= 1000, len(s.budget.history)))
    assert outcomes[0] == outcomes[1] == (True, 2)


def _measured_domain_tables(extra: bool) -> pd.DataFrame:
    frame = _tables(extra)
    rng = np.random.default_rng(1)
    ints = list(rng.integers(0, 50, 300))
    if extra:
        ints += [2**63 - 1, -(2**63), None, 0, 10**18, -1, 49, 50, None]
    frame["n"] = pd.array(ints, dtype="Int64")
    return frame


@pytest.mark.parametrize("method", ["mst", "aim"])
def test_a_release_with_a_measured_domain_has_the_same_outcome_on_neighbours(
    tmp_path: Path, method: str
) -> None:
    """DP quantile bins (real and integer columns, no declared bounds) and DP-selected keys
    (no declared keys): the extreme person's NaN, ±inf, ±1e308, integer limits, NULLs and
    100,000-character key change neither whether the release errors nor its charge count."""
    outcomes: list[tuple[object, ...]] = []
    bins: Any = {
        "v": Quantiles(6, within=(0, 100)),
        "n": Quantiles(4, within=(0, 49)),
        "k": SelectKeys(5),
    }
    for extra in (False, True):
        s = Session(
            budget=EpsilonDelta(epsilon=10, delta=1e-5), ledger=tmp_path / f"d{method}{extra}.db"
        )
        s.add_table("t", _measured_domain_tables(extra), privacy_unit="uid", max_groups=1,
                    max_rows=2)  # fmt: skip
        out = s.synthesize("t", columns=["v", "n", "k"], epsilon=1, delta=1e-6, method=method,
                           rows=50, bins=bins)  # fmt: skip
        outcomes.append((out.table.num_rows, out.table.column_names, len(s.budget.history)))
        # Every refusal stays public: the same one on both.
        with pytest.raises(UnsafeQuery) as refused:
            s.synthesize("t", columns=["v", "k"], epsilon=1, delta=1e-6, bins={"v": 4})
        outcomes.append((str(refused.value), len(s.budget.history)))
    assert outcomes[0] == outcomes[2] == (50, ["v", "n", "k"], 1)
    assert outcomes[1] == outcomes[3]
