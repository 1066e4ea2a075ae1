"""Analysts and their bearer tokens, as stored in the ledger.

A token is ``"dnb_" + secrets.token_urlsafe(32)`` (256 random bits from the OS CSPRNG). It is
shown once, when made; the ledger stores only ``sha256(token)`` (hex), so reading the database
never gives a usable token. Authentication hashes the presented token and compares it with
every active digest using :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Role = Literal["curator", "analyst"]
ROLES: tuple[Role, ...] = ("curator", "analyst")
TOKEN_PREFIX = "dnb_"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid token belongs to.

    Attributes:
        name: the analyst's name (recorded with their charges).
        role: ``"curator"`` or ``"analyst"``.
    """

    name: str
    role: Role


@dataclass(frozen=True, slots=True)
class AnalystInfo:
    """Public facts about an analyst (never the token or its digest).

    Attributes:
        name: the analyst's name.
        role: ``"curator"`` or ``"analyst"``.
        created: when the token was made (UTC).
        revoked_at: when it was revoked (UTC), or None while active.
    """

    name: str
    role: Role
    created: datetime
    revoked_at: datetime | None


def new_token() -> str:
    """A fresh high-entropy bearer token (256 bits from the OS CSPRNG)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """``sha256(token)`` as hex: the only form in which a token is stored.

    Raises:
        UnicodeEncodeError: the token is not encodable as UTF-8 (callers treat it as invalid).
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
