"""The HTTP API (FastAPI), versioned under ``/v1``.

Routes (all JSON; every one but ``/v1/health`` needs ``Authorization: Bearer <token>``):

==========================================  =========  ==============================
route                                       who        what
==========================================  =========  ==============================
``GET /v1/health``                          anyone     liveness (no data)
``GET /v1/whoami``                          any        the caller's name and role
``GET /v1/datasets``                        any        datasets and the caller's budget
``GET /v1/datasets/{d}``                    any        schema, bounds, keys, graphs
``GET /v1/datasets/{d}/budget``             any        the caller's budget
``POST /v1/datasets/{d}/query``             any        a DP answer (tables, graphs)
``POST /v1/datasets/{d}/accuracy``          any        expected widths, least loss (free)
``GET /v1/datasets/{d}/history``            any        the caller's own releases
``GET /v1/explain?epsilon=&prior=``         any        what ε means (posterior bounds)
``GET /v1/datasets/{d}/ledger``             curator    every release by everyone
``GET /v1/datasets/{d}/allowances``         curator    every analyst's budget
``PUT /v1/datasets/{d}/allowances/{a}``     curator    set an analyst's slice of the cap
``POST /v1/datasets/{d}/tune``              curator    DP contribution bounds (charged)
``POST /v1/datasets/{d}/synthesize``        curator    a DP synthetic table (charged once)
``POST /v1/datasets/{d}/utility-analysis``  curator    NON-PRIVATE exact kept shares
``GET /v1/analysts``                        curator    registered analysts
``POST /v1/analysts``                       curator    add one; its token is shown once
``DELETE /v1/analysts/{a}``                 curator    revoke its token
==========================================  =========  ==============================

Errors always have the body ``{"error": {"code": ..., "message": ...}}`` with a stable code
(:data:`ERROR_CODES`); messages are deniable's own, which never contain data, and anything
unexpected becomes ``internal`` with no detail (the traceback goes to the server log only).

Protections: bodies above ``server.max_request_bytes`` get 413; each principal has a token
bucket (``server.rate_limit``; per worker process, so ``w`` workers admit up to ``w`` times
the rate) and gets 429 with ``Retry-After`` beyond it; CORS is closed unless
``server.cors_origins`` lists origins. An analyst never sees another analyst's queries or
answers; whether identical queries are replayed across analysts is ``server.share_replays``.

The charging routes (query, tune, synthesize) take an ``Idempotency-Key`` header: a retry
with the same key and body gets the first response and is charged nothing more; the key
reused on the route for another body is refused (422 ``idempotency_key_reused``).
"""

import json
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DeniableError,
    DuplicateRequest,
    EngineError,
    InternalError,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
    SQLError,
    UnknownDataset,
    UnsafeQuery,
)
from deniable.explain import explain_epsilon, posterior_bounds
from deniable.server import timing as response_time
from deniable.server.config import (
    DEFAULT_FAILED_AUTH_BURST,
    ConfigError,
    ServerSettings,
    ServiceConfig,
    load_config,
)
from deniable.server.console import mount_console
from deniable.server.errors import (
    Forbidden,
    IdempotencyConflict,
    RateLimited,
    RequestInProgress,
    RequestTooLarge,
    Unauthenticated,
    UnknownResource,
)
from deniable.server.models import (
    AccuracyRequest,
    AccuracyResponse,
    AllowanceIn,
    AllowanceOut,
    AnalystOut,
    BudgetOut,
    ColumnOut,
    DatasetOut,
    DatasetSummary,
    ErrorBody,
    ErrorDetail,
    ExplainOut,
    LossOut,
    NewAnalyst,
    NewAnalystOut,
    QueryNumber,
    QueryRequest,
    QueryResponse,
    ReleaseOut,
    SynthesizeRequest,
    SynthesizeResponse,
    TableOut,
    TuneRequest,
    TuneResponse,
    UtilityAnalysisRequest,
    UtilityAnalysisResponse,
    WhoAmI,
    budget_out,
    graph_out,
    public_keys_out,
)
from deniable.server.service import MAX_IDEMPOTENCY_KEY, Caller, KeyedKind, Service

log = logging.getLogger("deniable.server")

