"""The ledger's records and their exact encoding: charges, curator events, sample releases.

A privacy loss is stored as its type plus exact rationals written as text ``"num/den"``
(:func:`encode`, :func:`decode`), never as floats; details are canonical JSON. Nothing here
touches storage.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Literal

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.accounting.renyi import ZCDPSpent
from deniable.errors import InvalidParameter, LedgerError

SCHEMA_VERSION = 2
"""Version of the stored schema, kept in the ``meta`` table (2: hash chain, analysts)."""

LOST_BY_ROLLBACK = "(lost by rollback)"
"""The analyst name of the charges :meth:`Ledger.acknowledge` adds for budget a rollback lost."""

RESERVED = "(reserved) "
"""Prefix of the allowance rows that hold reservations: ``"(reserved) bob"`` is bob's.

A reservation (:meth:`Ledger.set_allowance` with ``reserve=True``) is stored as an allowance
row of this pseudo-analyst, so the tables, the hash chain (a ``set_allowance`` entry),
checkpoints, verification and a curator's acknowledgement keep it exactly as they keep
allowances, with no change of schema. No analyst may bear such a name
(:func:`check_not_reserved`). A reservation of zero is none: rows are never deleted, so
releasing one sets it to zero."""

ChargeStatus = Literal["charged", "answered"]
LossType = Literal["epsilon", "epsilon_delta", "rho"]


def new_sample_id() -> str:
    """A fresh opaque identity for a sample (128 random bits, hex): reveals nothing of the data.

    Mint it when the sample is drawn, keep it with the sample, and give it to
    :meth:`Ledger.record_sample_release` when a sampling-based release consumes the sample.
    """
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class SampleRelease:
    """A recorded release whose guarantee comes from sampling (e.g. safe k-anonymization).

    Attributes:
        dataset: the dataset whose budget paid.
        sample: the sample's opaque identity (consumed: it answers nothing else).
        rate: the Bernoulli sampling rate β.
        charge: the charge that paid for it; its loss is the release's ``(ε, δ)``.
        time: commit time (UTC).
    """

    dataset: str
    sample: str
    rate: Fraction
    charge: Charge
    time: datetime


@dataclass(frozen=True, slots=True)
class Charge:
    """One committed release: an immutable fact of the ledger.

    Attributes:
        id: increasing identifier; history is ordered by it (commit order).
        dataset: the dataset whose budget paid.
        analyst: who asked.
        query_key: the engine's key for identical queries (normalised SQL, parameters,
            privacy parameters and data version).
        query_text: the query as the analyst wrote it.
        loss: the privacy loss charged, exact.
        time: commit time (UTC).
        details: JSON-compatible metadata the engine chose to record (mechanisms, bounds).
        status: ``"charged"``, or ``"answered"`` once the answer is stored in the cache.
        idempotency_key: the caller's key for retries of one request, if given.
        number: the analyst's own release number (1, 2, … among their charges on the
            dataset, in commit order): what the analyst is shown instead of ``id``, which
            counts everyone's releases. Set by :meth:`Ledger.history`; None where not
            computed (the Charge :meth:`Ledger.charge` returns; see
            :meth:`Ledger.release_number`). Derived, not part of the fact: equality ignores it.
    """

    id: int
    dataset: str
    analyst: str
    query_key: str
    query_text: str
    loss: PrivacyLoss
    time: datetime
    details: Mapping[str, object] = field(hash=False)
    status: ChargeStatus
    idempotency_key: str | None = None
    number: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class CuratorEvent:
    """A recorded curator decision: a registration, a change of cap, an allowance or reservation.

    Attributes:
        id: increasing identifier.
        dataset: the dataset concerned.
        action: ``"register"``, ``"change_cap"``, ``"set_allowance"`` or ``"reserve"`` (a
            reservation set, or released to zero).
        analyst: the analyst of an allowance or reservation, else None.
        loss: the cap, allowance or reservation set.
        previous: the one it replaced, if any.
        time: commit time (UTC).
    """

    id: int
    dataset: str
    action: Literal["register", "change_cap", "set_allowance", "reserve"]
    analyst: str | None
    loss: PrivacyLoss
    previous: PrivacyLoss | None
    time: datetime


CHARGE_COLUMNS = (
    "id, dataset, analyst, query_key, query_text, loss_type, epsilon, delta, rho, time, details, "
    "status, idempotency_key"
)


def loss_json(loss: PrivacyLoss) -> dict[str, str]:
    """``loss`` as the anchor's JSON (type and exact components)."""
    kind, e, d, r = encode_loss(loss)
    out: dict[str, str] = {"type": kind}
    for name, value in (("epsilon", e), ("delta", d), ("rho", r)):
        if value is not None:
            out[name] = value
    return out


