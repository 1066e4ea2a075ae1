"""Benchmark of a join with a small public table, and of compiling a wide query.

Two targets, each measured against floors timed in the same run:

1. **Join with a 50-row public table ≤ 1.2× the same query without the join.** Data: the
   ``events`` table of ``deniable.datasets.events(N, seed=1)`` (the ``uniform`` workload of
   ``benchmarks/query.py``: ``user_id``, ``category`` 0–49, ``value``), at most 5 groups and
   10 rows per user and group, values clamped to [0, 100], ε = 1. A public table ``cats``
   (50 rows: ``category`` → ``label`` = ``g<category mod 10>``, and a ``weight``) is registered
   with ``Session.add_public_table``. The DP query ``SELECT c.label, COUNT(*), SUM(e.value),
   AVG(e.value) FROM events e JOIN cats c ON e.category = c.category GROUP BY c.label`` (public
   keys: the labels come from the public table) is timed against ``SELECT category,
   COUNT(*), SUM(value), AVG(value) FROM events GROUP BY category`` at the same ε: end to end
   (``Session.sql``) and the generated SQL alone in DuckDB (``engine``). Non-private floors
   on the same DuckDB table: the plain and two-level aggregations (``GROUP BY user_id, key``
   then ``GROUP BY key``), each with and without the join. Also timed: the generated join SQL
   with its ``ON`` clause rewritten by hand to the plain equality (``engine, equi-join``), to
   show what the generated ``coalesce(try(a = b), FALSE)`` costs — DuckDB cannot use that
   condition as a hash-join key and plans a blockwise nested-loop join (N × 50 comparisons).
   The events table lives in the session engine's own DuckDB connection (bound as a
   relation of it), because a join with a public table fails when the private table was
   registered from another DuckDB connection (the public table's snapshot lives in the
   engine's connection).

2. **Compile time of a 10-aggregate query with a 1,000-key public domain < 20 ms.** Query:
   ``COUNT(*), COUNT(x), SUM(x), AVG(x), VARIANCE(x), STDDEV(x), SUM(y), AVG(y), SUM(x + 2 *
   y), AVG(x * y)`` grouped by a key with a declared domain of 1,000 values: integer keys
   0–999 (rendered as ``BETWEEN``) or text keys (rendered as ``IN`` of 1,000 literals); and
   the same with ``AVG(x * y)`` replaced by ``MEDIAN(x)`` (which switches the statement to
   its histogram form). Timed separately: ``Session.compile`` (parse, validate, plan,
   events check, cache key) and ``QueryProgram.statement`` (the sqlglot tree built and
   rendered for DuckDB), and the two together; best of ``--compile-repeat`` interleaved
   runs. Floors: sqlglot's parse and render of the same query text (the least any rewriting
   compiler does), and the same compile with a 10-key domain. The slowest variant is
   profiled with cProfile.

Timings are the minimum over interleaved repetitions (the machine is shared); the load
averages before and after are printed with the figures. The largest size runs last.

Run: ``.venv/bin/python benchmarks/compile_join.py [--sizes 1e6 1e7] [--repeat 5]
[--compile-repeat 20]`` (writes ``benchmarks/results/compile_join.md``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

POLICY: dict[str, Any] = {
    "privacy_unit": "user_id",
    "bounds": {"value": (0, 100)},
    "max_groups": 5,
    "max_rows": 10,
}
JOIN_QUERY = (
    "SELECT c.label, COUNT(*) AS n, SUM(e.value) AS total, AVG(e.value) AS mean "
    "FROM events e JOIN cats c ON e.category = c.category GROUP BY c.label"
)
PLAIN_QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
    "FROM events GROUP BY category"
)
DATA = "events_data"  # the native DuckDB table holding the rows
FLOORS = {
    "plain": (f"SELECT category, count(*), sum(value), avg(value) FROM {DATA} GROUP BY category"),
    "plain, join": (
        f"SELECT c.label, count(*), sum(e.value), avg(e.value) FROM {DATA} e "
        "JOIN cats_floor c ON e.category = c.category GROUP BY c.label"
    ),
    "two-level": (
        "SELECT category, sum(n), sum(s), sum(s) / sum(n) FROM (SELECT user_id, category, "
        f"count(*) AS n, sum(value) AS s FROM {DATA} GROUP BY user_id, category) "
        "GROUP BY category"
    ),
    "two-level, join": (
        "SELECT label, sum(n), sum(s), sum(s) / sum(n) FROM (SELECT e.user_id, c.label, "
        f"count(*) AS n, sum(e.value) AS s FROM {DATA} e JOIN cats_floor c "
        "ON e.category = c.category GROUP BY e.user_id, c.label) GROUP BY label"
    ),
}
OPERATORS = (
    "BLOCKWISE_NL_JOIN",
    "HASH_JOIN",
    "HASH_GROUP_BY",
    "WINDOW",
    "PROJECTION",
    "FILTER",
    "other",
)
AGGREGATES = (
    "COUNT(*) AS n",
    "COUNT(x) AS nx",
    "SUM(x) AS sx",
    "AVG(x) AS ax",
    "VARIANCE(x) AS vx",
    "STDDEV(x) AS dx",
    "SUM(y) AS sy",
    "AVG(y) AS ay",
    "SUM(x + 2 * y) AS sxy",
    "AVG(x * y) AS axy",
)
MEDIAN = "MEDIAN(x) AS mx"
DOMAIN = 1000
COMPILE_TARGET_MS = 20.0
JOIN_TARGET = 1.2
BARE = "dp engine, join (equi-join, no label domain filter, hand-fixed)"


def _load_average() -> str:
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _best(runs: dict[str, Callable[[int], object]], repeat: int) -> dict[str, float]:
    """The minimum wall time of each run over ``repeat`` interleaved rounds."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - t0)
    return {k: min(v) for k, v in times.items()}


