"""The server's JSON bodies, turned back into deniable's own types.

Pure post-processing of what the server released: nothing here is private, nothing is
charged. Losses are rebuilt from their exact rational form (``"exact"``), never from the
convenience floats; answers become the same :class:`~deniable.query.answer.Answer` a local
``Session`` returns.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InternalError
from deniable.query.accuracy import AccuracyReport, OutputAccuracy
from deniable.query.answer import Answer, AnswerMetadata, show_loss

__all__ = [
    "AccuracyEstimate",
    "AnalystRecord",
    "Budget",
    "DatasetInfo",
    "Explanation",
    "Release",
    "accuracy_from_json",
    "analyst_from_json",
    "answer_from_json",
    "budget_from_json",
    "dataset_from_json",
    "explanation_from_json",
    "loss_from_json",
    "release_from_json",
]


def loss_from_json(data: Mapping[str, Any]) -> PrivacyLoss:
    """The exact loss of a ``LossOut`` body (``{"type": ..., "exact": {...}}``).

    Raises:
        InternalError: the body is not a loss this client knows (a server bug or a newer
            server).
    """
    try:
        kind = data["type"]
        exact = data["exact"]
        if kind == "epsilon":
            return Epsilon(epsilon=Fraction(exact["epsilon"]))
        if kind == "epsilon_delta":
            return EpsilonDelta(epsilon=Fraction(exact["epsilon"]), delta=Fraction(exact["delta"]))
        if kind == "rho":
            return Rho(rho=Fraction(exact["rho"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise InternalError("the server sent a malformed privacy loss") from e
    raise InternalError(f"the server sent an unknown kind of privacy loss: {kind!r}")


def answer_from_json(body: Mapping[str, Any], *, cost: PrivacyLoss | None = None) -> Answer:
    """The :class:`~deniable.query.answer.Answer` of a ``QueryResponse`` body.

    The frame has the local layout: each output ``x``, followed by ``x_low``/``x_high`` when
    it has an interval (NaN where none exists, e.g. quantiles). Integers stay ``int64``,
    reals ``float64``, text the pandas string type; a missing value is NaN in a numeric
    column.

    Args:
        body: the decoded response of ``POST /v1/datasets/{d}/query``.
        cost: what the answer cost when first computed, for a cached replay (whose
            ``charge`` is zero); default: the ``charge`` of this response.

    Raises:
        InternalError: a malformed body.
    """
    try:
        intervals: Mapping[str, Mapping[str, Sequence[Any]]] = body["intervals"]
        measured = set(body["mechanisms"]) | set(intervals)
        data: dict[str, pd.Series] = {}
        for name in body["columns"]:
            data[name] = _column(body["values"][name], numeric=name in measured)
            if name in intervals:
                data[f"{name}_low"] = pd.Series(_reals(intervals[name]["low"]), dtype="float64")
                data[f"{name}_high"] = pd.Series(_reals(intervals[name]["high"]), dtype="float64")
        frame = pd.DataFrame(data)
        charge = loss_from_json(body["charge"])
        meta = AnswerMetadata(
            query=body["query"],
            loss=charge,
            cost=charge if cost is None else cost,
            remaining=loss_from_json(body["remaining"]),
            level=float(body["level"]),
            bounds={k: (float(v[0]), float(v[1])) for k, v in body["bounds"].items()},
            max_groups=int(body["max_groups"]),
            max_rows=int(body["max_rows"]),
            privacy_unit=body["privacy_unit"],
            mechanisms=dict(body["mechanisms"]),
            notes=dict(body["notes"]),
            partition_selection=body["partition_selection"],
            cached=bool(body["cached"]),
            charge_id=body["charge_id"],
            row_policies=tuple(body["row_policies"]),
        )
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise InternalError("the server sent a malformed answer") from e
    return Answer(frame, meta)


def _reals(values: Sequence[Any]) -> list[float]:
    return [np.nan if v is None else float(v) for v in values]


def _column(values: Sequence[Any], *, numeric: bool) -> pd.Series:
    """One released column; a released value's missing entries become NaN."""
    present = [v for v in values if v is not None]
    if (
        numeric
        and len(present) < len(values)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
    ):
        return pd.Series(_reals(values), dtype="float64")
    if not values:
        return pd.Series([], dtype="float64" if numeric else object)
    return pd.Series(list(values))


