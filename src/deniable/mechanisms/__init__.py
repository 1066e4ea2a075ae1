"""Mechanisms: each takes a sensitivity and a privacy parameter and returns a Release."""

from deniable.mechanisms.exponential import exponential, exponential_rejection, random_permutation
from deniable.mechanisms.gaussian import discrete_gaussian, gaussian, gaussian_loss
from deniable.mechanisms.laplace import geometric, laplace, laplace_loss
from deniable.mechanisms.mixture import Candidate, MixtureRelease, mixture, mixture_loss
from deniable.mechanisms.randomized_response import (
    coin_randomized_response,
    coin_rr_estimate,
    coin_rr_loss,
    k_randomized_response,
    randomized_response,
    rr_loss,
)
from deniable.mechanisms.release import NoiseLaw, Release

__all__ = [
    "Candidate",
    "MixtureRelease",
    "NoiseLaw",
    "Release",
    "coin_randomized_response",
    "coin_rr_estimate",
    "coin_rr_loss",
    "discrete_gaussian",
    "exponential",
    "exponential_rejection",
    "gaussian",
    "gaussian_loss",
    "geometric",
    "k_randomized_response",
    "laplace",
    "laplace_loss",
    "mixture",
    "mixture_loss",
    "random_permutation",
    "randomized_response",
    "rr_loss",
]