def _new_session(tmp: Path, label: str):  # type: ignore[no-untyped-def]
    from deniable.accounting.loss import EpsilonDelta
    from deniable.curator.session import Session

    return Session(
        budget=EpsilonDelta(epsilon=10**9, delta=0.5), ledger=str(tmp / f"ledger_{label}.db")
    )


def _cats() -> Any:
    import pandas as pd

    return pd.DataFrame(
        {
            "category": list(range(50)),
            "label": [f"g{c % 10}" for c in range(50)],
            "weight": [1.0 + c / 50 for c in range(50)],
        }
    )


# -- target 1: join ------------------------------------------------------------------------


def _equi_join(sql: str) -> str:
    """The generated SQL with the join's total predicate replaced by the plain equality."""
    total = 'coalesce(try(__t."category" = __j1."category"), FALSE)'
    if sql.count(total) < 1:
        return sql  # the compiler already emits the plain equality
    return sql.replace(total, '__t."category" = __j1."category"')


def _no_domain_filter(sql: str) -> str:
    """Also without the (tautological) domain filter on the public table's label."""
    key = '(try(__j1."label"))'
    labels = ", ".join(f"'g{i}'" for i in range(10))
    where = f"WHERE ({key} IN ({labels})) AND "
    if sql.count(where) != 2:
        return sql  # the compiler no longer filters a public table's own values
    return sql.replace(where, "WHERE ").replace(key, '__j1."label"')


def _profile(con, sql: str, tmp: Path, runs: int = 3) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """CPU seconds by operator type (DuckDB's JSON profile), minimum over ``runs``."""
    out = tmp / "profile.json"
    best: dict[str, float] = {}
    for _ in range(runs):
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{out}'")
        try:
            con.sql(sql).fetchall()
        finally:
            con.execute("PRAGMA disable_profiling")
        totals = dict.fromkeys(OPERATORS, 0.0)

        def walk(node: dict[str, Any], totals: dict[str, float] = totals) -> None:
            kind = str(node.get("operator_type", node.get("type", "")))
            key = kind if kind in OPERATORS else "other"
            timing = node.get("operator_timing", node.get("timing", 0.0))
            totals[key] += float(timing) if isinstance(timing, int | float) else 0.0
            for child in node.get("children", []) or []:
                walk(child)

        profile = json.loads(out.read_text())
        for op in profile.get("children", profile.get("operator", [])):
            walk(op)
        best = totals if not best else {k: min(best[k], v) for k, v in totals.items()}
    return best


