"""SmartNoise SQL 1.0 (pandas reader) on the benchmark query. SmartNoise bounds rows per user
(max_ids = 50 = 5 categories x 10 rows), not partitions per user.
"""

import json
import sys
import time
import warnings

import pandas as pd
import snsql
from snsql import Privacy

warnings.filterwarnings("ignore")

path = sys.argv[1]
t0 = time.perf_counter()
df = pd.read_parquet(path)
load = time.perf_counter() - t0
meta = {
    "": {
        "": {
            "events": {
                "max_ids": 50,
                "row_privacy": False,
                "censor_dims": False,
                "user_id": {"type": "int", "private_id": True},
                "category": {"type": "int"},
                "value": {"type": "float", "lower": 0.0, "upper": 100.0, "nullable": True},
            }
        }
    }
}
best = None
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1):
    t0 = time.perf_counter()
    reader = snsql.from_df(df, privacy=Privacy(epsilon=1.0, delta=1e-6), metadata=meta)
    res = reader.execute_df(
        "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
        "FROM events GROUP BY category"
    )
    t = time.perf_counter() - t0
    best = t if best is None else min(best, t)
res = res.sort_values("category")
counts = {int(k): int(v) for k, v in zip(res["category"], res["n"], strict=True)}
with open("/proc/self/status") as f:
    status = f.read()
peak = int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1])
print(
    json.dumps(
        {
            "lib": "smartnoise-sql",
            "load_s": load,
            "query_s": best,
            "peak_kib": peak,
            "counts": [counts.get(k, 0) for k in range(50)],
        }
    )
)