Authenticator = Callable[[str], Caller | None]

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY,
        description="a retry with the same key returns the same response, charged once "
        "(chosen by the client, unique per request and scoped to the route; reused on the "
        "route for another request: 422)",
    ),
]
"""The ``Idempotency-Key`` header of the charging routes (query, tune, synthesize)."""

ERROR_CODES: tuple[tuple[type[BaseException], int, str], ...] = (
    (Unauthenticated, 401, "unauthenticated"),
    (Forbidden, 403, "forbidden"),
    (UnknownResource, 404, "not_found"),
    (UnknownDataset, 404, "unknown_dataset"),
    (RequestTooLarge, 413, "request_too_large"),
    (RateLimited, 429, "rate_limited"),
    (BudgetExceeded, 409, "budget_exceeded"),
    (RequestInProgress, 409, "in_progress"),
    (DuplicateRequest, 409, "in_progress"),
    (IdempotencyConflict, 422, "idempotency_key_reused"),
    (CapConflict, 409, "cap_conflict"),
    (SQLError, 400, "sql_error"),
    (UnsafeQuery, 400, "unsafe_query"),
    (ConfigError, 400, "config_error"),
    (InvalidParameter, 400, "invalid_parameter"),
    (LedgerTampered, 503, "ledger_tampered"),
    (LedgerError, 503, "ledger_error"),
    (EngineError, 500, "engine_error"),
    (InternalError, 500, "internal"),
    (DeniableError, 400, "error"),
)
"""Exception class → (HTTP status, stable code); the first match (most specific) wins."""


def _error(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    exc: BaseException | None = None,
) -> JSONResponse:
    detail = ErrorDetail(code=code, message=message)
    if isinstance(exc, BudgetExceeded):
        if isinstance(exc.requested, Epsilon | EpsilonDelta | Rho):
            detail.requested = LossOut.of(exc.requested)
        if isinstance(exc.remaining, Epsilon | EpsilonDelta | Rho):
            detail.remaining = LossOut.of(exc.remaining)
    elif isinstance(exc, SQLError):
        detail.line, detail.column = exc.line, exc.column
    body = ErrorBody(error=detail)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def error_response(exc: BaseException) -> JSONResponse:
    """The JSON error response of a deniable error (its message never holds data)."""
    for cls, status, code in ERROR_CODES:
        if isinstance(exc, cls):
            if status >= 500 and code in ("internal", "engine_error"):
                log.error("request failed", exc_info=exc)
                message = (
                    "an internal error occurred; nothing was released"
                    if code == "internal"
                    else "the query engine failed; nothing was charged or released"
                )
                return _error(status, code, message)
            headers = None
            if isinstance(exc, RateLimited):
                headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
            return _error(status, code, str(exc), headers, exc)
    log.error("unexpected error", exc_info=exc)
    return _error(500, "internal", "an internal error occurred; nothing was released")


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    text = {
        400: (
            "well formed by this schema but refused for its meaning: SQL that names an "
            "unknown table or column or is unsafe, a loss of another kind than the budget, "
            "an ε too small to plan (nothing was charged)"
        ),
        401: "missing, unknown or revoked token",
        403: "the caller's role may not do this",
        404: "no such dataset or analyst",
        409: "the budget does not fit (nothing was charged), request in progress, or conflict",
        413: "request body too large",
        422: "malformed request: the body, path or query string violates this schema",
        429: "rate limited (see Retry-After)",
        500: "internal error (no detail)",
        503: "the ledger refuses (tampered) or failed",
    }
    out: dict[int | str, dict[str, Any]] = {}
    for s in (401, 413, 422, 429, 500, 503, *statuses):
        out[s] = {"model": ErrorBody, "description": text[s]}
    return out


# -- protections -------------------------------------------------------------------------------


FAILED_AUTH_BURST = DEFAULT_FAILED_AUTH_BURST
"""Failed authentications one client address may make at once by default (then one a
second); ``server.failed_auth`` in the configuration changes both."""


