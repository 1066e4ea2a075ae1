"""Test-only hooks: run the generated bounded query with noise switched off.

:func:`exact_aggregates` returns the exact, bounded, clamped per-partition aggregates that
the engine computes for a query — what the noise is added to. It releases data without any
privacy protection and charges nothing, so it lives here, apart from the release path, like
:class:`deniable.noise.testing.SeededRandom`: nothing in deniable imports this module, and
using it requires passing ``not_private=True``. Tests use it with DuckDB as an oracle (the
optimised bounding SQL against a hand-written reference on the same data and secrets) and to
sample many noisy releases of one exact answer.
"""

from __future__ import annotations

from typing import Any, Protocol

from deniable.errors import InvalidParameter
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.rewrite.compile import CompiledQuery, Secrets


class Session(Protocol):
    """What the hooks need of a :class:`deniable.curator.session.Session`.

    A protocol, not an import: the query layer never imports the curator.
    """

    def plan(self, *args: Any, **options: Any) -> DPPlan:
        """Plan a query (no data read)."""
        ...

    def _exact(self, plan: DPPlan, secrets: Secrets) -> tuple[CompiledQuery, ExactAggregates]:
        """Run a plan's bounded aggregation without noise."""
        ...


def exact_aggregates(
    session: Session,
    query: str,
    *,
    not_private: bool,
    secrets: Secrets | None = None,
    **options: Any,
) -> tuple[DPPlan, CompiledQuery, ExactAggregates]:
    """Plan ``query`` and run its generated SQL without noise and without charging.

    Args:
        session: the session holding the table.
        query: the SQL query.
        not_private: must be True: the result is the exact (non-private) aggregate.
        secrets: keys of the pseudo-random row and partition orders (default 1 and 2, so
            that results are reproducible).
        **options: as for :meth:`Session.sql` (``epsilon``, ``delta``, ``max_rows``, …).

    Returns:
        The plan, the compiled query and the exact aggregates.
    """
    if not_private is not True:
        raise InvalidParameter("exact_aggregates releases exact data: pass not_private=True")
    plan = session.plan(query, **options)
    compiled, exact = exact_for_plan(session, plan, not_private=True, secrets=secrets)
    return plan, compiled, exact


def exact_for_plan(
    session: Session,
    plan: DPPlan,
    *,
    not_private: bool,
    secrets: Secrets | None = None,
) -> tuple[CompiledQuery, ExactAggregates]:
    """Run the generated SQL of an already made (possibly altered) plan, without noise.

    For negative controls: e.g. ``dataclasses.replace(plan, max_groups=…, max_rows=…)``
    computes the same measures on the same fixed-point grids with other contribution bounds,
    while the noise stays calibrated for the original plan.

    Args:
        session: the session holding the plan's table.
        plan: the plan to run.
        not_private: must be True: the result is the exact (non-private) aggregate.
        secrets: keys of the pseudo-random orders (default 1 and 2, as above).

    Returns:
        The compiled query and the exact aggregates.
    """
    if not_private is not True:
        raise InvalidParameter("exact_for_plan releases exact data: pass not_private=True")
    return session._exact(plan, secrets or Secrets(rows=1, partitions=2))