def measure_join(n: int, repeat: int, tmp: Path) -> dict[str, Any]:
    """Time the join query against the query without join and the floors, at ``n`` rows."""
    from deniable.datasets import events
    from deniable.query.rewrite.compile import Secrets

    session = _new_session(tmp, f"join_{n}")
    con = session._engine.connection  # documented for tests and benchmarks
    table = events(n, seed=1)
    con.register("__arrow_events", table)
    con.execute(f"CREATE TABLE {DATA} AS SELECT * FROM __arrow_events")
    con.unregister("__arrow_events")
    del table
    con.register("__arrow_cats", _cats())
    con.execute("CREATE TABLE cats_floor AS SELECT * FROM __arrow_cats")
    con.unregister("__arrow_cats")
    # The events are bound in the engine's own connection (an Arrow table registered
    # there), so that one statement can also read the public table's snapshot.
    session.add_table(
        "events",
        con.table(DATA).to_arrow_table(),
        public_keys={"category": list(range(50))},
        **POLICY,
    )
    session.add_public_table("cats", _cats(), unique_key="category")
    binding = session._bindings["events"]
    caps = session._engine.capabilities

    def generated(query: str) -> str:
        program = session.compile(query, epsilon=1)
        joined = {k: b.name for k, b in session._joined(program.plan).items()}
        return str(program.statement(caps, binding.name, Secrets(1, 2), joined).sql)

    join_sql, plain_sql = generated(JOIN_QUERY), generated(PLAIN_QUERY)
    fixed_sql = _equi_join(join_sql)
    bare_sql = _no_domain_filter(fixed_sql)
    # the generated SQL reads the binding's view; on the connection, the table itself
    direct = {
        "dp engine": plain_sql.replace(f'"{binding.name}"', f'"{DATA}"'),
        "dp engine, join": join_sql.replace(f'"{binding.name}"', f'"{DATA}"'),
        "dp engine, join (equi-join, hand-fixed)": fixed_sql.replace(
            f'"{binding.name}"', f'"{DATA}"'
        ),
        BARE: bare_sql.replace(f'"{binding.name}"', f'"{DATA}"'),
    }
    # the hand-fixed SQL must give the same exact aggregates as the generated one
    reference = sorted(con.sql(direct["dp engine, join"]).fetchall())
    same = all(
        sorted(con.sql(direct[k]).fetchall()) == reference
        for k in ("dp engine, join (equi-join, hand-fixed)", BARE)
    )
    if not same:
        raise RuntimeError("the equi-join rewrite changed the bounded aggregates")

    def dp(query: str) -> Callable[[int], object]:
        # a new ε each time, so that the answer cache does not serve it
        return lambda i: session.sql(query, epsilon=Fraction(1) + Fraction(i + 1, 10**9))

    def floor(sql: str) -> Callable[[int], object]:
        return lambda i: con.sql(sql).fetchall()

    runs = {name: floor(sql) for name, sql in FLOORS.items()}
    runs |= {
        "dp": dp(PLAIN_QUERY),
        "dp, join": dp(JOIN_QUERY),
        "dp engine": lambda i: session._engine.run(binding, plain_sql),
        "dp engine, join": lambda i: session._engine.run(binding, join_sql),
        "dp engine, join (equi-join, hand-fixed)": lambda i: session._engine.run(
            binding, fixed_sql
        ),
        BARE: lambda i: session._engine.run(binding, bare_sql),
    }
    load_before = _load_average()
    best = _best(runs, repeat)
    load_after = _load_average()
    cpu = {name: _profile(con, sql, tmp) for name, sql in direct.items()}
    cpu["two-level"] = _profile(con, FLOORS["two-level"], tmp)
    cpu["two-level, join"] = _profile(con, FLOORS["two-level, join"], tmp)
    session.close()
    return {
        "n": n,
        "time": best,
        "cpu": cpu,
        "load": (load_before, load_after),
        "join_sql": join_sql,
    }


# -- target 2: compile ---------------------------------------------------------------------


