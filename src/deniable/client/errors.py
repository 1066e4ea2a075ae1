"""The HTTP API's stable error codes, mapped back to deniable's own exceptions.

The server answers every refusal with ``{"error": {"code": ..., "message": ...}}``
(:data:`deniable.server.app.ERROR_CODES`). The client raises the exception that local code
raises for the same refusal — :class:`~deniable.errors.BudgetExceeded` with ``requested``
and ``remaining``, :class:`~deniable.errors.SQLError` with ``line`` and ``column``,
:class:`~deniable.errors.UnknownDataset`, the service's
:class:`~deniable.server.errors.Forbidden` … — so ``except`` clauses written for a local
:class:`~deniable.curator.session.Session` keep working against a server. Every exception
the client raises carries the server's ``code`` and HTTP ``status`` as attributes (``None``
when no response arrived). A code this client does not know becomes a
:class:`RemoteError`, which keeps it.

Messages are the server's own, which never contain private values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from deniable.accounting.loss import PrivacyLoss
from deniable.client.decode import loss_from_json
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

__all__ = [
    "ConnectionFailed",
    "InvalidRequest",
    "RemoteError",
    "error_from_body",
]


class RemoteError(DeniableError):
    """An error the server reported with a code this client has no class for.

    Attributes:
        code: the server's stable machine-readable code (e.g. ``"method_not_allowed"``).
        status: the HTTP status, or None when no response arrived.
    """

    def __init__(self, message: str, *, code: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class InvalidRequest(RemoteError, InvalidParameter):
    """The server refused the request's shape (code ``invalid_request``, HTTP 422).

    A value out of its domain (a negative ε, a level of 1) or a malformed body. It is an
    :class:`~deniable.errors.InvalidParameter`, as the same mistake is in local code.
    """


class ConnectionFailed(RemoteError):
    """No answer arrived after every retry (connection refused, reset, timed out, 502-504).

    A charging request may nevertheless have been charged by the server. Retrying it with
    the same ``idempotency_key`` returns its answer without charging again.

    Attributes:
        idempotency_key: the key the request was sent with (None for requests that charge
            nothing).
        attempts: how many times the request was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        idempotency_key: str | None,
        attempts: int,
        status: int | None = None,
    ) -> None:
        super().__init__(message, code="connection_failed", status=status)
        self.idempotency_key = idempotency_key
        self.attempts = attempts


_WHERE = re.compile(r"^(?P<message>.*) \(line (?P<line>\d+), column (?P<column>\d+)\)$", re.S)
"""The position suffix :class:`~deniable.errors.SQLError` appends to its message."""

_NO_DATASET = "no dataset named "
"""How the service words an unknown dataset (it sends code ``not_found`` for it)."""

_Plain = Callable[[str], DeniableError]

_PLAIN: Mapping[str, _Plain] = {
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "unknown_dataset": UnknownDataset,
    "request_too_large": RequestTooLarge,
    "in_progress": RequestInProgress,
    "idempotency_key_reused": IdempotencyConflict,
    "cap_conflict": CapConflict,
    "unsafe_query": UnsafeQuery,
    "invalid_parameter": InvalidParameter,
    "config_error": InvalidParameter,
    "ledger_tampered": LedgerTampered,
    "ledger_error": LedgerError,
    "engine_error": EngineError,
    "internal": InternalError,
}
"""Codes whose exception takes only the message."""


def error_from_body(
    status: int,
    body: object,
    *,
    retry_after: float | None = None,
    budget_exceeded: Callable[[str], BudgetExceeded] | None = None,
) -> DeniableError:
    """The exception local code would raise for the server's error response.

    Args:
        status: the HTTP status of the response.
        body: the decoded JSON body (anything: a proxy's page is handled too).
        retry_after: the ``Retry-After`` header in seconds, for ``rate_limited``.
        budget_exceeded: builds a :class:`~deniable.errors.BudgetExceeded` from the
            message, filling ``requested`` and ``remaining`` (the caller knows what it
            asked for and can read the budget); by default both are None.

    Returns:
        The exception, with ``code`` and ``status`` attributes set. It is returned, not
        raised.
    """
    code, message = _code_and_message(status, body)
    detail = body.get("error") if isinstance(body, Mapping) else None
    if code == "budget_exceeded" and isinstance(detail, Mapping) and "remaining" in detail:
        # A server that states both amounts: no second request needed.
        error: DeniableError = BudgetExceeded(
            message,
            requested=_loss_or_none(detail.get("requested")),
            remaining=_loss_or_none(detail.get("remaining")),
        )
    else:
        error = _error(code, message, status, retry_after, budget_exceeded)
    error.code = code  # type: ignore[attr-defined]
    error.status = status  # type: ignore[attr-defined]
    return error


def _loss_or_none(data: object) -> PrivacyLoss | None:
    return loss_from_json(data) if isinstance(data, Mapping) else None


def _code_and_message(status: int, body: object) -> tuple[str, str]:
    if isinstance(body, Mapping):
        detail = body.get("error")
        if isinstance(detail, Mapping):
            code, message = detail.get("code"), detail.get("message")
            if isinstance(code, str) and isinstance(message, str):
                return code, message
    return f"http_{status}", f"the server answered HTTP {status} without a deniable error body"


def _error(
    code: str,
    message: str,
    status: int,
    retry_after: float | None,
    budget_exceeded: Callable[[str], BudgetExceeded] | None,
) -> DeniableError:
    if code == "sql_error":
        hit = _WHERE.match(message)
        if hit is None:
            return SQLError(message)
        return SQLError(hit["message"], line=int(hit["line"]), column=int(hit["column"]))
    if code == "budget_exceeded":
        return budget_exceeded(message) if budget_exceeded is not None else BudgetExceeded(message)
    if code == "rate_limited":
        return RateLimited(message, retry_after=retry_after if retry_after is not None else 1.0)
    if code == "not_found":
        # The service raises its generic "not found" for an unknown dataset; local code
        # raises UnknownDataset for it.
        return (
            UnknownDataset(message) if message.startswith(_NO_DATASET) else UnknownResource(message)
        )
    if code == "invalid_request":
        return InvalidRequest(message, code=code, status=status)
    plain = _PLAIN.get(code)
    if plain is not None:
        return plain(message)
    return RemoteError(message, code=code, status=status)
