"""Exactly-once delivery of transitions from actors to a learner that may be killed at any moment.

Two halves of one protocol (the fleet transport carries their messages; see robot_rl.fleet.wire):

* :class:`Outbox` (actor): every batch gets the next sequence number of its actor and is written to local
  disk (one safetensors file, atomically) *before* it is sent; it is deleted only when the learner
  acknowledges that a checkpoint holds it. An actor that loses its learner, or is killed and replaced by
  one with the same id and folder, re-sends every unacknowledged batch in order.
* :class:`Inbox` (learner): per actor, the highest sequence number received and the highest one inside
  the last checkpoint. A batch at or below what was received is a re-send and is skipped; after a restart
  the learner knows only what its checkpoint holds, so the actors' re-sends fill the gap exactly. The
  marks are saved with the checkpoint (JSON) and the acknowledgements name the checkpointed mark.

With both, every transition an actor produced ends up in the learner's checkpoint once: re-sent batches
are never stored twice, lost ones are re-sent. What an actor keeps is bounded (``limit_batches``): beyond
it the oldest unacknowledged batches are dropped and counted, never silently.

The outbox's audit journal (``journal=True``) is bounded too: once it outgrows ``journal_max_bytes`` its
acknowledged lines are folded into one summary line (their step count and :func:`multiset_hash`), written to
a temporary file and swapped in atomically, so a crash at any point of a rotation leaves either the old or
the new journal, both complete. :func:`journal_totals` gives count and hash over summary and lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions, encode_transitions

BATCH_FILE = re.compile(r"^(\d{12})\.safetensors$")
JOURNAL_FILE = "journal.jsonl"
JOURNAL_MAX_BYTES = 4 * 1024 * 1024
"""Journal size beyond which its acknowledged lines are folded into the summary line (about 200k steps)."""
_HASH_MOD = 1 << 128


def _digest(episode_id: int, step: int, action: np.ndarray) -> str:
    data = f"{int(episode_id)}:{int(step)}:".encode() + np.asarray(action, np.float32).tobytes()
    return hashlib.sha1(data).hexdigest()[:16]


def transition_digest(t: Transition) -> str:
    """A short fingerprint of one step (episode, step, action): what the exactly-once checks compare."""
    return _digest(t.episode_id, t.step, t.action)


def row_digests(columns: dict[str, np.ndarray], n: int) -> list[str]:
    """:func:`transition_digest` of the first ``n`` rows of a buffer's columns (a checkpoint's stored steps)."""
    return [_digest(columns["episode_id"][i], columns["step"][i], columns["action"][i]) for i in range(n)]


def _fold(total: int, digests: Sequence[str]) -> int:
    for d in digests:
        total = (total + int(hashlib.sha256(d.encode()).hexdigest()[:32], 16)) % _HASH_MOD
    return total


def multiset_hash(digests: Sequence[str]) -> str:
    """An order-free hash of step digests (a sum of their hashes): the same for the same steps, each as often.

    Additive, so a compacted journal keeps it for the steps it no longer lists.
    """
    return f"{_fold(0, digests):032x}"


class Outbox:
    """The actor's unacknowledged batches on disk, numbered ``1, 2, ...`` per actor id."""

    def __init__(self, folder: str | Path, limit_batches: int = 100_000, journal: bool = False,
                 journal_max_bytes: int = JOURNAL_MAX_BYTES) -> None:
        if limit_batches < 1:
            raise ValueError(f"limit_batches: must be >= 1, got {limit_batches}")
        if journal_max_bytes < 1:
            raise ValueError(f"journal_max_bytes: must be >= 1, got {journal_max_bytes}")
        self.journal_max_bytes = self._compact_at = journal_max_bytes
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.limit = limit_batches
        self.dropped = 0
        """Unacknowledged batches dropped because the outbox was full (the learner was away too long)."""
        found = sorted(int(m.group(1)) for p in self.folder.iterdir() if (m := BATCH_FILE.match(p.name)))
        self._pending: deque[int] = deque(found)
        """Sequence numbers on disk, oldest first (read from the folder once; kept in step with it after)."""
        self.next_seq = (found[-1] + 1) if found else 1
        self.acked = (found[0] - 1) if found else 0
        self.journal = self.folder / JOURNAL_FILE if journal else None
        """``journal.jsonl``: one line per batch ever added (seq + a digest per step), kept after acks: an audit
        of what this actor produced, which a learner's checkpoint can be checked against; its acknowledged lines
        are folded into a summary line once it outgrows ``journal_max_bytes`` (see :meth:`compact_journal`)."""
        if self.journal is not None:
            _repair_journal(self.journal)
            summary, lines = _parse_journal(self.journal)
            known = {line["seq"] for line in lines}
            for seq in found:  # batches written by an actor killed before it journaled them
                if seq not in known and seq > summary["through"]:
                    self._log(seq, decode_transitions(self.read(seq)))

    def _log(self, seq: int, transitions: Sequence[Transition]) -> None:
        assert self.journal is not None
        with self.journal.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"seq": seq, "steps": [transition_digest(t) for t in transitions]}) + "\n")

    def journaled(self) -> list[str]:
        """Digests of every step this outbox (and earlier actors on its folder) ever added, in order."""
        return read_journal(self.folder)

    def _path(self, seq: int) -> Path:
        return self.folder / f"{seq:012d}.safetensors"

    def add(self, transitions: Sequence[Transition]) -> int:
        """Write a batch (durably, atomically) and return its sequence number."""
        return self.add_batch(transitions)[0]

    def add_batch(self, transitions: Sequence[Transition]) -> tuple[int, bytes]:
        """:meth:`add`, also returning the batch's safetensors bytes (to send without reading them back)."""
        seq = self.next_seq
        payload = encode_transitions(transitions)
        tmp = self.folder / f".{seq:012d}.tmp"
        with tmp.open("wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(seq))
        if self.journal is not None:
            self._log(seq, transitions)
        self._pending.append(seq)
        self.next_seq += 1
        while len(self._pending) > self.limit:
            self._path(self._pending.popleft()).unlink(missing_ok=True)
            self.dropped += 1
        return seq, payload

    @property
    def oldest(self) -> int | None:
        """The oldest batch still held, None when empty.

        Sent with every batch: the learner then knows that a gap before it is what this outbox dropped when
        full, not batches lost on the way.
        """
        return self._pending[0] if self._pending else None

    def numbers(self) -> list[int]:
        """Sequence numbers of the batches held (unacknowledged), oldest first."""
        return list(self._pending)

    def read(self, seq: int) -> bytes:
        """The safetensors bytes of batch ``seq`` (FileNotFoundError once acknowledged or dropped)."""
        return self._path(seq).read_bytes()

    def pending(self) -> list[tuple[int, bytes]]:
        """Every unacknowledged batch, oldest first, as ``(seq, safetensors bytes)``."""
        return [(seq, self._path(seq).read_bytes()) for seq in self._pending]

    def ack(self, seq: int) -> None:
        """The learner's checkpoint holds every batch up to ``seq``: forget them (and compact a full journal)."""
        while self._pending and self._pending[0] <= seq:
            self._path(self._pending.popleft()).unlink(missing_ok=True)
        self.acked = max(self.acked, seq)
        if self.journal is not None and self.journal.is_file() and self.journal.stat().st_size > self._compact_at:
            self.compact_journal()
            # unacknowledged lines stay: the next try waits until the journal has grown by the limit again
            self._compact_at = self.journal.stat().st_size + self.journal_max_bytes

    def compact_journal(self) -> bool:
        """Fold the journal's acknowledged lines into its summary line; False when none was acknowledged.

        Steps: write the new journal to a temporary file, fsync, rename it over the old one. A crash before
        the rename leaves the old journal (the temporary file is removed on the next start), after it the
        new one: either lists every step once, as a line or inside the summary's count and hash.
        """
        assert self.journal is not None
        summary, lines = _parse_journal(self.journal)
        done = [line for line in lines if line["seq"] <= self.acked]
        if not done:
            return False
        folded = {"summary": True, "through": max(summary["through"], max(line["seq"] for line in done)),
                  "count": summary["count"] + sum(len(line["steps"]) for line in done),
                  "hash": f"{_fold(int(summary['hash'], 16), [d for line in done for d in line['steps']]):032x}"}
        tmp = self.journal.with_name(f".{JOURNAL_FILE}.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps(folded) + "\n")
            for line in lines:
                if line["seq"] > self.acked:
                    f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.journal)
        return True

    def resume_after(self, learner_mark: int) -> None:
        """On (re)connecting: the learner's checkpoint holds up to ``learner_mark``; number new batches after it.

        A replaced actor whose outbox is empty must not reuse numbers the learner has already stored.
        """
        self.ack(learner_mark)
        self.next_seq = max(self.next_seq, learner_mark + 1)


def _journal_lines(journal: Path | None) -> list[str]:
    if journal is None or not journal.is_file():
        return []
    lines = journal.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.endswith("}")]  # a torn last line of a killed actor


