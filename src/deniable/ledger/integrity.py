"""The ledger's tamper evidence: the hash chain, the anchor file and the writers' lock.

* **Hash chain.** Every mutation of the ledger appends one entry ``(seq, op, payload, hash)``
  to the ``chain`` table in the same SQLite transaction as the mutation itself:
  ``hash = sha256(prev_hash ‖ seq ‖ payload)`` with ``prev_hash`` the raw 32 bytes of the
  previous entry's hash (32 zero bytes before entry 1), ``seq`` as 8 big-endian bytes and
  ``payload`` the canonical JSON (:func:`canonical`) of what was written. Entry 1 names the
  ledger's random identity, so the whole chain is bound to it.
* **Anchor.** A small JSON file outside the database, ``{ledger_id, seq, head, spent,
  caps}`` and the checkpoint it vouches for (``{seq, hash}``, :mod:`deniable.ledger.chain`),
  replaced atomically (write a temporary file, fsync, rename over; the directory is fsynced
  when the anchor is first created) after each commit, under an exclusive ``flock`` on
  ``<anchor>.lock`` (:class:`FileLock`), so anchors never move backwards, even with many
  processes. How long the lock is held depends on the backend. SQLite: writers hold it
  from before their transaction until their anchor is written, so anchors are written in
  commit order. PostgreSQL (its advisory lock serialises the writers of every host): the
  lock is taken only to write the anchor, after the commit is durable, and one write
  covers every write of the host durable by then (:func:`deniable.ledger.chain.settle`);
  an anchor never names an entry that is not durable, and no write returns before an
  anchor covers it. The anchor is written *after* the commit: a crash in between leaves it
  behind the database, which is allowed (a database ahead of its anchor is normal; one
  behind it is an older copy).

Someone who can write both the database and the anchor file can forge anything, and a
restore or copy of both together (a VM snapshot of one directory) looks like a ledger that
never moved; the anchor defends against restoring or replacing the database alone (delete,
older copy, copy without its ``-wal``, another ledger's file), so keep it on another disk
or host.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass
from types import TracebackType

from deniable.errors import LedgerError

GENESIS = "0" * 64
"""The ``prev_hash`` of entry 1 (hex of 32 zero bytes)."""


def canonical(value: object) -> str:
    """The canonical JSON text of ``value``: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def entry_hash(prev: str, seq: int, payload: str) -> str:
    """``sha256(prev ‖ seq ‖ payload)`` as hex: ``prev`` hex, ``seq`` 8 bytes big-endian."""
    h = hashlib.sha256(bytes.fromhex(prev))
    h.update(seq.to_bytes(8, "big"))
    h.update(payload.encode("utf-8"))
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class LedgerReport:
    """What :meth:`deniable.ledger.Ledger.verify` found.

    Attributes:
        ok: True when no problem was found.
        problems: each problem in plain words (empty when ``ok``).
        seq: the database's last entry number.
        head: the hash of that entry (hex).
        anchor_seq: the entry number the anchor file records, or None without an anchor.
        ledger_id: the database's identity (hex, 128 bits).
    """

    ok: bool
    problems: tuple[str, ...]
    seq: int
    head: str
    anchor_seq: int | None
    ledger_id: str


@dataclass(frozen=True, slots=True)
class Anchor:
    """The parsed anchor file: identity, last entry, spent totals, vouched checkpoint, caps.

    ``checkpoint`` is ``(seq, sha256 of its body)`` of the checkpoint the anchor vouches
    for, or None (no checkpoint yet, or an anchor written before checkpoints existed).
    """

    ledger_id: str
    seq: int
    head: str
    spent: dict[str, dict[str, str]]
    checkpoint: tuple[int, str] | None = None
    caps: dict[str, list[str | None]] | None = None
    """Each dataset's cap and accountant, ``[loss_type, ε, δ, ρ, accountant spec]``, so an
    acknowledgement of a lost database registers it again (None: an anchor written before
    caps were recorded)."""


class AnchorUnreadable(Exception):
    """The anchor file exists but is not a valid anchor (internal; becomes a problem)."""


