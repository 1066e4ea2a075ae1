"""Assemble BENCHMARKS.md from the sections each benchmark wrote to benchmarks/results/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["noise", "query", "compare", "anonymize"]

HEADER = """# Benchmarks

Every figure is a ratio to a floor measured in the same run on the same machine (2 cores),
with the command that reproduces it. `make bench` reruns them all and rewrites this file.
"""


def main() -> None:
    results = ROOT / "benchmarks" / "results"
    parts = [HEADER]
    names = ORDER + sorted(p.stem for p in results.glob("*.md") if p.stem not in ORDER)
    for name in names:
        path = results / f"{name}.md"
        if path.exists():
            parts.append(path.read_text().strip() + "\n")
    (ROOT / "BENCHMARKS.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
