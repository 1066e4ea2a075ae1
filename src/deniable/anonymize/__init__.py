"""Safe k-anonymization with a differential-privacy guarantee (Li–Qardaji–Su 2012).

Sample each row with probability β, map every row through a recoding fixed independently
of the data (strongly safe) or chosen by the exponential mechanism (ε-safe), drop every
recoded tuple seen fewer than k times, publish the rest: the release is (ε, δ)-DP with
δ = d(k, β, ε) (:mod:`deniable.anonymize.dps`).
"""

from deniable.anonymize.dps import (
    DeltaSearch,
    DPSGuarantee,
    amplified_epsilon,
    dps_delta,
    dps_search,
    epsilon_for,
    epsilon_safe_guarantee,
    log_dps_delta,
    min_epsilon,
    smallest_k,
    strongly_safe_guarantee,
)
from deniable.anonymize.recoding import (
    Categorical,
    ColumnSpec,
    DateParts,
    Hierarchy,
    Identity,
    Interval,
    Prefix,
    RecodedColumn,
    Recoding,
    RecodingError,
    RecodingSpec,
    UncoveredValue,
    UnknownColumn,
    load_recoding,
    recoding_from_dict,
)
from deniable.anonymize.report import ColumnLoss, UtilityReport
from deniable.anonymize.safe import (
    Anonymization,
    Selection,
    anonymize_sample,
    candidate_scores,
    epsilon_safe,
    select_recoding,
    strongly_safe,
)

__all__ = [
    "Anonymization",
    "Categorical",
    "ColumnLoss",
    "ColumnSpec",
    "DPSGuarantee",
    "DateParts",
    "DeltaSearch",
    "Hierarchy",
    "Identity",
    "Interval",
    "Prefix",
    "RecodedColumn",
    "Recoding",
    "RecodingError",
    "RecodingSpec",
    "Selection",
    "UncoveredValue",
    "UnknownColumn",
    "UtilityReport",
    "amplified_epsilon",
    "anonymize_sample",
    "candidate_scores",
    "dps_delta",
    "dps_search",
    "epsilon_for",
    "epsilon_safe",
    "epsilon_safe_guarantee",
    "load_recoding",
    "log_dps_delta",
    "min_epsilon",
    "recoding_from_dict",
    "select_recoding",
    "smallest_k",
    "strongly_safe",
    "strongly_safe_guarantee",
]
