"""Experiment (not a benchmark of deniable): heavy-partition re-read vs expected-value scaling.

Run from the repository root: .venv/bin/python notes/scaled_bounding_experiment.py 1e7 [uniform]
"""
import sys, time, duckdb
sys.path.insert(0, "benchmarks")
import query as Q
con = duckdb.connect()
n = int(float(sys.argv[1]))
if len(sys.argv) > 2 and sys.argv[2] == "uniform":
    from deniable.datasets import events as _ev
    _t = _ev(n, seed=1); con.register("_t", _t); con.execute("CREATE TABLE events AS SELECT * FROM _t"); con.unregister("_t")
else:
    con.execute(f"CREATE TABLE events AS {Q.heavy_events_sql(n)}")
floor = "SELECT category, sum(n), sum(s) FROM (SELECT user_id, category, count(*) n, sum(value) s FROM events GROUP BY ALL) GROUP BY category"
def l1(extra=""):
    return ("SELECT user_id AS u, category AS k, count(*) AS n, "
            "sum(CAST(round(least(greatest(value, 0.0), 100.0) * 1048576.0) AS BIGINT)) AS s FROM events GROUP BY u, k")
cap = ("SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY u ORDER BY hash(xor(hash(xor(CAST(7 AS UBIGINT), hash(u))), hash(k))), k) AS pr FROM l1) WHERE pr <= 5 AND pr > 0")
scaled = f"""WITH l1 AS ({l1()}), capped AS ({cap}),
kept AS (SELECT u, k, least(n, 10) AS n, CASE WHEN n > 10 THEN CAST(trunc(CAST(s AS HUGEINT) * 10 / n) AS BIGINT) ELSE s END AS s FROM capped)
SELECT k, count(*), sum(n), sum(s) FROM kept GROUP BY k"""
exact = f"""WITH l1 AS ({l1()}), capped AS ({cap}),
heavy AS (SELECT u, k FROM capped WHERE n > 10),
hrows AS (SELECT e.user_id AS u, e.category AS k, CAST(round(least(greatest(e.value, 0.0), 100.0) * 1048576.0) AS BIGINT) AS v FROM events e SEMI JOIN heavy h ON e.user_id = h.u AND e.category = h.k),
hl1 AS (SELECT u, k, count(*) AS n, sum(v) AS s FROM (SELECT *, row_number() OVER (PARTITION BY u, k ORDER BY hash(xor(hash(xor(hash(xor(CAST(3 AS UBIGINT), hash(u))), hash(k))), hash(v))), v) AS rn FROM hrows) WHERE rn <= 10 AND rn > 0 GROUP BY u, k),
kept AS (SELECT u, k, n, s FROM capped WHERE n <= 10 UNION ALL SELECT u, k, n, s FROM hl1)
SELECT k, count(*), sum(n), sum(s) FROM kept GROUP BY k"""
def best(q, r=5):
    t = 9e9
    for _ in range(r):
        a = time.perf_counter(); con.sql(q).fetchall(); t = min(t, time.perf_counter() - a)
    return t
res = {"floor": [], "exact (current shape)": [], "scaled (expected value)": []}
for _ in range(3):
    for name, q in (("floor", floor), ("exact (current shape)", exact), ("scaled (expected value)", scaled)):
        res[name].append(best(q, 2))
f = min(res["floor"])
for k, v in res.items():
    print(f"{k:26s} {min(v):.3f} s  {min(v)/f:.2f}x floor")
