"""Exactly-once delivery: outbox (actor) + inbox (learner) across learner kills and replaced actors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions
from robot_rl.fleet.delivery import Inbox, Outbox


def step(actor: int, k: int) -> Transition:
    obs = {"state": np.array([actor, k], np.float32)}
    return Transition(observation=obs, next_observation=obs, action=np.zeros(2, np.float32), reward=float(k),
                      terminated=False, truncated=False, episode_id=actor, step=k)


def digest(transitions: list[Transition]) -> str:
    keys = sorted((int(t.observation["state"][0]), int(t.observation["state"][1])) for t in transitions)
    return hashlib.sha256(repr(keys).encode()).hexdigest()


class Learner:
    """A learner's memory (lost when killed) and its checkpoint (kept): stored transitions and the inbox."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.saved: list[Transition] = []
        self.restart()

    def restart(self) -> None:
        self.memory = list(self.saved)
        self.inbox = Inbox.load(self.folder / "inbox.json")

    def receive(self, actor: str, seq: int, payload: bytes) -> None:
        if self.inbox.accept(actor, seq):
            self.memory.extend(decode_transitions(payload))

    def checkpoint(self) -> dict[str, int]:
        self.saved = list(self.memory)
        acks = self.inbox.checkpoint_done()
        self.inbox.save(self.folder / "inbox.json")
        return acks


def test_every_transition_is_stored_once_through_learner_kills_and_replaced_actors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    learner = Learner(tmp_path)
    outboxes = {f"a{i}": Outbox(tmp_path / f"a{i}") for i in range(3)}
    connected = dict.fromkeys(outboxes, False)
    sent: list[Transition] = []
    counter = dict.fromkeys(outboxes, 0)
    kills = replaced = 0
    for _ in range(400):
        actor = f"a{rng.integers(3)}"
        batch = [step(int(actor[1]), counter[actor] + j) for j in range(int(rng.integers(1, 6)))]
        counter[actor] += len(batch)
        sent.extend(batch)
        seq = outboxes[actor].add(batch)
        if not connected[actor]:  # (re)connect: numbering resumes after the checkpoint, everything pending again
            outboxes[actor].resume_after(learner.inbox.mark(actor))
            for s, payload in outboxes[actor].pending():
                learner.receive(actor, s, payload)
            connected[actor] = True
        elif rng.random() < 0.9:  # a batch lost on the wire is re-sent at the next reconnect
            learner.receive(actor, seq, outboxes[actor].pending()[-1][1])
        else:
            connected[actor] = False
        event = rng.random()
        if event < 0.1:
            for a, mark in learner.checkpoint().items():
                if connected[a]:
                    outboxes[a].ack(mark)
        elif event < 0.15:  # SIGKILL of the learner: memory lost, every actor reconnects later
            learner.restart()
            connected = dict.fromkeys(outboxes, False)
            kills += 1
        elif event < 0.18:  # an actor killed and replaced by one with the same id and folder
            outboxes[actor] = Outbox(tmp_path / actor)
            connected[actor] = False
            replaced += 1
    for actor, box in outboxes.items():  # the end: everybody reconnects once, then a final checkpoint
        box.resume_after(learner.inbox.mark(actor))
        for s, payload in box.pending():
            learner.receive(actor, s, payload)
    for a, mark in learner.checkpoint().items():
        outboxes[a].ack(mark)
    assert kills > 5 and replaced > 5 and learner.inbox.duplicates > 0
    assert len(learner.saved) == len(sent) and digest(learner.saved) == digest(sent)
    assert all(not box.pending() for box in outboxes.values())


def test_a_replaced_actor_with_an_empty_outbox_numbers_after_the_learners_mark(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "a")
    inbox = Inbox()
    for k in range(3):
        assert inbox.accept("a", box.add([step(0, k)]))
    box.ack(inbox.checkpoint_done()["a"])
    fresh = Outbox(tmp_path / "a")  # the replacement: nothing pending, counter lost
    fresh.resume_after(inbox.mark("a"))
    assert fresh.add([step(0, 3)]) == 4 and inbox.accept("a", 4)


def test_gaps_bad_state_and_a_full_outbox_are_reported(tmp_path: Path) -> None:
    inbox = Inbox()
    assert inbox.accept("a", 1)
    with pytest.raises(ValueError, match=r"batches 2\.\.2 are missing"):
        inbox.accept("a", 3)
    with pytest.raises(ValueError, match="non-negative int"):
        Inbox.restore({"checkpointed": {"a": -1}})
    box = Outbox(tmp_path / "small", limit_batches=2)
    for k in range(5):
        box.add([step(0, k)])
    assert box.dropped == 3 and [s for s, _ in box.pending()] == [4, 5]
    # the learner had none of them: the gap before the oldest batch held is the outbox's drop, declared
    learner = Inbox()
    assert all(learner.accept("small", s, box.oldest) for s, _ in box.pending())
    assert learner.lost == {"small": 3} and learner.received == {"small": 5}
    with pytest.raises(ValueError, match="missing"):  # a gap the actor does not declare
        learner.accept("small", 7, oldest=6)


def test_balanced_batches_give_a_rare_task_half_of_every_batch() -> None:
    """A fleet of 9 hovering simulators and 1 tracking robot: uniform batches see the robot's task 10 % of the
    time, balanced ones 50 %, and only stored rows are drawn."""
    from robot_rl.learners.buffers import ReplayBuffer

    buf = ReplayBuffer(2000)
    obs = {"state": np.zeros(2, np.float32)}
    buf.extend([Transition(observation=obs, next_observation=obs, action=np.zeros(1, np.float32), reward=0.0,
                           terminated=False, truncated=False, episode_id=0, step=k, task=int(k % 10 == 0))
                for k in range(1500)])
    rng = np.random.default_rng(0)
    uniform = buf.columns["task"][buf.sample_indices(4000, rng)].mean()
    buf.balance_tasks = True
    idx = buf.sample_indices(4000, rng)
    assert idx.max() < len(buf) and abs(uniform - 0.1) < 0.03
    assert abs(buf.columns["task"][idx].mean() - 0.5) < 0.01
    assert buf.sample(7, rng)["task"].shape == (7,)