def _compile_setup(tmp: Path):  # type: ignore[no-untyped-def]
    """A session with three registrations of a small table: 1,000 int / text keys, 10 keys."""
    import pandas as pd

    session = _new_session(tmp, "compile")
    rows = 2 * DOMAIN
    frame = pd.DataFrame(
        {
            "user_id": range(rows),
            "k": [i % DOMAIN for i in range(rows)],
            "kt": [f"key{i % DOMAIN:04d}" for i in range(rows)],
            "x": [float(i % 100) for i in range(rows)],
            "y": [float(i % 7) for i in range(rows)],
        }
    )
    policy: dict[str, Any] = {
        "privacy_unit": "user_id",
        "bounds": {"x": (0, 100), "y": (-10, 10)},
        "max_groups": 5,
        "max_rows": 10,
    }
    session.add_table("t_int", frame, public_keys={"k": list(range(DOMAIN))}, **policy)
    session.add_table(
        "t_text", frame, public_keys={"kt": [f"key{i:04d}" for i in range(DOMAIN)]}, **policy
    )
    session.add_table("t_small", frame, public_keys={"k": list(range(10))}, **policy)
    return session


def _compile_query(table: str, key: str, median: bool) -> str:
    aggs = list(AGGREGATES)
    if median:
        aggs[-1] = MEDIAN
    return f"SELECT {key}, {', '.join(aggs)} FROM {table} GROUP BY {key}"


VARIANTS = {
    "1,000 integer keys": ("t_int", "k", False),
    "1,000 integer keys + MEDIAN": ("t_int", "k", True),
    "1,000 text keys": ("t_text", "kt", False),
    "1,000 text keys + MEDIAN": ("t_text", "kt", True),
    "10 integer keys (floor)": ("t_small", "k", False),
    "10 integer keys + MEDIAN (floor)": ("t_small", "k", True),
}


def measure_compile(repeat: int, tmp: Path) -> dict[str, Any]:
    """Best-of-``repeat`` compile, statement and total times of each variant (seconds)."""
    import sqlglot
    from sqlglot import ErrorLevel

    from deniable.query.rewrite.compile import Secrets, render

    session = _compile_setup(tmp)
    caps = session._engine.capabilities

    def parts(name: str) -> tuple[float, float, float, float, int]:
        table, key, median = VARIANTS[name]
        query = _compile_query(table, key, median)
        relation = session._bindings[table].name
        t0 = time.perf_counter()
        program = session.compile(query, epsilon=1)
        t1 = time.perf_counter()
        compiled = program.statement(caps, relation, Secrets(1, 2))
        t2 = time.perf_counter()
        # the statement's render step alone, as compile_plan does it (sqlglot copies the tree)
        text = render(compiled.statement, caps.dialect)
        t3 = time.perf_counter()
        # the same render without sqlglot's defensive copy of the (throw-away) tree
        tree = compiled.statement.copy()
        t4 = time.perf_counter()
        uncopied = tree.sql(
            dialect=caps.dialect,
            normalize_functions="lower",
            unsupported_level=ErrorLevel.RAISE,
            copy=False,
        )
        t5 = time.perf_counter()
        if text != compiled.sql or uncopied != compiled.sql:
            raise RuntimeError("re-rendering the statement changed its text")
        return t1 - t0, t2 - t1, t3 - t2, t5 - t4, len(compiled.sql)

    def floor() -> float:
        query = _compile_query("t_int", "k", False)
        t0 = time.perf_counter()
        sqlglot.parse_one(query, read="duckdb").sql(dialect="duckdb")
        return time.perf_counter() - t0

    cold = {name: parts(name) for name in VARIANTS}  # first call: warm-up, reported apart
    samples: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in VARIANTS}
    floors: list[float] = []
    sizes: dict[str, int] = {}
    load_before = _load_average()
    for _ in range(repeat):
        floors.append(floor())
        for name in VARIANTS:
            c, s, r, u, size = parts(name)
            samples[name].append((c, s, r, u))
            sizes[name] = size
    load_after = _load_average()
    result: dict[str, Any] = {"variants": {}, "floor": min(floors), "repeat": repeat}
    for name, xs in samples.items():
        result["variants"][name] = {
            "compile": min(x[0] for x in xs),
            "statement": min(x[1] for x in xs),
            "render": min(x[2] for x in xs),
            "render_no_copy": min(x[3] for x in xs),
            "total": min(x[0] + x[1] for x in xs),
            "median_total": statistics.median(x[0] + x[1] for x in xs),
            "cold_total": cold[name][0] + cold[name][1],
            "sql_chars": sizes[name],
        }
    slowest = max(VARIANTS, key=lambda n: result["variants"][n]["total"])
    result["slowest"] = slowest
    result["profile"] = _cprofile(session, slowest, caps)
    result["load"] = (load_before, load_after)
    session.close()
    return result


