"""Crash safety: a writer process killed with SIGKILL mid-episode loses only the episode it was writing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.synthetic import synthetic_episode

WRITER = """
import sys
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.synthetic import synthetic_episode
store = EpisodeStore.create(sys.argv[1], DatasetInfo(robot="panda", fps=10.0, task="pick"))
for i in range(2):
    store.add_episode(synthetic_episode(i, 40, cameras=2, size=48), success=True)
writer = store.begin_episode(flush_frames=4)
step = 0
while True:  # an endless third episode: the parent kills us somewhere in the middle of a write
    for t in synthetic_episode(2, 50, cameras=2, size=48):
        writer.add(t.replace(step=step))
        step += 1
        if step == 12:
            print("WRITING", flush=True)
    # keep the episode consecutive: restart the synthetic sequence without a break check
    writer._last = None
"""


@pytest.mark.parametrize("delay", [0.05, 0.4])
def test_sigkill_mid_episode_keeps_earlier_episodes(tmp_path: Path, delay: float) -> None:
    path = tmp_path / "crash.zarr"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "WRITING"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    reader = EpisodeStore.open(path)  # every committed episode readable, the partial one reported
    assert reader.num_episodes == 2
    assert reader.uncommitted_frames >= 12
    for i in range(2):
        expected = synthetic_episode(i, 40, cameras=2, size=48)
        back = list(reader.transitions(i))
        assert len(back) == 40
        for a, b in zip(expected, back):
            np.testing.assert_array_equal(a.observation["cam1"], b.observation["cam1"])
            np.testing.assert_array_equal(a.action, b.action)

    # Opening for append drops the partial episode (the killed writer's lock is gone with it) ...
    with EpisodeStore.open(path, mode="a") as store:
        assert store.dropped_frames == reader.uncommitted_frames
        store.add_episode(synthetic_episode(2, 10, cameras=2, size=48))
    # ... and leaves no frame of it on disk.
    store = EpisodeStore.open(path)
    assert store.num_episodes == 3 and store.num_frames == 90 and store.uncommitted_frames == 0
    assert not list(path.rglob("*.partial"))
    chunks = [p for p in (path / "data" / "observation.cam0").iterdir() if not p.name.startswith(".")]
    assert len(chunks) == 90
    assert [s.length for s in map(store.episode_info, range(3))] == [40, 40, 10]


def test_info_roundtrip_survives_reopen(tmp_path: Path) -> None:
    info = DatasetInfo(robot="g1", fps=50.0, task="walk", controller={"kp": [1.0, 2.0]}, cameras={})
    EpisodeStore.create(tmp_path / "d.zarr", info).close()
    assert EpisodeStore.open(tmp_path / "d.zarr").info == info
