"""The main job (``make demo``): to be replaced by the query-engine tour.

Until the query engine lands this shows the mechanisms on a built-in example.
"""

from __future__ import annotations

import numpy as np

from deniable.mechanisms import coin_rr_estimate, geometric, laplace


def main() -> None:
    """Print a few DP releases with their intervals."""
    counts = np.array([120, 45, 8])
    r = geometric(counts, sensitivity=1, epsilon=1.0)
    lo, hi = r.interval(0.95)
    for name, v, a, b in zip(["vim", "emacs", "nano"], r.value, lo, hi, strict=True):
        print(f"{name:6s} {int(v):5d}   95% interval [{a:.0f}, {b:.0f}]   ({r.loss})")
    s = laplace([2500.0], sensitivity=6000, epsilon=1.0)
    print(f"mean scholarship ~ {s.value[0]:.2f} ± {s.half_width():.0f}")
    print(f"coin RR, 400 yes of 1000, q=1/2 -> {coin_rr_estimate(400, 1000, 0.5):.0%}")


if __name__ == "__main__":
    main()
