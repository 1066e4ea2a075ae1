"""The analyst's side of a deniable server: the verbs of a local Session, over HTTP.

:class:`Analyst` asks a remote server what a local
:class:`~deniable.curator.session.Session` would answer: the same
:class:`~deniable.query.answer.Answer` objects, the same exceptions. Every query is charged
by the server to the token's owner before its answer leaves the server; a query carries an
``Idempotency-Key`` chosen here, and a retry after a network failure reuses it, so one call
is charged at most once however often it is resent.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.client.builder import builder_json
from deniable.client.decode import (
    AccuracyEstimate,
    Budget,
    DatasetInfo,
    Explanation,
    Release,
    accuracy_from_json,
    answer_from_json,
    budget_from_json,
    dataset_from_json,
    explanation_from_json,
    release_from_json,
)
from deniable.client.transport import Transport, new_idempotency_key
from deniable.errors import BudgetExceeded, DeniableError, InvalidParameter
from deniable.query.answer import Answer
from deniable.query.builder import Query
from deniable.query.program import QueryProgram
from deniable.server.errors import Forbidden

if TYPE_CHECKING:
    from deniable.client.curator import Curator

Amount = float | int | Fraction
"""A privacy parameter as given by the caller (sent as the decimal it prints as)."""


class Analyst:
    """A connection to a deniable server with an analyst's (or a curator's) token.

    Create it with :func:`deniable.client.connect`. Holds one connection pool; close it
    with :meth:`close` or use it as a context manager.
    """

    def __init__(self, transport: Transport, *, name: str, role: str) -> None:
        """Wrap an open transport whose token belongs to ``name`` with ``role``."""
        self._http = transport
        self.name = name
        """The token's owner: charges are recorded under this name."""
        self.role = role
        """``"analyst"`` or ``"curator"``."""

    def __repr__(self) -> str:
        return f"<deniable {self.role} {self.name!r} at {self._http.url}>"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    @property
    def curator(self) -> Curator:
        """The curator's verbs on this connection (same token and connection pool).

        Raises:
            Forbidden: the token belongs to an analyst.
        """
        from deniable.client.curator import Curator

        if self.role != "curator":
            raise Forbidden(
                f"{self.name!r} is an analyst: the curator's verbs need a curator's token"
            )
        return Curator(self._http, name=self.name, role=self.role)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what there is -------------------------------------------------------------------

    def datasets(self) -> list[DatasetInfo]:
        """The server's datasets, each with the caller's budget on it. Costs nothing."""
        return [dataset_from_json(d) for d in self._http.request("GET", "/v1/datasets")]

    def metadata(self, dataset: str) -> dict[str, Any]:
        """A dataset's public metadata, as the server sends it (``GET /v1/datasets/{d}``).

        Declared schema, clamping bounds, public key domains, contribution bounds and
        graphs — only what the curator declared, never a value computed from the data.
        Costs nothing.

        Raises:
            UnknownDataset: no such dataset.
        """
        body: dict[str, Any] = self._http.request("GET", _dataset_path(dataset))
        return body

    def budget(self, dataset: str) -> Budget:
        """The caller's budget on ``dataset``: cap, spent, remaining, allowance. Free.

        Raises:
            UnknownDataset: no such dataset.
        """
        return budget_from_json(self._http.request("GET", _dataset_path(dataset, "budget")))

    def history(self, dataset: str) -> list[Release]:
        """The caller's own releases on ``dataset``, oldest first (never anyone else's).

        Raises:
            UnknownDataset: no such dataset.
        """
        rows = self._http.request("GET", _dataset_path(dataset, "history"))
        return [release_from_json(r) for r in rows]

    def explain(self, epsilon: float, *, prior: float = 0.5) -> Explanation:
        """What ε means: how sure an attacker with ``prior`` can become. Reads no data.

        Raises:
            InvalidParameter: ε outside [0, 100] or a prior outside [0, 1].
        """
        body = self._http.request(
            "GET", "/v1/explain", params={"epsilon": float(epsilon), "prior": float(prior)}
        )
        return explanation_from_json(body)

    # -- queries -------------------------------------------------------------------------

    def table(self, dataset: str, table: str) -> Query:
        """Start a builder query on ``table`` of ``dataset``; ``.run(epsilon=…)`` asks it.

        The same :class:`~deniable.query.builder.Query` as ``Session.table``: building reads
        no data and costs nothing; ``run`` takes the keywords of :meth:`sql` and is charged
        exactly what the equivalent SQL is charged (the query is sent in the API's JSON
        form when it fits it, else as its SQL: :mod:`deniable.client.builder`).
        """
        return Query(table, session=_Remote(self, dataset))

    def sql(
        self,
        dataset: str,
        query: str | Query,
        *,
        epsilon: Amount | None = None,
        delta: Amount | None = None,
        rho: Amount | None = None,
        level: float = 0.95,
        idempotency_key: str | None = None,
        nonnegative: bool = False,
    ) -> Answer:
        """Answer an aggregate query on ``dataset`` with differential privacy.

        Privacy loss: ``epsilon`` (ε budgets), ``(epsilon, delta)`` with δ spent only on
        selecting private group keys, or ``rho`` (ρ-zCDP budgets), charged by the server to
        the caller's name (and allowance) before the answer leaves it — or nothing for a
        replay of an identical earlier query. The request carries an Idempotency-Key
        (``idempotency_key``, or a fresh uuid4) and every resend after a network failure
        reuses it: one call is charged at most once.

        Args:
            dataset: the dataset (see :meth:`datasets`).
            query: SQL text, or a builder :class:`~deniable.query.builder.Query`.
            epsilon: ε to spend.
            delta: δ to spend on selecting private group keys.
            rho: ρ to spend (ρ-zCDP budgets).
            level: the confidence level of the intervals.
            idempotency_key: the key of an earlier call that failed with
                :class:`~deniable.client.errors.ConnectionFailed`, to get its answer
                without paying again; default a new key.
            nonnegative: clip counts and their interval ends at 0 (free post-processing;
                biased upward near 0); by default counts are unbiased and may be negative.

        Returns:
            An :class:`~deniable.query.answer.Answer`, as ``Session.sql`` returns.

        Raises:
            SQLError: the text does not parse or names unknown tables or columns (with
                ``line`` and ``column``).
            UnsafeQuery: the query would release rows or unbounded values.
            InvalidParameter: malformed options (nothing sent for parameters the API
                cannot carry exactly).
            BudgetExceeded: it does not fit what is left (with ``requested`` and
                ``remaining``; nothing spent).
            UnknownDataset: no such dataset.
            ConnectionFailed: no answer after every retry (the error names the key).
        """
        body = _query_body(query)
        body.update(_loss_fields(epsilon=epsilon, delta=delta, rho=rho))
        body["level"] = float(level)
        if nonnegative:
            body["nonnegative"] = True
        key = idempotency_key if idempotency_key is not None else new_idempotency_key()
        requested = _requested(epsilon=epsilon, delta=delta, rho=rho)
        data = self._http.request(
            "POST",
            _dataset_path(dataset, "query"),
            body=body,
            idempotency_key=key,
            budget_exceeded=lambda message: self._refused(dataset, message, requested),
        )
        cost = self._first_cost(dataset, data) if data.get("cached") else None
        return answer_from_json(data, cost=cost)

    def accuracy(
        self,
        dataset: str,
        query: str | Query,
        *,
        epsilon: Amount | None = None,
        delta: Amount | None = None,
        rho: Amount | None = None,
        level: float = 0.95,
        rows: int | None = None,
        target: Mapping[str, float] | None = None,
    ) -> AccuracyEstimate:
        """The interval half-width each output would get, before spending anything.

        Privacy loss: none (a dry run: the server compiles the query, reads no data and
        writes nothing). Give the loss to spend, or ``target`` half-widths (by output
        name) to also get the least loss meeting them (``least_loss``; the widths are then
        for it when no loss was given). AVG, VARIANCE and STDDEV need ``rows``, an assumed
        number of rows per group; quantiles report a rank error.

        Returns:
            An :class:`~deniable.client.decode.AccuracyEstimate` (a
            :class:`~deniable.query.accuracy.AccuracyReport` with the loss, what is left
            and whether it fits).

        Raises:
            SQLError, UnsafeQuery, InvalidParameter, UnknownDataset: as for :meth:`sql`.
        """
        body = _query_body(query)
        body.update(_loss_fields(epsilon=epsilon, delta=delta, rho=rho))
        body["level"] = float(level)
        if rows is not None:
            body["rows"] = rows
        if target is not None:
            body["target"] = {str(k): float(v) for k, v in target.items()}
        data = self._http.request("POST", _dataset_path(dataset, "accuracy"), body=body)
        return accuracy_from_json(data)

    def budget_for(
        self,
        dataset: str,
        query: str | Query,
        target: Mapping[str, float],
        *,
        rows: int | None = None,
        delta: Amount | None = None,
        level: float = 0.95,
    ) -> PrivacyLoss:
        """The least privacy loss whose intervals meet ``target`` (half-widths by output).

        As ``Session.budget_for``: ``Epsilon(ε)``, ``EpsilonDelta(ε, δ)`` with ``delta``,
        or ``Rho(ρ)`` on a ρ-zCDP budget. Privacy loss: none (a dry run).

        Raises:
            InvalidParameter: an unknown output, an output with no width known in advance
                (quantiles; AVG without ``rows``), a target no budget meets.
        """
        estimate = self.accuracy(dataset, query, delta=delta, level=level, rows=rows, target=target)
        if estimate.least_loss is None:
            raise InvalidParameter("the server found no least loss for these targets")
        return estimate.least_loss

    # -- internals -----------------------------------------------------------------------

    def _refused(self, dataset: str, message: str, requested: PrivacyLoss | None) -> BudgetExceeded:
        """A BudgetExceeded with what was asked and (read afresh) what is left."""
        try:
            remaining: PrivacyLoss | None = self.budget(dataset).remaining
        except DeniableError:
            remaining = None
        return BudgetExceeded(message, requested=requested, remaining=remaining)

    def _first_cost(self, dataset: str, data: Mapping[str, Any]) -> PrivacyLoss | None:
        """What a replayed answer cost when first computed (from the caller's history)."""
        charge_id = data.get("charge_id")
        try:
            for release in self.history(dataset):
                if release.id == charge_id:
                    return release.loss
        except DeniableError:
            return None
        return None


