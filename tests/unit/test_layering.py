"""The package's layers (DESIGN.md §2) import downwards only, and SQL quoting lives in one place.

Every module under ``src/deniable`` is parsed with :mod:`ast` (nothing is imported), and every
``import`` / ``from … import`` statement in it — including those under ``TYPE_CHECKING`` and
inside functions — is checked against the layer map below.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "deniable"

# DESIGN.md §2, bottom to top. The leaf modules at the package root are core: they import
# nothing of deniable's but `errors` (checked below), so that every layer may use them.
LAYERS: dict[str, int] = {
    "errors": 0,
    "sqlnames": 0,  # the one identifier / string-literal quoting
    "sqlrunner": 0,  # the engine interface the toolkits run their SQL through
    "stats": 0,  # the one Clopper–Pearson
    "noise": 0,
    "accounting": 1,
    "mechanisms": 1,
    "ledger": 1,
    "local": 2,
    "sampling": 2,
    "anonymize": 2,
    "explain": 2,
    "audit": 2,
    "datasets": 2,
    "query": 3,
    "engines": 3,
    "curator": 3,
    "graph": 3,  # graph queries: like query, above engines, below the curator
    "synth": 3,  # synthetic data: measures in the engines, charges the ledger; below the curator
    "cli": 4,
    "server": 4,
    "client": 4,  # the analysts' client of the server (maps its errors to ours)
    "attacks": 4,  # drives a Session against unsafe baselines (the attack lab)
    "__init__": 4,  # the package root: an interface
    "demo": 4,  # an interface
    "__main__": 4,
}
LEAVES = ("errors", "sqlnames", "sqlrunner", "stats")
# Same-layer imports that are nevertheless forbidden.
FORBIDDEN = {
    "query": {"curator", "graph"},
    "engines": {"query", "curator", "graph"},
    "graph": {"curator"},
    "synth": {"curator"},
}
NO_DUCKDB = ("sampling", "anonymize", "local", "explain", "audit", "accounting", "mechanisms",
             "noise", *LEAVES)  # fmt: skip


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. deniable.sampling.bernoulli
    path: Path
    parsed: ast.Module | None = None  # a given tree (a test's fake module)

    @property
    def tree(self) -> ast.Module:
        """The parsed source, parsed when a test first needs it (not at collection, which
        every xdist worker repeats)."""
        return self.parsed if self.parsed is not None else _parse(self.path)

    @property
    def top(self) -> str:
        """The first component below ``deniable`` (``__init__`` for the root package)."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(SRC.parent))


def _modules() -> list[Module]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(Module(".".join(parts), path))
    return out


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


MODULES = _modules()


def _imports(module: Module) -> Iterator[tuple[str, int]]:
    """Absolute names imported by ``module`` (``from a import b`` yields ``a.b`` too)."""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


def _layer_of(name: str) -> str | None:
    """The layer key of an imported deniable name (None: not deniable's)."""
    parts = name.split(".")
    if parts[0] != "deniable":
        return None
    if len(parts) == 1:
        return "__init__"
    return parts[1] if parts[1] in LAYERS else "__init__"  # `from deniable import X` (an attr)


def _violations(module: Module) -> list[str]:
    mine = module.top
    out = []
    for name, line in _imports(module):
        theirs = _layer_of(name)
        if theirs is None or theirs == mine:
            continue
        if LAYERS[theirs] > LAYERS[mine] or theirs in FORBIDDEN.get(mine, ()):
            out.append(f"{module.rel}:{line} ({mine}) imports {name} ({theirs})")
        elif mine in LEAVES and theirs != "errors":
            out.append(f"{module.rel}:{line}: the leaf {mine} imports {name}")
    return sorted(set(out))


def test_the_layer_map_covers_every_top_level_module() -> None:
    unknown = {m.top for m in MODULES} - set(LAYERS)
    assert not unknown, f"add {sorted(unknown)} to LAYERS (DESIGN.md §2)"


@pytest.mark.parametrize("top", sorted({m.top for m in MODULES}))
def test_imports_point_downwards(top: str) -> None:
    bad = [v for m in MODULES if m.top == top for v in _violations(m)]
    assert not bad, "\n".join(bad)


def test_the_toolkits_and_the_core_never_import_duckdb() -> None:
    bad = [
        f"{m.rel}:{line}"
        for m in MODULES
        if m.top in NO_DUCKDB
        for name, line in _imports(m)
        if name.split(".")[0] == "duckdb"
    ]
    assert not bad, "these modules must go through deniable.sqlrunner.SQLRunner: " + str(bad)


# ------------------------------------------------------------------------------- quoting


def _quoting_functions(module: Module) -> set[str]:
    """Functions of ``module`` that quote an identifier or escape a string literal by hand.

    Quoting is a call with a ``quoted=`` keyword that is not the constant False
    (``exp.to_identifier(…, quoted=True)``, ``exp.column(…, quoted=True)``, a wrapper's
    ``quoted=quoted``), or a hand-written escape ``.replace('"', '""')`` /
    ``.replace("'", "''")``.
    """
    found: set[str] = set()

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}"
            if isinstance(child, ast.Call):
                quoted = [k for k in child.keywords if k.arg == "quoted"]
                if any(not (isinstance(k.value, ast.Constant) and k.value.value is False)
                       for k in quoted):  # fmt: skip
                    found.add(scope)
                func = child.func
                args = [a.value for a in child.args if isinstance(a, ast.Constant)]
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr == "replace"
                    and (args in (['"', '""'], ["'", "''"]))
                ):
                    found.add(scope)
            visit(child, inner)

    visit(module.tree, module.name)
    return found


def test_one_function_quotes_identifiers_outside_query() -> None:
    found = set().union(*(_quoting_functions(m) for m in MODULES if m.top != "query"))
    assert found == {"deniable.sqlnames.identifier"}, (
        f"quote identifiers and literals only through deniable.sqlnames; found {sorted(found)}"
    )


def test_query_quotes_identifiers_through_sqlnames() -> None:
    found = set().union(*(_quoting_functions(m) for m in MODULES if m.top == "query"))
    assert not found, f"quote identifiers only through deniable.sqlnames; found {sorted(found)}"


def test_the_quoting_check_would_catch_a_hand_written_quote(tmp_path: Path) -> None:
    # Negative control: the checks above must see the patterns they forbid.
    code = (
        "from sqlglot import exp\n"
        "def a(n):\n    return '\"' + n.replace('\"', '\"\"') + '\"'\n"
        "def b(n):\n    return exp.to_identifier(n, quoted=True)\n"
        "def c(n):\n    return exp.to_identifier(n, quoted=False)\n"
        "import duckdb\nfrom ..engines import duckdb as d\n"
    )
    path = SRC / "sampling" / "_fake.py"
    fake = Module("deniable.sampling._fake", path, ast.parse(code))
    assert _quoting_functions(fake) == {"deniable.sampling._fake.a", "deniable.sampling._fake.b"}
    assert any("deniable.engines" in v for v in _violations(fake))
    assert "duckdb" in {n.split(".")[0] for n, _ in _imports(fake)}
