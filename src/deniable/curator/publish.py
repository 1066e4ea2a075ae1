"""Safe k-anonymization of a registered table, charged to the session's ledger.

The toolkit (:mod:`deniable.anonymize`) publishes a k-anonymous table from a Bernoulli
sample with the ``(β, ε, δ)`` guarantee of Li–Qardaji–Su; this module runs it on a table of a
:class:`~deniable.curator.session.Session` and charges the release to the same budget as every
query and synthetic table:

1. the guarantee (hence the loss) is computed from ``k``, ``β`` and ``ε``/``δ`` alone, and a
   release that does not fit what is left is refused before the engine runs;
2. a table protecting persons (a privacy unit column) is first reduced to one uniformly
   random row per person (a keyed hash under a fresh secret key), so the row-level guarantee
   of the theorems is a person-level one; a table protecting rows is used as it is;
3. the toolkit samples, recodes (a total function: a value outside a hierarchy's domain is
   published as ``*``) and suppresses classes below ``k``;
4. the release is charged (:meth:`~deniable.ledger.Ledger.record_sample_release`: its sample
   is consumed and answers nothing else) before the table is returned.

Nothing before the charge is observable from the data: the refusals in step 1 and the
toolkit's own (unknown columns: the schema) are public, and the recoding cannot fail on a
value.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlglot import exp

from deniable.anonymize import (
    Anonymization,
    RecodingSpec,
    amplified_epsilon,
    epsilon_safe,
    epsilon_safe_guarantee,
    load_recoding,
    recoding_from_dict,
    strongly_safe,
    strongly_safe_guarantee,
)
from deniable.engines.base import Engine, TableBinding
from deniable.engines.duckdb import DuckDBEngine
from deniable.errors import InvalidParameter
from deniable.ledger import Ledger
from deniable.noise.source import RandomSource
from deniable.query.catalog import TableInfo
from deniable.query.execute import precheck_budget
from deniable.sqlnames import identifier, quote_identifier

Recodings = RecodingSpec | Mapping[str, Any] | str | Path
"""A recoding: a spec, its dict form (:func:`recoding_from_dict`), or a YAML/JSON file."""


def as_spec(recoding: Recodings) -> RecodingSpec:
    """The :class:`RecodingSpec` of any accepted form.

    Raises:
        RecodingError: a malformed recoding or an unreadable file.
    """
    if isinstance(recoding, RecodingSpec):
        return recoding
    if isinstance(recoding, str | Path):
        return load_recoding(recoding)
    return recoding_from_dict(dict(recoding))


def one_row_per_person(source: exp.Select, unit: str) -> exp.Select:
    """``source``'s rows, one uniformly random row per person of column ``unit``.

    Each person's kept row is the least of a keyed hash of the row's position under a fresh
    62-bit secret key (so the choice is uniform and unpredictable); rows without a unit
    belong to no one and are left out. The result keeps ``source``'s columns.
    """
    key = exp.Literal.number(secrets.randbits(62))
    keyed = source.select(
        exp.alias_(exp.func("hash", key, exp.Window(this=exp.RowNumber())), "__deniable_key"),
        copy=True,
    )
    person = exp.Column(this=identifier(unit))
    ranked = exp.select(
        "*",
        exp.alias_(
            exp.Window(
                this=exp.RowNumber(),
                partition_by=[person.copy()],
                order=exp.Order(expressions=[exp.Ordered(this=exp.column("__deniable_key"))]),
            ),
            "__deniable_rank",
        ),
    ).from_(exp.Subquery(this=keyed, alias=exp.TableAlias(this=exp.to_identifier("k"))))
    return (
        exp.select(exp.Star(except_=[exp.column("__deniable_key"), exp.column("__deniable_rank")]))
        .from_(exp.Subquery(this=ranked, alias=exp.TableAlias(this=exp.to_identifier("r"))))
        .where(
            exp.and_(
                exp.EQ(this=exp.column("__deniable_rank"), expression=exp.Literal.number(1)),
                exp.Not(this=exp.Is(this=person.copy(), expression=exp.Null())),
            )
        )
    )


def anonymize_table(
    info: TableInfo,
    engine: Engine,
    binding: TableBinding,
    recoding: Recodings,
    *,
    ledger: Ledger,
    dataset: str,
    analyst: str,
    k: int,
    beta: float,
    epsilon: float | None = None,
    delta: float | None = None,
    selection_epsilon: float | None = None,
    source: RandomSource | None = None,
) -> Anonymization:
    """Publish ``info``'s table k-anonymized from a β-sample; charges the guarantee's (ε, δ).

    Privacy loss: the release's ``(ε, δ)`` (Theorem 3.9 with a fixed recoding, or 3.11 when
    ``selection_epsilon`` chooses it by the exponential mechanism), per person when the table
    has a privacy unit (one random row each), per row otherwise; charged once, before the
    table is returned, and the sample it used is consumed.

    Raises:
        InvalidParameter: bad ``k``/``β``/``ε``/``δ``, a table not on DuckDB or bound from a
            relation (before anything runs).
        RecodingError, UnknownColumn: a malformed recoding, a column the table lacks (the
            schema only).
        BudgetExceeded: the release does not fit what is left (nothing ran, nothing spent).
    """
    if not isinstance(engine, DuckDBEngine):
        raise InvalidParameter(
            "safe k-anonymization runs on DuckDB tables; register the table from a file or a "
            "data frame (the default engine) to anonymize it"
        )
    spec = as_spec(recoding)
    if selection_epsilon is None:
        guarantee = strongly_safe_guarantee(k, beta=beta, epsilon=epsilon, delta=delta)
    else:
        guarantee = epsilon_safe_guarantee(
            k,
            beta=beta,
            selection_epsilon=amplified_epsilon(float(selection_epsilon), beta),
            epsilon=epsilon,
            delta=delta,
        )
    loss = guarantee.loss()
    precheck_budget(ledger, dataset, loss, what="this k-anonymized release")
    runner = engine.toolkit_runner(binding)
    unit = info.policy.privacy_unit
    table = binding.name
    view: str | None = None
    if unit is not None:
        view = f"__deniable_people_{secrets.token_hex(8)}"
        body = one_row_per_person(exp.select("*").from_(exp.to_table(table)), unit)
        runner.execute(
            exp.Create(this=exp.to_table(view), kind="VIEW", expression=body).sql(dialect="duckdb")
        )
        table = view
    try:
        if selection_epsilon is None:
            result = strongly_safe(
                runner, table, spec, k=k, beta=beta, epsilon=epsilon, delta=delta, source=source
            )
        else:
            result = epsilon_safe(
                runner, table, spec, k=k, beta=beta, selection_epsilon=selection_epsilon,
                epsilon=epsilon, delta=delta, source=source,
            )  # fmt: skip
    finally:
        if view is not None:
            runner.execute(f"DROP VIEW IF EXISTS {quote_identifier(view)}")
    ledger.record_sample_release(
        dataset,
        result.guarantee.loss(),
        sample=result.sample_id,
        rate=beta,
        analyst=analyst,
        query_text=f"anonymize {info.name!r}: k = {k}, β = {beta:g}",
        details={
            "kind": "safe k-anonymization",
            "k": k,
            "theorem": result.guarantee.theorem,
            "recoding": str(result.recoding.levels()),
            "unit": unit or "row",
        },
    )
    return result
