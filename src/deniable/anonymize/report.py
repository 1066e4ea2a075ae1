"""The utility report of a k-anonymization: what the published table lost.

Two kinds of figure, kept apart on purpose:

* **published** figures are functions of the published table and the recoding alone (class
  sizes, rows published, information loss per column): releasing them costs nothing more;
* **curator-only** figures need the size of the private sample (rows sampled, rows and
  fraction suppressed). The ``(ε, δ)`` guarantee covers the published table, *not* these
  numbers; show them to the data owner, do not publish them next to the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from deniable.anonymize.recoding import Recoding
from deniable.sqlnames import quote_identifier
from deniable.sqlrunner import SQLRunner, one_row

CLASS_SIZE = "__deniable_class_size"
"""Name of the class-size column of a classes table (never a published column)."""


@dataclass(frozen=True, slots=True)
class ColumnLoss:
    """Information lost in one published column.

    Attributes:
        name: the column.
        level: the level's index (0 raw).
        level_name: the level's name.
        height: generalisation height, ``level / top`` (0 raw, 1 ``'*'``).
        loss_metric: Iyengar's Loss Metric averaged over the published rows (0 raw, 1 ``'*'``;
            0 when nothing is published).
    """

    name: str
    level: int
    level_name: str
    height: float
    loss_metric: float


@dataclass(frozen=True, slots=True)
class UtilityReport:
    """What the release kept and lost.

    Attributes:
        k: the suppression threshold.
        published_rows: rows in the published table.
        classes: equivalence classes (distinct published tuples), each of size ≥ k.
        class_sizes: (lower, upper, classes) buckets ``[k, 2k), [2k, 4k), …`` of class sizes.
        min_class: smallest class size (0 if none).
        median_class: median class size (0 if none).
        max_class: largest class size (0 if none).
        columns: information loss per column.
        sample_rows: curator-only: rows in the private sample.
        suppressed_rows: curator-only: sampled rows dropped for being in a class below k.
    """

    k: int
    published_rows: int
    classes: int
    class_sizes: tuple[tuple[int, int, int], ...]
    min_class: int
    median_class: float
    max_class: int
    columns: tuple[ColumnLoss, ...]
    sample_rows: int
    suppressed_rows: int

    @property
    def suppressed_fraction(self) -> float:
        """Curator-only: suppressed rows over sampled rows (0 for an empty sample)."""
        return self.suppressed_rows / self.sample_rows if self.sample_rows else 0.0

    def lines(self) -> list[str]:
        """A plain-text rendering, curator-only figures marked."""
        out = [
            f"published rows: {self.published_rows} in {self.classes} classes (each ≥ k={self.k})",
            (
                f"class sizes: min {self.min_class}, median {self.median_class:g}, "
                f"max {self.max_class}"
            ),
        ]
        for lo, hi, n in self.class_sizes:
            out.append(f"  classes of size {lo}–{hi - 1}: {n}")
        for c in self.columns:
            out.append(
                f"column {c.name}: level {c.level} ({c.level_name}), height {c.height:.2f}, "
                f"loss metric {c.loss_metric:.3f}"
            )
        out.append(
            f"[curator-only, not covered by the guarantee] sampled rows {self.sample_rows}, "
            f"suppressed {self.suppressed_rows} ({100 * self.suppressed_fraction:.1f}%)"
        )
        return out


def utility_report(
    runner: SQLRunner,
    classes_table: str,
    recoding: Recoding,
    *,
    k: int,
    sample_rows: int,
) -> UtilityReport:
    """Compute the report from the published classes (columns of ``recoding`` plus ``n``).

    Args:
        runner: the engine holding ``classes_table``.
        classes_table: one row per published class: the recoded columns and its size
            (column :data:`CLASS_SIZE`).
        recoding: the recoding used.
        k: the threshold used.
        sample_rows: the private sample's size (curator-only figures).
    """
    n = CLASS_SIZE
    row = one_row(
        runner,
        f"SELECT COUNT(*), COALESCE(SUM({n}), 0), COALESCE(MIN({n}), 0), "
        f"COALESCE(MAX({n}), 0), COALESCE(MEDIAN({n}), 0) FROM {classes_table}",
    )
    n_classes, published, smallest, largest, median = (
        int(row[0]),
        int(row[1]),
        int(row[2]),
        int(row[3]),
        float(row[4]),
    )
    buckets: list[tuple[int, int, int]] = []
    lo = k
    while lo <= largest:
        hi = 2 * lo
        got = one_row(
            runner, f"SELECT COUNT(*) FROM {classes_table} WHERE {n} >= {lo} AND {n} < {hi}"
        )
        buckets.append((lo, hi, int(got[0])))
        lo = hi
    losses = []
    for c in recoding.columns:
        col = quote_identifier(c.name)
        per_label = runner.rows(f"SELECT {col}, SUM({n}) FROM {classes_table} GROUP BY {col}")
        weighted = sum(c.hierarchy.label_loss(c.level, lab) * int(w) for lab, w in per_label)
        losses.append(
            ColumnLoss(
                name=c.name,
                level=c.level,
                level_name=c.level_name,
                height=c.height,
                loss_metric=weighted / published if published else 0.0,
            )
        )
    return UtilityReport(
        k=k,
        published_rows=published,
        classes=n_classes,
        class_sizes=tuple(buckets),
        min_class=smallest,
        median_class=median,
        max_class=largest,
        columns=tuple(losses),
        sample_rows=sample_rows,
        suppressed_rows=sample_rows - published,
    )
