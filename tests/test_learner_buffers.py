"""Replay buffers: exact round trips, restart keeps counts, append-only saves, 50/50 batches, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.core.transition_columns import decode_transitions, encode_transitions
from robot_rl.learners.buffers import ReplayBuffer, mixed_sample, route


def make(i: int, human: bool = False, image: bool = True) -> Transition:
    obs = {"state": np.full(3, i, np.float32)}
    nxt = {"state": np.full(3, i + 1, np.float32)}
    if image:
        obs["cam"] = np.full((4, 5, 3), i % 256, np.uint8)
        nxt["cam"] = np.full((4, 5, 3), (i + 1) % 256, np.uint8)
    return Transition(obs, nxt, np.array([i, -i], np.float32), float(i) / 10, i % 7 == 6, False, i // 7, i % 7,
                      policy_action=np.array([0.5, 0.5], np.float32) if not human else None,
                      base_action=np.array([0.1, 0.2], np.float32) if i % 2 else None,
                      is_intervention=human, segment_source=SegmentSource.HUMAN if human else SegmentSource.POLICY,
                      segment_id=i // 3, policy_version=i % 4, obs_stamp=0.1 * i, next_obs_stamp=0.1 * i + 0.1)


def same(a: Transition, b: Transition) -> bool:
    keys = ("reward", "terminated", "truncated", "episode_id", "step", "is_intervention", "segment_source",
            "segment_id", "policy_version", "obs_stamp", "next_obs_stamp")
    arrays = [(a.action, b.action)] + [(a.observation[k], b.observation[k]) for k in a.observation] + \
             [(a.next_observation[k], b.next_observation[k]) for k in a.observation]
    for name in ("policy_action", "base_action"):
        x, y = getattr(a, name), getattr(b, name)
        if (x is None) != (y is None):
            return False
        if x is not None:
            arrays.append((x, y))
    return all(getattr(a, k) == getattr(b, k) for k in keys) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in arrays)


def test_codec_round_trip_is_exact_and_rejects_garbage() -> None:
    items = [make(i, human=i % 3 == 0) for i in range(10)]
    back = decode_transitions(encode_transitions(items))
    assert len(back) == 10 and all(same(a, b) for a, b in zip(items, back))
    with pytest.raises(SpecError, match="safetensors"):
        decode_transitions(b"\x00garbage")


def test_ring_keeps_newest_and_save_restore_keeps_counts(tmp_path: Path) -> None:
    buf = ReplayBuffer(capacity=25)
    buf.extend([make(i) for i in range(10)])
    # camera frames stay uint8 in the ring and in batches (a float copy would take 4x the memory)
    assert buf.layout["obs.cam"] == buf.layout["next_obs.cam"] == ((4, 5, 3), "uint8")
    assert buf.sample(4, np.random.default_rng(0))["obs.cam"].dtype == np.uint8
    buf.save(tmp_path / "buf")
    buf.extend([make(i) for i in range(10, 40)])  # wraps around: 40 added, 25 kept
    buf.save(tmp_path / "buf")
    assert len(buf) == 25 and buf.total_added == 40
    assert [int(t.step + 7 * t.episode_id) for t in buf.transitions()] == list(range(15, 40))
    # the first chunk only held rows that left the ring: it was deleted, the file set stays bounded
    assert sorted(p.name for p in (tmp_path / "buf").glob("chunk_*")) == ["chunk_000000000015.safetensors"]

    restarted = ReplayBuffer.load(tmp_path / "buf")
    assert (len(restarted), restarted.total_added) == (25, 40)
    assert all(same(a, b) for a, b in zip(buf.transitions(), restarted.transitions()))
    # a restarted buffer continues: the next save only appends the new rows
    restarted.extend([make(i) for i in range(40, 43)])
    restarted.save(tmp_path / "buf")
    again = ReplayBuffer.load(tmp_path / "buf")
    assert (len(again), again.total_added) == (25, 43)
    assert [int(t.step + 7 * t.episode_id) for t in again.transitions()] == list(range(18, 43))
    stranger = ReplayBuffer(25)
    stranger.extend([make(i) for i in range(5)])
    with pytest.raises(ValueError, match="another buffer"):  # would mix two buffers' rows
        stranger.save(tmp_path / "buf")
    assert ReplayBuffer.load(tmp_path / "buf").total_added == 43


def test_save_only_writes_new_rows(tmp_path: Path) -> None:
    buf = ReplayBuffer(capacity=1000)
    buf.extend([make(i) for i in range(200)])
    buf.save(tmp_path / "b")
    first = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "b").glob("chunk_*")}
    buf.add(make(200))
    buf.save(tmp_path / "b")
    chunks = {p.name: p.stat() for p in (tmp_path / "b").glob("chunk_*")}
    assert len(chunks) == 2
    assert all(chunks[n].st_mtime_ns == t for n, t in first.items())  # old chunk untouched
    assert chunks["chunk_000000000200.safetensors"].st_size < 0.05 * sum(c.st_size for c in chunks.values())


def test_route_and_fifty_fifty_batches() -> None:
    online, demo = ReplayBuffer(500), ReplayBuffer(500)
    route([make(i, human=i % 10 == 0, image=False) for i in range(300)], online, demo)
    assert (len(online), len(demo)) == (300, 30)
    assert demo.columns["is_intervention"][:30].all()
    rng = np.random.default_rng(0)
    batch = mixed_sample(online, demo, 256, 0.5, rng)
    assert batch["from_demo"].sum() == 128 and len(batch["action"]) == 256
    # half of every batch is intervention data although interventions are 10% of the stream
    assert 0.5 <= batch["is_intervention"].mean() <= 0.6
    only_online = mixed_sample(online, ReplayBuffer(10), 64, 0.5, rng)
    assert not only_online["from_demo"].any() and len(only_online["action"]) == 64


def test_bad_input_is_refused_and_nothing_is_lost() -> None:
    buf = ReplayBuffer(10)
    buf.extend([make(i) for i in range(3)])
    with pytest.raises(SpecError, match=r"obs\.cam|fields"):
        buf.add(make(3, image=False))
    wrong = make(4)
    bad = wrong.replace(observation={**wrong.observation, "state": np.zeros(4, np.float32)},
                        next_observation={**wrong.next_observation, "state": np.zeros(4, np.float32)})
    with pytest.raises(SpecError, match=r"obs\.state"):
        buf.add(bad)
    assert len(buf) == 3 and buf.total_added == 3
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(5).sample(1, np.random.default_rng())
    with pytest.raises(FileNotFoundError, match=r"buffer\.json"):
        ReplayBuffer.load("/nonexistent/buffer")


def test_sample_gives_the_base_action_of_the_next_step() -> None:
    buf = ReplayBuffer(50)
    items = []
    for i in range(30):  # episodes of 7 steps
        t = make(i, image=False)
        items.append(t.replace(base_action=np.array([i, -i], np.float32)))
    buf.extend(items)
    batch = buf.sample(200, np.random.default_rng(0))
    i = batch["step"] + 7 * batch["episode_id"]
    last_of_episode = (batch["step"] == 6) | (i == 29)
    expected = np.where(last_of_episode, i, i + 1)
    assert np.array_equal(batch["next_base_action"][:, 0], expected.astype(np.float32))
    assert last_of_episode.any() and (~last_of_episode).any()


def test_decoded_columns_are_checked_as_each_step_would_be() -> None:
    """Decoding checks whole columns instead of each step: the rows it builds are what the checked constructor
    builds from the same values (field types included), and every kind of bad column a peer could send is
    refused with the column's name."""
    from safetensors.numpy import load, save

    items = [make(i, human=i % 3 == 0) for i in range(10)]
    back = decode_transitions(encode_transitions(items))
    for t in back:
        checked = t.replace()  # the full per-step check of the same values
        assert same(t, checked) and all(type(getattr(t, k)) is type(getattr(checked, k)) for k in vars(checked))

    def tampered(**cols: np.ndarray) -> bytes:
        base = load(encode_transitions(items))
        return bytes(save({**base, **cols}))

    n = len(items)
    cases = {
        "obs.state": {"obs.state": np.full((n, 3), np.nan, np.float32)},
        "reward": {"reward": np.full(n, np.inf)},
        "episode_id": {"episode_id": np.full(n, -1, np.int64)},
        "next_obs_stamp": {"next_obs_stamp": np.zeros(n)},
        "an intervention step must be 'human'": {"source": np.zeros(n, np.uint8)},
        "source": {"source": np.full(n, 9, np.uint8)},
        "action": {"action": np.zeros((n, 2), np.float64)},
        "rows": {"step": np.zeros(n + 1, np.int64)},
        "next_observation.cam": {"next_obs.cam": np.zeros((n, 2, 2, 3), np.uint8)},
    }
    for what, cols in cases.items():
        with pytest.raises(SpecError, match=what.replace("(", r"\(")):
            decode_transitions(tampered(**cols))
