"""Privacy accounting: loss values, composition, conversions and budget filters.

One concept per module: :mod:`~deniable.accounting.loss` (the loss values),
:mod:`~deniable.accounting.composition` (sequential, parallel, advanced),
:mod:`~deniable.accounting.group` (group privacy), :mod:`~deniable.accounting.conversions`
(ε ↔ (ε, δ) ↔ ρ), :mod:`~deniable.accounting.amplification` (Bernoulli sampling),
:mod:`~deniable.accounting.pld` (tight composition through ``dp_accounting``; imports it
lazily), :mod:`~deniable.accounting.filter` (the budget filter),
:mod:`~deniable.accounting.renyi` (Rényi and zCDP filters for an (ε, δ) cap) and
:mod:`~deniable.accounting.bounds` (certified rounding of irrational results).
"""

from deniable.accounting.amplification import amplify_bernoulli, epsilon_for_sampled
from deniable.accounting.composition import (
    advanced_composition,
    common_kind,
    compose,
    compose_parallel,
)
from deniable.accounting.conversions import (
    convert,
    pure_to_approx,
    pure_to_zcdp,
    zcdp_to_approx,
)
from deniable.accounting.filter import Accountant, BudgetFilter, make_filter, parse_accountant
from deniable.accounting.group import group_privacy
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.accounting.pld import (
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    compose_pld,
)
from deniable.accounting.renyi import (
    RenyiFilter,
    ZCDPAccountant,
    ZCDPFilter,
    zcdp_epsilon,
    zcdp_rho_cap,
)

__all__ = [
    "Accountant",
    "BudgetFilter",
    "DiscreteLaplaceEvent",
    "Epsilon",
    "EpsilonDelta",
    "GaussianEvent",
    "LaplaceEvent",
    "PrivacyLoss",
    "RenyiFilter",
    "Rho",
    "ZCDPAccountant",
    "ZCDPFilter",
    "advanced_composition",
    "amplify_bernoulli",
    "common_kind",
    "compose",
    "compose_parallel",
    "compose_pld",
    "convert",
    "epsilon_for_sampled",
    "group_privacy",
    "make_filter",
    "parse_accountant",
    "pure_to_approx",
    "pure_to_zcdp",
    "zcdp_epsilon",
    "zcdp_rho_cap",
    "zcdp_to_approx",
]
