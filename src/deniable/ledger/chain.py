"""The chain: hash-chained entries, their replay and audit, and the live anchor check.

Every mutation of the ledger appends one entry to the ``chain`` table in the same
transaction (:class:`Write`); the entries are the ledger's source of truth. :func:`audit`
replays them and compares every table and the anchor with what they say
(:mod:`deniable.ledger.integrity` holds the hash and the anchor file). Nothing here depends
on the database used: it reads through :class:`~deniable.ledger.store.Tx`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from deniable.errors import LedgerError
from deniable.ledger.integrity import (
    GENESIS,
    Anchor,
    AnchorUnreadable,
    FileLock,
    LedgerReport,
    canonical,
    entry_hash,
    read_anchor,
    write_anchor,
)
from deniable.ledger.records import CHARGE_COLUMNS
from deniable.ledger.store import Counted, Tx

APPEND = "INSERT INTO chain (seq, op, payload, hash) VALUES (?, ?, ?, ?)"
"""The statement that appends an entry (a backend may prepare it once per connection)."""


class Write:
    """One write transaction in progress: appends chain entries and collects spent totals."""

    def __init__(self, conn: Tx, seq: int, head: str) -> None:
        self.conn = conn
        self.start = seq
        self.seq = seq
        self.head = head
        self.spent: dict[str, dict[str, str]] = {}  # spent totals for the anchor, as JSON
        self.recompute_all = False
        self.caps_changed = False  # a cap or accountant changed: the anchor re-reads them
        self.previous: Anchor | None = None
        self.checkpoint: tuple[int, str] | None = None  # (seq, hash) of one made here

    def append(self, op: str, payload: dict[str, object]) -> int:
        """Append the entry ``op`` with ``payload`` to the chain; return its number."""
        text = canonical({"op": op, **payload})
        seq = self.seq + 1
        digest = entry_hash(self.head, seq, text)
        # Nothing reads the insert's result: it may travel with the next statement.
        self.conn.defer(APPEND, (seq, op, text, digest))
        self.seq, self.head = seq, digest
        return seq


WriteMode = Literal["trusted", "lenient", "acknowledge"]


def anchor_key(anchor: Anchor | None, unreadable: str | None) -> str | None:
    """What identifies an anchor's state (to notice that it changed)."""
    if anchor is not None:
        return f"{anchor.ledger_id}:{anchor.seq}:{anchor.head}"
    return unreadable


Rows = dict[object, tuple[object, ...]]
TotalKey = tuple[str, str, str, str | None, str | None, str | None]
"""(dataset, analyst, loss_type, ε, δ, ρ): charges of one loss by one analyst on one dataset."""

# Rows of the small tables are kept whole in a checkpoint; each table's key, from its row.
_SMALL_TABLES: dict[str, Callable[[tuple[object, ...]], object]] = {
    "datasets": lambda r: r[0],
    "allowances": lambda r: (r[0], r[1]),
    "analysts": lambda r: r[0],
    "accountants": lambda r: r[0],
    "samples": lambda r: (r[0], r[1]),
}