def _cprofile(session, name: str, caps) -> str:  # type: ignore[no-untyped-def]
    """cProfile of 20 compile + statement calls of a variant: top functions by own time."""
    from deniable.query.rewrite.compile import Secrets

    table, key, median = VARIANTS[name]
    query = _compile_query(table, key, median)
    relation = session._bindings[table].name
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        program = session.compile(query, epsilon=1)
        program.statement(caps, relation, Secrets(1, 2))
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(25)
    stats.sort_stats("tottime").print_stats(15)
    return out.getvalue()


# -- report --------------------------------------------------------------------------------


def report(
    joins: list[dict[str, Any]], comp: dict[str, Any] | None, command: str, load: str
) -> str:
    lines = ["## Joins with a public table, and compile time (`benchmarks/compile_join.py`)", ""]
    if joins:
        lines += _join_section(joins)
    if comp is not None:
        lines += _compile_section(comp)
    lines += [
        (
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; DuckDB uses all of them; the machine is shared "
            f"(other test runs). Load average (1/5/15 min) before the run: {load}, after: "
            f"{_load_average()}. Reproduce with `{command}`."
        ),
        "",
    ]
    return "\n".join(lines)


JOIN_ROWS = (
    "plain",
    "plain, join",
    "two-level",
    "two-level, join",
    "dp engine",
    "dp engine, join",
    "dp engine, join (equi-join, hand-fixed)",
    BARE,
    "dp",
    "dp, join",
)