def loss_from_json(data: Mapping[str, str]) -> PrivacyLoss:
    """Inverse of :func:`loss_json`."""
    try:
        return decode_loss((data["type"], data.get("epsilon"), data.get("delta"), data.get("rho")))
    except KeyError as e:
        raise LedgerError("the anchor file holds a malformed privacy loss") from e


def utc_now() -> str:
    """Now (UTC), ISO 8601 with microseconds: how the ledger writes times."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def check_name(value: object, what: str) -> None:
    """Refuse a name that is not a non-empty string."""
    if not isinstance(value, str) or not value:
        raise InvalidParameter(f"{what} must be a non-empty string")


def check_not_reserved(name: str) -> None:
    """Refuse an analyst name that would collide with the rows holding reservations."""
    if name.startswith(RESERVED):
        raise InvalidParameter(
            f"analyst names may not start with {RESERVED.strip()!r}: the ledger keeps "
            "reservations under such names"
        )


def check_loss(value: object, what: str) -> None:
    """Refuse a value that is not a privacy loss."""
    if not isinstance(value, Epsilon | EpsilonDelta | Rho):
        raise InvalidParameter(f"{what} must be an Epsilon, EpsilonDelta or Rho")


def fraction_text(f: Fraction) -> str:
    """``"num/den"``: how the ledger stores an exact rational."""
    return f"{f.numerator}/{f.denominator}"


def encode_loss(loss: PrivacyLoss) -> tuple[LossType, str | None, str | None, str | None]:
    """Return ``(loss_type, epsilon, delta, rho)`` with exact ``"num/den"`` components."""
    if isinstance(loss, Epsilon):
        return "epsilon", fraction_text(loss.epsilon), None, None
    if isinstance(loss, EpsilonDelta):
        return "epsilon_delta", fraction_text(loss.epsilon), fraction_text(loss.delta), None
    return "rho", None, None, fraction_text(loss.rho)


def parse_fraction(text: object) -> tuple[int, int]:
    """Parse a stored ``"num/den"`` into ``(num, den)`` without building a Fraction."""
    if isinstance(text, str):
        num, slash, den = text.partition("/")
        try:
            n, d = int(num), int(den)
        except ValueError:
            n, d = -1, 0
        if slash and n >= 0 and d > 0:
            return n, d
    raise LedgerError("the ledger holds a malformed privacy loss")


def decode_loss(row: Sequence[Any]) -> PrivacyLoss:
    """Rebuild the loss of a row whose first four columns are ``(loss_type, ε, δ, ρ)``."""
    kind, e, d, r = row[0], row[1], row[2], row[3]
    if kind == "epsilon":
        return Epsilon(epsilon=Fraction(*parse_fraction(e)))
    if kind == "epsilon_delta":
        return EpsilonDelta(
            epsilon=Fraction(*parse_fraction(e)), delta=Fraction(*parse_fraction(d))
        )
    if kind == "rho":
        return Rho(rho=Fraction(*parse_fraction(r)))
    raise LedgerError("the ledger holds a malformed privacy loss")


def encode_details(details: Mapping[str, object] | None) -> str:
    """Canonical JSON text of a charge's public details (refuses what JSON cannot hold)."""
    if details is None:
        return "{}"
    if not isinstance(details, Mapping) or not all(isinstance(k, str) for k in details):
        raise InvalidParameter("details must be a mapping with string keys")
    try:
        return json.dumps(dict(details), sort_keys=True, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidParameter(
            "details must be JSON-serialisable (str, int, finite float, bool, None, lists and "
            "mappings of those)"
        ) from e


def decode_details(text: str) -> Mapping[str, object]:
    """The read-only mapping of stored details."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise LedgerError("the ledger holds malformed charge details")
    return MappingProxyType(value)


# -- accountants and sample releases (all run inside a transaction) ------------------------


def zcdp_json(total: ZCDPSpent, spec: str) -> dict[str, str]:
    """A zCDP total for the anchor: ``Σρ``, ``Σδ`` and the accountant that spends them."""
    return {
        "type": "zcdp",
        "rho": fraction_text(total.rho),
        "delta": fraction_text(total.delta),
        "spec": spec,
    }


def zcdp_from_json(data: Mapping[str, str]) -> ZCDPSpent:
    """Inverse of :func:`zcdp_json`."""
    try:
        return ZCDPSpent(
            rho=Fraction(*parse_fraction(data["rho"])),
            delta=Fraction(*parse_fraction(data["delta"])),
        )
    except KeyError as e:
        raise LedgerError("the anchor file holds a malformed zCDP total") from e
