"""Differentially private synthetic data from measured marginals (MST and AIM).

The measurements are ordinary DP releases; everything in :mod:`deniable.synth.model`,
:mod:`deniable.synth.inference` and :mod:`deniable.synth.sample` is post-processing of them
(no privacy cost, no access to the data).
"""

# discretize and release (discretisation, marginals measured in the engine, MST and AIM,
# the charged release) are synth-measure's; domain and model are synth-model's.
from deniable.synth.discretize import Discretization, Quantiles, SelectKeys, discretize
from deniable.synth.domain import Domain
from deniable.synth.model import GraphicalModel, Measurement, clique_cells, estimate
from deniable.synth.release import Synthetic, UtilityReport, synthesize, utility_report

__all__ = [
    "Discretization",
    "Domain",
    "GraphicalModel",
    "Measurement",
    "Quantiles",
    "SelectKeys",
    "Synthetic",
    "UtilityReport",
    "clique_cells",
    "discretize",
    "estimate",
    "synthesize",
    "utility_report",
]
