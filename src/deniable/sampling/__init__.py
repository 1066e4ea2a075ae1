"""Sampling: in-engine Bernoulli samples with a secret coin, and amplified accounting.

* :mod:`~deniable.sampling.bernoulli` — :func:`sample_table` (a DuckDB temp table holding a
  Bernoulli(β) sample drawn with a keyed hash), :class:`SampledTable` (charges queries on the
  sample their amplified loss), :class:`BernoulliFilter` (the predicate, to fuse the sampling
  into another statement).
* :mod:`~deniable.sampling.positional` — :func:`bernoulli_sample`, one CSPRNG bit per row
  joined by position: the fastest materialised row-level sample (used by ``anonymize``).
* :mod:`~deniable.sampling.fresh` — a fresh sample per release, and the composition that
  holds then.
"""

from deniable.sampling.bernoulli import (
    ROWID_IDENTITY,
    BernoulliFilter,
    SampledTable,
    identity_sql,
    quote_identifier,
    sample_table,
)
from deniable.sampling.fresh import FreshSampleReleases, fresh_total, shared_total
from deniable.sampling.positional import bernoulli_sample

__all__ = [
    "ROWID_IDENTITY",
    "BernoulliFilter",
    "FreshSampleReleases",
    "SampledTable",
    "bernoulli_sample",
    "fresh_total",
    "identity_sql",
    "quote_identifier",
    "sample_table",
    "shared_total",
]