@dataclass(frozen=True)
class AccuracyEstimate(AccuracyReport):
    """A dry run's answer: a local AccuracyReport and what the server adds to it.

    The :class:`~deniable.query.accuracy.AccuracyReport` part (``level``, ``outputs``,
    ``assumed_rows``, ``width(name)``) is what ``Session.accuracy`` returns.

    Nothing was read from the data and nothing was charged.

    Attributes:
        query: the query as the server compiled it (SQL).
        loss: the loss the widths are for (the one asked, else the least found).
        least_loss: the least loss meeting every target (when targets were given).
        remaining: what the caller may still spend.
        fits: whether ``loss`` fits in ``remaining``.
        targets: the half-widths asked for, by output name.
        coverage: what the intervals would cover, in words.
    """

    query: str = ""
    loss: PrivacyLoss | None = None
    least_loss: PrivacyLoss | None = None
    remaining: PrivacyLoss | None = None
    fits: bool = False
    targets: Mapping[str, float] = field(default_factory=dict)
    coverage: str = ""

    def __str__(self) -> str:
        """One line per output: its half-width (or rank error), then the loss."""
        lines = []
        for o in self.outputs:
            if o.half_width is not None:
                lines.append(f"{o.name}: ± {o.half_width:.4g} at {self.level:.0%}")
            elif o.rank_error is not None:
                lines.append(f"{o.name}: rank error {o.rank_error:.4g} rows")
            else:
                lines.append(f"{o.name}: depends on {o.depends_on or 'the data'}")
        if self.loss is not None:
            fits = "fits" if self.fits else "does NOT fit"
            lines.append(f"for {show_loss(self.loss)} ({fits} in what is left)")
        return "\n".join(lines)