def _join_section(joins: list[dict[str, Any]]) -> list[str]:
    lines = [
        "### A join with a 50-row public table",
        "",
        (
            "`SELECT c.label, COUNT(*), SUM(e.value), AVG(e.value) FROM events e JOIN cats c ON "
            "e.category = c.category GROUP BY c.label` (`cats`: 50 rows registered with "
            "`add_public_table`, 10 labels, public keys) against `SELECT category, COUNT(*), "
            "SUM(value), AVG(value) FROM events GROUP BY category` (50 declared categories), "
            "ε = 1, 5 groups and 10 rows per user, values in [0, 100], on the `uniform` events "
            "of `benchmarks/query.py`. Times: minimum of interleaved runs; `dp` is "
            "`Session.sql` end to end, `dp engine` the generated SQL alone; `equi-join, "
            "hand-fixed` applies by hand the two fixes the compiler now makes itself (a "
            "plain equality as join key, no domain filter on the public table's own values), "
            "a check that the generated SQL has them. Floors are "
            "non-private DuckDB queries on the same table, with and without the same join."
        ),
        "",
        "| N | query | time (s) | × same query without join | × two-level floor |",
        "|---|---|---|---|---|",
    ]
    base = {
        "plain, join": "plain",
        "two-level, join": "two-level",
        "dp engine, join": "dp engine",
        "dp engine, join (equi-join, hand-fixed)": "dp engine",
        BARE: "dp engine",
        "dp, join": "dp",
    }
    for r in joins:
        t = r["time"]
        for name in JOIN_ROWS:
            ref = base.get(name)
            ratio = f"{t[name] / t[ref]:.2f}" if ref else ""
            lines.append(
                f"| {r['n']:.0e} | {name} | {t[name]:.3f} | {ratio} | "
                f"{t[name] / t['two-level']:.2f} |"
            )
    lines.append("")
    for r in joins:
        t = r["time"]
        before, after = r["load"]
        ratio = t["dp, join"] / t["dp"]
        engine = t["dp engine, join"] / t["dp engine"]
        fixed = t["dp engine, join (equi-join, hand-fixed)"] / t["dp engine"]
        verdict = "met" if ratio <= JOIN_TARGET else "not met"
        lines.append(
            f"- N = {r['n']:.0e}: `Session.sql` with the join takes **{ratio:.2f}×** the query "
            f"without it (target ≤ {JOIN_TARGET}×: {verdict}); the generated SQL alone "
            f"{engine:.2f}×; with the join condition as a plain equality {fixed:.2f}×; "
            f"DuckDB's own cost of the join, non-private: "
            f"{t['two-level, join'] / t['two-level']:.2f}× (two-level), "
            f"{t['plain, join'] / t['plain']:.2f}× (plain). Load average before / after "
            f"these timings: {before} → {after}."
        )
    last = joins[-1]
    lines += [
        "",
        (
            f"Where the time goes at N = {last['n']:.0e} (DuckDB's profiler, CPU seconds "
            "summed over threads, by operator; minimum of 3 profiles):"
        ),
        "",
        "| query | " + " | ".join(OPERATORS) + " | total |",
        "|---|" + "---|" * (len(OPERATORS) + 1),
    ]
    for name, ops in last["cpu"].items():
        cells = " | ".join(f"{ops.get(o, 0.0):.2f}" for o in OPERATORS)
        lines.append(f"| {name} | {cells} | {sum(ops.values()):.2f} |")
    t = last["time"]
    cpu = last["cpu"]
    nl = cpu["dp engine, join"]["BLOCKWISE_NL_JOIN"]
    extra = sum(cpu["dp engine, join"].values()) - sum(cpu["dp engine"].values())
    within = t[BARE] / t["dp engine"] <= JOIN_TARGET
    bare_verdict = "within the target" if within else "still above the target"
    lines += [
        "",
        (
            "The compiler emits the join key as a plain equality (a comparison of two "
            "columns of one type cannot raise, so it needs no `try`, and DuckDB hashes it: "
            f"`BLOCKWISE_NL_JOIN` {nl:.2f} CPU s) and does not filter a key taken from the "
            "public table against that table's own values; the two `hand-fixed` rows, which "
            "apply those fixes by hand to the SQL, are therefore the generated SQL itself and "
            "stay as a check (their times differ only by noise). The join adds "
            f"{extra:.2f} CPU s at N = {last['n']:.0e}; grouping by 10 labels instead of 50 "
            "categories leaves fewer (user, group) pairs, as the non-private floors show. A "
            "join of a table bound to another DuckDB connection than the public table's "
            "snapshot is refused with a clear error; this benchmark binds the events in the "
            f"engine's own connection ({bare_verdict} without the label filter)."
        ),
        "",
    ]
    return lines