def _parse_journal(journal: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary of the compacted lines, the batch lines still listed) of a journal."""
    summary: dict[str, Any] = {"through": 0, "count": 0, "hash": f"{0:032x}"}
    lines: list[dict[str, Any]] = []
    for text in _journal_lines(journal):
        try:
            line = json.loads(text)
        except json.JSONDecodeError:  # a torn line an older actor appended to: its batch is re-logged
            continue
        if line.get("summary"):
            summary = line
        else:
            lines.append(line)
    return summary, lines


def _repair_journal(journal: Path) -> None:
    """On start: drop a rotation's leftover temporary file and a torn last line (so appends start afresh)."""
    journal.with_name(f".{JOURNAL_FILE}.tmp").unlink(missing_ok=True)
    if not journal.is_file():
        return
    data = journal.read_bytes()
    if data and not data.endswith(b"\n"):
        with journal.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def read_journal(folder: str | Path) -> list[str]:
    """Step digests an outbox folder's journal lists, read-only (safe while its actor runs).

    Raises ValueError for a compacted journal (it no longer lists every step): use :func:`journal_totals`.
    """
    summary, lines = _parse_journal(Path(folder) / JOURNAL_FILE)
    if summary["count"]:
        raise ValueError(f"{folder}: journal compacted ({summary['count']} steps folded); use journal_totals")
    return [d for line in lines for d in line["steps"]]


