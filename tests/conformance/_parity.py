"""The planted defect the neighbour-parity suites must catch (their negative control).

Issue 20's defect was a conversion of every partition's key to Python before the charge:
one person's ``DATE 'infinity'`` raised ``OverflowError`` and the query failed for free.
:func:`planted_pre_charge_conversion` puts such a conversion back (test-only, by patching
the release path's ``read_result``) so that each parity suite can show it would notice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


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
