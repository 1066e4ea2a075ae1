"""Latency of releases over HTTP does not reveal the magnitude of their noise.

A real uvicorn server answers many distinct DP counts of a table whose true count we know
(``ROWS``); each request's latency is measured by the client, and |released − true| is the
magnitude of its noise. If the release path took longer for larger noise (a sampler whose
running time grows with the draw, a retry loop, a code path for clamping...), an observer
timing the answers would learn something about the noise, and so about the data. The
statistic: Spearman's rank correlation ρ between latency and |noise|.

Threshold. Under the null (latency independent of the noise), the noise draws are i.i.d.
and independent of the latencies, so conditional on the latencies their ranks are
exchangeable: ρ is a permutation statistic with mean 0 and variance exactly 1/(n − 1)
(with or without ties; ties, frequent in |noise|, only change the scores being permuted),
and asymptotically ρ·√(n − 1) ~ N(0, 1). We refuse when |ρ| > Z/√(n − 1) with Z = 5:
P[|N(0, 1)| > 5] = 5.7e-7 < 1e-6. At n = 10⁴ that is the issue's |ρ| < 0.05; the default
suite uses n = 1,000 (about 20 s of requests on 2 CPUs), threshold 0.158, and the 10⁴ run is
``slow`` (each fresh release is a durable ledger charge: about 50 per second here, so 10⁴
take minutes).

Negative control: a deliberately leaky release path (the same noise, then a busy wait of a
few microseconds per unit of |noise|), timed in-process without HTTP: the same statistic
must flag it at the same n and threshold.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from _server_helpers import running, write_config
from scipy.stats import spearmanr

from deniable.ledger import Ledger
from deniable.noise import discrete_laplace
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

ROWS = 1000  # the true COUNT(*) of the table; every x >= 0, so `x > -i` keeps all rows
EPSILON = 0.05  # one count, sensitivity 1: discrete Laplace of scale 20 (|noise| 0 … ~300)
Z = 5.0  # two-sided normal tail P[|N(0,1)| > 5] = 5.7e-7 < 1e-6
N_DEFAULT = 1000
N_FULL = 10_000
CLIENTS = 4  # keep-alive connections, one thread each
WORKERS = 2


def threshold(n: int) -> float:
    """|ρ| above which a correct server fails with probability < 1e-6 (see the module)."""
    return Z / math.sqrt(n - 1)


def rank_correlation(latency: np.ndarray, magnitude: np.ndarray) -> float:
    """Spearman's ρ between latencies and noise magnitudes (average ranks for ties)."""
    if np.ptp(magnitude) == 0 or np.ptp(latency) == 0:
        raise AssertionError("no variation: the statistic is undefined (was noise added?)")
    return float(spearmanr(latency, magnitude).statistic)


def http_releases(folder: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Latency (s) and |released − true| of ``n`` distinct DP counts through a real server."""
    rows = "x\n" + "\n".join(str(i % 7) for i in range(ROWS)) + "\n"
    config = write_config(folder, cap="{ epsilon = 1000000 }", rows=rows)
    with Ledger(folder / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    latency = np.zeros(n)
    released = np.zeros(n, dtype=np.int64)
    charges: set[int] = set()
    errors: list[str] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def client(k: int, port: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for i in range(k, n, CLIENTS):
                # A distinct literal per request: a new question (same true answer, same ε),
                # never a replay of another, so each answer carries fresh noise.
                body = json.dumps(
                    {"sql": f"SELECT COUNT(*) AS n FROM t WHERE x > -{i + 1}", "epsilon": EPSILON}
                )
                t0 = time.perf_counter()
                conn.request("POST", "/v1/datasets/d/query", body, headers)
                response = conn.getresponse()
                data = response.read()
                latency[i] = time.perf_counter() - t0
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
                answer = json.loads(data)
                if answer["cached"]:
                    raise RuntimeError("a distinct query was served from the cache")
                released[i] = answer["values"]["n"][0]
                with lock:
                    charges.add(answer["charge_id"])
        except Exception as e:  # reported by the test thread
            with lock:
                errors.append(repr(e))
        finally:
            conn.close()

    with running(config, workers=WORKERS, log=folder / "server.log") as server:
        threads = [threading.Thread(target=client, args=(k, server.port)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert len(charges) == n  # n releases, each charged once
    return latency, np.abs(released - ROWS)


def check_no_correlation(latency: np.ndarray, magnitude: np.ndarray) -> None:
    n = latency.size
    # The noise is there, at its scale: E|noise| = 2α/(1−α²) ≈ 20 for scale 20 (α = e^-1/20),
    # sd(|noise|) ≈ 20, so the mean of n ≥ 1000 magnitudes is within ±6 (9.5 standard
    # errors; exponential tails) except with probability far below 1e-6.
    assert 14 < magnitude.mean() < 26, magnitude.mean()
    rho = rank_correlation(latency, magnitude)
    assert abs(rho) < threshold(n), (
        f"latency correlates with |noise|: Spearman ρ = {rho:.4f} over {n} releases "
        f"(threshold {threshold(n):.4f})"
    )


def test_latency_does_not_track_noise_magnitude(tmp_path: Path) -> None:
    latency, magnitude = http_releases(tmp_path, N_DEFAULT)
    check_no_correlation(latency, magnitude)


@pytest.mark.slow
def test_latency_does_not_track_noise_magnitude_10k(tmp_path: Path) -> None:
    latency, magnitude = http_releases(tmp_path, N_FULL)
    assert threshold(N_FULL) == pytest.approx(0.05, abs=1e-4)
    check_no_correlation(latency, magnitude)


# -- negative control ---------------------------------------------------------------------------

LEAK_PER_UNIT = 2e-6  # seconds of busy wait per unit of |noise|: ~40 µs on average


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def leaky_release(true: int, source: SeededRandom) -> int:
    """A deliberately broken release: its running time grows with the noise it adds."""
    noise = int(discrete_laplace(Fraction(1) / Fraction(EPSILON), 1, source=source)[0])
    _spin(abs(noise) * LEAK_PER_UNIT)
    return true + noise


def time_releases(release: Callable[[int], int], n: int) -> tuple[np.ndarray, np.ndarray]:
    latency = np.zeros(n)
    released = np.zeros(n, dtype=np.int64)
    for i in range(n):
        t0 = time.perf_counter()
        released[i] = release(ROWS)
        latency[i] = time.perf_counter() - t0
    return latency, np.abs(released - ROWS)


def test_negative_control_leaky_release_is_flagged() -> None:
    source = SeededRandom(11)
    latency, magnitude = time_releases(lambda true: leaky_release(true, source), N_DEFAULT)
    assert 14 < magnitude.mean() < 26, magnitude.mean()  # the same noise as the server's
    with pytest.raises(AssertionError, match="latency correlates with"):
        check_no_correlation(latency, magnitude)