class TokenBuckets:
    """Per-principal token buckets (in this process only; thread-safe).

    Each name may make ``burst`` requests at once and then ``per_second`` per second.
    """

    def __init__(
        self, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = per_second
        self._burst = float(burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, float]] = {}

    def wait(self, name: str) -> float | None:
        """Seconds until ``name`` has a token (None: it has one now); takes nothing."""
        now = self._clock()
        with self._lock:
            tokens, last = self._state.get(name, (self._burst, now))
            tokens = min(self._burst, tokens + (now - last) * self._rate)
            return None if tokens >= 1 else (1 - tokens) / self._rate

    def take(self, name: str) -> float | None:
        """Take one token for ``name``; None if granted, else seconds until one is free."""
        now = self._clock()
        with self._lock:
            tokens, last = self._state.get(name, (self._burst, now))
            tokens = min(self._burst, tokens + (now - last) * self._rate)
            if tokens >= 1:
                self._state[name] = (tokens - 1, now)
                return None
            self._state[name] = (tokens, now)
            return (1 - tokens) / self._rate


class _TooLarge(Exception):
    pass


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware refusing request bodies above ``limit`` bytes with 413.

    A declared ``Content-Length`` above the limit is refused before reading; a streamed
    body is counted as it arrives and refused as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, refusing it once its body passes the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        started = False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, tracking)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(RequestTooLarge(f"the request body exceeds {self.limit} bytes"))
        await response(scope, receive, send)


# -- the application ---------------------------------------------------------------------------


