"""SQL names and string literals: the one place where deniable quotes text into SQL.

Every identifier (column, table, alias) and every string literal that deniable writes into
SQL text, or into a sqlglot tree, is built here, by sqlglot's generator for the target
dialect, so that no module escapes quotes by hand. A leaf module: it imports only sqlglot
and :mod:`deniable.errors`, so that every layer (toolkits, query, engines) may use it.
Quoting reveals nothing and costs no privacy.
"""

from __future__ import annotations

from sqlglot import exp

from deniable.errors import InvalidParameter

DEFAULT_DIALECT = "duckdb"
"""The dialect of the SQL text the toolkits generate (DuckDB)."""


def identifier(name: str) -> exp.Identifier:
    """A quoted sqlglot identifier for ``name`` (kept exactly, case and all).

    Raises:
        InvalidParameter: ``name`` is not a non-empty string.

    Examples:
        >>> identifier('odd"name').sql(dialect="duckdb")
        '"odd""name"'
    """
    if not isinstance(name, str) or not name:
        raise InvalidParameter("identifiers must be non-empty strings")
    return exp.to_identifier(name, quoted=True)


def quote_identifier(name: str, dialect: str = DEFAULT_DIALECT) -> str:
    """``name`` as a quoted identifier in ``dialect`` (embedded quotes escaped).

    Raises:
        InvalidParameter: ``name`` is not a non-empty string.

    Examples:
        >>> quote_identifier('we"ird')
        '"we""ird"'
        >>> quote_identifier("a`b", "spark")
        '`a``b`'
    """
    return str(identifier(name).sql(dialect=dialect))


def quote_table(name: str, dialect: str = DEFAULT_DIALECT) -> str:
    """A table name, optionally schema-qualified (``schema.table``), each part quoted.

    Examples:
        >>> quote_table("s2.t")
        '"s2"."t"'
    """
    return ".".join(quote_identifier(part, dialect) for part in name.split("."))


def quote_literal(value: str, dialect: str = DEFAULT_DIALECT) -> str:
    """``value`` as a string literal in ``dialect`` (embedded quotes escaped).

    Examples:
        >>> quote_literal("it's")
        "'it''s'"
    """
    if not isinstance(value, str):
        raise InvalidParameter("string literals must be built from str values")
    return str(exp.Literal.string(value).sql(dialect=dialect))
