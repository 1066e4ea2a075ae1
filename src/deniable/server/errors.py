"""Errors of the HTTP service (all :class:`~deniable.errors.DeniableError` subclasses).

Each has a stable machine-readable code in :mod:`deniable.server.app`'s error table.
"""

from __future__ import annotations

from deniable.errors import DeniableError


class Unauthenticated(DeniableError):
    """No bearer token, or one that is unknown or revoked."""


class Forbidden(DeniableError):
    """The caller's role may not do this (e.g. an analyst asking for the full ledger)."""


class RateLimited(DeniableError):
    """The caller sent requests faster than its token bucket refills.

    Attributes:
        retry_after: seconds until one more request is admitted.
    """

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RequestTooLarge(DeniableError):
    """The request body exceeds ``server.max_request_bytes``."""


class RequestInProgress(DeniableError):
    """A request with this Idempotency-Key was charged but its answer is not stored yet."""


class IdempotencyConflict(DeniableError):
    """An Idempotency-Key was reused for a different query."""


class UnknownResource(DeniableError):
    """No dataset, analyst or route by that name."""
