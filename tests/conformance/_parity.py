"""What the neighbour-parity suites share: the outcome of a query, and the planted defect.

:func:`outcome` classifies what one query does on one dataset (answered and charged, or
which typed refusal with which message), checking that a refusal charges nothing.

Issue 20's defect was a conversion of every partition's key to Python before the charge:
one person's ``DATE 'infinity'`` raised ``OverflowError`` and the query failed for free.
:func:`planted_pre_charge_conversion` puts such a conversion back (test-only, by patching
the release path's ``read_result``) so that each parity suite can show it would notice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from deniable.curator.session import Session
from deniable.errors import DeniableError, InvalidParameter

Outcome = tuple[str, str]

DEFAULT_OPTIONS: dict[str, Any] = {"epsilon": 1, "delta": Fraction(1, 10**6)}


@contextlib.contextmanager
def planted_pre_charge_conversion(*, longest_text: int | None = None) -> Iterator[None]:
    """Raise before the charge on a temporal key Python cannot hold (as before the fix).

    ``longest_text``: also raise on a text key longer than this (a size-dependent failure,
    for engines whose dates all fit Python's range, such as Spark).
    """
    from deniable.query import execute as execute_module
    from deniable.query.release import decode_key

    original = execute_module.read_result

    def strict(table: Any, compiled: Any, plan: Any) -> Any:
        exact = original(table, compiled, plan)
        for key in exact.keys:
            for value, decoder in zip(key, exact.decoders or [None] * len(key), strict=True):
                if not isinstance(value, str):
                    continue
                undecodable = decode_key(value, decoder) == value  # as the old to_pylist()
                if decoder in ("date", "timestamp") and undecodable:
                    raise OverflowError("date value out of range")
                if longest_text is not None and len(value) > longest_text:
                    raise MemoryError("a key too long to convert")
        return exact

    execute_module.read_result = strict  # type: ignore[assignment]
    try:
        yield
    finally:
        execute_module.read_result = original


def outcome(session: Session, query: str, options: dict[str, Any] | None = None) -> Outcome:
    """``("answer", "charged"|"free")`` or ``(error class, message)``; a refusal spends nothing.

    ``options`` carry a δ; a query without private keys is asked without it (the refusal
    "leave delta out" says nothing about the data, and would hide the query's real outcome).
    """
    options = DEFAULT_OPTIONS if options is None else options
    before = session.budget.spent
    try:
        try:
            session.sql(query, **options)
        except InvalidParameter as e:
            if "leave delta out" not in str(e):
                raise
            assert session.budget.spent == before
            session.sql(query, **{k: v for k, v in options.items() if k != "delta"})
    except DeniableError as e:
        assert session.budget.spent == before, f"a refusal charged: {type(e).__name__}: {e}"
        return type(e).__name__, str(e)
    except Exception as e:  # an untyped error is an outcome too (and a defect of its own)
        assert session.budget.spent == before, f"an error charged: {type(e).__name__}: {e}"
        return f"untyped {type(e).__name__}", str(e)
    return "answer", "free" if session.budget.spent == before else "charged"