class Replay:
    """The tables' rows as the chain says they must be, and the exact totals of the charges.

    A replay starts empty (entry 1 next) or from a checkpoint (:meth:`from_checkpoint`): then
    it holds the small tables whole and, of the growing ones (charges, answers, curator
    events), only the rows written after the checkpoint; ``marks`` says where those begin.
    """

    def __init__(self) -> None:
        self.ledger_id: str | None = None
        self.datasets: Rows = {}
        self.allowances: Rows = {}
        self.events: Rows = {}
        self.charges: Rows = {}
        self.answers: Rows = {}
        self.analysts: Rows = {}
        self.accountants: Rows = {}
        self.samples: Rows = {}
        # Charges counted per (dataset, analyst, loss_type, ε, δ, ρ): the exact totals.
        self.totals: dict[TotalKey, int] = {}
        # Highest charge and event ids, and row counts of charges and answers, so far.
        self.marks: dict[str, int] = {"charges": 0, "events": 0, "n_charges": 0, "n_answers": 0}
        self.base: dict[str, int] | None = None  # the checkpoint's marks, when started from one
        self.old_answered: set[int] = set()  # charges before the checkpoint answered after it

    @classmethod
    def from_checkpoint(cls, body: Mapping[str, Any]) -> Replay:
        """The replay state a checkpoint's body records (rows, totals, marks)."""
        replay = cls()
        replay.ledger_id = str(body["ledger_id"])
        for name, key in _SMALL_TABLES.items():
            table: Rows = getattr(replay, name)
            for row in body["state"][name]:
                value = tuple(row)
                table[key(value)] = value
        for item in body["totals"]:
            replay.totals[tuple(item[:6])] = int(item[6])
        replay.marks = {k: int(v) for k, v in body["marks"].items()}
        replay.base = dict(replay.marks)
        return replay

    def checkpoint_body(self, seq: int, head: str) -> str:
        """The canonical text of a checkpoint of this state at entry ``seq`` (hash ``head``)."""
        state = {
            name: sorted((list(r) for r in getattr(self, name).values()), key=canonical)
            for name in _SMALL_TABLES
        }
        totals = sorted(([*k, n] for k, n in self.totals.items()), key=canonical)
        return canonical(
            {
                "ledger_id": self.ledger_id,
                "seq": seq,
                "head": head,
                "state": state,
                "totals": totals,
                "marks": self.marks,
            }
        )

    def apply(self, seq: int, op: str, d: dict[str, Any]) -> None:
        """Apply entry ``seq``; raise ValueError, KeyError, TypeError or IndexError if invalid."""
        if d.get("op") != op:
            raise ValueError("op")
        if op == "create":
            if seq != 1:
                raise ValueError("create")
            self.ledger_id = str(d["ledger_id"])
            return
        if seq == 1:
            raise ValueError("first")
        if op in ("register", "change_cap", "set_allowance"):
            loss: tuple[object, ...] = tuple(d["loss"])
            name = d["dataset"]
            self.events[d["event_id"]] = (
                d["event_id"],
                name,
                op,
                d["analyst"],
                *loss,
                d["previous"],
                d["time"],
            )
            self.marks["events"] = max(self.marks["events"], int(d["event_id"]))
            if op == "register":
                self.datasets[name] = (name, *loss, d["time"])
            elif op == "change_cap":
                self.datasets[name] = (name, *loss, self.datasets[name][5])
            else:
                key = (name, d["analyst"])
                self.allowances[key] = (*key, *loss, d["time"])
        elif op == "charge":
            loss = tuple(d["loss"])
            if len(loss) != 4:
                raise ValueError("loss")
            self.charges[d["id"]] = (
                d["id"],
                d["dataset"],
                d["analyst"],
                d["query_key"],
                d["query_text"],
                *loss,
                d["time"],
                d["details"],
                "charged",
                d["idempotency_key"],
            )
            kind, e, dd, r = (None if x is None else str(x) for x in loss)
            total: TotalKey = (str(d["dataset"]), str(d["analyst"]), str(kind), e, dd, r)
            self.totals[total] = self.totals.get(total, 0) + 1
            self.marks["charges"] = max(self.marks["charges"], int(d["id"]))
            self.marks["n_charges"] += 1
        elif op == "answer":
            charge_id = d["charge_id"]
            self.marks["n_answers"] += 1
            if charge_id not in self.charges and self.base is not None:
                if not isinstance(charge_id, int) or not 0 < charge_id <= self.base["charges"]:
                    raise ValueError("answer")
                if charge_id in self.old_answered:
                    raise ValueError("answer")
                self.old_answered.add(charge_id)
                self.answers[charge_id] = (charge_id, None, None, d["sha256"], d["time"])
                return
            c = self.charges[charge_id]
            if c[11] != "charged":
                raise ValueError("answer")
            self.charges[charge_id] = (*c[:11], "answered", c[12])
            self.answers[charge_id] = (charge_id, c[1], c[3], d["sha256"], d["time"])
        elif op == "add_analyst":
            self.analysts[d["id"]] = (
                d["id"],
                d["name"],
                d["role"],
                d["digest"],
                d["created"],
                None,
            )
        elif op == "revoke_analyst":
            a = self.analysts[d["id"]]
            self.analysts[d["id"]] = (*a[:5], d["time"])
        elif op == "set_accountant":
            if d["dataset"] not in self.datasets:
                raise ValueError("set_accountant")
            self.accountants[d["dataset"]] = (d["dataset"], d["spec"], d["time"])
        elif op == "sample_release":
            if d["charge_id"] not in self.charges:
                raise ValueError("sample_release")
            key = (d["dataset"], d["sample"])
            self.samples[key] = (*key, d["charge_id"], d["rate"], d["time"])
        elif op == "acknowledge":
            for table, key, was, found in d.get("accepted", ()):
                self._accept(table, key, was, found)
        else:
            raise ValueError(op)

    def _count(self, row: tuple[object, ...], step: int) -> None:
        """Add ``step`` to the total of a charge row's (dataset, analyst, loss)."""
        kind, e, dd, r = (None if x is None else str(x) for x in row[5:9])
        key: TotalKey = (str(row[1]), str(row[2]), str(kind), e, dd, r)
        n = self.totals.get(key, 0) + step
        if n < 0:
            raise ValueError("accepted")
        if n:
            self.totals[key] = n
        else:
            self.totals.pop(key, None)
        self.marks["n_charges"] += step

    def _accept(self, table: str, key: object, was: Any, found: Any) -> None:
        """A curator accepted a row as the database held it (None: deleted).

        The replay then expects that row, and a charge counts as found: the acknowledgement
        charged again whatever an accepted charge lost (see ``Ledger.acknowledge``).
        Growing tables before a replay's checkpoint are not compared; their totals are
        adjusted all the same, so every replay path gives the same checkpoints.
        """
        rows: Rows = getattr(self, ACCEPTED_TABLES[table])
        k = tuple(key) if isinstance(key, list) else key
        before: tuple[Any, ...] | None = None if was is None else tuple(was)
        after: tuple[Any, ...] | None = None if found is None else tuple(found)
        if table == "charges":
            if before is not None:
                self._count(before, -1)
            if after is not None:
                self._count(after, 1)
                self.marks["charges"] = max(self.marks["charges"], int(after[0]))
        elif table == "answers":
            self.marks["n_answers"] += (after is not None) - (before is not None)
        elif table == "curator_events" and after is not None:
            self.marks["events"] = max(self.marks["events"], int(after[0]))
        if self.base is not None and table in ("charges", "answers", "curator_events"):
            limit = self.base["events" if table == "curator_events" else "charges"]
            if isinstance(k, int) and k <= limit:
                return
        if after is None:
            rows.pop(k, None)
        else:
            rows[k] = after


