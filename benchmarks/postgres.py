"""Benchmark of the DP SQL path inside PostgreSQL against the two-level floor, in one run.

The query of ``benchmarks/query.py`` (per category a DP count, sum and mean; at most 5
categories and 10 rows per category per user, values clamped to [0, 100], ε = 1, public
category keys) on the ``uniform`` workload (``deniable.datasets.events(N, seed=1)``), loaded
into a table ``events(user_id BIGINT, category INTEGER, value DOUBLE PRECISION)`` of a
PostgreSQL 15 server started for the run (``initdb`` + ``pg_ctl`` on a temporary directory,
as the tests do) and read in place through ``Session.add_table(…, "postgresql://…",
table="public.events")``.

Floor, on the same server, table and run: the two-level query ``GROUP BY user_id, category``
then ``GROUP BY category`` (the aggregation a user-level DP query cannot avoid). ``dp engine``
is the generated bounded statement alone (``PostgresEngine.run``: read-only transaction,
statement timeout, result to Arrow); ``dp`` is ``Session.sql`` end to end (plan, statement,
ledger charge, noise). Times: minimum of interleaved repetitions.

The engine runs the bounded statement with ``max_parallel_workers_per_gather = 0``
(``PostgresEngine(parallel_workers=0)``, the default): ``parallel level 1`` runs the declared
form with the server's own setting instead (PostgreSQL then plans a parallel partial
aggregation of the (user, category) pairs, which are nearly unique per worker; the floor's plan
is serial by itself).

The generated statement is timed in both packed forms, compiled in the same run by switching
the capability ``wide_packing`` of the engine (their exact aggregates are checked equal):
``narrow packing`` (a count in the low bits of a sum clamped to BIGINT, and the re-sum of the
partitions of ``2^bits`` rows or more: ``__giant``, ``__grows``, ``__gl1``, a second reader
of ``__capped`` that PostgreSQL then materialises) and ``wide packing`` (the packed sum stays
NUMERIC, read back by exact decimal arithmetic, capability ``wide_bitwise = False``; no
re-sum). ``dp`` uses the form of :data:`deniable.engines.base.POSTGRES_CAPABILITIES`.

Server settings for a 2-core, 24 GiB machine (:data:`SETTINGS`): ``shared_buffers = 6GB``
(a quarter of memory: the whole 10⁷-row table stays cached), ``work_mem = 512MB`` (the
per-(user, category) hash aggregates and window sorts stay in memory), ``max_parallel_workers
_per_gather = 2`` and ``max_parallel_workers = 2`` (both cores), ``effective_cache_size = 16GB``,
``jit = off`` (JIT compiling the large generated statement costs more than it saves here), and
for a throwaway benchmark server only, ``fsync = off``, ``synchronous_commit = off``.

Run: ``.venv/bin/python benchmarks/postgres.py [--sizes 1e6 1e7] [--repeat 3]`` (writes
``benchmarks/results/postgres.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

from deniable.engines.base import POSTGRES_CAPABILITIES, Capabilities  # noqa: E402

QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
    "FROM events GROUP BY category"
)
TWO_LEVEL = (
    "SELECT category, sum(n), sum(s), sum(s) / sum(n) FROM (SELECT user_id, category, "
    "count(*) AS n, sum(value) AS s FROM events GROUP BY user_id, category) AS per_user "
    "GROUP BY category"
)
POLICY: dict[str, Any] = {
    "privacy_unit": "user_id",
    "bounds": {"value": (0, 100)},
    "max_groups": 5,
    "max_rows": 10,
}
SETTINGS = {
    "shared_buffers": "6GB",
    "work_mem": "512MB",
    "max_parallel_workers_per_gather": "2",
    "max_parallel_workers": "2",
    "effective_cache_size": "16GB",
    "jit": "off",
    "max_wal_size": "8GB",
}
SEED = 1


def _load(dsn: str, n: int) -> None:
    """Create ``public.events`` and COPY the workload in (CSV streamed from Arrow)."""
    import psycopg
    import pyarrow.csv as pacsv

    from deniable.datasets import events

    table = events(n, seed=SEED).select(["user_id", "category", "value"])
    with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS public.events")
        cur.execute(
            "CREATE TABLE public.events (user_id BIGINT, category INTEGER, value DOUBLE PRECISION)"
        )
        with cur.copy("COPY public.events FROM STDIN (FORMAT csv, HEADER true)") as copy:
            for i, batch in enumerate(table.to_batches(max_chunksize=1_000_000)):
                buf = io.BytesIO()
                pacsv.write_csv(batch, buf, pacsv.WriteOptions(include_header=i == 0))
                copy.write(buf.getvalue())
        cur.execute("VACUUM ANALYZE public.events")
        cur.execute("SELECT count(*) FROM public.events")
        row = cur.fetchone()
        assert row is not None and row[0] == n


@contextlib.contextmanager
def _capabilities(caps: Capabilities) -> Iterator[None]:
    """Compile for ``caps`` instead of PostgreSQL's declared capabilities (this process)."""
    from deniable.engines.postgres import PostgresEngine

    saved = PostgresEngine.capabilities
    PostgresEngine.capabilities = caps
    try:
        yield
    finally:
        PostgresEngine.capabilities = saved


def _runner(engine: Any, binding: Any, sql: str) -> Callable[[int], object]:
    """A timed run of ``sql`` (the repetition index is ignored)."""
    return lambda i: engine.run(binding, sql)


