"""The client's retries (same Idempotency-Key on every resend) and its error mapping."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from deniable.client.errors import ConnectionFailed, InvalidRequest, RemoteError, error_from_body
from deniable.client.transport import RetryPolicy, Transport
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DeniableError,
    EngineError,
    InternalError,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
    SQLError,
    UnknownDataset,
    UnsafeQuery,
)
from deniable.server.errors import (
    Forbidden,
    IdempotencyConflict,
    RateLimited,
    RequestInProgress,
    RequestTooLarge,
    Unauthenticated,
    UnknownResource,
)

Handler = Callable[[httpx.Request], httpx.Response]


def _error(status: int, code: str, message: str = "m", **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": message}}
    return httpx.Response(status, json=body, headers=headers)


class Scripted:
    """A mock server answering from a script; records every request it saw."""

    def __init__(self, *steps: httpx.Response | type[httpx.TransportError]) -> None:
        self.steps = list(steps)
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        step = self.steps.pop(0)
        if isinstance(step, type):
            raise step("scripted failure", request=request)
        return step


def _transport(script: Scripted, retries: int = 4) -> tuple[Transport, list[float]]:
    waits: list[float] = []
    t = Transport(
        "http://dp.test",
        "tok",
        retry=RetryPolicy(retries=retries, backoff=0.1, max_backoff=2.0),
        transport=httpx.MockTransport(script),
        sleep=waits.append,
    )
    return t, waits


OK = httpx.Response(200, json={"ok": True})


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError,
        httpx.ReadError,
        httpx.ReadTimeout,
        httpx.RemoteProtocolError,
        httpx.WriteError,
    ],
)
def test_a_keyed_request_is_resent_with_the_same_key(failure: type[httpx.TransportError]) -> None:
    script = Scripted(failure, _error(502, "bad_gateway"), httpx.Response(504), OK)
    t, waits = _transport(script)
    assert t.request("POST", "/q", body={"sql": "x"}, idempotency_key="k-1") == {"ok": True}
    assert len(script.seen) == 4
    assert {r.headers["Idempotency-Key"] for r in script.seen} == {"k-1"}
    assert {r.headers["Authorization"] for r in script.seen} == {"Bearer tok"}
    assert all(json.loads(r.content) == {"sql": "x"} for r in script.seen)
    # exponential backoff with ±25 % jitter: 0.1, 0.2, 0.4
    for wait, base in zip(waits, [0.1, 0.2, 0.4], strict=True):
        assert 0.75 * base <= wait <= 1.25 * base


def test_in_progress_and_rate_limited_are_waited_for() -> None:
    script = Scripted(
        _error(409, "in_progress"), _error(429, "rate_limited", **{"Retry-After": "1.5"}), OK
    )
    t, waits = _transport(script)
    t.request("POST", "/q", idempotency_key="k")
    assert len(script.seen) == 3 and waits[1] == 1.5


def test_retries_run_out_into_connection_failed_naming_the_key() -> None:
    script = Scripted(*[httpx.ReadError] * 3)
    t, _ = _transport(script, retries=2)
    with pytest.raises(ConnectionFailed) as info:
        t.request("POST", "/q", idempotency_key="key-42")
    e = info.value
    assert e.attempts == 3 and e.idempotency_key == "key-42" and e.code == "connection_failed"
    assert "idempotency_key='key-42'" in str(e) and isinstance(e, DeniableError)


def test_a_bare_gateway_error_after_every_retry_is_connection_failed() -> None:
    t, _ = _transport(Scripted(httpx.Response(503, text="<html>down</html>")), retries=0)
    with pytest.raises(ConnectionFailed) as info:
        t.request("GET", "/x")
    assert info.value.status == 503


def test_unkeyed_charging_requests_are_resent_only_if_never_sent() -> None:
    script = Scripted(httpx.ConnectError, httpx.ReadError)
    t, _ = _transport(script)
    with pytest.raises(ConnectionFailed, match="not resent"):
        t.request("POST", "/tune", resend="unsent")
    assert len(script.seen) == 2  # resent after the refused connection, not after the read
    script = Scripted(httpx.Response(502))
    t, _ = _transport(script)
    with pytest.raises(ConnectionFailed):
        t.request("POST", "/tune", resend="unsent")
    assert len(script.seen) == 1


def test_refusals_are_not_resent_and_tampering_is_final() -> None:
    for response in (_error(409, "budget_exceeded"), _error(503, "ledger_tampered")):
        script = Scripted(response)
        t, _ = _transport(script)
        with pytest.raises(DeniableError):
            t.request("POST", "/q", idempotency_key="k")
        assert len(script.seen) == 1
    # the deniable server's own 503 ledger_error charged nothing: resent
    script = Scripted(_error(503, "ledger_error"), OK)
    t, _ = _transport(script)
    t.request("POST", "/tune", resend="unsent")
    assert len(script.seen) == 2


def test_without_retries_the_first_failure_is_raised() -> None:
    script = Scripted(httpx.ReadError)
    t, _ = _transport(script, retries=0)
    with pytest.raises(ConnectionFailed):
        t.request("GET", "/x")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        Transport("dp.test", "tok")
    with pytest.raises(InvalidParameter):
        Transport("http://dp.test", "")
    with pytest.raises(InvalidParameter):
        RetryPolicy(retries=-1)
    with pytest.raises(InvalidParameter):
        RetryPolicy(backoff=float("nan"))


# -- error codes ----------------------------------------------------------------------------

CODES: list[tuple[int, str, type[BaseException]]] = [
    (401, "unauthenticated", Unauthenticated),
    (403, "forbidden", Forbidden),
    (404, "not_found", UnknownResource),
    (404, "unknown_dataset", UnknownDataset),
    (413, "request_too_large", RequestTooLarge),
    (429, "rate_limited", RateLimited),
    (409, "budget_exceeded", BudgetExceeded),
    (409, "in_progress", RequestInProgress),
    (422, "idempotency_key_reused", IdempotencyConflict),
    (409, "cap_conflict", CapConflict),
    (400, "sql_error", SQLError),
    (400, "unsafe_query", UnsafeQuery),
    (400, "config_error", InvalidParameter),
    (400, "invalid_parameter", InvalidParameter),
    (422, "invalid_request", InvalidRequest),
    (503, "ledger_tampered", LedgerTampered),
    (503, "ledger_error", LedgerError),
    (500, "engine_error", EngineError),
    (500, "internal", InternalError),
    (400, "error", RemoteError),
    (405, "method_not_allowed", RemoteError),
]


@pytest.mark.parametrize(("status", "code", "cls"), CODES)
def test_every_stable_code_maps_to_the_local_exception(
    status: int, code: str, cls: type[BaseException]
) -> None:
    error = error_from_body(status, {"error": {"code": code, "message": "what to change"}})
    assert type(error) is cls
    assert str(error) == "what to change"
    assert error.code == code and error.status == status  # type: ignore[attr-defined]


def test_every_code_of_the_server_is_known() -> None:
    from deniable.server.app import ERROR_CODES

    mapped = {code for _, code, _ in CODES}
    assert {code for _, _, code in ERROR_CODES} <= mapped


def test_sql_error_keeps_line_and_column_and_the_message() -> None:
    text = "unknown column 'zz' in table 't' (line 2, column 10)"
    error = error_from_body(400, {"error": {"code": "sql_error", "message": text}})
    assert isinstance(error, SQLError) and (error.line, error.column) == (2, 10)
    assert str(error) == text


def test_an_unknown_dataset_is_unknown_dataset() -> None:
    body = {"error": {"code": "not_found", "message": "no dataset named 'x'; GET /v1/datasets"}}
    error = error_from_body(404, body)
    assert isinstance(error, UnknownDataset) and isinstance(error, ValueError)


def test_rate_limited_keeps_retry_after() -> None:
    error = error_from_body(429, {"error": {"code": "rate_limited", "message": "m"}}, retry_after=3)
    assert isinstance(error, RateLimited) and error.retry_after == 3


def test_an_unknown_code_keeps_the_code_and_a_foreign_body_is_http_status() -> None:
    error = error_from_body(418, {"error": {"code": "teapot", "message": "short and stout"}})
    assert isinstance(error, RemoteError) and error.code == "teapot" and error.status == 418
    error = error_from_body(502, "<html>bad gateway</html>")
    assert isinstance(error, RemoteError) and error.code == "http_502"


def test_budget_exceeded_is_filled_by_the_caller() -> None:
    error = error_from_body(
        409,
        {"error": {"code": "budget_exceeded", "message": "too much"}},
        budget_exceeded=lambda m: BudgetExceeded(m, requested=1, remaining=0),
    )
    assert isinstance(error, BudgetExceeded) and (error.requested, error.remaining) == (1, 0)