def compare(
    table: str,
    expected: Rows,
    actual: Rows,
    problems: list[str],
) -> None:
    """Add to ``problems`` how the ``actual`` rows differ from the ``expected`` ones."""
    if expected == actual:
        return

    def show(keys: list[object]) -> str:
        shown = ", ".join(str(k) for k in keys[:5])
        return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

    edited = [k for k in expected if k in actual and expected[k] != actual[k]]
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    if edited:
        problems.append(
            f"table {table}: row(s) {show(edited)} differ from what the chain recorded: the "
            "database was edited by hand"
        )
    if missing:
        problems.append(
            f"table {table}: row(s) {show(missing)} recorded in the chain are missing: rows "
            "were deleted"
        )
    if extra:
        problems.append(
            f"table {table}: row(s) {show(extra)} are not in the chain: rows were added "
            "outside the ledger"
        )


def rows_by(
    conn: Tx,
    sql: str,
    key: Callable[[tuple[object, ...]], object],
    params: tuple[object, ...] = (),
) -> Rows:
    """The rows ``sql`` returns, by ``key``."""
    return {key(r): tuple(r) for r in conn.execute(sql, params)}


# -- checkpoints ---------------------------------------------------------------------------

ID_BOUND = 1 << 62
"""Upper end of the id ranges read after a checkpoint (see :func:`_table_pairs`)."""

CHECKPOINT_EVERY = 1000
"""A write that leaves at least this many entries after the last checkpoint makes a new one."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A stored checkpoint: entry ``seq`` with hash ``head``, the body and its SHA-256."""

    seq: int
    head: str
    body: str
    hash: str

    def parsed(self) -> dict[str, Any]:
        """The body as JSON (ledger_id, seq, head, state, totals, marks)."""
        value = json.loads(self.body)
        if not isinstance(value, dict):
            raise ValueError("checkpoint")
        return value


