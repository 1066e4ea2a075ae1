"""OpenDP (polars context, Rust core) on the benchmark query.

``user_id`` is the identifier of the privacy unit (one unit, ``contributions=1``); OpenDP's own
``truncate_per_group(10)`` and ``truncate_num_groups(5)`` bound the contributions. Its
``keep="sample"`` for the groups fails in OpenDP 0.16 with its pinned polars 1.36.1 ("multiple
fields with name 'category' found": the hash and the key share a struct field name), so the
groups kept are each user's 5 lowest category ids (``keep="first"``). Count, sum and mean
(itself a sum and a count) in one query at ε = 1: four Laplace releases at ε/4 each. The
margin's ``max_length`` (a public bound on rows per category, used by the float-sum
sensitivity) is the table's row count.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import opendp.prelude as dp
import polars as pl
from _common import CATEGORIES, EPSILON, HIGH, LOW, MAX_GROUPS, MAX_ROWS, main

dp.enable_features("contrib")


def load(path: str) -> pl.DataFrame:
    return pl.read_parquet(path)


def prepare(df: pl.DataFrame) -> Any:
    return dp.Context.compositor(
        data=df.lazy(),
        privacy_unit=dp.unit_of(contributions=1, identifier="user_id"),
        privacy_loss=dp.loss_of(epsilon=EPSILON),
        split_evenly_over=1,
        margins=[
            dp.polars.Margin(
                by=["category"], invariant="keys", max_length=df.height, max_groups=len(CATEGORIES)
            )
        ],
    )


def _query(ctx: Any) -> Any:
    value = pl.col("value").fill_nan(0.0).fill_null(0.0)
    return (
        ctx.query()
        .truncate_per_group(MAX_ROWS, by=["category"])
        .truncate_num_groups(MAX_GROUPS, by=["category"], keep="first")
        .group_by("category")
        .agg(
            pl.len().dp.noise().alias("n"),
            value.dp.sum((LOW, HIGH)).alias("total"),
            value.dp.mean((LOW, HIGH)).alias("mean"),
        )
        .with_keys(pl.LazyFrame({"category": CATEGORIES}, schema={"category": pl.Int32}))
    )


def query(ctx: Any) -> tuple[list[Any], list[Any], list[Any]]:
    res = _query(ctx).release().collect().sort("category")
    by = {int(r["category"]): r for r in res.iter_rows(named=True)}
    rows = [by.get(k, {}) for k in CATEGORIES]
    return (
        [r.get("n") for r in rows],
        [r.get("total") for r in rows],
        [r.get("mean") for r in rows],
    )


def count_scale(df: pl.DataFrame) -> float:
    """The scale OpenDP chose for the count (from ``summarize``; nothing is released)."""
    summary = _query(prepare(df)).summarize()
    return float(summary.filter(pl.col("column") == "n")["scale"][0])


if __name__ == "__main__":
    main(
        version=version("opendp"),
        backend=f"polars {pl.__version__} LazyFrame (Rust core)",
        load=load,
        prepare=prepare,
        query=query,
        count_scale=count_scale,
    )