def accuracy_from_json(body: Mapping[str, Any]) -> AccuracyEstimate:
    """The :class:`AccuracyEstimate` of an ``AccuracyResponse`` body."""
    try:
        outputs = tuple(
            OutputAccuracy(
                name=o["name"],
                half_width=o["half_width"],
                rank_error=o["rank_error"],
                depends_on=o["depends_on"],
            )
            for o in body["outputs"]
        )
        return AccuracyEstimate(
            level=float(body["level"]),
            outputs=outputs,
            assumed_rows=body["assumed_rows"],
            query=body["query"],
            loss=loss_from_json(body["loss"]),
            least_loss=None if body["least_loss"] is None else loss_from_json(body["least_loss"]),
            remaining=loss_from_json(body["remaining"]),
            fits=bool(body["fits"]),
            targets={
                o["name"]: float(o["target"]) for o in body["outputs"] if o["target"] is not None
            },
            coverage=body["interval_coverage"],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InternalError("the server sent a malformed accuracy report") from e


@dataclass(frozen=True)
class Budget:
    """A dataset's budget as the caller sees it (exact losses).

    Attributes:
        dataset: the dataset.
        cap: the dataset's one total cap.
        spent: spent by everyone (as a curator) or by the caller (as an analyst).
        remaining: what the caller may still spend: an analyst's own slice (the least of
            what is left of their allowance and of what the dataset can still give them, its
            cap less everything spent and other analysts' unspent reservations).
        allowance: the caller's slice of the cap, or None.
        reserved: the caller's reserved slice (held back from every other analyst), or None.
    """

    dataset: str
    cap: PrivacyLoss
    spent: PrivacyLoss
    remaining: PrivacyLoss
    allowance: PrivacyLoss | None
    reserved: PrivacyLoss | None = None

    def __str__(self) -> str:
        """``dataset: spent … of …; remaining …``."""
        slice_ = "" if self.allowance is None else f" (allowance {show_loss(self.allowance)})"
        if self.reserved is not None:
            slice_ = f" (reserved {show_loss(self.reserved)})"
        return (
            f"{self.dataset}: spent {show_loss(self.spent)} of {show_loss(self.cap)}{slice_}; "
            f"remaining {show_loss(self.remaining)}"
        )


def budget_from_json(body: Mapping[str, Any]) -> Budget:
    """The :class:`Budget` of a ``BudgetOut`` body."""
    try:
        return Budget(
            dataset=body["dataset"],
            cap=loss_from_json(body["cap"]),
            spent=loss_from_json(body["spent"]),
            remaining=loss_from_json(body["remaining"]),
            allowance=None if body["allowance"] is None else loss_from_json(body["allowance"]),
            reserved=None if body.get("reserved") is None else loss_from_json(body["reserved"]),
        )
    except (KeyError, TypeError) as e:
        raise InternalError("the server sent a malformed budget") from e


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset of ``datasets()``.

    Attributes:
        name: the dataset.
        table: its private table, or None for a graph-only dataset.
        graphs: names of its graphs.
        budget: the caller's budget on it.
    """

    name: str
    table: str | None
    graphs: tuple[str, ...]
    budget: Budget


def dataset_from_json(body: Mapping[str, Any]) -> DatasetInfo:
    """The :class:`DatasetInfo` of a ``DatasetSummary`` body."""
    try:
        return DatasetInfo(
            name=body["name"],
            table=body["table"],
            graphs=tuple(body["graphs"]),
            budget=budget_from_json(body["budget"]),
        )
    except (KeyError, TypeError) as e:
        raise InternalError("the server sent a malformed dataset summary") from e


@dataclass(frozen=True)
class Release:
    """One committed charge of the ledger.

    Attributes:
        id: the release's id as the caller is shown it: an analyst's own release number
            (1, 2, … on the dataset; answers name it as ``metadata.charge_id``), the
            ledger's charge id for a curator.
        number: the release number its analyst knows it by (1, 2, … per dataset).
        dataset: the dataset whose budget paid.
        analyst: who asked.
        query: the query text.
        loss: the loss charged, exact.
        time: when it was committed (UTC).
        status: ``"charged"``, or ``"answered"`` once the answer is stored.
    """

    id: int
    dataset: str
    analyst: str
    query: str
    loss: PrivacyLoss
    time: _dt.datetime
    status: str
    number: int | None = None


def release_from_json(body: Mapping[str, Any]) -> Release:
    """The :class:`Release` of a ``ReleaseOut`` body."""
    try:
        return Release(
            id=int(body["id"]),
            dataset=body["dataset"],
            analyst=body["analyst"],
            query=body["query"],
            loss=loss_from_json(body["loss"]),
            time=_time(body["time"]),
            status=body["status"],
            number=None if body.get("number") is None else int(body["number"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InternalError("the server sent a malformed ledger entry") from e


def _time(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Explanation:
    """What ε means for an attacker with a given prior (Desfontaines, Prop. 1).

    Attributes:
        epsilon: the ε explained.
        prior: the attacker's prior that the person is in the data.
        posterior_low: the least the attacker can become sure, after any ε-DP release.
        posterior_high: the most the attacker can become sure.
        text: the same, in one sentence.
    """

    epsilon: float
    prior: float
    posterior_low: float
    posterior_high: float
    text: str

    def __str__(self) -> str:
        """The sentence."""
        return self.text


def explanation_from_json(body: Mapping[str, Any]) -> Explanation:
    """The :class:`Explanation` of an ``ExplainOut`` body."""
    try:
        return Explanation(
            epsilon=float(body["epsilon"]),
            prior=float(body["prior"]),
            posterior_low=float(body["posterior_low"]),
            posterior_high=float(body["posterior_high"]),
            text=body["text"],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InternalError("the server sent a malformed explanation") from e


@dataclass(frozen=True)
class AnalystRecord:
    """A registered analyst or curator (never its token).

    Attributes:
        name: its unique name.
        role: ``"analyst"`` or ``"curator"``.
        created: when it was added (UTC).
        revoked_at: when its token was revoked, or None.
    """

    name: str
    role: str
    created: _dt.datetime
    revoked_at: _dt.datetime | None


def analyst_from_json(body: Mapping[str, Any]) -> AnalystRecord:
    """The :class:`AnalystRecord` of an ``AnalystOut`` body."""
    try:
        revoked = body["revoked_at"]
        return AnalystRecord(
            name=body["name"],
            role=body["role"],
            created=_time(body["created"]),
            revoked_at=None if revoked is None else _time(revoked),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InternalError("the server sent a malformed analyst") from e