def create_app(
    config_or_service: ServiceConfig | Service | str | os.PathLike[str],
    *,
    authenticate: Authenticator | None = None,
) -> FastAPI:
    """Build the FastAPI application.

    Args:
        config_or_service: a running :class:`Service` (the caller owns and closes it), or
            a configuration (object or file path): the service is then opened when the
            application starts (in the worker process, never before a fork) and closed
            when it stops.
        authenticate: maps a bearer token to a principal (default: the service's ledger,
            ``Ledger.authenticate``). For tests.

    Returns:
        The application. No route releases anything that the ledger did not charge.
    """
    if isinstance(config_or_service, Service):
        given: Service | None = config_or_service
        config = config_or_service.config
    else:
        given = None
        config = (
            config_or_service
            if isinstance(config_or_service, ServiceConfig)
            else load_config(config_or_service)
        )
    settings: ServerSettings = config.server
    holder: dict[str, Service] = {} if given is None else {"service": given}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opened = None
        if given is None:
            opened = Service(config)
            holder["service"] = opened
        try:
            yield
        finally:
            if opened is not None:
                holder.pop("service", None)
                opened.close()

    app = FastAPI(
        title="deniable",
        version="1",
        description=(
            "Differentially private queries over curated datasets. Every answer is charged "
            "to the dataset's one privacy budget before it leaves."
        ),
        lifespan=lifespan,
        # No Swagger UI or ReDoc: FastAPI loads them from a CDN, where a curator's token
        # pasted into the page would be exposed. The schema stays at /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    buckets = TokenBuckets(settings.rate_limit.per_second, settings.rate_limit.burst)
    # Failed authentications per client address (server.failed_auth; default 20 at once,
    # then one a second); beyond that the address is refused (429) before any token is
    # looked at.
    failures = TokenBuckets(settings.failed_auth.per_second, settings.failed_auth.burst)
    bearer = HTTPBearer(auto_error=False, description="a token from `deniable analyst add`")

    def service() -> Service:
        s = holder.get("service")
        if s is None:
            raise LedgerError("the service is not running")
        return s

    def caller(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Caller:
        address = request.client.host if request.client is not None else "unknown"
        blocked = failures.wait(address)
        if blocked is not None:
            raise RateLimited(
                f"too many failed authentications from this address; retry in {blocked:.2f} s",
                retry_after=blocked,
            )
        if credentials is None or credentials.scheme.lower() != "bearer":
            failures.take(address)
            raise Unauthenticated("send Authorization: Bearer <token>")
        token = credentials.credentials
        who = (authenticate or service().authenticate)(token)
        if who is None:
            failures.take(address)
            raise Unauthenticated("unknown or revoked token")
        wait = buckets.take(who.name)
        if wait is not None:
            raise RateLimited(f"too many requests; retry in {wait:.2f} s", retry_after=wait)
        return who

    Who = Annotated[Caller, Depends(caller)]
    Dataset = Annotated[str, Path(min_length=1, max_length=200, description="dataset name")]

    @app.exception_handler(DeniableError)
    async def _deniable(request: Request, exc: DeniableError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            # FastAPI decodes the JSON body before it resolves dependencies: authenticate
            # here, so that a missing or bad token is always 401 (or the failed-auth 429)
            # whatever the body, as the schema promises. (Any other validation error is
            # raised after the caller dependency has already passed.)
            try:
                await run_in_threadpool(caller, request, await bearer(request))
            except DeniableError as e:
                return error_response(e)
        # Locations and reasons only: pydantic's error entries also hold the input, which
        # is never echoed.
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
            for e in exc.errors()[:5]
        ]
        return _error(422, "invalid_request", "; ".join(parts) or "malformed request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, _TooLarge):
            return error_response(RequestTooLarge("the request body is too large"))
        codes = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}
        code = codes.get(exc.status_code, "http_error")
        message = {
            404: "no such route",
            405: "method not allowed on this route",
            400: "malformed request body",
        }.get(exc.status_code, "request refused")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette's Allow names the methods of the first route matching the path only;
            # a path served by several routes (GET and POST /v1/analysts) allows them all.
            headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return _error(exc.status_code, code, message, headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    # -- routes ----------------------------------------------------------------------------

    @app.get("/v1/health", tags=["service"], responses={500: _responses()[500]})
    def health() -> dict[str, str]:
        """Liveness: the process answers (no data, no authentication)."""
        return {"status": "ok"}

    @app.get("/v1/whoami", tags=["service"], responses=_responses())
    def whoami(who: Who) -> WhoAmI:
        """The caller's name and role."""
        return WhoAmI(name=who.name, role=who.role)

    def _budget_for(s: Service, dataset: str, who: Caller) -> BudgetOut:
        return budget_out(s.budget(dataset, analyst=None if who.role == "curator" else who.name))

    @app.get("/v1/datasets", tags=["datasets"], responses=_responses())
    def datasets(who: Who) -> list[DatasetSummary]:
        """The datasets, with the caller's budget on each."""
        s = service()
        return [
            DatasetSummary(
                name=d,
                table=s.config.datasets[d].table if s.config.datasets[d].has_table else None,
                graphs=[g.name for g in s.config.datasets[d].graphs],
                budget=_budget_for(s, d, who),
            )
            for d in s.datasets()
        ]

    @app.get("/v1/datasets/{dataset}", tags=["datasets"], responses=_responses(404))
    def dataset_metadata(dataset: Dataset, who: Who) -> DatasetOut:
        """Declared schema, bounds, public keys and policy, and the caller's budget.

        Never a row count or any value computed from the data without DP.
        """
        m = service().metadata(dataset, who)
        return DatasetOut(
            name=m.name,
            table=m.table,
            tables=[
                TableOut(
                    name=t.name,
                    public=t.public,
                    columns=[ColumnOut(name=n, type=ty) for n, ty in t.columns],
                    privacy_unit=t.privacy_unit,
                    bounds={k: list(v) for k, v in t.bounds.items()},
                    public_keys=public_keys_out(t.public_keys),
                    max_groups=t.max_groups,
                    max_rows=t.max_rows,
                    unique_keys=[list(k) for k in t.unique_keys],
                )
                for t in m.tables
            ],
            graphs=[graph_out(g) for g in m.graphs],
            budget=budget_out(m.budget),
        )

    @app.get("/v1/datasets/{dataset}/budget", tags=["datasets"], responses=_responses(404))
    def budget(dataset: Dataset, who: Who) -> BudgetOut:
        """The caller's budget on the dataset (a curator sees the whole cap)."""
        return _budget_for(service(), dataset, who)

    @app.post(
        "/v1/datasets/{dataset}/query",
        tags=["queries"],
        responses=_responses(400, 404, 409),
    )
    def query(
        dataset: Dataset,
        body: QueryRequest,
        who: Who,
        idempotency_key: IdempotencyKey = None,
    ) -> QueryResponse:
        """Answer a query with differential privacy, charging the caller.

        A query over a table, or over one of the dataset's graphs (``FROM g``,
        ``degrees(g)``, ``triangles(g)``; see the dataset's ``graphs``).

        Privacy loss: ``epsilon`` (ε budgets), ``(epsilon, delta)`` with δ spent only on
        selecting private group keys, or ``rho`` — nothing for a replay of an identical
        query, and nothing more for a retry with the same Idempotency-Key.
        """
        s = service()
        text = body.sql if body.sql is not None else None
        q = text if text is not None else body.builder.to_query()  # type: ignore[union-attr]
        answer = s.query(
            who,
            dataset,
            q,
            epsilon=body.epsilon,
            delta=body.delta,
            rho=body.rho,
            level=body.level,
            idempotency_key=idempotency_key,
            nonnegative=body.nonnegative,
        )
        return QueryResponse.of(dataset, answer)

    @app.post(
        "/v1/datasets/{dataset}/accuracy",
        tags=["queries"],
        responses=_responses(400, 404),
    )
    def accuracy(dataset: Dataset, body: AccuracyRequest, who: Who) -> AccuracyResponse:
        """A dry run: the interval half-width each output would get, before spending.

        Privacy loss: none. No data is read, no engine runs, nothing is charged and
        nothing is written to the ledger (which is only read, for the caller's remaining
        budget). Give the loss to spend (``epsilon``; ``epsilon`` and ``delta``; or
        ``rho``), or a ``target`` (half-widths by output name, in the output's units) to
        also get the least loss meeting every target (``least_loss``); the widths are for
        the loss given, else for the least loss found. Counts and sums need nothing else;
        AVG, VARIANCE and STDDEV need ``rows``, an assumed number of rows per group (a
        guess, never read from the data); quantiles report a ``rank_error`` in rows. Table
        queries only.
        """
        s = service()
        q = body.sql if body.sql is not None else body.builder.to_query()  # type: ignore[union-attr]
        result = s.accuracy(
            who,
            dataset,
            q,
            epsilon=body.epsilon,
            delta=body.delta,
            rho=body.rho,
            level=body.level,
            rows=body.rows,
            target=body.target,
        )
        return AccuracyResponse.of(dataset, result)

    @app.get("/v1/datasets/{dataset}/history", tags=["queries"], responses=_responses(404))
    def history(dataset: Dataset, who: Who) -> list[ReleaseOut]:
        """The caller's own releases on the dataset (never another analyst's).

        An analyst's releases are numbered 1, 2, 3, … on each dataset (``id``, as in their
        answers' ``charge_id``); the ledger's global ids, which count everyone's releases,
        are shown to curators only.
        """
        own = who.role != "curator"
        return [_release(c, own=own) for c in service().history(who, dataset)]

    @app.get("/v1/explain", tags=["explain"], responses=_responses(400))
    def explain(
        who: Who,
        epsilon: Annotated[float, Query(ge=0, le=100, allow_inf_nan=False), QueryNumber],
        prior: Annotated[float, Query(ge=0, le=1, allow_inf_nan=False), QueryNumber] = 0.5,
    ) -> ExplainOut:
        """What ε means: how sure an attacker with this prior can become (no data)."""
        low, high = posterior_bounds(prior, epsilon)
        return ExplainOut(
            epsilon=epsilon,
            prior=prior,
            posterior_low=low,
            posterior_high=high,
            text=explain_epsilon(epsilon, prior),
        )

    # -- curator ---------------------------------------------------------------------------

    @app.get("/v1/datasets/{dataset}/ledger", tags=["curator"], responses=_responses(403, 404))
    def ledger(dataset: Dataset, who: Who) -> list[ReleaseOut]:
        """Every release on the dataset, by every analyst (curators only)."""
        return [_release(c, own=False) for c in service().ledger_view(who, dataset)]

    @app.get("/v1/datasets/{dataset}/allowances", tags=["curator"], responses=_responses(403, 404))
    def allowances(dataset: Dataset, who: Who) -> list[AllowanceOut]:
        """Every registered analyst's budget on the dataset (curators only)."""
        views = service().allowances(who, dataset)
        return [AllowanceOut(analyst=a, budget=budget_out(v)) for a, v in views.items()]

    @app.put(
        "/v1/datasets/{dataset}/allowances/{analyst}",
        tags=["curator"],
        responses=_responses(400, 403, 404),
    )
    def set_allowance(
        dataset: Dataset,
        analyst: Annotated[str, Path(min_length=1, max_length=200)],
        body: AllowanceIn,
        who: Who,
    ) -> BudgetOut:
        """Set an analyst's slice of the dataset's cap (never extra budget).

        With ``"reserve": true`` the slice is also reserved: what the analyst has not spent
        of it is held back from every other analyst, so they can always spend all of it
        (refused with 400 when it exceeds what is unspent and unreserved); without it, a
        reservation the analyst held is released.
        """
        return budget_out(
            service().set_allowance(who, dataset, analyst, body.to_loss(), reserve=body.reserve)
        )

    @app.post(
        "/v1/datasets/{dataset}/tune",
        tags=["curator"],
        response_model=TuneResponse,
        responses=_responses(400, 403, 404, 409),
    )
    def tune(
        dataset: Dataset, body: TuneRequest, who: Who, idempotency_key: IdempotencyKey = None
    ) -> Response:
        """Measure contributions with DP and propose ``max_groups``/``max_rows`` (curators).

        Privacy loss: ``epsilon`` (pure ε-DP: four contribution histograms), charged to
        the dataset's one cap under the curator's name like any release; the charge is
        committed before anything computed from the data is released, and a request the
        budget refuses costs nothing (409 ``budget_exceeded``, before any data is read).
        The ranked proposals (the ``workload_epsilon`` and ``groups`` of a ``COUNT(*) …
        GROUP BY group_by`` workload) are post-processing: free. With ``apply`` the best
        proposal becomes the table's bounds in this service process until it restarts
        (other worker processes keep the configured bounds): write ``configuration`` into
        the dataset's configuration to keep it.

        With an ``Idempotency-Key``, a retry of the same request with the same key returns
        the first response (its ``applied`` says what the first did, in the process that
        served it) and is charged nothing more; the key reused for another request is
        refused (422 ``idempotency_key_reused``).
        """
        s = service()

        def release() -> bytes:
            result = s.tune(
                who,
                dataset,
                body.table,
                epsilon=body.epsilon,
                group_by=body.group_by,
                workload_epsilon=body.workload_epsilon,
                groups=body.groups,
                apply=body.apply,
                clamps=body.clamps,
                clamp_workload=body.clamp_workload,
            )
            return TuneResponse.of(dataset, result).model_dump_json(exclude={"remaining"}).encode()

        return _keyed_response(s, who, dataset, "tune", body, idempotency_key, release)

    @app.post(
        "/v1/datasets/{dataset}/synthesize",
        tags=["curator"],
        response_model=SynthesizeResponse,
        responses=_responses(400, 403, 404, 409),
    )
    def synthesize(
        dataset: Dataset,
        body: SynthesizeRequest,
        who: Who,
        idempotency_key: IdempotencyKey = None,
    ) -> Response:
        """Release a DP synthetic table (MST or AIM) of a private table (curators).

        Privacy loss: the request's ``epsilon`` and ``delta`` (or ``rho``), charged once to
        the dataset's cap under the curator's name, committed before any noise is drawn;
        the marginals are counted in the engine under the table's bounds (each person at
        most ``max_rows`` rows) and the rows are drawn from a model fitted to their noisy
        values (post-processing). A refused request costs nothing (409 ``budget_exceeded``,
        400 for missing bounds or keys, before the engine runs). ``measurements`` lists
        every noisy marginal and selection with its noise scale.

        With an ``Idempotency-Key``, a retry of the same request with the same key returns
        the same synthetic table (stored compressed with the charge) and is charged nothing
        more; the key reused for another request is refused (422
        ``idempotency_key_reused``).
        """
        s = service()

        def release() -> bytes:
            result = s.synthesize(
                who,
                dataset,
                body.table,
                rows=body.rows,
                columns=body.columns,
                epsilon=body.epsilon,
                delta=body.delta,
                rho=body.rho,
                method=body.method,
                bins=body.bins,
                measured=body.bin_specs(),
            )
            response = SynthesizeResponse.of(dataset, result)
            return response.model_dump_json(exclude={"remaining"}).encode()

        return _keyed_response(s, who, dataset, "synth", body, idempotency_key, release)

    @app.post(
        "/v1/datasets/{dataset}/utility-analysis",
        tags=["curator"],
        responses=_responses(400, 403, 404),
    )
    def utility_analysis(
        dataset: Dataset, body: UtilityAnalysisRequest, who: Who, response: Response
    ) -> UtilityAnalysisResponse:
        """NON-PRIVATE: the exact share of rows each candidate policy keeps (curators only).

        Privacy loss: none is accounted because none is promised: the shares are computed
        from the rows exactly, without noise (``"non_private": true``). For the curator,
        who holds the data: never charged, never written to the ledger, never stored or
        replayed as an answer, refused to analysts (403), and sent with
        ``Cache-Control: no-store``. Do not share it with analysts.
        """
        u = service().utility_analysis(who, dataset, body.table, group_by=body.group_by)
        response.headers["Cache-Control"] = "no-store"
        return UtilityAnalysisResponse.of(dataset, body.table, list(body.group_by), u)

    @app.get("/v1/analysts", tags=["curator"], responses=_responses(403))
    def analysts(who: Who) -> list[AnalystOut]:
        """Registered analysts and curators (never tokens)."""
        return [
            AnalystOut(
                name=a.name,
                role=a.role,
                created=a.created,
                revoked_at=a.revoked_at,
            )
            for a in service().analysts(who)
        ]

    @app.post(
        "/v1/analysts",
        tags=["curator"],
        status_code=201,
        responses=_responses(400, 403),
    )
    def add_analyst(body: NewAnalyst, who: Who) -> NewAnalystOut:
        """Create an analyst; the token is in this response only (stored hashed)."""
        token = service().add_analyst(who, body.name, role=body.role)
        return NewAnalystOut(name=body.name, role=body.role, token=token)

    @app.delete(
        "/v1/analysts/{name}",
        tags=["curator"],
        status_code=204,
        response_class=Response,
        responses=_responses(403, 404),
    )
    def revoke_analyst(
        name: Annotated[str, Path(min_length=1, max_length=200)], who: Who
    ) -> Response:
        """Revoke an analyst's token; its charges stay in the ledger."""
        service().revoke_analyst(who, name)
        return Response(status_code=204)

    @app.post(
        "/v1/analysts/{name}/token",
        tags=["curator"],
        responses=_responses(403, 404),
    )
    def rotate_analyst(
        name: Annotated[str, Path(min_length=1, max_length=200)], who: Who
    ) -> NewAnalystOut:
        """Give an analyst a new token, in this response only (the old one stops working).

        For the same person (a lost or leaked token, a revoked analyst reinstated): the
        history, allowances and stored answers stay theirs. A new person gets a new name.
        """
        s = service()
        token = s.rotate_analyst(who, name)
        role = next(a.role for a in s.analysts(who) if a.name == name)
        return NewAnalystOut(name=name, role=role, token=token)

    mount_console(app)  # the web console at /console/ (static files; not in OpenAPI)

    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            allow_credentials=False,
        )
    response_time.install(app, {n: d.response_time for n, d in config.datasets.items()})
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)
    return app


def _keyed_response(
    s: Service,
    who: Caller,
    dataset: str,
    kind: KeyedKind,
    body: BaseModel,
    idempotency_key: str | None,
    release: Callable[[], bytes],
) -> Response:
    """The JSON response of a charging curator release, run once per Idempotency-Key.

    ``release`` returns the response's JSON without ``remaining``, which is added here:
    what the caller may still spend now (for a retry as for a keyed query: now, not when
    the first request was answered).
    """
    request = json.dumps(body.model_dump(mode="json"), sort_keys=True)
    data = s.keyed_release(
        who, dataset, kind=kind, request=request, idempotency_key=idempotency_key, release=release
    )
    if not data.startswith(b"{") or data == b"{}":
        raise InternalError("a curator release's response is not a JSON object")
    left = LossOut.of(s.ledger.remaining(dataset, analyst=who.name)).model_dump_json()
    content = b'{"remaining":' + left.encode() + b"," + data[1:]
    return Response(content=content, media_type="application/json")


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves at the request's path (for a 405's ``Allow``)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _release(c: Any, *, own: bool) -> ReleaseOut:
    """A charge as shown: ``own`` (an analyst's history) names it by its release number."""
    return ReleaseOut(
        id=c.number if own else c.id,
        number=c.number,
        dataset=c.dataset,
        analyst=c.analyst,
        query=c.query_text,
        loss=LossOut.of(c.loss),
        time=c.time,
        status=c.status,
    )
