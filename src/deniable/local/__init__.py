"""Local differential privacy: client-side randomisers and server-side estimators.

* :mod:`~deniable.local.randomizers` — binary, coin and k-ary randomized response, optimised
  unary encoding; :mod:`~deniable.local.bloom` — a RAPPOR-style Bloom-filter encoder.
* :mod:`~deniable.local.estimators` — unbiased frequency estimates, variances, intervals.
* :mod:`~deniable.local.repeated` — what repeated reports cost, and memoisation.
* :mod:`~deniable.local.simulate` — a survey simulator.
"""

from deniable.local.bloom import BloomEncoder, BloomReports
from deniable.local.estimators import (
    BinaryEstimate,
    FrequencyEstimate,
    estimate_binary,
    estimate_coin,
    estimate_k_rr,
    estimate_unary,
    pure_estimate,
)
from deniable.local.randomizers import (
    BinaryRandomizedResponse,
    CoinRandomizedResponse,
    KRandomizedResponse,
    LocalRandomizer,
    OptimizedUnaryEncoding,
)
from deniable.local.repeated import (
    FreshRandomizer,
    KeyedStream,
    MemoizedRandomizer,
    fresh_loss,
    memoized_loss,
)
from deniable.local.simulate import SurveyResult, population_counts, simulate_survey

__all__ = [
    "BinaryEstimate",
    "BinaryRandomizedResponse",
    "BloomEncoder",
    "BloomReports",
    "CoinRandomizedResponse",
    "FrequencyEstimate",
    "FreshRandomizer",
    "KRandomizedResponse",
    "KeyedStream",
    "LocalRandomizer",
    "MemoizedRandomizer",
    "OptimizedUnaryEncoding",
    "SurveyResult",
    "estimate_binary",
    "estimate_coin",
    "estimate_k_rr",
    "estimate_unary",
    "fresh_loss",
    "memoized_loss",
    "population_counts",
    "pure_estimate",
    "simulate_survey",
]