def read_anchor(path: str) -> Anchor | None:
    """Return the anchor at ``path``, None when there is no file.

    Raises:
        AnchorUnreadable: the file exists but cannot be read or parsed.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise AnchorUnreadable(f"the anchor file {path!r} cannot be read") from e
    try:
        value = json.loads(data.decode("utf-8"))
        ledger_id, seq, head, spent = (
            value["ledger_id"],
            value["seq"],
            value["head"],
            value["spent"],
        )
        valid = (
            isinstance(ledger_id, str)
            and isinstance(seq, int)
            and not isinstance(seq, bool)
            and seq >= 1
            and isinstance(head, str)
            and len(head) == 64
            and isinstance(spent, dict)
            and all(
                isinstance(k, str)
                and isinstance(v, dict)
                and all(isinstance(x, str) and isinstance(y, str) for x, y in v.items())
                for k, v in spent.items()
            )
        )
        vouched = value.get("checkpoint")
        checkpoint: tuple[int, str] | None = None
        if vouched is not None:
            cp_seq, cp_hash = vouched["seq"], vouched["hash"]
            valid = valid and (
                isinstance(cp_seq, int)
                and not isinstance(cp_seq, bool)
                and 1 <= cp_seq <= seq
                and isinstance(cp_hash, str)
                and len(cp_hash) == 64
            )
            checkpoint = (cp_seq, cp_hash) if valid else None
        caps = value.get("caps")
        if caps is not None:
            valid = valid and (
                isinstance(caps, dict)
                and all(
                    isinstance(k, str)
                    and isinstance(v, list)
                    and len(v) == 5
                    and all(x is None or isinstance(x, str) for x in v)
                    for k, v in caps.items()
                )
            )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise AnchorUnreadable(f"the anchor file {path!r} is not a valid anchor") from e
    if not valid:
        raise AnchorUnreadable(f"the anchor file {path!r} is not a valid anchor")
    return Anchor(
        ledger_id=ledger_id, seq=seq, head=head, spent=spent, checkpoint=checkpoint, caps=caps
    )


def write_anchor(path: str, anchor: Anchor) -> None:
    """Replace the anchor at ``path`` atomically and durably.

    Writes ``<path>.tmp``, fsyncs it and renames it over ``path``; the directory is fsynced
    only when ``path`` did not exist (the rename made a new name). A replacement whose
    rename a power loss undoes leaves the previous anchor, complete and durable: an anchor
    behind its database, which is normal (its commits are durable before the anchor is
    written) — so each charge pays one fsync here, not two. Callers hold the exclusive
    writers' lock, so the temporary name is not shared.

    Raises:
        LedgerError: the file system refused (the database change is already committed).
    """
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
    text = canonical(value)
    tmp = path + ".tmp"
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, (text + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        created = not os.path.exists(path)
        os.replace(tmp, path)
        if created:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except OSError as e:
        raise LedgerError(
            f"the change was recorded in the ledger but its anchor file {path!r} could not be "
            "written; nothing may be released until the file system is fixed"
        ) from e


class FileLock:
    """An ``flock`` on a lock file, taken with a deadline (polling, as SQLite's busy handler).

    ``flock`` locks belong to the open file description, so two :class:`FileLock` objects on
    one path exclude each other even inside one process; the OS drops the lock when a process
    dies, so ``kill -9`` never leaves it held.
    """

    def __init__(self, path: str, *, create: bool = True) -> None:
        # Without ``create`` (a reader that never writes) a missing lock file means no
        # writer has ever run beside this anchor: there is nothing to wait for.
        self._fd: int | None = None
        self._absent = False
        try:
            if create:
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            else:
                self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise LedgerError(f"cannot open the ledger's lock file {path!r}") from None
            self._absent = True
        except OSError as e:
            raise LedgerError(f"cannot open the ledger's lock file {path!r}") from e
        self._path = path
        self._held = False
        self._deadline = 0.0

    def acquire(self, deadline: float) -> None:
        """Take the exclusive lock, waiting until ``deadline`` (``time.monotonic``).

        Raises:
            LedgerError: not acquired in time, or the lock file is closed.
        """
        if self._absent:
            return
        if self._fd is None:
            raise LedgerError("the ledger is closed")
        delay = 0.0002
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._held = True
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LedgerError(
                        f"timed out waiting for another writer of the ledger ({self._path!r})"
                    ) from None
            except OSError as e:
                raise LedgerError(f"cannot lock the ledger's lock file {self._path!r}") from e
            time.sleep(delay)
            delay = min(2 * delay, 0.005)

    def release(self) -> None:
        """Drop the lock if held."""
        if self._held and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._held = False

    def hold(self, deadline: float) -> _Held:
        """Context manager: acquire until ``deadline``, release on exit."""
        self._deadline = deadline
        return _Held(self)

    def close(self) -> None:
        """Release and close the lock file."""
        self.release()
        self._absent = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _Held:
    def __init__(self, lock: FileLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire(self._lock._deadline)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()
