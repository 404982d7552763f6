"""Export a store through LeRobot's own ``LeRobotDataset`` writer API, for the test that checks our features on it.

LeRobot needs Python >= 3.12 and torch < 2.12, so the package's exporter
(:mod:`robot_rl.data.lerobot_export`) writes the v3.0 files itself; this writes the same features with
``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` / ``finalize`` in an interpreter where
``lerobot`` is installed, so a change in LeRobot's format shows up as a failing test.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from robot_rl.data.lerobot_export import IMAGE_PREFIX, _frame_columns, lerobot_features
from robot_rl.data.schema import DatasetError
from robot_rl.data.store import EpisodeStore

_AUTOMATIC = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def export_with_lerobot(store: EpisodeStore, root: str | Path, repo_id: str = "local/robot_rl",
                        episodes: Sequence[int] | None = None, progress: bool = True) -> Path:
    """Write ``store`` at ``root`` with LeRobot's API (same features as :func:`export_lerobot`)."""
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except Exception as exc:
        raise DatasetError("LeRobot is not importable here (it needs Python >= 3.12 and torch < 2.12); "
                           "use robot_rl.data.lerobot_export.export_lerobot instead") from exc
    if store.schema is None or store.num_episodes == 0:
        raise DatasetError(f"{store.path}: no episodes to export")
    fps = round(store.info.fps)
    selected = list(range(store.num_episodes)) if episodes is None else list(episodes)
    feats = {k: {kk: vv for kk, vv in v.items() if kk != "info"} for k, v in
             lerobot_features(store, fps, "av1", proposed=()).items() if k not in _AUTOMATIC}
    dataset = LeRobotDataset.create(repo_id, fps=fps, features=feats, root=Path(root), robot_type=store.info.robot,
                                    use_videos=True)
    for new_index, ep in enumerate(tqdm(selected, desc="export", unit="episode", disable=not progress)):
        info = store.episode_info(ep)
        cols = store.read_episode(ep)
        frames = _frame_columns(store, cols, info.length, new_index, 0, 0, fps)
        for i in range(info.length):
            frame: dict[str, Any] = {"task": info.task}
            for key, feat in feats.items():
                if feat["dtype"] == "video":
                    frame[key] = cols[f"observation.{key[len(IMAGE_PREFIX):]}"][i]
                else:
                    frame[key] = np.asarray(frames[key][i], dtype=feat["dtype"]).reshape(feat["shape"])
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()
    return Path(root)