class _Remote:
    """What a builder :class:`~deniable.query.builder.Query` needs to run on a server."""

    def __init__(self, analyst: Analyst, dataset: str) -> None:
        self._analyst = analyst
        self._dataset = dataset

    def sql(self, *args: Any, **options: Any) -> Answer:
        """Answer the builder's SQL on the server (``options`` as for :meth:`Analyst.sql`)."""
        (text,) = args
        return self._analyst.sql(self._dataset, _Rendered(text), **options)

    def compile(self, *args: Any, **options: Any) -> QueryProgram:
        """Refused: queries are compiled on the server."""
        raise InvalidParameter(
            "a remote query is compiled by the server: use client.accuracy(...) to see what "
            "it would cost and how accurate it would be"
        )


class _Rendered(str):
    """SQL text rendered by the builder (eligible for the JSON form)."""

    __slots__ = ()


def _query_body(query: str | Query) -> dict[str, Any]:
    if isinstance(query, Query | _Rendered):
        spec = builder_json(query)
        if spec is not None:
            return {"builder": spec}
        return {"sql": query.to_sql() if isinstance(query, Query) else str(query)}
    if not isinstance(query, str) or not query.strip():
        raise InvalidParameter("query must be SQL text or a builder Query")
    return {"sql": query}


def _exact_float(value: Amount, name: str) -> float:
    """``value`` as the float the server reads back exactly (its printed decimal)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise InvalidParameter(f"{name} must be a number")
    as_float = float(value)
    # A float is read by the server as the decimal it prints as, exactly as it is locally;
    # an int or a Fraction must survive that reading unchanged.
    if not isinstance(value, float) and Fraction(repr(as_float)) != Fraction(value):
        raise InvalidParameter(
            f"{name} = {value} cannot be sent exactly (the API takes decimals): give a "
            "decimal such as 0.25"
        )
    return as_float


def _loss_fields(
    *, epsilon: Amount | None, delta: Amount | None, rho: Amount | None
) -> dict[str, float]:
    given = {"epsilon": epsilon, "delta": delta, "rho": rho}
    return {k: _exact_float(v, k) for k, v in given.items() if v is not None}


def _requested(
    *, epsilon: Amount | None, delta: Amount | None, rho: Amount | None
) -> PrivacyLoss | None:
    """The loss a query asked to spend, exactly as the server reads it."""
    try:
        if rho is not None and epsilon is None:
            return Rho(rho=_exact_float(rho, "rho"))
        if epsilon is not None and delta is not None:
            return EpsilonDelta(
                epsilon=_exact_float(epsilon, "epsilon"), delta=_exact_float(delta, "delta")
            )
        if epsilon is not None:
            return Epsilon(epsilon=_exact_float(epsilon, "epsilon"))
    except InvalidParameter:
        return None
    return None


def _dataset_path(dataset: str, *rest: str) -> str:
    if not isinstance(dataset, str) or not dataset:
        raise InvalidParameter("dataset must be a non-empty string")
    return "/".join(["/v1/datasets", quote(dataset, safe=""), *rest])
