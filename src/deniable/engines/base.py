"""What the query compiler needs from an engine: declared capabilities and five calls.

Engines are thin adapters. The compiler reads :class:`Capabilities` (never an engine's name)
to choose how to spell the generated SQL; the session calls :meth:`Engine.bind` once per
table (and :meth:`Engine.sample` for a table queried through a sample) and then
:meth:`Engine.check` and :meth:`Engine.run` with SQL that deniable generated.
No engine ever receives the analyst's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from fractions import Fraction

    import pyarrow as pa

    from deniable.noise.source import RandomSource

SAMPLE_ALIAS = "__t"
"""The alias of the table in the identity expression given to :meth:`Engine.sample` (the
compiler's alias of the source table)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Facts about an engine's SQL that change how deniable spells a query.

    Attributes:
        dialect: the sqlglot dialect used to render identifiers and literals.
        try_expression: ``TRY(expr)`` turns a runtime error into NULL (used so that no row
            predicate can fail on one dataset and not on its neighbour).
        semi_join: ``SEMI JOIN`` / ``ANTI JOIN`` are available.
        null_safe_equal: ``IS NOT DISTINCT FROM`` may be used as a join condition.
        hash_function: a deterministic, well-mixed 64-bit hash of one value (unsigned result).
        xor_function: bitwise exclusive or of two such hashes (or of a hash and a key).
        unicode_nfc: a function normalising text to Unicode NFC.
        is_nan: a function testing a double for NaN.
    """

    dialect: str
    try_expression: bool
    semi_join: bool
    null_safe_equal: bool
    hash_function: str
    xor_function: str
    unicode_nfc: str | None
    is_nan: str


@dataclass(frozen=True, slots=True)
class TableBinding:
    """How generated SQL refers to one registered table.

    Attributes:
        name: the identifier to use in ``FROM`` (quoted by the compiler).
        columns: ``(name, engine type)`` pairs, from the schema only.
        version: an opaque data version.
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    version: str


class Engine(Protocol):
    """An engine adapter."""

    capabilities: ClassVar[Capabilities]

    def bind(self, name: str, source: object, *, version: str | None = None) -> TableBinding:
        """Make ``source`` queryable; return how to refer to it."""
        ...

    def check(self, binding: TableBinding, sql: str) -> None:
        """Bind and type-check generated SQL without reading rows; raise on error."""
        ...

    def run(self, binding: TableBinding, sql: str) -> pa.Table:
        """Run generated SQL and return its (aggregated) result."""
        ...

    def sample(
        self,
        binding: TableBinding,
        *,
        rate: Fraction,
        identity: str | None,
        source: RandomSource | None = None,
    ) -> TableBinding:
        """Materialise a Bernoulli(``rate``) sample of privacy units; return its binding.

        ``identity`` is an SQL expression of a unit's text identity over the table aliased
        :data:`SAMPLE_ALIAS` (None: rows are units).
        """
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...


def column_names(binding: TableBinding) -> Sequence[str]:
    """The column names of a binding, in order."""
    return [c for c, _ in binding.columns]
