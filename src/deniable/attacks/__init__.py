"""The attack lab: attacks on UNSAFE query systems and anonymizers, and on deniable.

Each attack runs against the unsafe baselines of :mod:`deniable.attacks.naive` (written for
the demonstration only) and against a real deniable session or anonymizer on the same
synthetic data, and returns a dataclass report with numbers and :meth:`text`:

* :func:`run_averaging` — the same count asked again and again;
* :func:`run_differencing` — count(all) − count(all but the target), and rewrites;
* :func:`run_reconstruction` — Dinur–Nissim reconstruction from random subset counts;
* :func:`run_kanonymity` — the leak of clustering-based k-anonymity (Li–Qardaji–Su §3.1);
* :func:`run_membership` — membership inference on a released histogram;
* :func:`run_publication` — membership and linkage on a de-identified, a safe k-anonymized
  and a synthetic table of the same data at the same ε.

:data:`ATTACKS` maps the command-line names to these functions.
"""

from collections.abc import Callable
from typing import Any

from deniable.attacks.averaging import AveragingReport, run_averaging
from deniable.attacks.differencing import DifferencingReport, run_differencing
from deniable.attacks.kanonymity import KAnonymityReport, run_kanonymity
from deniable.attacks.membership import MembershipReport, run_membership
from deniable.attacks.publication import PublicationReport, run_publication
from deniable.attacks.reconstruction import ReconstructionReport, run_reconstruction
from deniable.attacks.report import plot, render, to_json

ATTACKS: dict[str, Callable[..., Any]] = {
    "averaging": run_averaging,
    "differencing": run_differencing,
    "reconstruction": run_reconstruction,
    "k-anonymity": run_kanonymity,
    "membership": run_membership,
    "publication": run_publication,
}

__all__ = [
    "ATTACKS",
    "AveragingReport",
    "DifferencingReport",
    "KAnonymityReport",
    "MembershipReport",
    "PublicationReport",
    "ReconstructionReport",
    "plot",
    "render",
    "run_averaging",
    "run_differencing",
    "run_kanonymity",
    "run_membership",
    "run_publication",
    "run_reconstruction",
    "to_json",
]
