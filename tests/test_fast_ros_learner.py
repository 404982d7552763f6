"""The learner node in-process (fast tier): parameters, the run folder it writes, its reports and its shutdown.

A residual learner on the hover expert needs no checkpoint, so the node comes up in a fraction of a second;
its loop thread serves but receives nothing here. Streaming to it from a policy node on a graph is
tests/test_ros_online.py's (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.ros_inprocess import capture, ros_context  # noqa: E402

from robot_rl.core.config import ConfigError, load_config, save_config  # noqa: E402
from robot_rl.learners.online import CONFIG_FILE  # noqa: E402
from robot_rl.learners.online_config import OnlineConfig  # noqa: E402
from robot_rl.ros.learner_node import LearnerNode, LearnerNodeConfig  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.realtime("none")]  # in-process nodes, callbacks called directly


def residual_config(folder: Path) -> Path:
    cfg = load_config(OnlineConfig, None, [
        "actor.env_id=robot_rl/QuadHover-RealStandIn-v0", "learner.algorithm=residual", "learner.residual.base=expert",
        "learner.residual.reward=env", "learner.residual.sac.hidden=16", "learner.residual.sac.num_critics=2",
        "learner.device=cpu"])
    path = folder / "residual.yaml"
    save_config(cfg, path)
    return path


def test_learner_node_config_needs_a_run_folder_and_a_sane_status_rate() -> None:
    with pytest.raises(ValueError, match="run_dir: a run folder is required"):
        LearnerNodeConfig()
    with pytest.raises(ValueError, match=r"status_hz must be in \(0, 50\]"):
        LearnerNodeConfig(run_dir="run", status_hz=0.0)
    assert LearnerNodeConfig(run_dir="run", status_hz=50.0).config == ""  # "": the installed default config


def test_learner_node_writes_its_run_reports_once_per_version_and_checkpoints_on_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the learner's setting would outlive the test
    run = tmp_path / "run"
    args = ["--ros-args", "-p", f"run_dir:={run}", "-p", f"config:={residual_config(tmp_path)}",
            "-p", f"demos:={tmp_path / 'demos.zarr'}", "-p", "status_hz:=20.0"]
    with ros_context(args):
        node = LearnerNode()
        try:
            versions, status = capture(node.pub_version), capture(node.pub_status)
            written = load_config(OnlineConfig, run / CONFIG_FILE)  # what actors joining the run read
            assert written.learner.algorithm == "residual" and written.learner.demos == str(tmp_path / "demos.zarr")
            node._report()
            node._report()
            assert [m.data for m in versions] == [0]  # latched: published again only when the version changes
            report = json.loads(status[-1].data)
            assert len(status) == 2 and report == {"version": 0, "updates": 0, "steps": 0, "human_steps": 0,
                                                   "running": True}
            node.learner.publisher.version = 3  # as after a publish
            node._report()
            assert [m.data for m in versions] == [0, 3]
        finally:
            node.close()
            node.destroy_node()
        assert not node.thread.is_alive() and node.result is not None and node.result["updates"] == 0
        assert (run / "checkpoint").is_dir() and (run / "learner.key").is_file()
    with ros_context(["--ros-args", "-p", f"run_dir:={run}", "-p", "config:=/nowhere.yaml"]), \
            pytest.raises(ConfigError, match=r"config file not found: /nowhere\.yaml"):
        LearnerNode()
