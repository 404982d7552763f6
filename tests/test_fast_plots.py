"""The PNG plots of alignment runs and of recorded episodes: real PNG files, one panel per quantity they show.

Each plot function is called on small in-memory inputs; the figure it saves is also captured, so the
panels (and what is drawn in them) can be counted rather than only the file's existence checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.image
import numpy as np
import pytest

from robot_rl.align.episodes import Segments
from robot_rl.align.layout import layout_for
from robot_rl.align.plots import plot_closed_loop, plot_horizon_errors, plot_overlay
from robot_rl.align.replay import Gap, Rollout
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data import plots as data_plots
from robot_rl.data.synthetic import synthetic_episode

PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels of a PNG that must exist and be non-empty."""
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 1000, path
    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


@pytest.fixture
def pyplot_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Figures the alignment plots close (they use pyplot), kept for inspection."""
    import matplotlib.pyplot as plt

    closed: list[Any] = []
    close = plt.close

    def keep(fig: Any = None) -> None:
        closed.append(fig)
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    return closed


def data_axes(fig: Any) -> list[Any]:
    """The axes that hold data (a legend-free figure may add none of its own)."""
    return [ax for ax in fig.axes if ax.get_visible()]


def test_horizon_errors_get_one_panel_per_error_and_one_curve_per_method(tmp_path: Path,
                                                                        pyplot_figures: list[Any]) -> None:
    layout = layout_for("cf2x")
    rng = np.random.default_rng(0)
    gaps = {m: Gap({e: np.abs(rng.normal(size=(4, 11))) for e in layout.errors}, 0.02, 0)
            for m in ("nominal", "sysid", "delta_action")}
    out = plot_horizon_errors(gaps, layout, tmp_path / "open_loop.png", "quad")
    assert png_size(out)[0] == round(5 * len(layout.errors) * 110)  # figsize 5 in per panel at 110 dpi
    (fig,) = pyplot_figures
    axes = data_axes(fig)
    assert len(axes) == len(layout.errors) == 2
    for ax, name in zip(axes, layout.errors):
        assert len(ax.lines) == 3 and name in ax.get_ylabel()
        np.testing.assert_allclose(ax.lines[0].get_xdata(), np.arange(11) * 0.02)
        np.testing.assert_allclose(ax.lines[0].get_ydata(), gaps["nominal"].curve(name))


def test_overlay_draws_the_recording_and_every_replay_of_one_window(tmp_path: Path,
                                                                    pyplot_figures: list[Any]) -> None:
    layout = layout_for("cf2x")
    rng = np.random.default_rng(1)
    n, w, h = 3, 2, 5
    seg = Segments(rng.normal(size=(n, w + h + 1, layout.nq)), rng.normal(size=(n, w + h + 1, layout.nv)),
                   rng.normal(size=(n, w + h, 4)), [f"ep#0@{i}" for i in range(n)], warmup=w)
    rollouts = {m: Rollout(rng.normal(size=(n, h + 1, layout.nq)), rng.normal(size=(n, h + 1, layout.nv)),
                           np.zeros(n, bool)) for m in ("nominal", "delta_action")}
    plot_overlay(seg, rollouts, layout, 0.02, tmp_path / "overlay.png", "quad", index=2)
    png_size(tmp_path / "overlay.png")
    (fig,) = pyplot_figures
    axes = data_axes(fig)
    assert len(axes) == 6  # first three qpos (the base position) and qvel
    q_real = seg.open_loop()[0]
    np.testing.assert_allclose(axes[1].lines[0].get_ydata(), q_real[2, :, 1])  # window 2, qpos[1], recorded
    np.testing.assert_allclose(axes[1].lines[2].get_ydata(), rollouts["delta_action"].qpos[2, :, 1])
    assert [len(ax.lines) for ax in axes] == [3] * 6


def test_closed_loop_bars_skip_what_no_method_measured(tmp_path: Path, pyplot_figures: list[Any]) -> None:
    row = {"sim": {"success_rate": None, "metric": 0.01, "failure_rate": 0.0},
           "real": {"success_rate": None, "metric": 0.05, "failure_rate": 0.25}}
    summary = {"robot": "cf2x", "real_env": "robot_rl/QuadHover-RealStandIn-v0",
               "methods": {"pretrained": {"real": row["real"]}, "nominal": row, "sysid": row}}
    out = plot_closed_loop(summary, tmp_path / "closed_loop.png")
    png_size(out)
    (fig,) = pyplot_figures
    axes = data_axes(fig)
    assert [ax.get_ylabel() for ax in axes] == ["task error (episodes that did not fail)", "failed (crash, fall)"]
    bars = [p.get_height() for p in axes[1].patches]
    assert len(bars) == 6 and bars[3:] == [0.25, 0.25, 0.25] and np.isnan(bars[0])  # no sim row: NaN bar


@pytest.fixture
def store(tmp_path: Path) -> EpisodeStore:
    info = DatasetInfo(robot="panda", fps=10.0, task="pick the cube", cameras={"cam0": {"height": 32, "width": 32},
                                                                                  "cam1": {"height": 32, "width": 32}})
    with EpisodeStore.create(tmp_path / "d.zarr", info) as s:
        s.add_episode(synthetic_episode(0, 30, cameras=2, size=32), success=True)
        s.add_episode(synthetic_episode(1, 3, cameras=2, size=32, interventions=False))
    return EpisodeStore.open(tmp_path / "d.zarr")


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    figures: list[Any] = []
    save = data_plots._save

    def keep(fig: Any, out: str | Path) -> Path:
        figures.append(fig)
        return save(fig, out)

    monkeypatch.setattr(data_plots, "_save", keep)
    return figures


def test_episode_plot_has_a_panel_per_state_key_action_and_reward_and_shades_human_steps(
        tmp_path: Path, store: EpisodeStore, saved_figures: list[Any]) -> None:
    out = data_plots.plot_episode(store, 0, tmp_path / "plots" / "episode_0.png")
    assert png_size(out) == (810, round(1.9 * 4 * 90))  # 9 in x 1.9 in per panel at 90 dpi
    (fig,) = saved_figures
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ["joint_pos", "gripper", "action", "reward"]
    assert [len(ax.lines) for ax in axes] == [7, 1, 8, 1]
    shaded = axes[3].patches  # steps 10..14 of 30 were the human's (synthetic_episode)
    assert len(shaded) == 1 and shaded[0].get_x() == pytest.approx(1.0)  # from step 10 at 10 Hz
    assert "success" in fig.get_suptitle() and "human control shaded" in fig.get_suptitle()
    data_plots.plot_episode(store, 1, tmp_path / "episode_1.png")
    assert not saved_figures[1].axes[0].patches and "outcome unknown" in saved_figures[1].get_suptitle()


def test_contact_sheet_shows_each_camera_at_evenly_spaced_steps(tmp_path: Path, store: EpisodeStore,
                                                                saved_figures: list[Any]) -> None:
    out = data_plots.contact_sheet(store, 0, tmp_path / "sheet.png", frames=4)
    assert out is not None and png_size(out) == (round(1.6 * 4 * 90), round(1.7 * 2 * 90))
    axes = saved_figures[0].axes
    assert len(axes) == 8 and [ax.get_title() for ax in axes[:4]] == ["step 0", "step 10", "step 19", "step 29"]
    np.testing.assert_array_equal(axes[5].images[0].get_array(), store.array("observation.cam1")[10])
    short = data_plots.contact_sheet(store, 1, tmp_path / "short.png", frames=8)  # 3 steps: 3 columns, not 8
    assert short is not None and len(saved_figures[1].axes) == 6


def test_contact_sheet_without_cameras_is_none_and_runs_of_human_steps_are_found(tmp_path: Path) -> None:
    with EpisodeStore.create(tmp_path / "s.zarr", DatasetInfo(robot="panda", fps=10.0)) as s:
        s.add_episode(synthetic_episode(0, 6, cameras=0))
    assert data_plots.contact_sheet(EpisodeStore.open(tmp_path / "s.zarr"), 0, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    assert data_plots._runs(np.array([0, 1, 1, 0, 1], bool)) == [(1, 3), (4, 5)]
    assert data_plots._runs(np.zeros(3, bool)) == []
