"""robot-rl train / eval end to end on a few recorded pick-and-lift demos (zarr and LeRobot format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robot_rl.cli.main import main
from robot_rl.data.lerobot_export import export_lerobot
from robot_rl.data.store import EpisodeStore
from robot_rl.training.evaluate import wilson_interval

TINY = ["--set", "steps=20", "--set", "log_every=10", "--set", "policy.unet_channels=[16, 32]",
        "--set", "policy.horizon=8", "--set", "policy.executor.n_action_steps=4", "--no-progress"]


def test_wilson_interval_matches_known_values() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    for k, n in ((3, 2), (-1, 5)):  # as scipy's binomtest refused them
        with pytest.raises(ValueError, match="0 <= successes <= trials"):
            wilson_interval(k, n)


def test_wilson_interval_is_scipys_at_every_count_and_confidence() -> None:
    """The closed form against scipy's binomtest (the reference it replaced, to keep scipy.stats out of the
    actors' start-up)."""
    from scipy.stats import binomtest, norm

    for z in (1.0, 1.645, 1.96, 2.576):
        level = float(2 * norm.cdf(z) - 1)
        for n in (1, 2, 5, 20, 50, 137):
            for k in range(n + 1):
                ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
                assert wilson_interval(k, n, z) == pytest.approx((max(0.0, ci.low), min(1.0, ci.high)), abs=1e-12)


def test_train_rejects_bad_config_and_missing_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = Path(__file__).resolve().parents[1] / "config" / "policies" / "flow_pick_lift.yaml"
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--set", "policy.horizonn=8"]) == 2
    assert "horizonn" in capsys.readouterr().out
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--dataset", str(tmp_path / "none")]) == 2
    assert "neither an episode store" in capsys.readouterr().out


@pytest.mark.slow
def test_record_train_eval_and_lerobot_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "pick.zarr"
    assert main(["data", "record", "--out", str(store), "--episodes", "2", "--seed", "7", "--no-progress"]) == 0
    cfg = Path(__file__).resolve().parents[1] / "config" / "policies" / "flow_pick_lift.yaml"
    assert main(["train", str(cfg), "--dataset", str(store), "--out", str(tmp_path / "run"), *TINY]) == 0
    assert (tmp_path / "run" / "policy" / "model.safetensors").is_file()
    assert main(["train", str(cfg), "--dataset", str(store), "--out", str(tmp_path / "run"), *TINY]) == 2
    assert "resume" in capsys.readouterr().out
    assert main(["eval", str(tmp_path / "run" / "policy"), "--episodes", "2", "--seed", "5", "--no-progress",
                 "--out", str(tmp_path / "ev")]) == 0
    report = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert report["seeds"] == [5, 6] and len(report["successes"]) == 2
    assert 0.0 <= report["ci95"][0] <= report["success_rate"] <= report["ci95"][1] <= 1.0
    assert (tmp_path / "ev" / "eval.png").stat().st_size > 1000
    # env settings on the command line reach gym.make (episodes cut at 3 steps); an unknown one is an error
    assert main(["eval", str(tmp_path / "run" / "policy"), "--episodes", "1", "--no-progress", "--override",
                 "max_episode_steps=3", "--out", str(tmp_path / "ev3")]) == 0
    assert json.loads((tmp_path / "ev3" / "eval.json").read_text())["lengths"] == [3]
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "policy"), "--episodes", "1", "--no-progress", "--override",
                 "no_such_setting=1"]) == 2
    assert "no_such_setting" in capsys.readouterr().out
    # the same demos in LeRobot v3 layout train too (imported into the run folder first)
    with EpisodeStore.open(store) as s:
        export_lerobot(s, tmp_path / "lerobot", progress=False)
    assert main(["train", str(cfg), "--dataset", str(tmp_path / "lerobot"), "--out", str(tmp_path / "run2"),
                 *TINY]) == 0
    assert (tmp_path / "run2" / "dataset.zarr" / ".zgroup").is_file()
