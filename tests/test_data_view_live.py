"""The live view of an online run: a follower polls the run folder as it grows and logs the new points to rerun."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robot_rl.fleet.fleet_status import FleetStatus
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.online import read_jsonl

rr = pytest.importorskip("rerun")


def rows(chunk: Any) -> list[dict[str, Any]]:
    """A chunk's rows; time columns as integer nanoseconds (what was logged, without datetime rounding)."""
    import pyarrow as pa

    batch = chunk.to_record_batch()
    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) or pa.types.is_duration(c.type) else c
               for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names).to_pylist()


def read_rrd(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Entity path -> rows of the (single) recording in ``path``, read with rerun's own RrdReader."""
    from rerun.chunk import RrdReader

    entities: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for chunk in RrdReader(path).stream():
        entities[chunk.entity_path] += rows(chunk)
    return entities


def values(rows: list[dict[str, Any]]) -> list[float]:
    return [r["Scalars:scalars"][0] for r in rows if "Scalars:scalars" in r]


def learner_line(updates: int, loss: float | None, **extra: Any) -> dict[str, Any]:
    """A line as LearnerProcess._log writes it."""
    return {"t": time.time(), "version": updates // 10, "updates": updates, "steps": 5 * updates, "human_steps": 3,
            "loss": loss, "metrics": {"critic_loss": loss, "q_mean": 0.5}, **extra}


def episode_record(actor: int, k: int, success: bool) -> dict[str, Any]:
    """A line as actor_process.run_actor writes it."""
    return {"actor": actor, "task": "robot_rl/ArmPickLift-v0", "episode": k, "seed": k, "success": success,
            "steps": 80, "intervention_steps": 20 * k, "takeovers": k, "version_start": k, "version_end": k + 1,
            "hands_off": False, "seconds": 3.0, "t": time.time(), "queued": 0}


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_follower_logs_what_the_run_folder_gains_between_polls(tmp_path: Path) -> None:
    from robot_rl.data.synthetic import synthetic_episode
    from robot_rl.learners.live_view import RunFollower

    run = tmp_path / "run"
    run.mkdir()
    rec = rr.RecordingStream("robot_rl", recording_id="live-test")
    rec.save(str(tmp_path / "live.rrd"))
    follower = RunFollower(run, rec)
    assert follower.poll() == 0  # nothing written yet

    # what the learner and an actor write: their logs, the status file, a checkpoint of the received steps
    append(run / "learner_log.jsonl", "".join(json.dumps(learner_line(u, 1.0 / u)) + "\n" for u in (10, 20)))
    first = json.dumps(episode_record(0, 0, False)) + "\n"
    second = json.dumps(episode_record(0, 1, True)) + "\n"
    append(run / "actor_0.jsonl", first + second[:25])  # the second line is being written
    status = FleetStatus(run, tensorboard=False)
    actor_row = {"actor": "local-1", "host": "h", "task": "pick", "steps": 20, "interventions": 4, "version": 1}
    status.update({"updates": 20, "steps": 100, "version": 2}, [actor_row])
    steps = ReplayBuffer(1000)
    steps.extend([t.replace(episode_id=1_000_000 + t.episode_id) for t in synthetic_episode(0, 12, size=16)])
    steps.save(run / "checkpoint" / "steps")
    assert follower.poll() > 0
    assert (follower.counts.learner_lines, follower.counts.episodes, follower.counts.frames) == (2, {0: 1}, 12)

    append(run / "actor_0.jsonl", second[25:] + json.dumps(episode_record(0, 2, True)) + "\n")
    append(run / "learner_log.jsonl", json.dumps(learner_line(30, None, error="weights not finite")) + "\n")
    time.sleep(0.01)
    status.update({"updates": 30, "steps": 140, "version": 3}, [{**actor_row, "steps": 60}])
    steps.extend([t.replace(episode_id=1_000_000 + t.episode_id) for t in synthetic_episode(1, 5, size=16)])
    steps.save(run / "checkpoint" / "steps")
    follower.poll()
    assert follower.counts.episodes == {0: 3} and follower.counts.statuses == 2 and follower.counts.frames == 17
    assert follower.poll() == 0  # nothing new
    rec.flush()
    rec.disconnect()

    ents = read_rrd(tmp_path / "live.rrd")
    assert values(ents["/learner/loss"]) == pytest.approx([0.1, 0.05])  # the third line has no loss
    assert [r["updates"] for r in ents["/learner/version"]] == [10, 20, 30]
    assert values(ents["/learner/q_mean"]) == [0.5] * 3
    assert "weights not finite" in ents["/learner/events"][0]["TextLog:text"][0]
    assert values(ents["/actors/0/success"]) == [0.0, 1.0, 1.0]
    assert values(ents["/actors/0/intervention_rate"]) == pytest.approx([0.0, 0.25, 0.5])
    assert values(ents["/fleet/success_rate"]) == pytest.approx([0.0, 0.5, 2 / 3])
    assert values(ents["/status/actors/local-1/steps"]) == [20.0, 60.0]
    assert len(ents["/status/learner/steps_per_s"]) == 2
    frames = [r for r in ents["/actors/1/camera/cam0"] if "Image:buffer" in r]
    assert [r["received_step"] for r in frames] == list(range(17))
    want = synthetic_episode(1, 5, size=16)[2].observation["cam0"]
    assert np.array_equal(np.array(frames[14]["Image:buffer"][0], np.uint8).reshape(16, 16, 3), want)


def test_a_rewritten_log_is_read_again_and_a_folder_without_images_has_no_frames(tmp_path: Path) -> None:
    from robot_rl.learners.live_view import RunFollower

    rec = rr.RecordingStream("robot_rl", recording_id="live-rewrite")
    rec.save(str(tmp_path / "r.rrd"))
    follower = RunFollower(tmp_path, rec)
    log = tmp_path / "actor_3.jsonl"
    log.write_text("".join(json.dumps(episode_record(3, k, True)) + "\n" for k in range(4)))
    follower.poll()
    log.write_text(json.dumps(episode_record(3, 0, False)) + "\n")  # a new run in the same folder
    follower.poll()
    assert follower.counts.episodes == {3: 5} and follower.counts.frames == 0 and not follower.counts.image_keys
    rec.flush()
    rec.disconnect()
    assert values(read_rrd(tmp_path / "r.rrd")["/actors/3/success"]) == [1.0] * 4 + [0.0]


@pytest.mark.slow
def test_follow_a_real_online_run_with_a_camera(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RLPD from scratch (no demonstrations), one actor, two episodes with a 16x16 camera: the follower,
    started before the learner, logs points while the run is going and, at the end, every episode, every
    learner line and the frames of the checkpointed steps."""
    from robot_rl.core.config import load_config
    from robot_rl.learners.live_view import RunFollower
    from robot_rl.learners.online import run_online
    from robot_rl.learners.online_config import OnlineConfig

    monkeypatch.setenv("MUJOCO_GL", "egl")  # the actor renders offscreen
    monkeypatch.setenv("PYOPENGL_PLATFORM", "egl")
    cfg = load_config(OnlineConfig, None, [
        "actor.env_id=robot_rl/ArmPickLift-v0", "actor.episodes=2", "actor.human.max_takeovers=0",
        "actor.env_options={cameras: [front], image_size: [16, 16]}", "learner.algorithm=rlpd",
        "learner.rlpd.warmup_steps=0", "learner.rlpd.sac.hidden=16", "learner.rlpd.sac.batch_size=16",
        "learner.rlpd.sac.utd_ratio=1", "learner.publish_every=20", "learner.device=cpu",
        "learner.checkpoint_every_s=1.0", "fleet.status_every_s=0.5"])
    run = tmp_path / "run"
    run.mkdir()
    rec = rr.RecordingStream("robot_rl", recording_id="live-real")
    rec.save(str(tmp_path / "real.rrd"))
    follower = RunFollower(run, rec)
    errors: list[BaseException] = []

    def go() -> None:
        try:
            run_online(cfg, run, progress=False, timeout=400)
        except BaseException as exc:  # reported below
            errors.append(exc)

    runner = threading.Thread(target=go)
    runner.start()
    during = 0
    while runner.is_alive():
        during += follower.poll()
        time.sleep(0.5)
    runner.join()
    assert not errors, errors
    assert during > 0  # points arrived while the run was going
    follower.poll()
    rec.flush()
    rec.disconnect()
    ents = read_rrd(tmp_path / "real.rrd")
    episodes = read_jsonl(run / "actor_0.jsonl")
    lines = read_jsonl(run / "learner_log.jsonl")
    assert len(episodes) == 2 and values(ents["/actors/0/success"]) == [float(e["success"]) for e in episodes]
    assert values(ents["/learner/version"]) == [float(line["version"]) for line in lines]
    assert values(ents["/learner/loss"]) == pytest.approx([line["loss"] for line in lines if line.get("loss")])
    assert ents["/status/learner/updates_per_s"]
    assert follower.counts.image_keys == ["image_front"]
    frames = [r for r in ents["/actors/0/camera/image_front"] if "Image:buffer" in r]
    received = [r["received_step"] for r in frames]
    assert frames and len(frames[0]["Image:buffer"][0]) == 16 * 16 * 3 and received == sorted(set(received))
