"""Fault drills on data: the recorder killed with SIGKILL mid-recording, and the disk filling up while
recording and while checkpointing. Each asserts the data invariant (what was committed before the fault
reads back bit-identical; the partial episode / checkpoint is absent or flagged; work resumes after) and
reports its measured outcome with ``record_fault``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.fuzz import record_fault

from robot_rl.core.transition import SegmentSource
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.stream_recorder import StreamRecorder
from robot_rl.policies.base import Policy, PolicySpec
from robot_rl.policies.mlp import MLPConfig, MLPPolicy
from robot_rl.training.checkpoint import load_training_state, save_training_state

SPEC = PolicySpec({"pos": 2, "goal": 2}, {}, 2)


def episode_digest(store: EpisodeStore, index: int) -> str:
    """sha256 over every column of one committed episode (the content the drills compare)."""
    h = hashlib.sha256()
    for name, value in sorted(store.read_episode(index).items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


def stream_episode(recorder: StreamRecorder, seed: int, steps: int) -> None:
    """A live robot's samples (joint state + camera frame) at 50 Hz, ended as a success."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        obs = {"joint_pos": rng.normal(size=7).astype(np.float32),
               "cam": rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)}
        recorder.add(obs, rng.normal(size=7).astype(np.float32), SegmentSource.POLICY, t / 50.0)
    recorder.end("success")


# ============================================================================ recorder killed with SIGKILL
RECORDER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from test_drills_data import stream_episode
import numpy as np
from robot_rl.core.transition import SegmentSource
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.stream_recorder import StreamRecorder
path = sys.argv[1]
store = EpisodeStore.create(path, DatasetInfo(robot="g1", fps=50.0, task="walk"))
recorder = StreamRecorder(store)
for i in range(3):
    stream_episode(recorder, i, 30)
    print("COMMITTED", i, flush=True)
rng = np.random.default_rng(99)
t = 0
while True:  # the fourth episode never ends: the parent kills the recorder mid-take
    obs = {"joint_pos": rng.normal(size=7).astype(np.float32), "cam": np.zeros((16, 16, 3), np.uint8)}
    recorder.add(obs, np.zeros(7, np.float32), SegmentSource.POLICY, t / 50.0)
    t += 1
    if t == 40:
        print("RECORDING", flush=True)
    time.sleep(0.001)
