"""Run the ``Examples:`` blocks of every module in the package as doctests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import deniable

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(deniable.__path__, prefix="deniable.")
    if not m.name.endswith("__main__") and ".cli." not in m.name and m.name != "deniable.demo"
)


@pytest.mark.parametrize("name", MODULES)
def test_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_there_are_examples() -> None:
    total = sum(
        len(doctest.DocTestFinder().find(importlib.import_module(name))) for name in MODULES
    )
    assert total > 20
