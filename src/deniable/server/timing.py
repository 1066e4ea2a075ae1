"""Predictable response time: every query response leaves at a deadline fixed in advance.

The time an engine takes depends on the private data (the rows a WHERE matches, the
partitions a GROUP BY finds): a ``SUM`` over 10⁶ rows took 183 ms when its WHERE matched
nothing and 1,037 ms when it matched everything. Over HTTP an analyst reads that time beside
every answer, for free and outside every ε. The defence is Haeberlen, Pierce and Narayan's
*predictable query time* ("Differential privacy under fire", USENIX Security 2011): each
response leaves at a time fixed in advance from public information only.

:class:`ResponseDeadline` (ASGI middleware, installed by :func:`install` in the application)
does this for the routes that read private data and charge
(``POST /v1/datasets/{d}/query`` and ``POST /v1/datasets/{d}/tune``):

1. When the request's body has arrived, before anything else runs, it computes the
   deadline ``arrival + policy.seconds(shape)`` from the dataset's :class:`ResponseTime`
   (configuration: public) and the request's :class:`QueryShape` (aggregates and joins
   counted in the analyst's own query text: public to the analyst). No data is read.
2. It runs the route and holds its response (answer or refusal: ``budget_exceeded``,
   ``sql_error``, ``unsafe_query``…, whether decided before or after the engine ran) until
   the deadline on the monotonic clock, then sends it. Only ``401`` and ``429`` leave at
   once: they are decided before the caller is known or from the request rate, never from
   the data.
3. A request still running at its deadline gets ``503 deadline_exceeded`` *at* the
   deadline (:data:`OVERRUN_CODE`). The query keeps running: it is charged like an
   answer (when the budget admits it, as it would have been) and its answer is stored, so
   asking the identical query again (or retrying with the same ``Idempotency-Key``)
   returns it without a new charge. Whether a query overran is itself decided by its run
   time: a residual one-bit channel per query, which the curator makes negligible by
   setting the deadline above the worst case at the declared size (docs:
   ``docs/before-the-charge.md``, "Predictable response time").

The policy is on by default (:data:`DEFAULT_RESPONSE_TIME`: every query takes
:data:`DEFAULT_DEADLINE` seconds); ``response_time = "off"`` turns it off for a dataset.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from deniable.errors import InvalidParameter

log = logging.getLogger("deniable.server")

DEFAULT_DEADLINE = 1.0
"""Seconds every query response takes when a dataset declares no ``response_time``."""

MAX_DEADLINE = 600.0
"""The longest deadline a policy may produce (seconds); a longer formula is cut here."""

OVERRUN_STATUS = 503
OVERRUN_CODE = "deadline_exceeded"
"""Status and error code of a response whose query was still running at its deadline."""

EARLY_STATUSES = frozenset({401, 429})
"""Responses sent as soon as they are ready: decided before the caller is known (401) or
from the request rate (429), never from the data."""


# -- the policy --------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryShape:
    """Public facts about one request: counted in the analyst's own text, never in the data.

    Attributes:
        aggregates: aggregate function calls (at least 1).
        joins: ``JOIN`` clauses.
    """

    aggregates: int = 1
    joins: int = 0


@dataclass(frozen=True)
class ResponseTime:
    """A dataset's response-time policy (the ``response_time`` key of its configuration).

    Every query response on the dataset leaves ``seconds(shape)`` after its request arrived::

        seconds = base + per_row · rows · (1 + per_join · joins + per_aggregate · (aggregates − 1))

    cut at :data:`MAX_DEADLINE`. With ``per_row = 0`` (``response_time = { deadline = s }``)
    it is one fixed deadline. Every input is public: the curator's numbers, the declared
    size ``rows`` (a number the curator states, never counted in the data) and the shape of
    the analyst's own query.

    Attributes:
        enabled: False: responses leave when ready (their time depends on the data).
        base: seconds every query gets.
        per_row: seconds per declared row for one scan (one aggregate, no join).
        rows: the declared size of the dataset's table (public).
        per_join: extra scans per ``JOIN``, as a multiple of one scan.
        per_aggregate: extra scans per aggregate after the first.
    """

    enabled: bool = True
    base: float = DEFAULT_DEADLINE
    per_row: float = 0.0
    rows: int = 0
    per_join: float = 0.0
    per_aggregate: float = 0.0

    def seconds(self, shape: QueryShape = QueryShape()) -> float:
        """The response time of a request of this shape, in seconds (no data read).

        Examples:
            >>> ResponseTime(base=0.5).seconds()
            0.5
            >>> p = ResponseTime(base=0.1, per_row=1e-6, rows=1_000_000, per_join=1.0)
            >>> round(p.seconds(QueryShape(aggregates=1, joins=1)), 6)
            2.1
        """
        scan = self.per_row * self.rows
        extra = self.per_join * shape.joins + self.per_aggregate * max(shape.aggregates - 1, 0)
        return min(MAX_DEADLINE, self.base + scan * (1.0 + extra))

    def describe(self) -> str:
        """One line for logs and docs, e.g. ``fixed deadline 1 s``."""
        if not self.enabled:
            return "off (response times depend on the data)"
        if self.per_row == 0 or self.rows == 0:
            return f"fixed deadline {self.base:g} s"
        return (
            f"deadline {self.base:g} s + {self.per_row:g} s/row × {self.rows} declared rows × "
            f"(1 + {self.per_join:g}·joins + {self.per_aggregate:g}·(aggregates − 1))"
        )


OFF = ResponseTime(enabled=False)
"""``response_time = "off"``: responses leave when ready."""

DEFAULT_RESPONSE_TIME = ResponseTime()
"""The policy of a dataset that declares none: on, :data:`DEFAULT_DEADLINE` seconds."""

_FIXED_KEYS = {"deadline"}
_DERIVED_KEYS = {"base", "per_row", "rows", "per_join", "per_aggregate"}
_EXAMPLE = (
    "response_time = { deadline = 1.0 } (seconds), response_time = { base = 0.1, "
    "per_row = 1e-6, rows = 1000000, per_join = 1.0, per_aggregate = 0.25 } or "
    'response_time = "off"'
)


def parse_response_time(value: object, where: str) -> ResponseTime:
    """The ``response_time`` key of a dataset, validated (no privacy loss: pure parsing).

    Args:
        value: the TOML value: ``"off"``, ``{ deadline = s }`` or the derived form.
        where: the key's name for messages (``datasets.students.response_time``).

    Raises:
        InvalidParameter: a malformed value; the message names the key and what to write.

    Examples:
        >>> parse_response_time({"deadline": 2}, "k").seconds()
        2.0
        >>> parse_response_time("off", "k").enabled
        False
    """
    if value is None:
        return DEFAULT_RESPONSE_TIME
    if value == "off":
        return OFF
    if not isinstance(value, dict) or not value:
        raise InvalidParameter(f"{where} must be one of: {_EXAMPLE}")
    keys = set(value)
    if keys - _FIXED_KEYS - _DERIVED_KEYS or (keys & _FIXED_KEYS and keys & _DERIVED_KEYS):
        raise InvalidParameter(
            f"{where} has keys {sorted(keys)}: give deadline alone (a fixed deadline) or "
            f"base with per_row, rows, per_join, per_aggregate; write {_EXAMPLE}"
        )

    def seconds(key: str, default: float) -> float:
        raw = value.get(key, default)
        if (
            isinstance(raw, bool)
            or not isinstance(raw, int | float)
            or not math.isfinite(raw)
            or raw < 0
        ):
            raise InvalidParameter(f"{where}.{key} must be a number ≥ 0 (seconds)")
        return float(raw)

    if "deadline" in keys:
        deadline = seconds("deadline", DEFAULT_DEADLINE)
        if not 0 < deadline <= MAX_DEADLINE:
            raise InvalidParameter(
                f"{where}.deadline must be in (0, {MAX_DEADLINE:g}] seconds, e.g. deadline = 1.0"
            )
        return ResponseTime(base=deadline)
    if "base" not in keys:
        raise InvalidParameter(f"{where}.base is missing: write {_EXAMPLE}")
    rows = value.get("rows", 0)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise InvalidParameter(
            f"{where}.rows must be an integer ≥ 0: the table's size as the curator declares "
            "it (public; never counted in the data)"
        )
    policy = ResponseTime(
        base=seconds("base", 0.0),
        per_row=seconds("per_row", 0.0),
        rows=rows,
        per_join=seconds("per_join", 0.0),
        per_aggregate=seconds("per_aggregate", 0.0),
    )
    if policy.per_row > 0 and rows == 0:
        raise InvalidParameter(f"{where}: per_row needs rows, the table's declared size")
    if not 0 < policy.seconds() <= MAX_DEADLINE:
        raise InvalidParameter(
            f"{where}: the deadline of a one-aggregate query must be in (0, {MAX_DEADLINE:g}] "
            "seconds; raise base"
        )
    return policy


# -- the shape of a request --------------------------------------------------------------------

_AGGREGATE = re.compile(
    r"\b(count|sum|avg|mean|min|max|median|quantile(?:_cont|_disc)?|percentile_(?:cont|disc)"
    r"|var(?:iance|_samp|_pop)?|stddev(?:_samp|_pop)?)\s*\(",
    re.IGNORECASE,
)
_JOIN = re.compile(r"\bjoin\b", re.IGNORECASE)


def shape_of(body: bytes, route: str) -> QueryShape:
    """The public shape of a request body: aggregates and joins in the analyst's own query.

    A total function (never raises): a body it cannot read counts as one aggregate and no
    join. It reads the request only, never data; counting words of the text (including
    any in comments or string literals, the asker's own doing) is deliberate: it is cheap,
    cannot fail, and never runs the SQL compiler in the event loop.

    Examples:
        >>> shape_of(b'{"sql": "SELECT COUNT(*), SUM(x) FROM t JOIN u USING (k)"}', "query")
        QueryShape(aggregates=2, joins=1)
        >>> shape_of(b"not json", "query")
        QueryShape(aggregates=1, joins=0)
    """
    if route == "tune":
        return QueryShape(aggregates=4)  # four contribution histograms
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return QueryShape()
    if not isinstance(data, dict):
        return QueryShape()
    sql = data.get("sql")
    if isinstance(sql, str):
        return QueryShape(
            aggregates=max(1, len(_AGGREGATE.findall(sql))), joins=len(_JOIN.findall(sql))
        )
    builder = data.get("builder")
    if isinstance(builder, dict) and isinstance(builder.get("aggregates"), list):
        return QueryShape(aggregates=max(1, len(builder["aggregates"])))
    return QueryShape()


# -- releasing at the deadline -----------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_ROUTE = re.compile(r"/v1/datasets/([^/]+)/(query|tune)$")
"""The held routes, matched at the end of the (already percent-decoded) ASGI path, so that
a service mounted under a prefix (``root_path``) is held too."""


async def sleep_until(deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Return at ``deadline`` on ``clock`` (monotonic seconds), not before.

    The event loop's timer wakes at most about a millisecond late (epoll's resolution);
    the clock is checked again on waking, so it never returns early.
    """
    while True:
        left = deadline - clock()
        if left <= 0:
            return
        await asyncio.sleep(left)


def overrun_response() -> tuple[Message, Message]:
    """The ASGI messages of ``503 deadline_exceeded`` (the same bytes for every overrun)."""
    body = json.dumps(
        {
            "error": {
                "code": OVERRUN_CODE,
                "message": (
                    "the query did not finish by its deadline (the dataset's response_time "
                    "policy); it keeps running and is charged like an answer if the budget "
                    "admits it: ask the identical query again, or retry with the same "
                    "Idempotency-Key, to get its answer without a new charge"
                ),
            }
        }
    ).encode()
    start: Message = {
        "type": "http.response.start",
        "status": OVERRUN_STATUS,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    return start, {"type": "http.response.body", "body": body, "more_body": False}


class ResponseDeadline:
    """ASGI middleware: query and tune responses leave at their deadline (see the module).

    Args:
        app: the application it wraps.
        policies: the response-time policy of each dataset by name.
        default: the policy of a name not in ``policies`` (an unknown dataset's 404 is held
            like any refusal).
        clock: the monotonic clock deadlines are measured on (seconds).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        policies: Mapping[str, ResponseTime],
        default: ResponseTime = DEFAULT_RESPONSE_TIME,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.policies = dict(policies)
        self.default = default
        self.clock = clock
        self._running: set[asyncio.Task[None]] = set()  # requests still working
        self._overrun: set[asyncio.Task[None]] = set()  # of which: response already sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request; hold a query's or tune's response until its deadline."""
        match = (
            _ROUTE.search(scope.get("path", ""))
            if scope["type"] == "http" and scope.get("method") == "POST"
            else None
        )
        policy = self.policies.get(match.group(1), self.default) if match else None
        if match is None or policy is None or not policy.enabled:
            await self.app(scope, receive, send)
            return
        body, ended = await _read_body(receive)
        if not ended:  # the client left before its body arrived: nothing to answer
            return
        # The request has arrived: its deadline is fixed now, from public facts only.
        deadline = self.clock() + policy.seconds(shape_of(body, match.group(2)))
        held: list[Message] = []
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def hold(message: Message) -> None:
            held.append(message)

        # A task of its own, strongly held: it runs to its end (and its charge commits) even
        # when its response is dropped (an overrun) or the client goes away.
        async def run() -> None:
            await self.app(scope, replay, hold)

        task = asyncio.create_task(run())
        self._running.add(task)
        task.add_done_callback(self._finished)
        await asyncio.wait({task}, timeout=max(0.0, deadline - self.clock()))
        if not task.done():
            # Overrun: the same 503 at the deadline, whatever the query would have given.
            # The query goes on (it is charged like an answer); its response is dropped.
            self._overrun.add(task)
            log.warning(
                "dataset %r: a query overran its response_time deadline (503 "
                "deadline_exceeded); raise the deadline above the worst case",
                match.group(1)[:200],
            )
            await sleep_until(deadline, self.clock)
            for message in overrun_response():
                await send(message)
            return
        error = task.exception()
        early = (
            error is None
            and held
            and held[0]["type"] == "http.response.start"
            and held[0]["status"] in EARLY_STATUSES
        )
        if not early:
            await sleep_until(deadline, self.clock)
        if error is not None:
            raise error  # the server's error handler answers 500, now, at the deadline
        for message in held:
            await send(message)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if task in self._overrun:
            self._overrun.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("a query that overran its deadline failed", exc_info=task.exception())


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body, and whether it arrived (False: the client disconnected)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def install(app: Any, policies: Mapping[str, ResponseTime]) -> None:
    """Install :class:`ResponseDeadline` on a Starlette/FastAPI ``app`` (one line in the app).

    Add it before the body-size limit, so that oversized bodies are refused (413) at once.
    Logs a warning for each dataset whose policy is off.
    """
    for name, policy in policies.items():
        if not policy.enabled:
            log.warning(
                "dataset %r: response_time is off: response times depend on the data "
                "(docs/before-the-charge.md, 'Predictable response time')",
                name,
            )
    app.add_middleware(ResponseDeadline, policies=dict(policies))