"""


def _reference(tmp: Path) -> list[str]:
    """The digests the three committed episodes must have (recorded the same way, in this process)."""
    with EpisodeStore.create(tmp / "reference.zarr", DatasetInfo(robot="g1", fps=50.0, task="walk")) as store:
        recorder = StreamRecorder(store)
        for i in range(3):
            stream_episode(recorder, i, 30)
        return [episode_digest(store, i) for i in range(3)]


def test_recorder_sigkill_mid_take_keeps_committed_episodes_and_appends_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "live.zarr"
    proc = subprocess.Popen([sys.executable, "-c", RECORDER, str(path), str(Path(__file__).parent)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(4)]
        assert lines[-1] == "RECORDING", lines
        killed = time.monotonic()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    reader = EpisodeStore.open(path)  # readable while nobody holds it for writing
    assert reader.num_episodes == 3 and reader.uncommitted_frames >= 0  # the partial take is flagged, not an episode
    assert [episode_digest(reader, i) for i in range(3)] == _reference(tmp_path)
    partial = reader.uncommitted_frames
    # the restarted recorder appends: the partial take is dropped, the committed ones untouched
    with EpisodeStore.open(path, mode="a") as store:
        assert store.dropped_frames == partial
        recorder = StreamRecorder(store)
        stream_episode(recorder, 3, 20)
        recovered = time.monotonic() - killed
    final = EpisodeStore.open(path)
    assert final.num_episodes == 4 and final.uncommitted_frames == 0
    assert [episode_digest(final, i) for i in range(3)] == _reference(tmp_path / "again")
    assert final.episode_info(3).length == 20
    record_fault("recorder: SIGKILL mid-episode", happened=f"3 committed episodes intact (sha256), partial take "
                 f"of {partial} frames flagged uncommitted, dropped on reopen; restart appended episode 4",
                 recovery_s=round(recovered, 3), lost=f"{partial} frames of the open take", robot="n/a")


# ============================================================================ the disk fills up
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root, or a user+mount namespace would be needed: skipped with the reason otherwise)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({result.stderr.strip()[:200]}); run as root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(disk: Path, leave: int = 0, name: str = "filler.bin") -> Path:
    """Fill ``disk`` to ``leave`` bytes free with one file (deleted to free the space again)."""
    filler = disk / name
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def assert_no_space_error(exc: BaseException, path: Path) -> None:
    message = str(exc)
    assert "\n" not in message and str(path) in message and "no space" in message.lower(), message


def test_disk_full_while_recording_keeps_earlier_episodes_and_records_after_space_is_freed(
        small_disk: Path) -> None:
    path = small_disk / "episodes.zarr"
    store = EpisodeStore.create(path, DatasetInfo(robot="g1", fps=50.0, task="walk"))
    recorder = StreamRecorder(store)
    for i in range(2):
        stream_episode(recorder, i, 30)
    digests = [episode_digest(store, i) for i in range(2)]
    filler = fill(small_disk)
    with pytest.raises(OSError) as info:
        stream_episode(recorder, 2, 30)
    assert_no_space_error(info.value, path)
    failed = time.monotonic()
    lost = recorder.steps
    assert not recorder.recording  # the take is over: the next sample starts a new one
    reader = EpisodeStore.open(path)
    assert reader.num_episodes == 2 and [episode_digest(reader, i) for i in range(2)] == digests
    filler.unlink()
    stream_episode(recorder, 3, 30)
    recovered = time.monotonic() - failed
    store.close()
    final = EpisodeStore.open(path)
    assert final.num_episodes == 3 and final.uncommitted_frames == 0
    assert [episode_digest(final, i) for i in range(2)] == digests
    record_fault("disk full while recording", happened="one-line OSError naming the store and 'no space'; the "
                 "take was discarded, 2 earlier episodes intact; recording resumed once space was freed",
                 recovery_s=round(recovered, 3), lost=f"the open take ({lost} steps)", robot="n/a")


def _train_objects(seed: int) -> tuple[MLPPolicy, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    policy = MLPPolicy(MLPConfig(hidden=(64,)), SPEC)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    torch.stack([p.sum() for p in policy.parameters()]).sum().backward()
    optimizer.step()
    return policy, optimizer


def test_disk_full_while_checkpointing_keeps_the_previous_checkpoint(small_disk: Path) -> None:
    policy, optimizer = _train_objects(0)
    last = save_training_state(small_disk / "last", policy, None, optimizer, 10, {"seed": 0})
    exported = policy.save(small_disk / "policy")
    weights = {k: v.clone() for k, v in policy.state_dict().items()}
    bigger, big_opt = _train_objects(1)  # different weights: a half-written save would show
    filler = fill(small_disk, leave=8192)
    with pytest.raises(OSError) as info:
        save_training_state(last, bigger, None, big_opt, 20, {"seed": 0})
    assert_no_space_error(info.value, last)
    more = fill(small_disk, leave=1024, name="more.bin")  # the failed save freed its temporary files
    with pytest.raises(OSError) as info:
        bigger.save(exported)
    assert_no_space_error(info.value, exported)
    failed = time.monotonic()
    for folder in (last, exported):  # the previous checkpoints still load, with their weights
        loaded = Policy.load(folder)
        for k, v in loaded.state_dict().items():
            torch.testing.assert_close(v, weights[k])
    resumed, resumed_opt = _train_objects(2)
    assert load_training_state(last, resumed, None, resumed_opt)["step"] == 10
    filler.unlink()
    more.unlink()
    save_training_state(last, bigger, None, big_opt, 20, {"seed": 0})
    bigger.save(exported)
    recovered = time.monotonic() - failed
    assert load_training_state(last, resumed, None, resumed_opt)["step"] == 20
    assert Policy.load(exported).version == bigger.version
    assert sorted(p.name for p in small_disk.iterdir()) == ["last", "policy"]  # no temporary left behind
    record_fault("disk full while checkpointing", happened="one-line OSError naming the checkpoint and 'no space'; "
                 "training state and policy checkpoint both kept the previous version; saving worked once space "
                 "was freed", recovery_s=round(recovered, 3), lost="the one failed save", robot="n/a")


# ============================================================================ the recorder node, end to end
@pytest.mark.ros
@pytest.mark.slow
def test_recorder_node_survives_a_full_disk_and_sigkill_loses_only_the_open_take(small_disk: Path) -> None:
    pytest.importorskip("rclpy")
    import rclpy
    from helpers.ros_spin import spin_until
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from robot_rl.robots import panda
    from robot_rl.ros.conversions import joint_state_to_msg, pose_to_msg
    from robot_rl.ros.launch_processes import LaunchedGraph, launch
    from robot_rl.ros.launch_yaml import load_launch_file, write_node_launch_file
    from robot_rl.ros.qos import EVENTS, LATCHED

    dataset = small_disk / "demos.zarr"
    launch_file = write_node_launch_file(small_disk.parent / "recorder.launch.yaml", "recorder_node",
                                         {"dataset": str(dataset), "robot": "panda", "rate_hz": 20.0})
    status: list[str] = []
    rclpy.init()
    node = rclpy.create_node("recorder_drill")
    try:
        node.create_subscription(String, "/recorder/status", lambda m: status.append(m.data), LATCHED)
        joints = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
        pose = node.create_publisher(type(pose_to_msg(np.zeros(3), np.array([1.0, 0, 0, 0]), 0, "")),
                                     "/current_pose", qos_profile_sensor_data)
        events = node.create_publisher(String, "/episode_event", EVENTS)
        names = [*panda.JOINT_NAMES, *panda.GRIPPER_JOINTS]
        rng = np.random.default_rng(0)

        def feed() -> None:
            now = time.time_ns()
            joints.publish(joint_state_to_msg(names, np.r_[panda.HOME_Q + rng.normal(0, 0.01, 7), 0.04, 0.04],
                                              np.zeros(9), np.zeros(9), now))
            pose.publish(pose_to_msg(np.array([0.5, 0.0, 0.4]) + rng.normal(0, 0.01, 3),
                                     np.array([0.0, 1.0, 0.0, 0.0]), now, "base"))

        def spin(seconds: float, until: object = None) -> bool:
            return spin_until(node, seconds, until, tick=feed, tick_period=0.02)  # type: ignore[arg-type]

        def take(graph: LaunchedGraph, index: int) -> None:
            """Record about a second, then end the take as a success; wait for its commit."""
            assert spin(30, lambda: any("episode open" in s for s in status[-1:])), graph.log("recorder")
            spin(1.0)
            events.publish(String(data="success"))
            assert spin(10, lambda: f"committed as episode {index}" in graph.log("recorder")), \
                graph.log("recorder")[-2000:]

        with launch(load_launch_file(launch_file), small_disk.parent / "logs") as graph:
            take(graph, 0)
            take(graph, 1)
            digests = [episode_digest(EpisodeStore.open(dataset), i) for i in range(2)]
            filler = fill(small_disk)  # the disk fills up mid-take
            full = time.monotonic()
            assert spin(30, lambda: "No space left on device" in graph.log("recorder")), graph.log("recorder")[-2000:]
            line = next(x for x in graph.log("recorder").splitlines() if "No space left on device" in x)
            assert str(dataset) in line and graph.is_running("recorder"), line  # one line, the node records on
            filler.unlink()
            take(graph, 2)  # space freed: recording works again
            recovered = time.monotonic() - full
            spin(2.5)  # a fourth take is open, some of it flushed
            graph.kill("recorder")  # SIGKILL mid-take
            assert spin(10, lambda: not graph.is_running("recorder"))
        store = EpisodeStore.open(dataset)
        assert store.num_episodes == 3 and [episode_digest(store, i) for i in range(2)] == digests
        partial = store.uncommitted_frames
        status.clear()
        with launch(load_launch_file(launch_file), small_disk.parent / "logs2") as graph:  # restarted: appends
            assert spin(30, lambda: "3 episodes already" in graph.log("recorder")), graph.log("recorder")
            take(graph, 3)
        final = EpisodeStore.open(dataset)
        assert final.num_episodes >= 4 and final.uncommitted_frames == 0  # (+ the take a clean stop commits)
        assert [episode_digest(final, i) for i in range(2)] == digests
    finally:
        node.destroy_node()
        rclpy.shutdown()
    record_fault("recorder_node: disk full, then SIGKILL mid-take", happened=f"'{line.split('] ')[-1][:160]}' "
                 f"logged, node kept running, recorded again once space was freed ({recovered:.1f} s incl. a take); "
                 f"SIGKILL left 3 committed episodes intact (sha256), the open take ({partial} flushed frames) "
                 "uncommitted; the restarted node appended episode 4", recovery_s=round(recovered, 3),
                 lost=f"the take open at the disk-full and the one open at the kill ({partial} frames on disk)",
                 robot="n/a")
