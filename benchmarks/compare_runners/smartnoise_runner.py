"""SmartNoise SQL on the benchmark query, with its pandas reader (an in-memory SQLite database).

SmartNoise bounds rows per user (``max_ids``), not groups per user nor rows per group: the
nearest option is ``max_ids = 50`` (5 groups × 10 rows), with its default per-user reservoir
sampling. It charges its ε once per noisy column (here 3: COUNT(*), SUM(value) and the count
behind AVG), so ``Privacy(epsilon=1/3, delta=1e-6)`` gives a total of ε = 1 (checked with
``get_privacy_cost``). ``censor_dims = False``: every category present is released (the keys
are public). The in-memory form is the reader (the DataFrame copied into SQLite).
"""

from __future__ import annotations

import warnings
from importlib.metadata import version
from typing import Any

import pandas as pd
import snsql
from _common import DELTA, EPSILON, HIGH, LOW, MAX_GROUPS, MAX_ROWS, main
from snsql import Privacy

warnings.filterwarnings("ignore")
QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
    "FROM events GROUP BY category"
)
META = {
    "": {
        "": {
            "events": {
                "max_ids": MAX_GROUPS * MAX_ROWS,
                "row_privacy": False,
                "censor_dims": False,
                "user_id": {"type": "int", "private_id": True},
                "category": {"type": "int"},
                "value": {"type": "float", "lower": LOW, "upper": HIGH, "nullable": True},
            }
        }
    }
}


def load(path: str) -> Any:
    reader = snsql.from_df(
        pd.read_parquet(path), privacy=Privacy(epsilon=EPSILON / 3, delta=DELTA), metadata=META
    )
    eps, _ = reader.get_privacy_cost(QUERY)
    if abs(float(eps) - EPSILON) > 1e-9:
        raise RuntimeError(f"SmartNoise would charge ε = {eps}, not {EPSILON}")
    return reader


def prepare(reader: Any) -> Any:
    return reader


def query(reader: Any) -> tuple[list[Any], list[Any], list[Any]]:
    res = reader.execute_df(QUERY)
    by = {int(r.category): r for r in res.itertuples(index=False)}
    rows = [by.get(k) for k in range(50)]
    return (
        [None if r is None else r.n for r in rows],
        [None if r is None else r.total for r in rows],
        [None if r is None else r.mean for r in rows],
    )


if __name__ == "__main__":
    main(
        version=version("smartnoise-sql"),
        backend="pandas reader (in-memory SQLite)",
        load=load,
        prepare=prepare,
        query=query,
        count_scale=MAX_GROUPS * MAX_ROWS / (EPSILON / 3),
    )
