"""Budgets: caps, allowances, accountants, charges, exact spent totals and admission.

The admission rule is not here: the ledger rebuilds a dataset's filter from the stored cap,
accountant and charges (:func:`filter_of`) and asks it (:func:`admit_both`); a refused charge
raises its :class:`~deniable.errors.BudgetExceeded` and writes nothing. Every function runs
inside a transaction (:class:`~deniable.ledger.store.Tx`); writers append their chain entry
through :class:`~deniable.ledger.chain.Write` in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from fractions import Fraction
from typing import Any, Literal

from deniable.accounting.composition import components, from_components
from deniable.accounting.conversions import convert
from deniable.accounting.filter import (
    Accountant,
    BudgetFilter,
    accountant_spec,
    check_accountant,
    make_filter,
    parse_accountant,
)
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, show
from deniable.accounting.renyi import ZCDPFilter, ZCDPSpent, zcdp_charge
from deniable.errors import BudgetExceeded, InvalidParameter, LedgerError, UnknownDataset
from deniable.ledger.chain import ID_BOUND, Write
from deniable.ledger.records import (
    RESERVED,
    Charge,
    check_not_reserved,
    decode_details,
    decode_loss,
    encode_loss,
    loss_from_json,
    loss_json,
    parse_fraction,
    utc_now,
    zcdp_from_json,
    zcdp_json,
)
from deniable.ledger.store import Tx


def all_spent(conn: Tx, *, also: Iterable[str] = ()) -> dict[str, dict[str, str]]:
    """Every dataset's exact spent total (in its cap's kind) as loss JSON.

    The registered datasets, and those of ``also`` (the previous anchor's) that have charges
    but no registration — budget lost by a rollback, acknowledged on a database that does not
    know the dataset (yet) — counted in their first charge's kind. Each is one indexed read:
    nothing here scans the charges, which a host whose anchor lags behind another host's
    writes runs on every charge.
    """
    out: dict[str, dict[str, str]] = {}
    caps = {r[0]: decode_loss(r[1:5]) for r in conn.execute(ALL_CAPS)}
    registered = set(caps)
    for name in sorted(set(also) - registered):
        row = conn.execute(
            "SELECT loss_type, epsilon, delta, rho FROM charges WHERE dataset = ? "
            "ORDER BY id LIMIT 1",
            (name,),
        ).fetchone()
        if row is not None:
            caps[name] = decode_loss(row)
    for name, cap in sorted(caps.items()):
        if name in registered:
            out[name] = dataset_spent(conn, name, cap, accountant_of(conn, name))
            continue
        try:
            out[name] = dataset_spent(conn, name, cap, "basic")
        except LedgerError:
            # Lost ρ and δ of a zCDP dataset the database does not know yet.
            out[name] = zcdp_json(zcdp_spent(conn, name, analyst=None), "zcdp")
    return out


def lost_budget(
    w: Write, dataset: str, anchored_json: Mapping[str, str], now: str
) -> list[PrivacyLoss]:
    """The charges that make up what the anchor says was spent beyond what the database holds.

    A zCDP total lost with its registration is restored too: when the database spends the
    dataset with the basic accountant (the accountant was chosen after the restored copy was
    taken, hence before any charge), the anchor's accountant is recorded again first.
    """
    conn = w.conn
    row = conn.execute(
        "SELECT loss_type, epsilon, delta, rho FROM datasets WHERE name = ?", (dataset,)
    ).fetchone()
    if anchored_json.get("type") == "zcdp":
        anchored = zcdp_from_json(anchored_json)
        if row is not None and accountant_of(conn, dataset) == "basic":
            try:
                choice = parse_accountant(anchored_json.get("spec", "zcdp"))
                check_accountant(decode_loss(row), choice)
            except InvalidParameter as e:
                raise LedgerError(
                    f"dataset {dataset!r}'s anchor records a zCDP total that its cap cannot "
                    "be spent with; the lost budget cannot be expressed in it"
                ) from e
            set_accountant(w, dataset, choice, now)
        here = zcdp_spent(conn, dataset, analyst=None)
        out: list[PrivacyLoss] = []
        if anchored.rho > here.rho:
            out.append(Rho(rho=anchored.rho - here.rho))
        if anchored.delta > here.delta:
            out.append(EpsilonDelta(epsilon=0, delta=anchored.delta - here.delta))
        return out
    loss = loss_from_json(anchored_json)
    kind_of = loss if row is None else decode_loss(row)
    if row is not None and accountant_of(conn, dataset) != "basic":
        # Anchored before the zCDP choice (made while nothing was charged): count it as given.
        return [loss] if any(components(loss)) else []
    try:
        target = convert(loss, type(kind_of))
    except InvalidParameter as e:
        raise LedgerError(
            f"dataset {dataset!r}'s cap has another kind than the spent total its anchor "
            "records; the lost budget cannot be expressed in it"
        ) from e
    here_basic = spent_total(conn, dataset, kind_of, analyst=None)
    diff = tuple(
        max(a - b, Fraction(0))
        for a, b in zip(components(target), components(here_basic), strict=True)
    )
    if not any(diff):
        return []
    return [from_components(type(kind_of), diff)]


# -- helpers (all run inside a transaction) ------------------------------------------------


CAP = "SELECT loss_type, epsilon, delta, rho FROM datasets WHERE name = ?"
ALL_CAPS = "SELECT name, loss_type, epsilon, delta, rho FROM datasets"
ACCOUNTANT = "SELECT spec FROM accountants WHERE dataset = ?"
SLICES = (
    "SELECT analyst, loss_type, epsilon, delta, rho FROM allowances "
    "WHERE dataset = ? AND (analyst = ? OR substr(analyst, 1, ?) = ?)"
)
IDEMPOTENT = "SELECT id FROM charges WHERE dataset = ? AND analyst = ? AND idempotency_key = ?"
"""Admission's reads of a dataset, an analyst's slices and an idempotency key (a batch of
charges reads them all in one round trip, :meth:`ChargeBatch.prefetch`)."""


def cap_of(conn: Tx, dataset: str) -> PrivacyLoss:
    """``dataset``'s cap.

    Raises:
        UnknownDataset: the dataset is not registered.
    """
    row = conn.execute(CAP, (dataset,)).fetchone()
    if row is None:
        raise UnknownDataset(
            f"dataset {dataset!r} is not registered in this ledger; the curator must register "
            "it with a budget first"
        )
    return decode_loss(row)


def allowance_of(conn: Tx, dataset: str, analyst: str) -> PrivacyLoss | None:
    """``analyst``'s slice of ``dataset``'s cap, or None."""
    row = conn.execute(
        "SELECT loss_type, epsilon, delta, rho FROM allowances WHERE dataset = ? AND analyst = ?",
        (dataset, analyst),
    ).fetchone()
    return None if row is None else decode_loss(row)


def loss_groups(conn: Tx, dataset: str, *, analyst: str | None) -> list[Any]:
    """Distinct losses charged on ``dataset`` (of one analyst if given) with their counts.

    Rows ``(loss_type, epsilon, delta, rho, count)``: both accountants' totals
    (:func:`spent_total`, :func:`zcdp_spent`) read these. When a checkpoint the anchor
    vouches for counts the charges up to some id (``conn.counted``), those come from the
    checkpoint and only the rows after it are read: the cost follows the charges since the
    last checkpoint, and a hand edit of an older row cannot change what is counted.
    """
    mark, by_dataset = conn.counted if conn.counted is not None else (0, {})
    if conn.batch is not None:
        rows = conn.batch.loss_groups(conn, dataset, analyst, mark)
        return _with_counted(rows, by_dataset.get(dataset), analyst)
    where, args = "dataset = ?", [dataset]
    args_: list[object] = list(args)
    if analyst is not None:
        where, args_ = where + " AND analyst = ?", [*args_, analyst]
    if mark:  # a closed range: estimated small even without statistics (chain.ID_BOUND)
        where, args_ = where + " AND id > ? AND id < ?", [*args_, mark, ID_BOUND]
    rows = conn.execute(
        f"SELECT loss_type, epsilon, delta, rho, COUNT(*) FROM charges WHERE {where} "
        "GROUP BY loss_type, epsilon, delta, rho",
        args_,
    ).fetchall()
    return _with_counted(rows, by_dataset.get(dataset), analyst)


def _with_counted(
    rows: list[Any],
    before: list[tuple[str, str, str | None, str | None, str | None, int]] | None,
    analyst: str | None,
) -> list[Any]:
    """``rows`` plus what the vouched checkpoint counts (``before``, of the dataset)."""
    if not before:
        return rows
    counts: dict[tuple[object, ...], int] = {}
    for row in rows:
        key = tuple(row[:4])
        counts[key] = counts.get(key, 0) + int(row[4])
    for who, kind, e, d, r, n in before:
        if analyst is None or who == analyst:
            counts[(kind, e, d, r)] = counts.get((kind, e, d, r), 0) + n
    return [(*k, n) for k, n in counts.items()]


def spent_total(conn: Tx, dataset: str, cap: PrivacyLoss, *, analyst: str | None) -> PrivacyLoss:
    """Exact sum of the charges on ``dataset`` (of one analyst if given), in the cap's kind.

    Each charge counts as the filter counted it when it was admitted: converted into the
    cap's kind by :func:`deniable.accounting.conversions.convert` (exact). SQLite groups
    identical losses first, and numerators over one denominator are added as integers, so
    the exact total costs a few integer operations per distinct loss value.
    """
    rows = loss_groups(conn, dataset, analyst=analyst)
    kind, kind_name = type(cap), encode_loss(cap)[0]
    sums: list[dict[int, int]] = [{} for _ in components(cap)]  # per component: den -> num
    for row in rows:
        count = int(row[4])
        if row[0] == kind_name:  # the common case: no conversion, no Fraction built
            values = [parse_fraction(text) for text in row[1:4] if text is not None]
        else:
            try:
                converted = convert(decode_loss(row), kind)
            except InvalidParameter as e:
                raise LedgerError(
                    f"dataset {dataset!r} holds a charge that its cap's kind cannot express"
                ) from e
            values = [(f.numerator, f.denominator) for f in components(converted)]
        if len(values) != len(sums):
            raise LedgerError("the ledger holds a malformed privacy loss")
        for bucket, (num, den) in zip(sums, values, strict=True):
            bucket[den] = bucket.get(den, 0) + num * count
    total = tuple(sum((Fraction(n, d) for d, n in b.items()), Fraction(0)) for b in sums)
    return from_components(kind, total)


def within(a: PrivacyLoss, b: PrivacyLoss) -> bool:
    """Whether ``a`` and ``b`` are of one kind and ``a <= b`` component-wise."""
    return type(a) is type(b) and all(
        x <= y for x, y in zip(components(a), components(b), strict=True)
    )


def meet(a: PrivacyLoss, b: PrivacyLoss) -> PrivacyLoss:
    """Component-wise minimum of two losses of one kind: what fits under both fits under it."""
    if type(a) is not type(b):
        raise LedgerError("an allowance has another loss kind than its dataset's cap")
    return from_components(
        type(a), tuple(min(x, y) for x, y in zip(components(a), components(b), strict=True))
    )


def admit(budget: BudgetFilter | ZCDPFilter, loss: PrivacyLoss, where: str) -> None:
    """Ask the filter to admit ``loss``; add ``where`` to its refusal, keeping its figures."""
    try:
        budget.charge(loss)
    except BudgetExceeded as e:
        raise BudgetExceeded(f"{where}: {e}", requested=e.requested, remaining=e.remaining) from e


def record_event(
    w: Write,
    dataset: str,
    action: Literal["register", "change_cap", "set_allowance"],
    analyst: str | None,
    loss: PrivacyLoss,
    previous: PrivacyLoss | None,
    now: str,
) -> None:
    """Insert a curator event and its chain entry, inside ``w``."""
    if action != "set_allowance":
        w.caps_changed = True
    prev_text = None if previous is None else json.dumps(list(encode_loss(previous)))
    event_id = w.conn.insert(
        "INSERT INTO curator_events (dataset, action, analyst, loss_type, epsilon, delta, rho, "
        "previous, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (dataset, action, analyst, *encode_loss(loss), prev_text, now),
    )
    w.append(
        action,
        {
            "event_id": event_id,
            "dataset": dataset,
            "analyst": analyst,
            "loss": list(encode_loss(loss)),
            "previous": prev_text,
            "time": now,
        },
    )


SAMPLED_UNDER_ZCDP = (
    "this dataset spends its budget with the zCDP accountant, which cannot take the charges of "
    "queries on a Bernoulli sample: they are increments of one amplified total, a guarantee "
    "only added up (docs/accounting.md); nothing was charged. Query the table without "
    "sample_rate, or a sampled table of a dataset with accountant='basic'"
)


def accountant_of(conn: Tx, dataset: str) -> Accountant:
    """How ``dataset``'s budget is spent (``"basic"`` when nothing is recorded)."""
    if not conn.has_table("accountants"):
        return "basic"
    row = conn.execute(ACCOUNTANT, (dataset,)).fetchone()
    if row is None:
        return "basic"
    try:
        return parse_accountant(str(row[0]))
    except InvalidParameter as e:
        raise LedgerError(f"dataset {dataset!r} has a malformed accountant") from e


def set_accountant(w: Write, dataset: str, accountant: Accountant, now: str) -> None:
    """Record ``dataset``'s accountant and its chain entry, inside ``w``."""
    w.caps_changed = True
    w.conn.ensure_extensions()
    spec = accountant_spec(accountant)
    w.conn.execute(
        "INSERT INTO accountants (dataset, spec, set_at) VALUES (?, ?, ?) "
        "ON CONFLICT (dataset) DO UPDATE SET spec = excluded.spec, set_at = excluded.set_at",
        (dataset, spec, now),
    )
    w.append("set_accountant", {"dataset": dataset, "spec": spec, "time": now})


def zcdp_spent(conn: Tx, dataset: str, *, analyst: str | None) -> ZCDPSpent:
    """Exact ``(Σρᵢ, Σδᵢ)`` of the charges on ``dataset`` (of one analyst if given)."""
    rows = loss_groups(conn, dataset, analyst=analyst)
    rho, delta = Fraction(0), Fraction(0)
    for row in rows:
        one = zcdp_charge(decode_loss(row))
        rho += one.rho * int(row[4])
        delta += one.delta * int(row[4])
    return ZCDPSpent(rho=rho, delta=delta)


def filter_of(
    conn: Tx,
    dataset: str,
    cap: PrivacyLoss,
    accountant: Accountant,
    *,
    analyst: str | None,
) -> BudgetFilter | ZCDPFilter:
    """The filter of ``cap`` (the dataset's or an allowance) with what was spent against it."""
    try:
        if accountant == "basic":
            dataset_cap = cap_of(conn, dataset)
            return BudgetFilter(cap, spent=spent_total(conn, dataset, dataset_cap, analyst=analyst))
        return make_filter(cap, accountant, spent=zcdp_spent(conn, dataset, analyst=analyst))
    except InvalidParameter as e:
        raise LedgerError(f"dataset {dataset!r}'s cap cannot be spent by its accountant") from e


def filter_total(budget: BudgetFilter | ZCDPFilter) -> dict[str, str]:
    """What the anchor records: the exact spent total (a loss, or ``(Σρ, Σδ)``), as JSON."""
    if isinstance(budget, ZCDPFilter):
        return zcdp_json(budget.used, budget.accountant.spec)
    return loss_json(budget.spent)


def check_zcdp_cap_change(
    conn: Tx,
    dataset: str,
    old: PrivacyLoss,
    cap: PrivacyLoss,
    accountant: Accountant,
) -> None:
    """Refuse a new cap for a charged zCDP dataset unless it only lowers the old one.

    The zCDP filter's guarantee (Feldman–Zrnic's Rényi filter, Whitehouse et al.'s filter for
    approximate zCDP) holds for a budget fixed before the first charge. A lower cap only
    makes the filter stop earlier: every run it admits is a run the old filter admits too
    (an analyst may always stop asking), so the old cap's guarantee still covers it (the
    lower cap is then a spending limit; it is the guarantee itself only if lowering did not
    depend on the answers). A higher cap, chosen after answers were seen, is covered by no
    theorem. "Lower" is checked where admission happens: ``ε`` and ``δ`` at most the old
    ones *and* the new ``ρ_max`` and δ pool at most the old ones.

    Raises:
        InvalidParameter: the new cap is not below the old one in that sense.
    """
    before = filter_of(conn, dataset, old, accountant, analyst=None)
    after = filter_of(conn, dataset, cap, accountant, analyst=None)
    lowered = (
        within(cap, old)
        and isinstance(before, ZCDPFilter)
        and isinstance(after, ZCDPFilter)
        and after.rho_max <= before.rho_max
        and after.delta_pool <= before.delta_pool
    )
    if not lowered:
        raise InvalidParameter(
            f"dataset {dataset!r} spends its cap through the zCDP accountant and already has "
            f"charges: its cap ({old}) cannot be raised to {cap}. The zCDP filter is sound "
            "for adaptively chosen queries only with a budget fixed before the first charge "
            "(a cap raised after answers were seen voids the guarantee); it may only be "
            "lowered (ε and δ both at most the current ones). Nothing was changed."
        )


def kind_name(loss: PrivacyLoss) -> str:
    """``(ε, δ)``, ``ε`` or ``ρ``: the kind of a budget, as messages name it."""
    if isinstance(loss, EpsilonDelta):
        return "(ε, δ)"
    return "ε" if isinstance(loss, Epsilon) else "ρ"


def over(budget: BudgetFilter | ZCDPFilter) -> bool:
    """Whether ``budget`` has spent more than its cap (e.g. after lowering the cap)."""
    if isinstance(budget, ZCDPFilter):
        used = budget.used
        return used.rho > budget.rho_max or used.delta > budget.delta_pool
    return not within(budget.spent, budget.cap)


def dataset_spent(
    conn: Tx, dataset: str, cap: PrivacyLoss, accountant: Accountant
) -> dict[str, str]:
    """``dataset``'s exact spent total as the anchor records it (JSON)."""
    if accountant == "basic":
        return loss_json(spent_total(conn, dataset, cap, analyst=None))
    return zcdp_json(zcdp_spent(conn, dataset, analyst=None), accountant_spec(accountant))


def admit_both(
    conn: Tx, dataset: str, analyst: str | None, loss: PrivacyLoss
) -> BudgetFilter | ZCDPFilter:
    """Admit ``loss`` against the dataset's filter and the analyst's allowance, or raise.

    The dataset admits ``loss`` for ``analyst`` when it fits the cap once everything spent
    *and* every other analyst's unspent reservation are counted (:func:`available`):
    ``spent + loss ≤ cap − Σ_{B ≠ analyst} max(0, reserved_B − spent_B)``, exactly, per
    component (``(Σρ, Σδ)`` under the zCDP accountant). An analyst with an allowance must
    also fit what is left of it. Returns the dataset's filter (its true spent total, for
    the anchor) with ``loss`` charged. Nothing is written here.

    Raises:
        BudgetExceeded: ``loss`` does not fit; for a named analyst the message and
            ``remaining`` say only what *they* may still spend (:func:`refusal`), never the
            dataset's spent total or others' reservations.
    """
    cap = cap_of(conn, dataset)
    accountant = accountant_of(conn, dataset)
    budget = filter_of(conn, dataset, cap, accountant, analyst=None)
    allowance, reserved = slices_of(conn, dataset, analyst)
    avail = available(
        conn, dataset, cap, accountant, budget, analyst=analyst, reservations=reserved
    )
    if analyst is None:
        if avail is budget:
            admit(budget, loss, f"dataset {dataset!r}")
            return budget
        if not avail.can_charge(loss):
            left = avail.remaining_for(loss)
            raise BudgetExceeded(
                f"{loss} does not fit what is unspent and unreserved of dataset {dataset!r}: "
                f"only {left} is; nothing was spent",
                requested=loss,
                remaining=left,
            )
        budget.charge(loss)
        return budget
    mine = (
        None
        if allowance is None
        else filter_of(conn, dataset, allowance, accountant, analyst=analyst)
    )
    if not (avail.can_charge(loss) and (mine is None or mine.can_charge(loss))):
        raise refusal(dataset, analyst, loss, avail, mine)
    if mine is not None:
        mine.charge(loss)
    budget.charge(loss)  # cannot refuse: avail counts at least what budget counts
    return budget


def refusal(
    dataset: str,
    analyst: str,
    loss: PrivacyLoss,
    avail: BudgetFilter | ZCDPFilter,
    mine: BudgetFilter | ZCDPFilter | None,
) -> BudgetExceeded:
    """The refusal of ``loss`` as ``analyst`` sees it: what *they* may still spend, and why.

    The figure is the least of what is left of their allowance and of what the dataset can
    still give them (its cap less everything spent and every other analyst's unspent
    reservation) — exactly what a sequence of refused requests would reveal anyway. The
    message never states the dataset's spent total, its remaining before reservations,
    other analysts' allowances or reservations, or its cap.
    """
    from_dataset = avail.remaining_for(loss)
    left = from_dataset if mine is None else meet(from_dataset, mine.remaining_for(loss))
    if mine is not None and not mine.can_charge(loss):
        why = "what is left of their allowance"
    else:
        why = (
            "what the dataset's shared budget can still give them: other analysts' spending "
            "and reservations count against it"
        )
    return BudgetExceeded(
        f"{loss} does not fit what analyst {analyst!r} may still spend on dataset "
        f"{dataset!r}: only {left} ({why}); nothing was spent",
        requested=loss,
        remaining=left,
    )


GROUPS_BY_ANALYST = (
    "SELECT analyst, loss_type, epsilon, delta, rho, COUNT(*) FROM charges "
    "WHERE dataset = ? AND id > ? AND id < ? GROUP BY analyst, loss_type, epsilon, delta, rho"
)
"""A dataset's charges after a checkpoint's last id, grouped by analyst and loss."""

OwnCharge = tuple[str, str, str, str | None, str | None, str | None]
"""(dataset, analyst, loss_type, ε, δ, ρ) of a charge a batch inserted."""


class ChargeBatch:
    """Admission's view of the charges while a batch is admitted in one write transaction.

    Set as ``tx.batch`` (:attr:`deniable.ledger.store.Tx.batch`) by
    :meth:`deniable.ledger.Ledger.charge`'s group commit. :meth:`prefetch` reads, in one
    round trip and *before the batch inserts anything*, everything admission will read:
    each dataset's cap and accountant, its charges after the vouched checkpoint grouped by
    analyst and loss, each analyst's slices, the idempotency keys, and (when the backend
    can) a block of new charge ids. Then every charge the batch inserts registers here
    (:func:`insert_charge`), and :func:`loss_groups` answers with the rows read plus those
    charges. This is exactly what a fresh read would return at that point: the writers'
    lock is held, so no other writer commits during the transaction, and every charge the
    transaction inserts while the batch is set goes through :func:`insert_charge`. So each
    member is admitted against everything committed before the batch *and* the members
    before it, as if each had its own transaction.
    """

    def __init__(self, mark: int) -> None:
        self._mark = mark
        self._base: dict[str, list[Any]] = {}  # dataset -> GROUPS_BY_ANALYST rows
        self._own: list[OwnCharge] = []
        self._keys: dict[tuple[str, str, str], int | None] = {}
        self._ids: list[int] = []

    def prefetch(
        self, tx: Tx, members: Iterable[tuple[str, str, str | None]], *, every_cap: bool
    ) -> None:
        """Read what admitting ``members`` ``(dataset, analyst, idempotency_key)`` needs.

        ``every_cap``: also every dataset's cap (:data:`ALL_CAPS`), for an anchor whose
        totals are recomputed at the end of the transaction (:func:`all_spent`).
        """
        members = list(members)
        datasets = sorted({d for d, _, _ in members})
        slices = sorted({(d, a) for d, a, _ in members})
        keys = sorted({(d, a, k) for d, a, k in members if k is not None})
        statements: list[tuple[str, tuple[object, ...]]] = []
        for d in datasets:
            statements.append((CAP, (d,)))
            if tx.has_table("accountants"):
                statements.append((ACCOUNTANT, (d,)))
            statements.append((GROUPS_BY_ANALYST, (d, self._mark, ID_BOUND)))
        statements.extend((SLICES, slices_params(d, a)) for d, a in slices)
        statements.extend((IDEMPOTENT, key) for key in keys)
        if every_cap:
            statements.append((ALL_CAPS, ()))
        ids = tx.charge_ids_query(len(members))
        if ids is not None:
            statements.append(ids)
        results = iter(tx.prefetch(statements))
        for d in datasets:
            next(results)  # CAP: the transaction keeps it for cap_of
            if tx.has_table("accountants"):
                next(results)
            self._base[d] = next(results)
        for _ in slices:
            next(results)
        for key in keys:
            rows = next(results)
            self._keys[key] = int(rows[0][0]) if rows else None
        if every_cap:
            next(results)  # kept by the transaction for all_spent
        if ids is not None:
            self._ids = sorted(int(r[0]) for r in next(results))

    def loss_groups(self, tx: Tx, dataset: str, analyst: str | None, mark: int) -> list[Any]:
        """Rows ``(loss_type, ε, δ, ρ, count)``: the charges read, then the batch's own."""
        if mark != self._mark:  # pragma: no cover - the mark is fixed per transaction
            raise LedgerError("a batch of charges was read against another checkpoint")
        base = self._base.get(dataset)
        if base is None:
            # Another dataset (the anchor's totals): read now. Exact as long as the batch
            # inserted nothing on it (its inserts would be counted twice); it cannot have,
            # as every member's dataset was prefetched.
            if any(own[0] == dataset for own in self._own):  # pragma: no cover
                raise LedgerError("a batch of charges read a dataset it did not prefetch")
            base = self._base[dataset] = tx.execute(
                GROUPS_BY_ANALYST, (dataset, mark, ID_BOUND)
            ).fetchall()
        counts: dict[tuple[object, ...], int] = {}
        for row in base:
            if analyst is None or row[0] == analyst:
                key = tuple(row[1:5])
                counts[key] = counts.get(key, 0) + int(row[5])
        for d, a, *loss in self._own:
            if d == dataset and (analyst is None or a == analyst):
                key = tuple(loss)
                counts[key] = counts.get(key, 0) + 1
        return [(*k, n) for k, n in counts.items()]

    def duplicate(self, dataset: str, analyst: str, key: str) -> int | None:
        """The id of the charge with this idempotency key (read, or the batch's), or None."""
        return self._keys.get((dataset, analyst, key))

    def next_id(self) -> int | None:
        """The next reserved charge id, or None when there is none left."""
        return self._ids.pop(0) if self._ids else None

    def record(
        self, dataset: str, analyst: str, loss: tuple[str, str | None, str | None, str | None],
        key: str | None, charge_id: int,
    ) -> None:  # fmt: skip
        """Register a charge the transaction inserted (counted from now on)."""
        self._own.append((dataset, analyst, *loss))
        if key is not None:
            self._keys[(dataset, analyst, key)] = charge_id


# -- reserved slices -------------------------------------------------------------------------


def reservation_of(conn: Tx, dataset: str, analyst: str) -> PrivacyLoss | None:
    """``analyst``'s reservation on ``dataset`` (None when none, or released to zero)."""
    loss = allowance_of(conn, dataset, RESERVED + analyst)
    return None if loss is None or not any(components(loss)) else loss


def reservations_of(conn: Tx, dataset: str) -> dict[str, PrivacyLoss]:
    """Every analyst's non-zero reservation on ``dataset``, by analyst name."""
    rows = conn.execute(
        "SELECT analyst, loss_type, epsilon, delta, rho FROM allowances "
        "WHERE dataset = ? AND substr(analyst, 1, ?) = ?",
        (dataset, len(RESERVED), RESERVED),
    ).fetchall()
    out: dict[str, PrivacyLoss] = {}
    for row in rows:
        loss = decode_loss(row[1:5])
        if any(components(loss)):
            out[str(row[0])[len(RESERVED) :]] = loss
    return out


def unspent_reservation(
    conn: Tx, dataset: str, accountant: Accountant, reservation: PrivacyLoss, analyst: str
) -> tuple[Fraction, ...]:
    """``max(0, reserved − spent)`` of ``analyst``, per component of the dataset's filter.

    In the cap's kind with the basic accountant; ``(ρ, δ)`` with the zCDP accountant (the
    reservation's ``ρ_max`` and δ pool less the analyst's ``Σρ`` and ``Σδ``).
    """
    held = filter_of(conn, dataset, reservation, accountant, analyst=analyst)
    if isinstance(held, ZCDPFilter):
        return (held.remaining_rho.rho, held.remaining_delta)
    return components(held.remaining)


def slices_of(
    conn: Tx, dataset: str, analyst: str | None
) -> tuple[PrivacyLoss | None, dict[str, PrivacyLoss]]:
    """``analyst``'s allowance (or None) and every non-zero reservation, in one read.

    The admission path's only read of the allowances table: reservations cost a charge no
    extra round trip to the database.
    """
    rows = conn.execute(SLICES, slices_params(dataset, analyst)).fetchall()
    allowance: PrivacyLoss | None = None
    reserved: dict[str, PrivacyLoss] = {}
    for row in rows:
        name, loss = str(row[0]), decode_loss(row[1:5])
        if name == analyst:
            allowance = loss
        elif any(components(loss)):
            reserved[name[len(RESERVED) :]] = loss
    return allowance, reserved


def slices_params(dataset: str, analyst: str | None) -> tuple[object, ...]:
    """The parameters of :data:`SLICES` for ``analyst`` on ``dataset``."""
    return (dataset, "" if analyst is None else analyst, len(RESERVED), RESERVED)


def held_for_others(
    conn: Tx,
    dataset: str,
    accountant: Accountant,
    *,
    analyst: str | None,
    reservations: Mapping[str, PrivacyLoss] | None = None,
) -> tuple[Fraction, ...] | None:
    """The sum of every other analyst's unspent reservation, or None when nobody has one.

    ``reservations``: every reservation on ``dataset`` when the caller already read them.
    """
    if reservations is None:
        reservations = reservations_of(conn, dataset)
    found = {b: r for b, r in reservations.items() if b != analyst}
    if not found:
        return None
    total: tuple[Fraction, ...] | None = None
    for b, r in sorted(found.items()):
        one = unspent_reservation(conn, dataset, accountant, r, b)
        total = one if total is None else tuple(x + y for x, y in zip(total, one, strict=True))
    return total


def with_held(
    budget: BudgetFilter | ZCDPFilter,
    cap: PrivacyLoss,
    accountant: Accountant,
    held: tuple[Fraction, ...],
) -> BudgetFilter | ZCDPFilter:
    """``budget``'s filter with ``held`` counted as spent (what others hold in reserve)."""
    if isinstance(budget, ZCDPFilter):
        used = budget.used
        spent = ZCDPSpent(rho=used.rho + held[0], delta=used.delta + held[1])
        return make_filter(cap, accountant, spent=spent)
    values = tuple(s + h for s, h in zip(components(budget.spent), held, strict=True))
    return BudgetFilter(cap, spent=from_components(type(cap), values))


def available(
    conn: Tx,
    dataset: str,
    cap: PrivacyLoss,
    accountant: Accountant,
    budget: BudgetFilter | ZCDPFilter,
    *,
    analyst: str | None,
    reservations: Mapping[str, PrivacyLoss] | None = None,
) -> BudgetFilter | ZCDPFilter:
    """The dataset's filter as ``analyst`` may spend it: others' reservations held back.

    ``budget`` itself when nobody else holds a reservation (the common case).
    ``reservations``: every reservation on ``dataset`` when the caller already read them.
    """
    held = held_for_others(conn, dataset, accountant, analyst=analyst, reservations=reservations)
    return budget if held is None else with_held(budget, cap, accountant, held)


def analyst_remaining(conn: Tx, dataset: str, analyst: str) -> PrivacyLoss:
    """What ``analyst`` may still spend on ``dataset``: their own slice of it.

    The least of what is left of their allowance (if any) and of what the dataset can still
    give them (its cap less everything spent and every other analyst's unspent
    reservation). With a reservation covering their allowance this is what is left of
    their allowance, whatever others do.
    """
    cap = cap_of(conn, dataset)
    accountant = accountant_of(conn, dataset)
    budget = filter_of(conn, dataset, cap, accountant, analyst=None)
    left = available(conn, dataset, cap, accountant, budget, analyst=analyst).remaining
    allowance = allowance_of(conn, dataset, analyst)
    if allowance is None:
        return left
    return meet(left, filter_of(conn, dataset, allowance, accountant, analyst=analyst).remaining)


def set_reservation(
    w: Write, dataset: str, analyst: str, reservation: PrivacyLoss | None, now: str
) -> None:
    """Reserve ``reservation`` of ``dataset`` for ``analyst`` (None: release it), inside ``w``.

    A reservation is subtracted from what every other analyst may spend (:func:`admit_both`).
    It can never be made larger than what is unspent and unreserved: the analyst's unspent
    part of it, ``max(0, reservation − spent_analyst)``, must fit the dataset's cap once
    everything spent and every other analyst's unspent reservation are counted (exactly, in
    the dataset filter's terms: per component, or ``(ρ, δ)`` under the zCDP accountant).

    Raises:
        InvalidParameter: the reservation is of another kind than the cap, or larger than
            what is unspent and unreserved (the message says how much is); nothing written.
    """
    conn = w.conn
    previous = allowance_of(conn, dataset, RESERVED + analyst)
    if reservation is None:
        if previous is None or not any(components(previous)):
            return
        zero = tuple(Fraction(0) for _ in components(previous))
        reservation = from_components(type(previous), zero)
    elif previous == reservation:
        return
    cap = cap_of(conn, dataset)
    if type(reservation) is not type(cap):
        raise InvalidParameter(
            f"a reservation is a slice of dataset {dataset!r}'s cap and must be of its kind "
            f"({kind_name(cap)}); nothing was changed"
        )
    if any(components(reservation)):
        accountant = accountant_of(conn, dataset)
        budget = filter_of(conn, dataset, cap, accountant, analyst=None)
        free = available(conn, dataset, cap, accountant, budget, analyst=analyst)
        need = unspent_reservation(conn, dataset, accountant, reservation, analyst)
        if isinstance(free, ZCDPFilter):
            used = free.used
            fits = used.rho + need[0] <= free.rho_max and used.delta + need[1] <= free.delta_pool
            left = (
                f"ρ = {show(free.remaining_rho.rho)} with δ = {show(free.remaining_delta)} for "
                "δ-charges, in the zCDP accountant's terms"
            )
        else:
            fits = free.can_charge(from_components(type(cap), need))
            left = str(free.remaining)
        if not fits:
            raise InvalidParameter(
                f"cannot reserve {reservation} of dataset {dataset!r} for {analyst!r}: it "
                f"exceeds what is unspent and unreserved ({left} is, beyond what "
                f"{analyst!r} has already spent); reserve less, or release another "
                "analyst's reservation first. Nothing was changed"
            )
    conn.execute(
        "INSERT INTO allowances (dataset, analyst, loss_type, epsilon, delta, rho, set_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dataset, analyst) DO UPDATE SET "
        "loss_type = excluded.loss_type, epsilon = excluded.epsilon, "
        "delta = excluded.delta, rho = excluded.rho, set_at = excluded.set_at",
        (dataset, RESERVED + analyst, *encode_loss(reservation), now),
    )
    record_event(w, dataset, "set_allowance", RESERVED + analyst, reservation, previous, now)


def number_rows(rows: Iterable[Any]) -> list[int]:
    """Release numbers of charge rows (``(id, dataset, analyst, …)``) listed in commit order.

    The rows must hold every charge of each analyst they name on their dataset (a listing of
    a dataset, whole or of one analyst): each is numbered 1, 2, … within its analyst.
    """
    seen: dict[tuple[str, str], int] = {}
    out: list[int] = []
    for r in rows:
        key = (str(r[1]), str(r[2]))
        seen[key] = seen.get(key, 0) + 1
        out.append(seen[key])
    return out


def event_action(
    action: str, analyst: str | None
) -> Literal["register", "change_cap", "set_allowance", "reserve"]:
    """A stored curator event's action as the ledger reports it (a reservation's: reserve)."""
    if action == "set_allowance" and analyst is not None and analyst.startswith(RESERVED):
        return "reserve"
    if action not in ("register", "change_cap", "set_allowance"):
        raise LedgerError("the ledger holds a curator event of an unknown kind")
    return action  # type: ignore[return-value]


def event_analyst(analyst: str | None) -> str | None:
    """The analyst a stored curator event concerns (a reservation's row names its holder)."""
    if analyst is not None and analyst.startswith(RESERVED):
        return analyst[len(RESERVED) :]
    return analyst


def check_cap_keeps_reservations(
    conn: Tx, dataset: str, cap: PrivacyLoss, accountant: Accountant
) -> None:
    """Refuse a new cap below what is spent plus every analyst's unspent reservation.

    A reservation promises its holder the whole of it; a cap lowered beneath the promises
    would break them silently.

    Raises:
        InvalidParameter: the new cap cannot hold them (nothing is changed).
    """
    held = held_for_others(conn, dataset, accountant, analyst=None)
    if held is None:
        return
    after = filter_of(conn, dataset, cap, accountant, analyst=None)
    if over(with_held(after, cap, accountant, held)):
        raise InvalidParameter(
            f"dataset {dataset!r}'s cap cannot become {cap}: it would no longer hold what "
            "was spent and what analysts' reservations still promise them; release or lower "
            "reservations first (deniable analyst allow NAME without --reserve). Nothing was "
            "changed"
        )


def release_number(conn: Tx, dataset: str, analyst: str, charge_id: int) -> int | None:
    """The number ``analyst`` knows charge ``charge_id`` by (1, 2, … per dataset), or None.

    Its rank among the analyst's own charges on ``dataset`` in commit order: what an analyst
    is shown instead of the ledger's global id, which would count everyone's releases.
    None when the charge is not the analyst's on that dataset.
    """
    row = conn.execute(
        "SELECT 1 FROM charges WHERE id = ? AND dataset = ? AND analyst = ?",
        (charge_id, dataset, analyst),
    ).fetchone()
    if row is None:
        return None
    count = conn.execute(
        "SELECT COUNT(*) FROM charges WHERE dataset = ? AND analyst = ? AND id <= ?",
        (dataset, analyst, charge_id),
    ).fetchone()
    return int(count[0])


def charge_by_number(conn: Tx, dataset: str, analyst: str, number: int) -> int | None:
    """The ledger's id of ``analyst``'s release number ``number`` on ``dataset``, or None."""
    if number < 1:
        return None
    row = conn.execute(
        "SELECT id FROM charges WHERE dataset = ? AND analyst = ? ORDER BY id LIMIT 1 OFFSET ?",
        (dataset, analyst, number - 1),
    ).fetchone()
    return None if row is None else int(row[0])


def admit_and_insert(
    w: Write,
    *,
    dataset: str,
    analyst: str,
    query_key: str,
    query_text: str,
    loss: PrivacyLoss,
    details_json: str,
    idempotency_key: str | None,
) -> Charge:
    """Admit ``loss`` (dataset and allowance) and insert its charge, inside ``w``.

    The one write path of a release (:meth:`Ledger.charge`, :meth:`Ledger.record_sample_release`):
    nothing is written when the filter refuses; the anchor's total follows the charge.
    """
    budget = admit_charge(w, dataset=dataset, analyst=analyst, loss=loss)
    return record_charge(
        w,
        budget,
        dataset=dataset,
        analyst=analyst,
        query_key=query_key,
        query_text=query_text,
        loss=loss,
        details_json=details_json,
        idempotency_key=idempotency_key,
    )


def admit_charge(
    w: Write, *, dataset: str, analyst: str, loss: PrivacyLoss
) -> BudgetFilter | ZCDPFilter:
    """Admit ``loss`` for ``analyst`` on ``dataset`` inside ``w``, or raise; writes nothing.

    Counts every charge the transaction can see, its own earlier inserts included (a
    batch of charges in one transaction is admitted in order, each against those before
    it). Returns the dataset's filter with ``loss`` charged (for the anchor's total).

    Raises:
        BudgetExceeded, UnknownDataset, InvalidParameter, LedgerError: as
            :func:`admit_both`; nothing was written.
    """
    check_not_reserved(analyst)
    return admit_both(w.conn, dataset, analyst, loss)


def record_charge(
    w: Write,
    budget: BudgetFilter | ZCDPFilter,
    *,
    dataset: str,
    analyst: str,
    query_key: str,
    query_text: str,
    loss: PrivacyLoss,
    details_json: str,
    idempotency_key: str | None,
) -> Charge:
    """Insert the charge :func:`admit_charge` admitted (``budget`` its filter), inside ``w``."""
    now = utc_now()
    charge_id = insert_charge(
        w,
        dataset=dataset,
        analyst=analyst,
        query_key=query_key,
        query_text=query_text,
        loss=loss,
        now=now,
        details_json=details_json,
        idempotency_key=idempotency_key,
    )
    w.spent[dataset] = filter_total(budget)
    return Charge(
        id=charge_id,
        dataset=dataset,
        analyst=analyst,
        query_key=query_key,
        query_text=query_text,
        loss=loss,
        time=datetime.fromisoformat(now),
        details=decode_details(details_json),
        status="charged",
        idempotency_key=idempotency_key,
    )


INSERT_CHARGE = (
    "INSERT INTO charges (dataset, analyst, query_key, query_text, loss_type, "
    "epsilon, delta, rho, time, details, status, idempotency_key) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'charged', ?)"
)
INSERT_CHARGE_WITH_ID = (
    "INSERT INTO charges (id, dataset, analyst, query_key, query_text, loss_type, "
    "epsilon, delta, rho, time, details, status, idempotency_key) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'charged', ?)"
)
"""A charge row; the second with an id reserved for a batch (:class:`ChargeBatch`)."""


def insert_charge(
    w: Write,
    *,
    dataset: str,
    analyst: str,
    query_key: str,
    query_text: str,
    loss: PrivacyLoss,
    now: str,
    details_json: str,
    idempotency_key: str | None,
) -> int:
    """Insert one charge row and its chain entry (no admission: callers admitted it).

    Inside a batch (``w.conn.batch``) the charge is registered with it, and takes one of
    its reserved ids when it has some: the insert then travels with the next statement.
    """
    encoded = encode_loss(loss)
    row = (dataset, analyst, query_key, query_text, *encoded, now, details_json, idempotency_key)
    batch = w.conn.batch
    reserved = None if batch is None else batch.next_id()
    if reserved is None:
        charge_id = w.conn.insert(INSERT_CHARGE, row)
    else:
        charge_id = reserved
        w.conn.defer(INSERT_CHARGE_WITH_ID, (charge_id, *row))
    if batch is not None:
        batch.record(dataset, analyst, encoded, idempotency_key, charge_id)
    w.append(
        "charge",
        {
            "id": charge_id,
            "dataset": dataset,
            "analyst": analyst,
            "query_key": query_key,
            "query_text": query_text,
            "loss": list(encoded),
            "time": now,
            "details": details_json,
            "idempotency_key": idempotency_key,
        },
    )
    return charge_id


# -- settling rows edited by hand (Ledger.acknowledge) ---------------------------------------


def lost_by_edit(expected: tuple[Any, ...], found: tuple[Any, ...] | None) -> list[PrivacyLoss]:
    """What a charge row lost against the chain's record: charged again on acknowledgement.

    Deleted, moved to another dataset or analyst, or changed to another kind: the whole
    recorded loss. Edited to a smaller amount: the difference, component by component
    (so the charge then counts at the larger of its two amounts). Otherwise nothing.
    """
    recorded = decode_loss(expected[5:9])
    if found is None or tuple(found[1:3]) != tuple(expected[1:3]):
        return [recorded]
    try:
        now = decode_loss(found[5:9])
    except (LedgerError, InvalidParameter, ValueError, TypeError, KeyError, ZeroDivisionError):
        return [recorded]
    if type(now) is not type(recorded):
        return [recorded]
    lost = tuple(
        max(Fraction(0), a - b) for a, b in zip(components(recorded), components(now), strict=True)
    )
    return [from_components(type(recorded), lost)] if any(lost) else []


def restore_row(
    conn: Tx, table: str, expected: tuple[Any, ...] | None, found: tuple[Any, ...] | None
) -> None:
    """Write back a row that bounds spending as the chain records it (acknowledgement).

    Caps, allowances and accountants (a raised cap or allowance would give budget), a
    revocation (a revoked token must stay revoked; the name stays taken) and a consumed
    sample (its release must stay its only one) return to the chain's values. Rows the
    chain does not know, and differences these writes cannot undo, are left to be accepted.
    """
    if expected is None or expected == found:
        return
    if table == "datasets":
        if found is None:
            conn.execute(
                "INSERT INTO datasets (name, loss_type, epsilon, delta, rho, registered_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                expected,
            )
        elif tuple(found[1:5]) != tuple(expected[1:5]):
            conn.execute(
                "UPDATE datasets SET loss_type = ?, epsilon = ?, delta = ?, rho = ? WHERE name = ?",
                (*expected[1:5], expected[0]),
            )
    elif table == "allowances":
        if found is None:
            conn.execute(
                "INSERT INTO allowances (dataset, analyst, loss_type, epsilon, delta, rho, "
                "set_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                expected,
            )
        else:
            conn.execute(
                "UPDATE allowances SET loss_type = ?, epsilon = ?, delta = ?, rho = ?, "
                "set_at = ? WHERE dataset = ? AND analyst = ?",
                (*expected[2:7], expected[0], expected[1]),
            )
    elif table == "accountants":
        conn.ensure_extensions()
        if found is None:
            conn.execute(
                "INSERT INTO accountants (dataset, spec, set_at) VALUES (?, ?, ?)", expected
            )
        else:
            conn.execute(
                "UPDATE accountants SET spec = ?, set_at = ? WHERE dataset = ?",
                (expected[1], expected[2], expected[0]),
            )
    elif table == "analysts" and expected[5] is not None:
        if found is None:
            conn.execute(
                "INSERT INTO analysts (id, name, role, digest, created, revoked_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                expected,
            )
        elif found[5] is None:
            conn.execute(
                "UPDATE analysts SET revoked_at = ? WHERE id = ?", (expected[5], expected[0])
            )
    elif table == "sample_releases" and found is None:
        charge = conn.execute("SELECT 1 FROM charges WHERE id = ?", (expected[2],)).fetchone()
        if charge is not None:
            conn.ensure_extensions()
            conn.execute(
                "INSERT INTO sample_releases (dataset, sample, charge_id, rate, time) "
                "VALUES (?, ?, ?, ?, ?)",
                expected,
            )