def measure(dsn: str, n: int, repeat: int, tmp: Path) -> dict[str, float]:
    """Best wall times (s) of the floor, the generated statement and ``Session.sql``."""
    import psycopg

    from deniable.accounting.loss import Epsilon
    from deniable.curator.session import Session
    from deniable.query.testing import exact_aggregates

    _load(dsn, n)

    def events_session(ledger: Path) -> Session:
        s = Session(budget=Epsilon(epsilon=10**6), ledger=ledger)
        s.add_table(
            "events",
            dsn,
            table="public.events",
            public_keys={"category": list(range(50))},
            version=f"bench-{n}",
            **POLICY,
        )
        return s

    session = events_session(tmp / f"ledger_{n}.db")
    engine = session._engines["events"]
    binding = session._bindings["events"]
    forms: dict[str, str] = {}
    exact: dict[str, Any] = {}
    for name, wide in (("narrow packing", False), ("wide packing", True)):
        caps = dataclasses.replace(POSTGRES_CAPABILITIES, wide_packing=wide)
        with _capabilities(caps):
            _, compiled, result = exact_aggregates(session, QUERY, not_private=True, epsilon=1)
        assert ("__giant" in compiled.sql) == (not wide), name
        forms[name], exact[name] = compiled.sql, result
    by_key = [
        {
            k: (int(r.units[i]), *(int(v[i]) for v in r.measures.values()))
            for i, k in enumerate(r.keys)
        }
        for r in exact.values()
    ]
    assert by_key[0] == by_key[1], "the two packed forms disagree"
    # The declared form again with the server's parallelism (the engine's default turns it
    # off for the bounded statement): PostgreSQL plans a parallel partial aggregation there,
    # which barely reduces the nearly unique (user, category) pairs.
    parallel_session = events_session(tmp / f"parallel_{n}.db")
    from deniable.engines.postgres import PostgresEngine

    parallel = parallel_session._engines["events"]
    assert isinstance(parallel, PostgresEngine)
    parallel._parallel_workers = None  # the server's max_parallel_workers_per_gather
    declared = "wide packing" if POSTGRES_CAPABILITIES.wide_packing else "narrow packing"
    parallel_run = _runner(parallel, parallel_session._bindings["events"], forms[declared])
    floor = psycopg.connect(dsn, autocommit=True)

    def dp(i: int) -> None:
        # a new ε each time, so that the answer cache does not serve it
        session.sql(QUERY, epsilon=Fraction(1) + Fraction(i + 1, 10**9))

    runs = {
        "two-level (non-private)": lambda i: floor.execute(TWO_LEVEL).fetchall(),
        **{f"dp engine, {name}": _runner(engine, binding, sql) for name, sql in forms.items()},
        f"dp engine, {declared}, parallel level 1": parallel_run,
        "dp": dp,
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for warm in runs.values():  # warm the cache and the plans once
        warm(-1)
    for i in range(repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - t0)
    floor.close()
    session.close()
    parallel_session.close()
    return {k: min(v) for k, v in times.items()}


def main() -> None:
    """Start a tuned server, measure each size, write ``benchmarks/results/postgres.md``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "postgres.md"))
    args = parser.parse_args()

    from _postgres import PostgresServer

    server = PostgresServer(settings=SETTINGS)
    results: list[tuple[int, dict[str, float]]] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for size in args.sizes:
                n = int(size)
                best = measure(server.dsn(), n, args.repeat, Path(d))
                results.append((n, best))
                floor = best["two-level (non-private)"]
                print(
                    f"N={n}: "
                    + ", ".join(f"{k} {v:.3f}s ({v / floor:.2f}x)" for k, v in best.items()),
                    flush=True,
                )
        import psycopg

        with psycopg.connect(server.dsn()) as con:
            version = str(con.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    finally:
        server.stop()
    lines = [
        "## DP SQL inside PostgreSQL (`benchmarks/postgres.py`)",
        "",
        (
            "The per-category DP count, sum and mean of `benchmarks/query.py` (uniform workload, "
            "≤ 5 categories and ≤ 10 rows per category per user, values clamped to "
            "[0, 100], ε = 1, "
            f"public keys), run inside PostgreSQL {version} on a table read in place "
            '(`Session.add_table(…, "postgresql://…", table="public.events")`), as a ratio to '
            "the non-private two-level query (`GROUP BY user_id, category` then `GROUP BY "
            "category`) on the same server, table and run. `dp engine` is the generated bounded "
            "statement alone (read-only transaction with a statement timeout, result to Arrow), "
            "in both packed forms compiled in the same run (equal exact aggregates checked): "
            "*narrow packing* (a count in the low bits of a sum clamped to BIGINT, with the "
            "re-sum of partitions of 2^bits rows or more — a second reader of `__capped`) and "
            "*wide packing* (the packed sum kept NUMERIC, read back by exact decimal arithmetic, "
            "no re-sum); the engine runs them with `max_parallel_workers_per_gather = 0` (its "
            "default, `PostgresEngine(parallel_workers=0)`); *parallel level 1* is the declared "
            "form with the server's own setting (same server); "
            "`dp` is `Session.sql` end to end, with "
            f"`wide_packing = {POSTGRES_CAPABILITIES.wide_packing}` (the declared form). "
            "Minimum of "
            f"{args.repeat} interleaved runs after one warm-up. Target: ≤ 2.5× the floor."
        ),
        "",
        "Server: "
        + ", ".join(f"`{k} = {v}`" for k, v in SETTINGS.items())
        + " (and `fsync = off` for this throwaway server); "
        f"{platform.machine()}, {platform.python_version()}.",
        "",
        "| N | query | time (s) | × two-level |",
        "|---|---|---|---|",
    ]
    for n, best in results:
        floor = best["two-level (non-private)"]
        for name, value in best.items():
            lines.append(f"| {n:.0e} | {name} | {value:.3f} | {value / floor:.2f} |")
    lines += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/postgres.py --sizes "
        + " ".join(f"{s:.0e}" for s in args.sizes)
        + f" --repeat {args.repeat}`",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
