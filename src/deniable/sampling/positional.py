"""Bernoulli sampling of an engine table from CSPRNG bits joined by position (the fastest way).

Each row is kept independently with probability exactly ``β`` (the rational value of the
float given), using :func:`deniable.noise.bernoulli` on the OS CSPRNG: the keep/drop bits are
drawn in Python in fixed-size batches and joined to the table by position inside DuckDB
(``POSITIONAL JOIN``), so the rows never travel into Python. The order in which DuckDB scans
the rows does not matter: the bits are i.i.d. and drawn independently of the data, so any
assignment of bits to rows gives every row an independent Bernoulli(β) fate.

Compared with :mod:`deniable.sampling.bernoulli` (a keyed hash of each row's identity, which
can sample whole privacy units and be fused into another statement), this draws one exact
Bernoulli(β) bit per row and hashes nothing, for a materialised one-off sample (its cost
on 10^7 rows is in BENCHMARKS.md, anonymization section: 1.85 s, 0.24x a GROUP BY).
"""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa

from deniable.noise.bernoulli import bernoulli
from deniable.noise.exact import RationalLike
from deniable.noise.source import RandomSource
from deniable.sqlrunner import SQLRunner, one_row, require_runner

_BATCH = 1 << 22  # rows per batch of CSPRNG bits (32 MiB of words)


def fresh_name(prefix: str) -> str:
    """A unique temporary table name."""
    return f"__deniable_{prefix}_{uuid.uuid4().hex[:12]}"


def bernoulli_sample(
    runner: SQLRunner,
    relation: str,
    columns: str,
    beta: RationalLike,
    *,
    source: RandomSource | None = None,
) -> str:
    """Create a TEMP table holding a Bernoulli(β) sample of ``relation``; return its name.

    Args:
        runner: the engine (DuckDB SQL: ``POSITIONAL JOIN``) that can read ``relation``;
            e.g. :class:`deniable.engines.duckdb.DuckDBRunner` around a connection.
        relation: a quoted table/view name (or parenthesised subquery).
        columns: the SELECT list of the columns to keep (e.g. quoted names).
        beta: the exact sampling rate.
        source: randomness (default: the OS CSPRNG).

    The sample is not a release: it must stay inside the trusted boundary and be used for
    one release only (LQS §2.6).
    """
    runner = require_runner(runner)
    n = int(one_row(runner, f"SELECT COUNT(*) FROM {relation}")[0])
    parts = [bernoulli(beta, min(_BATCH, n - i), source=source) for i in range(0, n, _BATCH)]
    keep = np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
    mask_name = fresh_name("mask")
    out = fresh_name("sample")
    runner.register(mask_name, pa.table({"__keep": pa.array(keep)}))
    try:
        runner.execute(
            f"CREATE TEMP TABLE {out} AS SELECT {columns} FROM {relation} "
            f"POSITIONAL JOIN {mask_name} WHERE {mask_name}.__keep"
        )
    finally:
        runner.unregister(mask_name)
    return out