def body_hash(body: str) -> str:
    """SHA-256 (hex) of a checkpoint's body: what the anchor records."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def load_checkpoint(conn: Tx, seq: int) -> Checkpoint | None:
    """The checkpoint at entry ``seq``, or None."""
    if not conn.has_table("checkpoints"):
        return None
    row = conn.execute(
        "SELECT seq, head, body, hash FROM checkpoints WHERE seq = ?", (seq,)
    ).fetchone()
    if row is None:
        return None
    return Checkpoint(seq=int(row[0]), head=str(row[1]), body=str(row[2]), hash=str(row[3]))


def vouched(
    conn: Tx, anchor: Anchor | None, ledger_id: str
) -> tuple[Checkpoint | None, str | None]:
    """The checkpoint ``anchor`` vouches for, or (None, the problem in words).

    (None, None) when the anchor vouches for none (no checkpoint yet, an older anchor, or an
    anchor of another ledger: that is reported elsewhere).
    """
    if anchor is None or anchor.checkpoint is None or anchor.ledger_id != ledger_id:
        return None, None
    seq, digest = anchor.checkpoint
    found = load_checkpoint(conn, seq)
    if found is None:
        return None, (
            f"the checkpoint at entry {seq} that the anchor vouches for is missing: rows were "
            "deleted"
        )
    if found.hash != digest or body_hash(found.body) != digest:
        return None, (
            f"the checkpoint at entry {seq} differs from the one the anchor vouches for: it "
            "was edited"
        )
    return found, None


def replay_from(
    conn: Tx, base: Checkpoint | None, upto: int | None = None
) -> tuple[Replay, int, str]:
    """The replay state at entry ``upto`` (default: the last), from ``base`` or entry 1.

    Reads the chain only, each entry's hash checked against its predecessor.

    Raises:
        LedgerError: the chain after ``base`` does not verify.
    """
    replay = Replay() if base is None else Replay.from_checkpoint(base.parsed())
    seq, head = (0, GENESIS) if base is None else (base.seq, base.head)
    if base is not None:
        row = conn.execute("SELECT hash FROM chain WHERE seq = ?", (base.seq,)).fetchone()
        if row is None or str(row[0]) != base.head:
            raise LedgerError("the chain no longer matches its last checkpoint")
    last = (1 << 62) if upto is None else upto
    for s, op, payload, digest in conn.execute(
        "SELECT seq, op, payload, hash FROM chain WHERE seq > ? AND seq <= ? ORDER BY seq",
        (seq, last),
    ):
        if s != seq + 1 or entry_hash(head, s, payload) != digest:
            raise LedgerError(f"chain entry {s} does not verify; no checkpoint was made")
        try:
            replay.apply(s, op, json.loads(payload))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise LedgerError(f"chain entry {s} cannot be replayed; no checkpoint was made") from e
        seq, head = s, digest
    if upto is not None and seq != upto:
        raise LedgerError(f"chain entry {seq + 1} is missing; no checkpoint was made")
    return replay, seq, head


def make_checkpoint(w: Write, base: Checkpoint | None) -> Checkpoint:
    """Build and insert the checkpoint at ``w``'s last entry, inside ``w``.

    The checkpoint is a function of the chain alone: the state of ``base`` (a checkpoint the
    anchor vouches for, or None to start from entry 1) with every entry after it replayed,
    each entry's hash checked against its predecessor (:func:`replay_from`). Table rows are
    never read, so a row edited by hand cannot be laundered into a checkpoint.

    Raises:
        LedgerError: the chain after ``base`` does not verify (nothing is written then: the
            caller's transaction rolls back).
    """
    conn = w.conn
    replay, seq, head = replay_from(conn, base)
    body = replay.checkpoint_body(seq, head)
    made = Checkpoint(seq=seq, head=head, body=body, hash=body_hash(body))
    conn.ensure_extensions()
    conn.execute(
        "INSERT INTO checkpoints (seq, head, body, hash) VALUES (?, ?, ?, ?)",
        (made.seq, made.head, made.body, made.hash),
    )
    return made


def confirms(conn: Tx, base: Checkpoint | None, later: Checkpoint) -> bool:
    """Whether ``later`` (made by another writer) is what the chain gives from ``base``.

    A host whose anchor vouches for an older checkpoint adopts a later one only after
    replaying the entries between them: its anchor then vouches only for what it checked.

    Raises:
        LedgerError: the chain between them does not verify.
    """
    replay, seq, head = replay_from(conn, base, later.seq)
    return later.head == head and body_hash(replay.checkpoint_body(seq, head)) == later.hash


def latest_checkpoint(conn: Tx) -> Checkpoint | None:
    """The stored checkpoint with the highest entry number, or None."""
    if not conn.has_table("checkpoints"):
        return None
    row = conn.execute(
        "SELECT seq, head, body, hash FROM checkpoints ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    return Checkpoint(seq=int(row[0]), head=str(row[1]), body=str(row[2]), hash=str(row[3]))


def counted(checkpoint: Checkpoint) -> Counted:
    """What a checkpoint counts: the last charge id it includes and its totals by dataset.

    Admission adds the charges after that id to these totals
    (:func:`deniable.ledger.budget.loss_groups`), so a charge before the checkpoint counts as
    the chain recorded it, whatever its row says.
    """
    body = checkpoint.parsed()
    by_dataset: dict[str, list[tuple[str, str, str | None, str | None, str | None, int]]] = {}
    for t in body["totals"]:
        dataset, analyst, kind, e, d, r, n = t
        by_dataset.setdefault(str(dataset), []).append((str(analyst), str(kind), e, d, r, int(n)))
    return int(body["marks"]["charges"]), by_dataset


def audit(
    conn: Tx,
    anchor: Anchor | None,
    unreadable: str | None,
    *,
    anchor_path: str | None,
    full: bool = True,
) -> LedgerReport:
    """Replay the chain, compare the tables with it, and compare the anchor with the chain.

    ``anchor_path`` None means no anchor is expected (a backup copy). With ``full`` the
    whole chain is replayed from entry 1, every table compared whole and every checkpoint
    recomputed. Without it, the replay starts at the checkpoint the anchor vouches for (if
    any): the small tables (datasets, allowances, accountants, analysts, samples) are still
    compared whole, but of charges, answers and curator events only the rows written after
    the checkpoint (and the charges before it that were answered after it), so the cost
    does not grow with the history. A hand edit, deletion or insertion of an older row is
    then found by the full verification only — and cannot change what admission counts,
    which takes the checkpoint's totals for every charge before it.
    """
    problems: list[str] = []
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    ledger_id = meta.get("ledger_id", "")
    start: Checkpoint | None = None
    if not full and anchor_path is not None and unreadable is None:
        start, problem = vouched(conn, anchor, ledger_id)
        if problem is not None:
            problems.append(problem)
    replay = Replay()
    seq, head = 0, GENESIS
    intact = True
    if start is not None:
        try:
            replay = Replay.from_checkpoint(start.parsed())
        except (ValueError, KeyError, TypeError, IndexError):
            problems.append(f"the checkpoint at entry {start.seq} cannot be read: it was edited")
            intact = False
        row = conn.execute("SELECT hash FROM chain WHERE seq = ?", (start.seq,)).fetchone()
        if intact and (row is None or str(row[0]) != start.head):
            problems.append(
                f"chain entry {start.seq} differs from the checkpoint the anchor vouches for: "
                "the history was rewritten"
            )
            intact = False
        seq, head = start.seq, start.head
    stored: dict[int, str] = {}
    if conn.has_table("checkpoints"):
        stored = {
            int(r[0]): str(r[1])
            for r in conn.execute("SELECT seq, hash FROM checkpoints WHERE seq > ?", (seq,))
        }
    hashes: dict[int, str] = {}
    if intact:
        for s, op, payload, digest in conn.execute(
            "SELECT seq, op, payload, hash FROM chain WHERE seq > ? ORDER BY seq", (seq,)
        ):
            if s != seq + 1:
                problems.append(
                    f"chain entries {seq + 1} to {s - 1} are missing: entries were deleted"
                )
                intact = False
                break
            if entry_hash(head, s, payload) != digest:
                problems.append(f"chain entry {s} ({op}) does not match its hash: it was edited")
                intact = False
                break
            try:
                replay.apply(s, op, json.loads(payload))
            except (ValueError, KeyError, TypeError, IndexError):
                problems.append(f"chain entry {s} ({op}) cannot be replayed: it was edited")
                intact = False
                break
            seq, head = s, digest
            hashes[s] = digest
            if s in stored and body_hash(replay.checkpoint_body(s, digest)) != stored.pop(s):
                problems.append(
                    f"the checkpoint at entry {s} differs from the chain: it was edited"
                )
    if intact and stored:
        problems.append(
            f"checkpoint(s) at entries {', '.join(str(s) for s in sorted(stored)[:5])} are "
            "not backed by the chain: rows were added outside the ledger"
        )
    last = conn.execute("SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1").fetchone()
    db_seq, db_head = (0, GENESIS) if last is None else (int(last[0]), str(last[1]))
    if intact and seq == 0:
        problems.append("the chain is empty: the ledger's first entry was deleted")
        intact = False
    if intact and replay.ledger_id != ledger_id:
        problems.append("the ledger's recorded identity differs from its first chain entry")
    if intact:
        _compare_tables(conn, replay, problems)
    if anchor_path is not None:
        _check_anchor(conn, anchor, unreadable, anchor_path, ledger_id, db_seq, hashes, problems)
    return LedgerReport(
        ok=not problems,
        problems=tuple(problems),
        seq=db_seq,
        head=db_head,
        anchor_seq=None if anchor is None else anchor.seq,
        ledger_id=ledger_id,
    )


def _compare_tables(conn: Tx, replay: Replay, problems: list[str]) -> None:
    """Compare the tables with the replay (after its checkpoint, when it started from one)."""
    for table, expected, actual in _table_pairs(conn, replay, problems):
        compare(table, expected, actual, problems)


def _table_pairs(conn: Tx, replay: Replay, problems: list[str]) -> list[tuple[str, Rows, Rows]]:
    """Each table's rows as the replay expects them and as the database holds them."""
    pairs: list[tuple[str, Rows, Rows]] = []
    compare = _collect(pairs)
    base = replay.base
    # A closed range: without statistics (a table just bulk-loaded, before autovacuum
    # analyses it) PostgreSQL estimates an open "id > ?" at a third of the table and scans
    # it all; a closed range is estimated small and read through the key.
    after = "" if base is None else " WHERE id > ? AND id < ?"
    compare(
        "datasets",
        replay.datasets,
        rows_by(
            conn,
            "SELECT name, loss_type, epsilon, delta, rho, registered_at FROM datasets",
            lambda r: r[0],
        ),
        problems,
    )
    compare(
        "allowances",
        replay.allowances,
        rows_by(
            conn,
            "SELECT dataset, analyst, loss_type, epsilon, delta, rho, set_at FROM allowances",
            lambda r: (r[0], r[1]),
        ),
        problems,
    )
    compare(
        "curator_events",
        replay.events,
        rows_by(
            conn,
            "SELECT id, dataset, action, analyst, loss_type, epsilon, delta, rho, previous, "
            "time FROM curator_events" + after,
            lambda r: r[0],
            () if base is None else (base["events"], ID_BOUND),
        ),
        problems,
    )
    compare(
        "charges",
        replay.charges,
        rows_by(
            conn,
            f"SELECT {CHARGE_COLUMNS} FROM charges" + after,
            lambda r: r[0],
            () if base is None else (base["charges"], ID_BOUND),
        ),
        problems,
    )
    answer_sql = "SELECT charge_id, dataset, query_key, payload, time FROM answers"
    answer_args: tuple[object, ...] = ()
    if base is not None:
        answer_sql += " WHERE charge_id > ? AND charge_id < ?"
        answer_args = (base["charges"], ID_BOUND)
    answers: Rows = {
        r[0]: (r[0], r[1], r[2], hashlib.sha256(bytes(r[3])).hexdigest(), r[4])
        for r in conn.execute(answer_sql, answer_args)
    }
    expected = dict(replay.answers)
    if base is not None:
        # Answers stored after the checkpoint for charges made before it: the charge row
        # must say answered, and the answer row must carry the charge's dataset and key.
        for charge_id in sorted(replay.old_answered):
            old = conn.execute(
                "SELECT dataset, query_key, status FROM charges WHERE id = ?", (charge_id,)
            ).fetchone()
            ans = conn.execute(
                "SELECT charge_id, dataset, query_key, payload, time FROM answers "
                "WHERE charge_id = ?",
                (charge_id,),
            ).fetchone()
            want = expected.pop(charge_id)
            if old is None or old[2] != "answered":
                problems.append(
                    f"table charges: row {charge_id} is not marked answered although the "
                    "chain recorded its answer: the database was edited by hand"
                )
                continue
            expected[charge_id] = (charge_id, old[0], old[1], want[3], want[4])
            if ans is not None:
                answers[charge_id] = (
                    ans[0],
                    ans[1],
                    ans[2],
                    hashlib.sha256(bytes(ans[3])).hexdigest(),
                    ans[4],
                )
    compare("answers", expected, answers, problems)
    compare(
        "analysts",
        replay.analysts,
        rows_by(
            conn,
            "SELECT id, name, role, digest, created, revoked_at FROM analysts",
            lambda r: r[0],
        ),
        problems,
    )
    compare(
        "accountants",
        replay.accountants,
        rows_by(conn, "SELECT dataset, spec, set_at FROM accountants", lambda r: r[0])
        if conn.has_table("accountants")
        else {},
        problems,
    )
    compare(
        "sample_releases",
        replay.samples,
        rows_by(
            conn,
            "SELECT dataset, sample, charge_id, rate, time FROM sample_releases",
            lambda r: (r[0], r[1]),
        )
        if conn.has_table("sample_releases")
        else {},
        problems,
    )
    return pairs


def _collect(
    pairs: list[tuple[str, Rows, Rows]],
) -> Callable[[str, Rows, Rows, list[str]], None]:
    def add(table: str, expected: Rows, actual: Rows, problems: list[str]) -> None:
        pairs.append((table, expected, actual))

    return add


@dataclass(frozen=True, slots=True)
class Dispute:
    """A row where the database and the chain disagree (``None``: no such row there)."""

    table: str
    key: object
    expected: tuple[object, ...] | None
    found: tuple[object, ...] | None


def disputes(conn: Tx) -> list[Dispute]:
    """Every row where a table differs from what the whole chain says, in table order.

    Raises:
        LedgerError: the chain itself does not verify (an entry edited or deleted): no
            row can then be compared with it.
    """
    replay, _, _ = replay_from(conn, None)
    out: list[Dispute] = []
    for table, expected, actual in _table_pairs(conn, replay, []):
        for key, row in expected.items():
            if actual.get(key) != row:
                out.append(Dispute(table, key, row, actual.get(key)))
        out.extend(Dispute(table, k, None, r) for k, r in actual.items() if k not in expected)
    return out


ACCEPTED_TABLES: dict[str, str] = {
    "datasets": "datasets",
    "allowances": "allowances",
    "curator_events": "events",
    "charges": "charges",
    "answers": "answers",
    "analysts": "analysts",
    "accountants": "accountants",
    "sample_releases": "samples",
}
"""The tables an acknowledgement can accept rows of, and the replay's name for each."""


def _check_anchor(
    conn: Tx,
    anchor: Anchor | None,
    unreadable: str | None,
    anchor_path: str,
    ledger_id: str,
    db_seq: int,
    hashes: dict[int, str],
    problems: list[str],
) -> None:
    """Compare the anchor with the chain: identity, rollback, and the hash it records."""
    if unreadable is not None:
        problems.append(unreadable)
    elif anchor is None:
        if db_seq > 1:
            problems.append(
                f"the anchor file {anchor_path!r} is missing but the ledger has {db_seq} "
                "entries: the anchor was deleted, or this database is a copy of a ledger"
            )
        elif db_seq == 1 and conn.log_apart():
            # A new ledger's anchor is written before its file switches to WAL mode.
            problems.append(
                f"the anchor file {anchor_path!r} is missing but the ledger's file was "
                "already in use: this database is a copy of a ledger (perhaps of its main "
                "file without the -wal file that held its charges), or the anchor was deleted"
            )
    elif anchor.ledger_id != ledger_id:
        if db_seq <= 1:
            problems.append(
                f"the ledger database is new (no entry after its creation) but the anchor "
                f"file records {anchor.seq} entries of another ledger: the ledger file "
                "was deleted, or replaced by an empty copy (e.g. one taken without its "
                "-wal file)"
            )
        else:
            problems.append(
                f"the ledger's identity differs from the anchor's: this database is "
                f"another ledger file than the one {anchor_path!r} belongs to"
            )
    elif anchor.seq > db_seq:
        problems.append(
            f"the ledger has {db_seq} entries but its anchor records {anchor.seq}: an older "
            "copy of the ledger was restored (or a copy made without its -wal file)"
        )
    else:
        at = hashes.get(anchor.seq)
        if at is None:
            row = conn.execute("SELECT hash FROM chain WHERE seq = ?", (anchor.seq,)).fetchone()
            at = None if row is None else str(row[0])
        if at != anchor.head:
            problems.append(
                f"chain entry {anchor.seq} has another hash than the anchor records: the "
                "history was rewritten"
            )


def live_check(
    w: Write,
    anchor: Anchor | None,
    unreadable: str | None,
    *,
    ledger_id: str,
    anchor_path: str,
) -> str | None:
    """Inside a write: the anchor must name this ledger at an entry the database has.

    Returns the problem in plain words, or None.
    """
    if unreadable is not None:
        return unreadable
    if anchor is None:
        return f"the anchor file {anchor_path!r} disappeared while the ledger was in use"
    if anchor.ledger_id != ledger_id:
        return "the anchor file now belongs to another ledger"
    if anchor.seq > w.seq:
        return (
            f"the database has {w.seq} entries but its anchor records {anchor.seq}: the "
            "database was replaced by an older copy while in use"
        )
    head: str | None = w.head
    if anchor.seq != w.seq:
        row = w.conn.execute(ENTRY_HASH, (anchor.seq,)).fetchone()
        head = None if row is None else str(row[0])
    if head != anchor.head:
        return f"entry {anchor.seq} has another hash than the anchor records"
    return None


# -- the anchor of a store that serialises its writers itself (PostgreSQL) ---------------------
#
# Such a store (``Store.serialises_writers``) admits one writer at a time on every host and
# returns from a write transaction only once its commit is durable. The host's anchor lock is
# then not held through the transaction: each write, once durable, makes sure the anchor
# covers it before it returns (:func:`settle`), and one anchor write covers every write of
# the host that became durable before it (a group commit of the anchor file).


def proposal_path(anchor_path: str) -> str:
    """``<anchor>.next``: the anchor the host's last write would write (not durable)."""
    return anchor_path + ".next"


def _anchor_value(anchor: Anchor) -> dict[str, object]:
    value: dict[str, object] = {
        "ledger_id": anchor.ledger_id,
        "seq": anchor.seq,
        "head": anchor.head,
        "spent": anchor.spent,
    }
    if anchor.checkpoint is not None:
        value["checkpoint"] = {"seq": anchor.checkpoint[0], "hash": anchor.checkpoint[1]}
    if anchor.caps is not None:
        value["caps"] = anchor.caps
    return value


def _put(path: str, anchor: Anchor) -> None:
    """Overwrite ``path`` with ``anchor`` and its SHA-256 (not durable; errors ignored)."""
    text = canonical(_anchor_value(anchor))
    data = f"{hashlib.sha256(text.encode('utf-8')).hexdigest()} {text}\n".encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
    except OSError:
        return


def _get(path: str) -> Anchor | None:
    """What :func:`_put` wrote at ``path``, or None if absent, torn or invalid."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
        digest, _, rest = data.partition(b" ")
        text, newline, _ = rest.partition(b"\n")
        if not newline or hashlib.sha256(text).hexdigest().encode() != digest:
            return None
        value = json.loads(text)
        checkpoint = value.get("checkpoint")
        return Anchor(
            ledger_id=str(value["ledger_id"]),
            seq=int(value["seq"]),
            head=str(value["head"]),
            spent=dict(value["spent"]),
            checkpoint=None
            if checkpoint is None
            else (int(checkpoint["seq"]), str(checkpoint["hash"])),
            caps=value.get("caps"),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def propose(anchor_path: str, anchor: Anchor) -> None:
    """Record ``anchor`` as what this host's write at ``anchor.seq`` would anchor.

    Called inside the write transaction, before its commit, so the proposal may name an
    entry that never commits: it is used only by the next writer of this host, under the
    database's writers' lock, and only when it names exactly that writer's first entry and
    its hash (:func:`newest_base`). It saves that writer the recomputation of every
    dataset's spent total for its anchor. Not durable, overwritten in place: a reader
    checks the SHA-256 it carries, so a torn read is ignored. A failure to write it is
    ignored (it is an optimisation).
    """
    _put(proposal_path(anchor_path), anchor)


def proposed(anchor_path: str) -> Anchor | None:
    """The last proposal of this host (:func:`propose`), or None if absent, torn or invalid."""
    return _get(proposal_path(anchor_path))


def newest_base(w: Write, anchor: Anchor | None, ledger_id: str, anchor_path: str) -> Anchor | None:
    """The anchor state ``w`` starts from: this host's proposal if it is ``w``'s start.

    Inside a write, under the database's writers' lock: the proposal counts only when it
    names this ledger, ``w``'s first entry and that entry's hash (the chain binds every
    earlier entry), so it is exactly the state the previous writer committed. Otherwise the
    anchor file (which may be behind: the anchor state is then recomputed from the rows).
    """
    ahead = proposed(anchor_path)
    if (
        ahead is not None
        and ahead.ledger_id == ledger_id
        and ahead.seq == w.start
        and ahead.head == w.head
    ):
        return ahead
    return anchor


ENTRY_HASH = "SELECT hash FROM chain WHERE seq = ?"
CHECKPOINT_HASH = "SELECT hash FROM checkpoints WHERE seq = ?"
LATEST_CHECKPOINT = "SELECT seq FROM checkpoints ORDER BY seq DESC LIMIT 1"
"""Statements of a write's start (:func:`live_check`, ``Ledger._counted_by`` and
``Ledger._maybe_checkpoint``) that :func:`start` answers in advance."""


START = (
    "SELECT 'h', seq, hash FROM (SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1) h"
    " UNION ALL SELECT 'a', seq, hash FROM chain WHERE seq = ?"
    " UNION ALL SELECT 'v', seq, hash FROM checkpoints WHERE seq = ?"
    " UNION ALL SELECT 'c', seq, hash FROM"
    " (SELECT seq, hash FROM checkpoints ORDER BY seq DESC LIMIT 1) c"
)
"""What :func:`start` reads (parameters: the anchor's entry, its vouched checkpoint)."""


def start(tx: Tx, anchor: Anchor | None) -> Write:
    """Begin a write on a ledger whose tables all exist: one statement reads its start.

    The chain's last entry, and — so that they need no round trip of their own while the
    writer holds the lock — the hash of the anchor's entry (:func:`live_check`), the hash
    of the checkpoint the anchor vouches for and the last checkpoint's number (handed to
    the transaction with :meth:`~deniable.ledger.store.Tx.remember`). A backend may prepare
    :data:`START` once per connection and send it with the statements that open the
    transaction.
    """
    seq = int(anchor.seq) if anchor is not None else 0
    vouched_seq = int(anchor.checkpoint[0]) if anchor and anchor.checkpoint else 0
    rows = tx.execute(START, (seq, vouched_seq)).fetchall()
    found = {str(r[0]): (int(r[1]), str(r[2])) for r in rows}
    if anchor is not None:
        tx.remember(ENTRY_HASH, (seq,), [(found["a"][1],)] if "a" in found else [])
    if vouched_seq:
        tx.remember(CHECKPOINT_HASH, (vouched_seq,), [(found["v"][1],)] if "v" in found else [])
    tx.remember(LATEST_CHECKPOINT, (), [(found["c"][0],)] if "c" in found else [])
    if "h" not in found:
        return Write(tx, 0, GENESIS)
    return Write(tx, *found["h"])


def durable_path(anchor_path: str) -> str:
    """``<anchor>.durable``: the newest durable write of this host and its anchor state."""
    return anchor_path + ".durable"


def _mark(anchor_path: str, durable: Anchor) -> None:
    """Publish ``durable`` (a write whose commit is durable) for the host's next anchor.

    Written after the flush, without a lock, and only over an older state of this ledger:
    two writers racing may leave the older one, which only makes :func:`settle` vouch for
    less. Not durable itself; a torn read fails its SHA-256 and is ignored.
    """
    current = _get(durable_path(anchor_path))
    if current is None or current.ledger_id != durable.ledger_id or current.seq < durable.seq:
        _put(durable_path(anchor_path), durable)


def _covers(anchor: Anchor | None, mine: Anchor) -> bool:
    return anchor is not None and anchor.ledger_id == mine.ledger_id and anchor.seq >= mine.seq


def _current(anchor_path: str) -> Anchor | None:
    try:
        return read_anchor(anchor_path)
    except AnchorUnreadable:
        return None


def settle(
    anchor_path: str,
    lock: FileLock,
    mine: Anchor,
    *,
    deadline: float,
    force: bool = False,
) -> None:
    """Return once the anchor file covers ``mine`` (a write whose commit is durable).

    Covered means: the anchor names this ledger at entry ``mine.seq`` or later. An anchor
    at a later entry vouches for ours too: the chain binds every entry before it, and the
    anchor is written only for entries that are durable. Otherwise, under the anchor's
    lock, the newest state this host can vouch for is written: the newest durable write
    another writer of this host published after its flush (:func:`_mark`) if it is later
    than ``mine``, else ``mine``. So the writes of this host that became durable while one
    anchor was being written are covered together by the next one: fewer anchor file
    writes than charges, and still none returns before an anchor covers it (as when the
    lock spanned each write). The anchor never moves backwards, and never names an entry
    that is not durable (a crash of the database then cannot leave it behind its anchor).

    ``force`` (an acknowledgement) writes ``mine`` under the lock whatever the anchor says,
    and replaces what was published (it may be of a branch the acknowledgement left).

    Raises:
        LedgerError: the lock was not obtained before ``deadline`` (``time.monotonic``), or
            the anchor could not be written (the change is already committed).
    """
    if force:  # what was published before an acknowledgement may be of a lost branch
        _put(durable_path(anchor_path), mine)
    else:
        _mark(anchor_path, mine)
    delay = 0.0001
    while True:
        try:  # one attempt: another writer of this host may be writing the anchor
            lock.acquire(time.monotonic())
        except LedgerError:
            if not force and _covers(_current(anchor_path), mine):
                return  # it wrote one that covers this write
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.001)
            continue
        try:
            best = mine
            if not force:
                if _covers(_current(anchor_path), mine):
                    return
                ahead = _get(durable_path(anchor_path))
                if ahead is not None and ahead.ledger_id == mine.ledger_id and ahead.seq > mine.seq:
                    best = ahead
            write_anchor(anchor_path, best)
            return
        finally:
            lock.release()
