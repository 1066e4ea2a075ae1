"""The example notebook (examples/analyst_client.ipynb) and the README's client example run
against a real server.

It is executed with nbclient in a Jupyter kernel when nbclient and ipykernel are installed;
otherwise its code cells are executed in order, in one namespace, in this process. Either
way any exception fails the test, and the budget it spent is checked in the ledger.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
from fractions import Fraction
from pathlib import Path

import pytest
from _server_helpers import ROOT, running

from deniable.accounting.loss import Epsilon
from deniable.ledger import Ledger

NOTEBOOK = ROOT / "examples" / "analyst_client.ipynb"
FIXTURE = ROOT / "tests" / "fixtures" / "service"

pytestmark = pytest.mark.timeout(180)


def _with_kernel() -> str:
    """Run the notebook in a Jupyter kernel (it inherits our environment); its outputs."""
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            texts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def _in_process() -> str:
    """Execute the code cells in order, in one namespace, here; the printed text."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    namespace: dict[str, object] = {"__name__": "__notebook__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                code = compile("".join(cell["source"]), f"<cell {i}>", "exec")
                exec(code, namespace)  # our own notebook, from this repository
    return out.getvalue()


KERNEL = os.environ.get("DENIABLE_NOTEBOOK_IN_PROCESS") is None and all(
    importlib.util.find_spec(m) for m in ("nbclient", "ipykernel", "nbformat")
)


def untimed(config: Path) -> None:
    """Answers as soon as ready (the fixture shows the 1 s response-time default)."""
    text = config.read_text()
    config.write_text(text.replace("response_time = { deadline = 1.0 }", 'response_time = "off"'))


def test_the_analyst_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("example.toml", "students.csv", "schools.csv"):
        shutil.copy(FIXTURE / name, tmp_path / name)
    untimed(tmp_path / "example.toml")
    with Ledger(tmp_path / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    with running(tmp_path / "example.toml", workers=1, log=tmp_path / "server.log") as server:
        monkeypatch.setenv("DENIABLE_URL", server.url)
        monkeypatch.setenv("DENIABLE_TOKEN", token)
        text = _with_kernel() if KERNEL else _in_process()
    assert "refused, nothing spent" in text
    with Ledger(tmp_path / "ledger.db") as led:
        charges = led.history("students")
        spent = led.spent("students")
    # two charged questions of ε = 0.25 (the repeated one is a free replay)
    assert [c.loss for c in charges] == [Epsilon(epsilon=Fraction(1, 4))] * 2
    assert spent == Epsilon(epsilon=Fraction(1, 2))


def test_the_readme_client_example_runs(tmp_path: Path) -> None:
    """README.md's client block, with the server's URL and a token, as written otherwise."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    (block,) = [b for b in blocks if "import deniable.client" in b]
    for name in ("example.toml", "students.csv", "schools.csv"):
        shutil.copy(FIXTURE / name, tmp_path / name)
    untimed(tmp_path / "example.toml")
    with Ledger(tmp_path / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    with running(tmp_path / "example.toml", workers=1, log=tmp_path / "server.log") as server:
        assert "http://127.0.0.1:8000" in block
        code = compile(block.replace("http://127.0.0.1:8000", server.url), "README", "exec")
        namespace: dict[str, object] = {"__name__": "readme", "token": token}
        exec(code, namespace)  # our own README
    with Ledger(tmp_path / "ledger.db") as led:
        charges = led.history("students")
    assert [c.loss for c in charges] == [Epsilon(epsilon=Fraction(1, 4))]  # accuracy is free
