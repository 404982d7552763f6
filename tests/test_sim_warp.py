"""QuadHover on MuJoCo Warp: the same flights as on mujoco.batch (float32 vs float64), autoreset, devices.

The kernels run on Warp's CPU device here (slow, but the same code); the CUDA cases run on a GPU machine
and are skipped without one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco_warp")

from robot_rl.core import SpecError
from robot_rl.sim.batched_quad import BatchedQuadHover
from robot_rl.sim.experts import HoverExpert
from robot_rl.sim.threaded import ThreadedVectorEnv
from robot_rl.sim.vector import make_vector_env
from robot_rl.sim.warp_vector import WarpVectorEnv


def _cuda() -> bool:
    import warp as wp

    wp.config.log_level = 30
    return bool(wp.is_cuda_available())


DEVICES = ["cpu", pytest.param("cuda:0", marks=[pytest.mark.gpu,
                                                pytest.mark.skipif(not _cuda(), reason="no CUDA device")])]


def _fly(venv: BatchedQuadHover, actions: np.ndarray, steps: int) -> list[dict[str, np.ndarray]]:
    venv.reset(seed=3)
    out = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = venv.step(actions)
        out.append({"position": obs["position"], "quat": obs["quat"], "reward": reward,
                    "done": terminated | truncated, "success": info["is_success"]})
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_warp_flies_the_same_as_mujoco_batch(device: str) -> None:
    """Same starts and actions (random thrusts and body rates): positions agree to 0.1 mm over 0.4 s.

    Measured: < 1 µm apart on Warp's CPU device (float32 against mujoco.batch's float64)."""
    n = 8
    rng = np.random.default_rng(0)
    actions = np.c_[rng.uniform(0.45, 0.65, n), rng.uniform(-0.2, 0.2, (n, 3))].astype(np.float32)
    ref = _fly(BatchedQuadHover(n), actions, 20)
    got = _fly(BatchedQuadHover(n, physics="warp", device=device), actions, 20)
    moved = np.linalg.norm(ref[-1]["position"] - ref[0]["position"], axis=1)
    assert moved.min() > 0.02  # the drones really fly somewhere different from their start
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g["position"], r["position"], atol=1e-4)
        np.testing.assert_allclose(g["quat"], r["quat"], atol=1e-4)
        np.testing.assert_allclose(g["reward"], r["reward"], atol=1e-4)
        np.testing.assert_array_equal(g["done"], r["done"])


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_warp_expert_hovers_and_autoresets(device: str) -> None:
    n = 4
    venv = BatchedQuadHover(n, max_episode_steps=100, physics="warp", device=device)
    obs, _ = venv.reset(seed=7)
    expert = HoverExpert()
    for _ in range(100):
        actions = np.stack([expert.act({k: v[i] for k, v in obs.items()}) for i in range(n)])
        obs, _, terminated, truncated, info = venv.step(actions)
    assert not terminated.any() and truncated.all() and info["is_success"].all()
    obs, rewards, terminated, truncated, _ = venv.step(actions)  # next-step autoreset: nothing flown
    np.testing.assert_array_equal(obs["angvel"], 0.0)
    assert np.all(rewards == 0) and not (terminated.any() or truncated.any())
    obs, *_ = venv.step(actions)
    assert np.abs(obs["angvel"]).max() > 0.01  # the fresh episodes fly again


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_warp_humanoid_follows_the_cpu_envs_through_contacts_and_a_push(device: str) -> None:
    """G1 HumanoidStand, random joint targets for 1.3 s (feet on the floor, the first push at 1-2 s): the
    Warp worlds and the CPU envs agree to 1e-4 (measured ~1e-6 on CPU) in joints, height and reward."""
    n, steps = 2, 65
    ref = ThreadedVectorEnv("robot_rl/HumanoidStand-v0", n, nthread=1)
    got = make_vector_env("robot_rl/HumanoidStand-v0", n, warp=True, device=device)
    assert isinstance(got, WarpVectorEnv)
    ref.reset(seed=0)
    got.reset(seed=0)
    rng = np.random.default_rng(0)
    pushed = np.zeros(n, bool)
    for _ in range(steps):
        a = rng.uniform(-0.3, 0.3, (n, 29)).astype(np.float32)
        o1, r1, t1, u1, _ = ref.step(a)
        o2, r2, t2, u2, _ = got.step(a)
        for key in ("joint_pos", "joint_vel", "base_height", "base_linvel"):
            np.testing.assert_allclose(o2[key], o1[key], atol=1e-3 if key.endswith("vel") else 1e-4, err_msg=key)
        np.testing.assert_allclose(r2, r1, atol=1e-4)
        np.testing.assert_array_equal(t2 | u2, t1 | u1)
        pushed |= [np.abs(e.data.xfrc_applied).max() > 0 for e in ref.robot_envs]
    assert pushed.any()  # a push happened and Warp saw the same force
    assert np.abs(o1["joint_pos"] - ref.robot_envs[0].default_q).max() > 0.05  # the joints really moved


def test_warp_vector_env_refuses_what_it_cannot_batch() -> None:
    with pytest.raises(SpecError, match="joint-PD"):
        WarpVectorEnv("robot_rl/ArmReach-v0", 1, device="cpu")
    with pytest.raises(SpecError, match="randomised or stand-in"):
        WarpVectorEnv("robot_rl/HumanoidStand-RealStandIn-v0", 1, device="cpu")
    with pytest.raises(SpecError, match="randomised or stand-in"):
        WarpVectorEnv("robot_rl/HumanoidWalk-v0", 1, device="cpu", randomization={"mass_scale": [0.9, 1.1]})


def test_warp_refuses_unknown_physics_and_missing_cuda() -> None:
    with pytest.raises(SpecError, match="physics"):
        BatchedQuadHover(2, physics="bullet")
    if not _cuda():
        with pytest.raises(SpecError, match="no CUDA device"):
            BatchedQuadHover(2, physics="warp", device="cuda:0")


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA device")
def test_ppo_learns_hover_on_warp_gpu(tmp_path: Path) -> None:
    """The shipped hover config with its drones on MuJoCo Warp (CUDA): the same hover criterion, 4096 drones."""
    from robot_rl.core.config import load_config
    from robot_rl.rl.config import RLConfig
    from robot_rl.rl.train import train_rl

    hover = Path(__file__).resolve().parents[1] / "config" / "rl" / "quad_hover.yaml"
    cfg = load_config(RLConfig, hover, ["time_budget_s=null", "total_steps=4000000", "num_envs=4096",
                                        "vector=warp", "env_options={device: 'cuda:0'}"])
    result = train_rl(cfg, tmp_path / "run", progress=False)
    assert result.stopped == "target", result.summary()
    assert result.final_row["success_at_last_step"] == 1.0 and result.final_row["crash_rate"] == 0.0