def journal_totals(folder: str | Path) -> tuple[int, str]:
    """(steps, :func:`multiset_hash`) of everything an outbox folder's journal records, compacted or not."""
    summary, lines = _parse_journal(Path(folder) / JOURNAL_FILE)
    digests = [d for line in lines for d in line["steps"]]
    return summary["count"] + len(digests), f"{_fold(int(summary['hash'], 16), digests):032x}"


class Inbox:
    """The learner's record of which batches of which actor it has, received and checkpointed."""

    def __init__(self) -> None:
        self.received: dict[str, int] = {}
        """Actor id -> highest sequence number received (in memory, maybe not yet checkpointed)."""
        self.checkpointed: dict[str, int] = {}
        """Actor id -> highest sequence number inside the last checkpoint."""
        self.duplicates = 0
        """Re-sent batches skipped."""
        self.lost: dict[str, int] = {}
        """Actor id -> batches its full outbox dropped before the learner had them (declared, counted)."""
        self.members: dict[str, int] = {}
        """Actor id -> its number in the run (0, 1, ... in order of first contact; kept across restarts)."""

    def number(self, actor: str) -> int:
        """The run-wide number of ``actor`` (a new id gets the next one)."""
        return self.members.setdefault(actor, len(self.members))

    def mark(self, actor: str) -> int:
        """What the learner's checkpoint holds of ``actor`` (sent back in the handshake: numbering resumes there)."""
        return self.checkpointed.get(actor, 0)

    def accept(self, actor: str, seq: int, oldest: int | None = None) -> bool:
        """Whether batch ``seq`` of ``actor`` is new (store it) or a re-send (skip it).

        ``oldest`` is the oldest batch the actor still holds: a gap right before it is what the actor's full
        outbox dropped (counted in :attr:`lost`). Raises ValueError for any other gap: an actor sends in order,
        so those batches went missing on the way.
        """
        last = self.received.get(actor, self.checkpointed.get(actor, 0))
        if seq <= last:
            self.duplicates += 1
            return False
        if seq != last + 1:
            if oldest != seq:
                raise ValueError(f"actor {actor!r}: batch {seq} after {last}; batches {last + 1}..{seq - 1} are "
                                 f"missing")
            self.lost[actor] = self.lost.get(actor, 0) + seq - last - 1
        self.received[actor] = seq
        return True

    def checkpoint_done(self) -> dict[str, int]:
        """Everything received is now in a checkpoint: the acknowledgements to send (actor id -> mark)."""
        self.checkpointed.update(self.received)
        return dict(self.checkpointed)

    def state(self) -> dict[str, Any]:
        """What the checkpoint saves (the marks it holds)."""
        return {"checkpointed": dict(self.checkpointed), "members": dict(self.members), "lost": dict(self.lost)}

    @classmethod
    def restore(cls, state: dict[str, Any] | None) -> Inbox:
        """The inbox of a restarted learner: only what its checkpoint holds counts as received."""
        inbox = cls()
        marks = (state or {}).get("checkpointed", {})
        if not isinstance(marks, dict) or not all(isinstance(v, int) and v >= 0 for v in marks.values()):
            raise ValueError(f"inbox state: expected actor -> non-negative int, got {marks!r}")
        inbox.checkpointed = {str(k): int(v) for k, v in marks.items()}
        inbox.members = {str(k): int(v) for k, v in (state or {}).get("members", {}).items()}
        inbox.lost = {str(k): int(v) for k, v in (state or {}).get("lost", {}).items()}
        return inbox

    def save(self, path: str | Path) -> None:
        """Write :meth:`state` as JSON, atomically (beside the checkpoint's other parts)."""
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state()), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> Inbox:
        """:meth:`restore` from a file written by :meth:`save`; a missing file is a fresh learner."""
        path = Path(path)
        return cls.restore(json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None)


