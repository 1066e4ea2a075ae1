"""Analysts and their bearer tokens, as stored in the ledger (identities and hashed tokens).

A token is ``"dnb_" + secrets.token_urlsafe(32)`` (256 random bits from the OS CSPRNG). It is
shown once, when made; the ledger stores only ``sha256(token)`` (hex), so reading the database
never gives a usable token. Authentication hashes the presented token and compares it with
every active digest using :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from deniable.errors import InvalidParameter
from deniable.ledger.chain import Write
from deniable.ledger.records import check_not_reserved, utc_now
from deniable.ledger.store import Tx

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


# -- stored analysts (run inside a ledger transaction) --------------------------------------


def insert_analyst(w: Write, name: str, role: Role, digest: str) -> None:
    """Record a new analyst with token digest ``digest``, in ``w``.

    A name is an identity for ever: charges, allowances, the history an analyst reads and
    the stored answers replayed to them are all kept under it, so it is never given to
    anyone else — not even after its holder was revoked (:func:`rotate` gives the same
    analyst a new token).

    Raises:
        InvalidParameter: an analyst of that name exists or existed, or the name is one the
            ledger keeps reservations under.
    """
    check_not_reserved(name)
    row = w.conn.execute(
        "SELECT revoked_at FROM analysts WHERE name = ? ORDER BY id DESC LIMIT 1", (name,)
    ).fetchone()
    if row is not None and row[0] is None:
        raise InvalidParameter(
            f"analyst {name!r} already has an active token; to give them a new one, rotate it "
            "(`deniable analyst rotate`, Ledger.rotate_token)"
        )
    if row is not None:
        raise InvalidParameter(
            f"the name {name!r} belonged to an analyst who was revoked; a name is never given "
            "to anyone else (their history, allowances and stored answers stay under it): "
            "choose another name, or if it is the same person, rotate their token "
            "(`deniable analyst rotate`, Ledger.rotate_token)"
        )
    _insert(w, name, role, digest)


def _insert(w: Write, name: str, role: Role, digest: str) -> None:
    now = utc_now()
    analyst_id = w.conn.insert(
        "INSERT INTO analysts (name, role, digest, created) VALUES (?, ?, ?, ?)",
        (name, role, digest, now),
    )
    w.append(
        "add_analyst",
        {"id": analyst_id, "name": name, "role": role, "digest": digest, "created": now},
    )


def rotate(w: Write, name: str, digest: str) -> None:
    """Give analyst ``name`` (active or revoked) the token of ``digest``, in ``w``.

    The active token, if any, is revoked; the new one has the same name and role, so the
    analyst keeps their history, allowances and stored answers. For the same person only.

    Raises:
        InvalidParameter: no analyst of that name ever existed.
    """
    row = w.conn.execute(
        "SELECT role, revoked_at FROM analysts WHERE name = ? ORDER BY id DESC LIMIT 1", (name,)
    ).fetchone()
    if row is None:
        raise InvalidParameter(f"there is no analyst named {name!r}: add them first")
    if row[1] is None:
        revoke(w, name)
    role = str(row[0])
    if role not in ROLES:
        raise InvalidParameter(f"analyst {name!r} has an unknown role")
    _insert(w, name, role, digest)


def revoke(w: Write, name: str) -> None:
    """Revoke ``name``'s active token, in ``w``.

    Raises:
        InvalidParameter: no active analyst of that name.
    """
    row = w.conn.execute(
        "SELECT id FROM analysts WHERE name = ? AND revoked_at IS NULL", (name,)
    ).fetchone()
    if row is None:
        raise InvalidParameter(f"there is no active analyst named {name!r}")
    now = utc_now()
    w.conn.execute("UPDATE analysts SET revoked_at = ? WHERE id = ?", (now, row[0]))
    w.append("revoke_analyst", {"id": row[0], "time": now})


def find(tx: Tx, digest: str) -> Principal | None:
    """Who the active token with ``digest`` belongs to, or None.

    Every active digest is compared by :func:`hmac.compare_digest`, so the time taken does
    not depend on how much of a guess is right.
    """
    rows = tx.execute("SELECT name, role, digest FROM analysts WHERE revoked_at IS NULL").fetchall()
    found: Principal | None = None
    for name, role, stored in rows:
        if hmac.compare_digest(str(stored), digest) and found is None:
            found = Principal(name=name, role=role)
    return found


def listing(tx: Tx) -> list[AnalystInfo]:
    """Every analyst ever added, in order (never their token digests)."""
    rows = tx.execute("SELECT name, role, created, revoked_at FROM analysts ORDER BY id").fetchall()
    return [
        AnalystInfo(
            name=r[0],
            role=r[1],
            created=datetime.fromisoformat(r[2]),
            revoked_at=None if r[3] is None else datetime.fromisoformat(r[3]),
        )
        for r in rows
    ]
