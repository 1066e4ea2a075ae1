"""Dinur–Nissim reconstruction: unsafe systems give the column back, deniable stops at chance.

Threshold for deniable (fresh CSPRNG data and noise, n = 1000 uniform bits): after ε charged
in total, each bit's posterior is at most p = e^ε/(1 + e^ε) given the output and the other
bits, so the number of bits any decoder gets right is a sum of indicators with conditional
means ≤ p, and Azuma–Hoeffding gives P[accuracy ≥ p + √(ln 10⁷/(2n))] ≤ 1e-7 — the
threshold of :func:`accuracy_threshold`. Negative control: the unsafe fresh-noise system at
the same per-answer noise as a deniable query at ε = 1/2 (b = 2), but with no budget, beats
that threshold (deterministic: seeded).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from deniable.attacks.reconstruction import (
    accuracy_threshold,
    decode,
    run_reconstruction,
    subsets,
)


def test_exact_and_low_noise_answers_give_every_bit_back() -> None:
    report = run_reconstruction(n=150, scales=(0.0, 1.0))
    assert [p.accuracy for p in report.sweep] == [1.0, 1.0]


def test_lp_decoder_recovers_from_exact_answers() -> None:
    matrix, _ = subsets(40, 80, seed=5)
    truth = (np.arange(40) * 7 % 3 == 0).astype(np.int64)
    assert (decode(matrix, matrix @ truth, 40, decoder="lp") == truth).all()
    assert (decode(matrix, matrix @ truth, 40, decoder="lstsq") == truth).all()


def test_deniable_budget_stops_reconstruction_near_chance() -> None:
    report = run_reconstruction(n=1000, scales=(2.0,), budget=1, epsilon=Fraction(1, 2), seed=None)
    assert report.deniable_refused == 1  # SELECT id, notepad: refused as unsafe
    assert report.deniable_answered == 2 and report.deniable_stopped_by == "budget"
    threshold = accuracy_threshold(report.n, report.epsilon_spent)
    assert threshold < 0.83
    assert report.deniable_accuracy <= threshold
    # negative control: the same noise per answer without a budget beats the threshold
    # (seed=None draws fresh data: 2000 answers at b = 2 recover ≈ 99.7% of the bits; the
    # chance that they fall below 0.83 is below 1e-7 by the LS error's Gaussian-like tail)
    assert report.sweep[0].accuracy > threshold