# ---------------------------------------------------------------------------- the checkpoint's commit record
COMMIT_FILE = "commit.json"
"""Written last by every checkpoint: what the checkpoint holds. Parts saved after it are not part of it."""


def write_commit(checkpoint: str | Path, inbox: Inbox, buffers: dict[str, int], held: bytes | None) -> int:
    """Seal a checkpoint whose buffers (and networks) are already saved; returns its number.

    ``buffers``: saved buffer folder (under ``checkpoint``) -> rows the checkpoint holds; ``held``: the
    algorithm's received steps not yet in a buffer (safetensors bytes), kept in a file of this commit's own.
    The inbox marks are marked checkpointed only after the commit is on disk (the caller acknowledges them).
    """
    ckpt = Path(checkpoint)
    ckpt.mkdir(parents=True, exist_ok=True)
    previous = read_commit(ckpt)
    number = (previous or {}).get("number", 0) + 1
    held_name = None
    if held:
        held_name = f"held_{number:09d}.safetensors"
        tmp = ckpt / f".{held_name}.tmp"
        tmp.write_bytes(held)
        os.replace(tmp, ckpt / held_name)
    inbox_state = {**inbox.state(), "checkpointed": {**inbox.checkpointed, **inbox.received}}  # as it will be
    record = {"number": number, "buffers": {k: int(v) for k, v in buffers.items()}, "held": held_name,
              "inbox": inbox_state}
    tmp = ckpt / f".{COMMIT_FILE}.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(record))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt / COMMIT_FILE)
    for old in ckpt.glob("held_*.safetensors"):
        if old.name != held_name:
            old.unlink(missing_ok=True)
    return int(number)


def read_commit(checkpoint: str | Path) -> dict[str, Any] | None:
    """The last commit record of a checkpoint folder, None when there is none (a fresh learner)."""
    file = Path(checkpoint) / COMMIT_FILE
    if not file.is_file():
        return None
    record = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(record, dict) or not isinstance(record.get("buffers"), dict):
        raise ValueError(f"{file}: not a checkpoint commit record")
    return record
