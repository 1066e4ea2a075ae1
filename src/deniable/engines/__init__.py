"""Engine adapters: thin, with declared capabilities (:mod:`deniable.engines.base`)."""

from deniable.engines.base import Capabilities, Engine, TableBinding
from deniable.engines.duckdb import DuckDBEngine

__all__ = ["Capabilities", "DuckDBEngine", "Engine", "TableBinding"]
