"""Exact, secure noise: the only place deniable draws randomness.

Everything here returns integers (numpy int64) drawn exactly from the stated distribution,
using the OS CSPRNG by default. See :mod:`deniable.noise.grid` for real-valued releases.
"""

from deniable.noise.bernoulli import bernoulli, bernoulli_exp_neg
from deniable.noise.discrete_gaussian import discrete_gaussian
from deniable.noise.discrete_laplace import discrete_laplace, geometric
from deniable.noise.grid import grid_exponent, grid_sensitivity, snap, unsnap
from deniable.noise.source import RandomSource, SecureRandom, default_source
from deniable.noise.uniform import random_bits, uniform_int

__all__ = [
    "RandomSource",
    "SecureRandom",
    "bernoulli",
    "bernoulli_exp_neg",
    "default_source",
    "discrete_gaussian",
    "discrete_laplace",
    "geometric",
    "grid_exponent",
    "grid_sensitivity",
    "random_bits",
    "snap",
    "uniform_int",
    "unsnap",
]
