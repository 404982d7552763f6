"""Episode store: exact round trips, appends that never touch earlier episodes, discards that leave nothing."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numcodecs
import numpy as np
import pytest

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.data import DatasetError, DatasetInfo, EpisodeStore
from robot_rl.data.synthetic import synthetic_episode

INFO = DatasetInfo(robot="panda", fps=10.0, task="pick the cube", controller={"type": "cartesian_impedance"},
                   cameras={"cam0": {"height": 32, "width": 32}})


def assert_same(a: Transition, b: Transition) -> None:
    for key in a.observation:
        np.testing.assert_array_equal(a.observation[key], b.observation[key])
        np.testing.assert_array_equal(a.next_observation[key], b.next_observation[key])
    np.testing.assert_array_equal(a.action, b.action)
    for name in ("policy_action", "base_action"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y)
    for name in ("reward", "terminated", "truncated", "is_intervention", "segment_source", "segment_id",
                 "episode_id", "step", "policy_version", "obs_stamp", "next_obs_stamp"):
        assert getattr(a, name) == getattr(b, name), name


def tree_digest(path: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and not any(s in str(p) for s in skip)}


def test_round_trip_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    eps = [synthetic_episode(i, n, cameras=2, size=32) for i, n in enumerate((23, 5, 40))]
    with EpisodeStore.create(path, INFO) as store:
        store.add_episode(eps[0], success=True)
        store.add_episode(eps[1], task="place", success=False)
    with EpisodeStore.open(path, mode="a") as store:
        store.add_episode(eps[2])
    store = EpisodeStore.open(path)
    assert store.num_episodes == 3 and store.num_frames == 68
    assert store.info == INFO
    assert [store.episode_info(i).task for i in range(3)] == ["pick the cube", "place", "pick the cube"]
    assert [store.episode_info(i).success for i in range(3)] == [True, False, None]
    for i, ep in enumerate(eps):
        back = list(store.transitions(i))
        assert len(back) == len(ep)
        for a, b in zip(ep, back):
            assert_same(a, b)


def test_append_never_rewrites_earlier_image_chunks(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    with EpisodeStore.create(path, INFO) as store:
        store.add_episode(synthetic_episode(0, 20, size=32))
    before = tree_digest(path / "data" / "observation.cam0", skip=(".zarray",))
    with EpisodeStore.open(path, mode="a") as store:
        store.add_episode(synthetic_episode(1, 20, size=32))
    after = tree_digest(path / "data" / "observation.cam0", skip=(".zarray",))
    assert all(after[k] == v for k, v in before.items())
    assert len(after) > len(before)


def test_discard_and_rerecord_leave_no_frames(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    store = EpisodeStore.create(path, INFO)
    store.add_episode(synthetic_episode(0, 10, size=32))
    writer = store.begin_episode()
    for t in synthetic_episode(1, 300, size=32):  # long take: flushed to disk, then thrown away
        writer.add(t)
    writer.discard()
    retake = synthetic_episode(1, 7, size=32)
    store.add_episode(retake)
    store.close()
    store = EpisodeStore.open(path)
    assert store.num_frames == 17 and store.uncommitted_frames == 0
    assert_same(list(store.transitions(1))[-1], retake[-1])
    # No chunk of the discarded take survives on disk: one file per image row, and the low-dim tail chunk
    # is zero past the last committed row.
    image_chunks = [p for p in (path / "data" / "observation.cam0").iterdir() if not p.name.startswith(".")]
    assert len(image_chunks) == 17
    raw = (path / "data" / "reward" / "0").read_bytes()
    tail = np.frombuffer(numcodecs.Blosc().decode(raw), dtype=np.float64)
    assert tail.size == store.array("reward").chunks[0] and np.all(tail[17:] == 0)


def test_writer_context_discards_on_error(tmp_path: Path) -> None:
    store = EpisodeStore.create(tmp_path / "d.zarr", INFO)
    with pytest.raises(RuntimeError), store.begin_episode() as writer:
        for t in synthetic_episode(0, 40, size=32):
            writer.add(t)
        raise RuntimeError("operator pressed e-stop")
    assert store.num_episodes == 0
    assert store.array("action").shape[0] == 0


def test_bad_steps_are_rejected_with_episode_and_field(tmp_path: Path) -> None:
    store = EpisodeStore.create(tmp_path / "d.zarr", INFO)
    store.add_episode(synthetic_episode(0, 5, size=32))
    ep = synthetic_episode(1, 5, size=32)
    writer = store.begin_episode()
    writer.add(ep[0])
    small = {**ep[1].observation, "cam0": np.zeros((16, 16, 3), np.uint8)}
    with pytest.raises(SpecError, match=r"episode 1, step 1, field observation.cam0: expected \(32, 32, 3\)"):
        writer.add(ep[1].replace(observation=small, next_observation={**ep[1].next_observation,
                                                                      "cam0": small["cam0"]}))
    with pytest.raises(SpecError, match="episode 1, step 1, field action"):
        writer.add(ep[1].replace(action=np.zeros(3, np.float32), policy_action=None, base_action=None))
    with pytest.raises(SpecError, match="field step: expected 1, got 2"):
        writer.add(ep[2])
    with pytest.raises(SpecError, match=r"observation\.joint_pos: differs from the previous"):
        writer.add(ep[1].replace(observation={**ep[1].observation, "joint_pos": np.ones(7, np.float32)}))
    with pytest.raises(SpecError, match="episode 1: expected a Transition, got dict"):
        writer.add({"action": np.full(8, np.nan, np.float32)})  # type: ignore[arg-type]
    for t in ep[1:]:  # the rejected steps lost nothing: the episode still completes
        writer.add(t)
    assert writer.commit() == 1
    assert store.num_frames == 10


def test_corrupt_and_truncated_stores_name_episode_and_field(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    with EpisodeStore.create(path, INFO) as store:
        for i in range(3):
            store.add_episode(synthetic_episode(i, 100, size=16))
    # the chunk of rows 256..511 (episode 2's tail) overwritten with garbage
    (path / "data" / "action" / "1.0").write_bytes(b"garbage")
    store = EpisodeStore.open(path)
    list(store.transitions(0))
    with pytest.raises(DatasetError, match=r"episode 2, field action: cannot be read"):
        store.read_episode(2)
    # a missing column
    os.rename(path / "data" / "reward", tmp_path / "reward")
    with pytest.raises(DatasetError, match="field data/reward is missing"):
        EpisodeStore.open(path)
    os.rename(tmp_path / "reward", path / "data" / "reward")
    # an array shorter than the committed episodes (e.g. a copy cut short)
    zarray = path / "data" / "segment_id" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta["shape"] = [150]
    zarray.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=r"episode 1, field data/segment_id: truncated \(150 of 300 rows\)"):
        EpisodeStore.open(path)
    zarray.write_text("{truncated")
    with pytest.raises(DatasetError, match="field data/segment_id cannot be opened"):
        EpisodeStore.open(path)
    (path / ".zattrs").write_text("{not json")
    with pytest.raises(DatasetError, match="cannot open the store"):
        EpisodeStore.open(path)
    with pytest.raises(DatasetError, match="no episode store"):
        EpisodeStore.open(tmp_path / "nowhere.zarr")


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    store = EpisodeStore.create(path, INFO)
    with pytest.raises(DatasetError, match="another process"):
        EpisodeStore.open(path, mode="a")
    reader = EpisodeStore.open(path)  # readers are never blocked
    assert reader.num_episodes == 0
    store.close()
    EpisodeStore.open(path, mode="a").close()


def test_write_error_on_the_writer_thread_surfaces_and_loses_nothing_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import robot_rl.data.writer as store_module

    store = EpisodeStore.create(tmp_path / "d.zarr", INFO)
    store.add_episode(synthetic_episode(0, 40, size=32))
    real_append = store_module._append

    def disk_full(arr: object, row: int, values: np.ndarray) -> None:
        if "observation.cam0" in str(getattr(arr, "path", "")):
            raise OSError(28, "No space left on device")
        real_append(arr, row, values)

    monkeypatch.setattr(store_module, "_append", disk_full)
    writer = store.begin_episode(flush_frames=4)
    with pytest.raises(OSError, match="No space left"):
        for t in synthetic_episode(1, 40, size=32):
            writer.add(t)
        writer.commit()
    writer.discard()
    monkeypatch.setattr(store_module, "_append", real_append)
    assert store.num_episodes == 1 and store.array("action").shape[0] == 40
    store.add_episode(synthetic_episode(1, 6, size=32))
    assert [s.length for s in map(store.episode_info, range(2))] == [40, 6]


@pytest.mark.skipif(not os.environ.get("ROBOT_RL_ZARR2_PYTHON"),
                    reason="set ROBOT_RL_ZARR2_PYTHON to a Python 3.10 with zarr 2.18 to check interoperability")
def test_zarr2_python_reads_and_appends_our_store(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "d.zarr"
    with EpisodeStore.create(path, INFO) as store:
        store.add_episode(synthetic_episode(0, 30, cameras=2, size=32))
    code = ("import sys; sys.path.insert(0, sys.argv[2])\n"
            "from robot_rl.data import EpisodeStore\nfrom robot_rl.data.synthetic import synthetic_episode\n"
            "s = EpisodeStore.open(sys.argv[1], mode='a'); assert s.num_frames == 30\n"
            "s.add_episode(synthetic_episode(1, 12, cameras=2, size=32)); s.close()\n")
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([os.environ["ROBOT_RL_ZARR2_PYTHON"], "-c", code, str(path), repo],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = EpisodeStore.open(path)
    assert store.num_episodes == 2
    for a, b in zip(synthetic_episode(1, 12, cameras=2, size=32), store.transitions(1)):
        assert_same(a, b)


def test_validate_finds_missing_chunk_files_and_changes_nothing(tmp_path: Path) -> None:
    from robot_rl.data.validate import validate_store

    path = tmp_path / "d.zarr"
    with EpisodeStore.create(path, INFO) as store:
        for i in range(3):
            store.add_episode(synthetic_episode(i, 10, size=16, interventions=False))
    assert validate_store(path).ok  # all-False / all-zero columns are on disk too
    (path / "data" / "observation.cam0" / "14.0.0.0").unlink()  # as after an interrupted copy
    (path / "data" / "is_intervention" / "0").unlink()
    before = tree_digest(path)
    report = validate_store(path)
    assert not report.ok
    assert "episode 1, field data/observation.cam0: chunk file 14 (rows 14...14) is missing" in report.issues
    assert "episode 0, field data/is_intervention: chunk file 0 (rows 0...29) is missing" in report.issues
    assert tree_digest(path) == before


def test_store_created_from_robot_specs_checks_the_first_step(tmp_path: Path) -> None:
    from robot_rl.core.spaces import ActionSpec, FieldSpec, ObservationSpec
    from robot_rl.data import StepSchema

    obs_spec = ObservationSpec({"joint_pos": FieldSpec((7,)), "gripper": FieldSpec((1,)),
                                "cam0": FieldSpec((32, 32, 3), "uint8")})
    schema = StepSchema.from_specs(obs_spec, ActionSpec({"delta": FieldSpec((6,)), "grip": FieldSpec((2,))}))
    store = EpisodeStore.create(tmp_path / "d.zarr", INFO, schema=schema)
    assert store.array("observation.cam0").shape == (0, 32, 32, 3)  # arrays exist before the first step
    wrong = synthetic_episode(0, 3, size=16)
    with pytest.raises(SpecError, match=r"episode 0, step 0, field observation\.cam0: expected \(32, 32, 3\)"):
        store.add_episode(wrong)
    store.add_episode(synthetic_episode(0, 3, size=32))
    assert store.num_frames == 3 and store.array("action").shape[0] == 3


def test_drop_last_episode_leaves_no_frames(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    store = EpisodeStore.create(path, INFO)
    store.add_episode(synthetic_episode(0, 300, size=16))
    store.add_episode(synthetic_episode(1, 30, size=16), task="bad take")
    dropped = store.drop_last_episode()
    assert (dropped.index, dropped.length, dropped.task) == (1, 30, "bad take")
    store.add_episode(synthetic_episode(1, 8, size=16))
    store.close()
    store = EpisodeStore.open(path)
    assert store.num_frames == 308 and store.uncommitted_frames == 0
    assert len([p for p in (path / "data" / "observation.cam0").iterdir() if not p.name.startswith(".")]) == 308
    assert_same(list(store.transitions(1))[-1], synthetic_episode(1, 8, size=16)[-1])
    with pytest.raises(DatasetError, match="read-only"):
        store.drop_last_episode()