def _compile_section(comp: dict[str, Any]) -> list[str]:
    floor = comp["floor"]
    lines = [
        "### Compile time of a 10-aggregate query over a 1,000-key public domain",
        "",
        (
            "`SELECT key, " + ", ".join(AGGREGATES) + " FROM t GROUP BY key` with a declared "
            f"domain of {DOMAIN} keys (integers 0–999: rendered as `BETWEEN`; text: `IN` of "
            f"{DOMAIN} literals); `+ MEDIAN` replaces `AVG(x * y)` by `MEDIAN(x)` (the "
            "statement's histogram form). `compile` is `Session.compile(query, epsilon=1)`, "
            "`statement` is `program.statement(…)` (sqlglot tree built and rendered), `total` "
            f"both; minimum of {comp['repeat']} interleaved runs (`median` of total, and the "
            "first, cold call, shown too). Floor: sqlglot's parse and render of the same query "
            f"text, {1e3 * floor:.2f} ms."
        ),
        "",
        (
            "| variant | compile (ms) | statement (ms) | of which render (ms) | render "
            "without copy (ms) | total (ms) | × floor | median total (ms) | cold total (ms) "
            "| SQL chars | < 20 ms |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in comp["variants"].items():
        ok = "yes" if 1e3 * v["total"] < COMPILE_TARGET_MS else "no"
        lines.append(
            f"| {name} | {1e3 * v['compile']:.1f} | {1e3 * v['statement']:.1f} | "
            f"{1e3 * v['render']:.1f} | {1e3 * v['render_no_copy']:.1f} | "
            f"{1e3 * v['total']:.1f} | {v['total'] / floor:.0f} | "
            f"{1e3 * v['median_total']:.1f} | {1e3 * v['cold_total']:.1f} | "
            f"{v['sql_chars']} | {ok} |"
        )
    before, after = comp["load"]
    v = comp["variants"]
    big, small = v["1,000 integer keys"], v["10 integer keys (floor)"]
    text = v["1,000 text keys"]
    lines += [
        "",
        f"Load average before / after these timings: {before} → {after}.",
        "",
        (
            "Reading: `Session.compile` itself (parse, validate, plan) takes "
            f"{1e3 * big['compile']:.1f} ms and does not depend on the domain; the time goes "
            "to `program.statement`, and there the 1,000 integer keys cost nothing "
            f"({1e3 * big['total']:.1f} ms against {1e3 * small['total']:.1f} ms with 10 "
            "keys: the domain is one `BETWEEN`). It is the size of the statement tree (ten "
            "aggregates, each clamped and fixed-point-packed in both row projections and "
            "summed in the last step) that costs: rendering it is "
            f"{100 * big['render'] / big['statement']:.0f}% of `statement`, and sqlglot's "
            "generator first deep-copies the whole tree (`Expression.sql()` copies by default, "
            "`__deepcopy__` is the top function by own time). Text keys add the 1,000 "
            "literals of the `IN` list twice (first CTE and heavy re-read), built, copied and "
            f"rendered: {1e3 * text['total']:.1f} ms. The `MEDIAN` form renders a smaller "
            f"statement ({v['1,000 integer keys + MEDIAN']['sql_chars']} characters against "
            f"{big['sql_chars']}); with integer keys it is the one variant under 20 ms."
        ),
        "",
        (
            "Done: the compiler renders its statement without sqlglot's defensive copy "
            "(`statement` above includes that; `render` re-renders with the copy, "
            f"{1e3 * big['render']:.1f} against {1e3 * big['render_no_copy']:.1f} ms "
            "without). Not done: build each shared sub-expression (the row projection, the "
            "filters, the domain `IN` list) once instead of copying it for each use, and "
            "bind a text domain as a relation rather than 1,000 literal nodes; the tree "
            f"build ({1e3 * (big['statement'] - big['render_no_copy']):.1f} ms) and the "
            f"compile step ({1e3 * big['compile']:.1f} ms) would also need trimming for "
            "every variant to be under 20 ms."
        ),
        "",
        (
            f"cProfile of the slowest variant ({comp['slowest']}), 20 calls of compile + "
            "statement, top functions (cumulative, then own time):"
        ),
        "",
        "```",
        _trim_profile(comp["profile"]),
        "```",
        "",
    ]
    return lines


def _trim_profile(text: str) -> str:
    keep = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line.lstrip().startswith(("Ordered by", "List reduced")):
            continue
        keep.append(line.replace(str(ROOT) + "/", "").replace(sys.prefix, "<venv>"))
    return "\n".join(keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[1e6, 1e7])
    parser.add_argument("--repeat", type=int, default=5, help="rounds of the join timings")
    parser.add_argument("--compile-repeat", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="skip target 2")
    parser.add_argument(
        "--output", default=str(ROOT / "benchmarks" / "results" / "compile_join.md")
    )
    parser.add_argument("--dump", help="also write the raw figures as JSON here")
    args = parser.parse_args()
    command = (
        ".venv/bin/python benchmarks/compile_join.py"
        + (" --sizes " + " ".join(f"{n:.0e}".replace("+0", "") for n in args.sizes))
        + f" --repeat {args.repeat} --compile-repeat {args.compile_repeat}"
        + (" --no-compile" if args.no_compile else "")
    )
    load = _load_average()
    joins: list[dict[str, Any]] = []
    comp: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_compile:  # cheap: first, so that the large sizes run last
            comp = measure_compile(args.compile_repeat, Path(tmp))
            print(json.dumps({k: v for k, v in comp.items() if k != "profile"}), flush=True)
        for n in sorted(args.sizes):
            r = measure_join(int(n), args.repeat, Path(tmp))
            print(json.dumps({k: v for k, v in r.items() if k != "join_sql"}), flush=True)
            joins.append(r)
    text = report(joins, comp, command, load)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    if args.dump:
        Path(args.dump).write_text(json.dumps({"joins": joins, "compile": comp}, default=str))
    print(text)


if __name__ == "__main__":
    main()
