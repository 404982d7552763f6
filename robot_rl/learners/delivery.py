"""Exactly-once delivery of transitions from actors to a learner that may be killed at any moment.

Two halves of one protocol (the fleet transport carries their messages; see robot_rl.learners.wire):

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
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robot_rl.core.transition import Transition
from robot_rl.learners.buffers import encode_transitions

BATCH_FILE = re.compile(r"^(\d{12})\.safetensors$")


class Outbox:
    """The actor's unacknowledged batches on disk, numbered ``1, 2, ...`` per actor id."""

    def __init__(self, folder: str | Path, limit_batches: int = 100_000) -> None:
        if limit_batches < 1:
            raise ValueError(f"limit_batches: must be >= 1, got {limit_batches}")
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

    def _path(self, seq: int) -> Path:
        return self.folder / f"{seq:012d}.safetensors"

    def add(self, transitions: Sequence[Transition]) -> int:
        """Write a batch (durably, atomically) and return its sequence number."""
        seq = self.next_seq
        tmp = self.folder / f".{seq:012d}.tmp"
        with tmp.open("wb") as f:
            f.write(encode_transitions(transitions))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(seq))
        self._pending.append(seq)
        self.next_seq += 1
        while len(self._pending) > self.limit:
            self._path(self._pending.popleft()).unlink(missing_ok=True)
            self.dropped += 1
        return seq

    @property
    def oldest(self) -> int | None:
        """The oldest batch still held, None when empty.

        Sent with every batch: the learner then knows that a gap before it is what this outbox dropped when
        full, not batches lost on the way.
        """
        return self._pending[0] if self._pending else None

    def read(self, seq: int) -> bytes:
        """The safetensors bytes of batch ``seq`` (FileNotFoundError once acknowledged or dropped)."""
        return self._path(seq).read_bytes()

    def pending(self) -> list[tuple[int, bytes]]:
        """Every unacknowledged batch, oldest first, as ``(seq, safetensors bytes)``."""
        return [(seq, self._path(seq).read_bytes()) for seq in self._pending]

    def ack(self, seq: int) -> None:
        """The learner's checkpoint holds every batch up to ``seq``: forget them."""
        while self._pending and self._pending[0] <= seq:
            self._path(self._pending.popleft()).unlink(missing_ok=True)
        self.acked = max(self.acked, seq)

    def resume_after(self, learner_mark: int) -> None:
        """On (re)connecting: the learner's checkpoint holds up to ``learner_mark``; number new batches after it.

        A replaced actor whose outbox is empty must not reuse numbers the learner has already stored.
        """
        self.ack(learner_mark)
        self.next_seq = max(self.next_seq, learner_mark + 1)


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
        return {"checkpointed": dict(self.checkpointed)}

    @classmethod
    def restore(cls, state: dict[str, Any] | None) -> Inbox:
        """The inbox of a restarted learner: only what its checkpoint holds counts as received."""
        inbox = cls()
        marks = (state or {}).get("checkpointed", {})
        if not isinstance(marks, dict) or not all(isinstance(v, int) and v >= 0 for v in marks.values()):
            raise ValueError(f"inbox state: expected actor -> non-negative int, got {marks!r}")
        inbox.checkpointed = {str(k): int(v) for k, v in marks.items()}
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
