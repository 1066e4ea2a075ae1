"""One HTTP connection to a deniable server: authentication, retries, error mapping.

Retries (with exponential backoff) never charge twice:

* A request that charges (a query, the curator's ``tune`` and ``synthesize``) carries an
  ``Idempotency-Key`` chosen by the client (a uuid4) and is resent with the *same* key
  after a network failure — connection refused or reset, a timeout, a response cut
  short — or a 502, 503 or 504, or a 409 ``in_progress`` (the first attempt is still
  being answered). The server charges a key once and returns the stored response to
  every retry.
* A request that is not idempotent (adding or revoking an analyst) is resent only when
  it never left the client (the connection could not be opened).
* Requests that change nothing are resent after any of those failures.
* A 429 (rate limited) is refused before anything is done: it is resent after its
  ``Retry-After``, whatever the request.

Uses ``httpx`` (synchronous client, one connection pool).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from deniable.client.errors import ConnectionFailed, error_from_body
from deniable.errors import BudgetExceeded, DeniableError, InvalidParameter

Resend = Literal["always", "unsent"]
"""When a failed request may be sent again: after any transient failure (idempotent or
keyed requests), or only when it never left the client."""

_RETRY_STATUSES = frozenset({502, 503, 504})
_FINAL_CODES = frozenset({"ledger_tampered"})
"""Codes of a 503 that no retry changes (a curator must act)."""

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures that happen before any byte of the request reached the server."""

_jitter = random.SystemRandom()


def new_idempotency_key() -> str:
    """A fresh Idempotency-Key: a random uuid4 (122 random bits from the OS)."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed request is sent again.

    Attributes:
        retries: resends after the first attempt (0: never resend).
        backoff: seconds before the first resend; doubled each time, with ±25 % jitter.
        max_backoff: longest wait between two attempts, in seconds (also caps
            ``Retry-After``).
    """

    retries: int = 4
    backoff: float = 0.2
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        """Refuse a negative count or a negative or non-finite wait."""
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidParameter("retries must be a non-negative integer")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise InvalidParameter(f"{name} must be a finite number of seconds ≥ 0")

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before resend number ``attempt + 1`` (``attempt`` from 0)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff)
        base = min(self.backoff * 2**attempt, self.max_backoff)
        return float(base * _jitter.uniform(0.75, 1.25))


class Transport:
    """Authenticated JSON requests to one server, retried as the module explains.

    Args:
        url: the server's base URL (``https://host:port``; the API is under ``/v1``).
        token: the bearer token of an analyst or curator.
        timeout: seconds to wait for a response (connect, read and write each).
        retry: the retry policy.
        verify: check the server's TLS certificate (a path to a CA bundle also works).
        transport: an ``httpx`` transport to use instead of the network (for tests).
        sleep: how to wait between attempts (for tests).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        verify: bool | str = True,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidParameter("url must start with http:// or https://")
        if not isinstance(token, str) or not token or not token.isprintable():
            raise InvalidParameter("token must be a non-empty printable string")
        self.url = url.rstrip("/")
        self.retry = retry if retry is not None else RetryPolicy()
        self._sleep = sleep
        self._client = httpx.Client(
            base_url=self.url,
            timeout=timeout,
            verify=verify,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "deniable-client"},
        )

    def close(self) -> None:
        """Close the connection pool (the object cannot be used afterwards)."""
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        resend: Resend = "always",
        budget_exceeded: Callable[[str], BudgetExceeded] | None = None,
    ) -> Any:
        """Send one request (resending it as the policy allows); its decoded JSON body.

        Args:
            method: ``GET``, ``POST``, ``PUT`` or ``DELETE``.
            path: the route, e.g. ``/v1/datasets``.
            body: the JSON body.
            params: query-string parameters.
            idempotency_key: sent as ``Idempotency-Key`` on every attempt (charging
                requests); the same key on every resend is what keeps the charge single.
            resend: ``"always"`` for idempotent or keyed requests, ``"unsent"`` for the
                others (see the module).
            budget_exceeded: fills ``requested``/``remaining`` of a ``budget_exceeded``
                refusal.

        Returns:
            The decoded JSON of a 2xx response (None for an empty body, e.g. 204).

        Raises:
            DeniableError: the exception local code raises for the server's refusal
                (:mod:`deniable.client.errors`), or
                :class:`~deniable.client.errors.ConnectionFailed` when no answer arrived.
        """
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        attempt = 0
        while True:
            try:
                response = self._client.request(
                    method, path, json=body, params=params, headers=headers
                )
            except httpx.TransportError as e:
                may_resend = resend == "always" or isinstance(e, _NOT_SENT)
                if not may_resend or attempt >= self.retry.retries:
                    raise self._failed(e, attempt + 1, idempotency_key, resend) from e
                self._sleep(self.retry.wait(attempt))
                attempt += 1
                continue
            if response.is_success:
                return None if not response.content else _json(response)
            decoded = _json(response)
            retry_after = _retry_after(response)
            error = error_from_body(
                response.status_code,
                decoded,
                retry_after=retry_after,
                budget_exceeded=budget_exceeded,
            )
            if attempt < self.retry.retries and _transient(response.status_code, error, resend):
                self._sleep(self.retry.wait(attempt, retry_after))
                attempt += 1
                continue
            if response.status_code in _RETRY_STATUSES and getattr(error, "code", "").startswith(
                "http_"
            ):
                raise ConnectionFailed(
                    f"{method} {path}: the server (or a proxy) answered HTTP "
                    f"{response.status_code} to all {attempt + 1} attempts"
                    + _advice(idempotency_key),
                    idempotency_key=idempotency_key,
                    attempts=attempt + 1,
                    status=response.status_code,
                )
            raise error

    def _failed(
        self, error: httpx.TransportError, attempts: int, key: str | None, resend: Resend
    ) -> ConnectionFailed:
        kind = type(error).__name__
        why = (
            f"no answer from {self.url} after {attempts} attempt(s) (last failure: {kind})"
            if resend == "always" or isinstance(error, _NOT_SENT)
            else f"the connection to {self.url} failed after the request was sent ({kind}); "
            "it was not resent because it cannot be made idempotent: check its effect "
            "before sending it again"
        )
        return ConnectionFailed(why + _advice(key), idempotency_key=key, attempts=attempts)


def _advice(key: str | None) -> str:
    if key is None:
        return ""
    return (
        f"; the request may have been charged: send it again with idempotency_key={key!r} "
        "to get its answer without paying twice"
    )


def _transient(status: int, error: DeniableError, resend: Resend) -> bool:
    code = getattr(error, "code", "")
    if status == 429 or code == "in_progress":
        return True  # refused before anything was done / the keyed first attempt still runs
    if status in _RETRY_STATUSES and code not in _FINAL_CODES:
        # A 503 from deniable itself (ledger_error) charged nothing; a bare 502/504 from a
        # proxy may hide a request the server did: resend it only when that is harmless.
        return resend == "always" or code == "ledger_error"
    return False


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None
