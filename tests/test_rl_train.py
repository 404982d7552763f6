"""RL from scratch end to end: hover is learnt, the checkpoint deploys, non-finite values stop the run safely."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tensordict import TensorDict

from robot_rl.core.config import load_config
from robot_rl.policies.base import Policy
from robot_rl.rl.config import RLConfig, TrainingError
from robot_rl.rl.envs import env_spec
from robot_rl.rl.normalization import RunningNorm
from robot_rl.rl.ppo import PPOAgent
from robot_rl.rl.sac import SACAgent
from robot_rl.rl.train import RLResult, export_policy, make_agent, train_rl, warm_start
from robot_rl.sim.envs.quad_hover import SUCCESS_DISTANCE

REPO = Path(__file__).resolve().parents[1]
HOVER = REPO / "config" / "rl" / "quad_hover.yaml"


def hover(*overrides: str) -> RLConfig:
    return load_config(RLConfig, HOVER, list(overrides))


@pytest.fixture(scope="module")
def hover_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RLResult, Path]:
    """The shipped hover config, trained once for this module, without its wall-clock limit (CI machines are
    slower or busier) but bounded to 2M env steps."""
    out = tmp_path_factory.mktemp("hover") / "run"
    return train_rl(hover("time_budget_s=null", "total_steps=2000000"), out, progress=False), out


@pytest.mark.slow
def test_ppo_learns_quadrotor_hover_within_a_bounded_number_of_steps(hover_run: tuple[RLResult, Path]) -> None:
    """Every one of the 50 evaluation episodes ends within 5 cm of the goal, slower than 0.1 m/s and without a
    crash, within 2M env steps."""
    result, run = hover_run
    assert result.stopped == "target", result.summary()
    final = result.final_row
    assert final["success_at_last_step"] == 1.0 and final["crash_rate"] == 0.0
    assert final["error_max"] < SUCCESS_DISTANCE
    # averaged over each episode, the error includes the flight from the random start (up to ~0.87 m away)
    assert final["error_mean"] < final["tracking_error"] < 0.5
    assert result.first_target is not None and result.first_target["steps"] <= 2_000_000
    assert (run / "learning_curve.png").stat().st_size > 10_000
    rows = [json.loads(line) for line in (run / "curve.jsonl").read_text().splitlines()]
    assert rows[0]["success_at_last_step"] < 1.0 and rows[-1]["success_at_last_step"] == 1.0  # learnt, not at start
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "target" and summary["final"]["success_at_last_step"] == 1.0


@pytest.mark.slow
@pytest.mark.ros
def test_the_ros_policy_node_flies_the_trained_policy(hover_run: tuple[RLResult, Path], tmp_path: Path) -> None:
    """quadrotor_sim.launch.yaml with the checkpoint, unchanged: the node streams accepted body-rate targets
    and the simulated Crazyflie ends near the goal (the graph bring-up of the embodiment tests)."""
    pytest.importorskip("rclpy")
    from geometry_msgs.msg import TwistStamped
    from test_ros_policy_node_embodiments import _assert_accepted, _run

    got = _run("quadrotor_sim.launch.yaml", hover_run[1] / "policy", tmp_path, "/target_body_rates", TwistStamped,
               200)
    assert "MLPPolicy" in got["policy_log"] and "['position', 'quat', 'linvel', 'angvel']" in got["policy_log"]
    _assert_accepted(got)
    last = got["frames"].odometry[-1].pose.pose.position  # nav_msgs/Odometry on odom
    assert np.linalg.norm([last.x, last.y, last.z - 1.0]) < 2 * SUCCESS_DISTANCE


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_exported_policy_is_the_trained_actor(algorithm: str, tmp_path: Path) -> None:
    """Same actions from the training networks and from the checkpoint loaded through Policy.load."""
    cfg = hover(f"algorithm={algorithm}", "num_envs=8", "sac.learning_starts=0")
    spec = env_spec(cfg)
    rng = np.random.default_rng(0)
    norm = RunningNorm(spec.obs_dim, clip=cfg.obs_clip)
    norm.update(rng.normal([0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.3, (500, spec.obs_dim)))
    agent = make_agent(cfg, spec, norm, torch.device("cpu"))
    export_policy(agent, spec, norm, cfg, version=7).save(tmp_path / "policy")
    policy = Policy.load(tmp_path / "policy")
    assert policy.name == "mlp" and policy.version == 7 and policy.spec.robot == "cf2x"
    assert list(policy.spec.state_dims) == ["position", "quat", "linvel", "angvel"]
    raw = rng.normal([0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.5, (16, spec.obs_dim)).astype(np.float32)
    x = torch.from_numpy(norm.normalize(raw))
    with torch.no_grad():
        if isinstance(agent, PPOAgent):
            mean = agent.actor(TensorDict({"policy": x}, batch_size=[16])).clamp(-1, 1)
        else:
            assert isinstance(agent, SACAgent)
            mean, _ = agent.learner.actor(x, None, deterministic=True)
    start = 0
    obs = {}
    for key, dim in policy.spec.state_dims.items():
        obs[key] = raw[:, None, start:start + dim]
        start += dim
    np.testing.assert_allclose(policy.predict_chunk(obs)[:, 0], spec.to_env(mean.numpy()), atol=1e-5)


def test_a_run_can_start_from_an_exported_policy(tmp_path: Path) -> None:
    """init_policy (fine-tuning, e.g. in an aligned simulator): the new actor and statistics act exactly as the
    policy it starts from; a policy of another shape is refused before training."""
    from robot_rl.core.config import ConfigError

    cfg = hover("num_envs=8")
    spec = env_spec(cfg)
    rng = np.random.default_rng(1)
    norm = RunningNorm(spec.obs_dim, clip=cfg.obs_clip)
    norm.update(rng.normal([0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.3, (500, spec.obs_dim)))
    source = make_agent(cfg, spec, norm, torch.device("cpu"))
    with torch.no_grad():
        for p in source.actor.parameters():  # type: ignore[attr-defined]
            p.add_(torch.randn_like(p) * 0.3)
    export_policy(source, spec, norm, cfg, version=3).save(tmp_path / "source")
    fresh_norm = RunningNorm(spec.obs_dim, clip=cfg.obs_clip)
    fresh = make_agent(cfg, spec, fresh_norm, torch.device("cpu"))
    warm_start(fresh, fresh_norm, spec, str(tmp_path / "source"))
    export_policy(fresh, spec, fresh_norm, cfg, version=4).save(tmp_path / "copy")
    obs = {k: rng.normal(0, 0.5, (16, 1, d)).astype(np.float32) for k, d in zip(spec.keys, spec.dims)}
    np.testing.assert_allclose(Policy.load(tmp_path / "copy").predict_chunk(obs),
                               Policy.load(tmp_path / "source").predict_chunk(obs), atol=1e-5)
    other = hover("num_envs=8", "obs_keys=[position,quat,linvel,angvel,goal_pos]")
    with pytest.raises(ConfigError, match="init_policy"):
        warm_start(make_agent(other, env_spec(other), RunningNorm(16), torch.device("cpu")), RunningNorm(16),
                   env_spec(other), str(tmp_path / "source"))


def test_critic_warm_up_leaves_the_actor_alone() -> None:
    cfg = hover("num_envs=8", "ppo.steps_per_env=4", "ppo.critic_warmup_updates=1")
    spec = env_spec(cfg)
    norm = RunningNorm(spec.obs_dim)
    agent = make_agent(cfg, spec, norm, torch.device("cpu"))
    assert isinstance(agent, PPOAgent)
    rng = np.random.default_rng(0)
    actor0 = [p.detach().clone() for p in agent.actor.parameters()]
    critic0 = [p.detach().clone() for p in agent.critic.parameters()]

    def rollout() -> None:
        for _ in range(4):
            obs = rng.normal(size=(8, spec.obs_dim)).astype(np.float32)
            agent.act(obs)
            agent.observe(rng.normal(size=8), obs, np.zeros(8, bool), np.zeros(8, bool), np.ones(8, bool))

    rollout()
    agent.update()
    assert all(torch.equal(a, b) for a, b in zip(actor0, agent.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(critic0, agent.critic.parameters()))
    rollout()
    agent.update()  # past the warm-up: the actor learns too
    assert not all(torch.equal(a, b) for a, b in zip(actor0, agent.actor.parameters()))


@pytest.mark.slow
def test_checkpoint_round_trips_through_robot_rl_eval(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = train_rl(hover("total_steps=20000", "eval_every_steps=10000", "num_envs=64", "eval_episodes=4",
                            "error_keys=null"), run, progress=False)  # no error measured: NaN aggregates
    assert result.steps >= 20000 and len(result.evaluations) == 2
    assert (run / "tensorboard").is_dir() and (run / "rl_config.yaml").is_file()
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in a JSON file")

    for name in ("summary.json", "eval.json"):  # strict JSON: no NaN even where nothing was measured
        json.loads((run / name).read_text(), parse_constant=refuse)
    proc = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", "eval", str(run / "policy"), "--env",
                           "robot_rl/QuadHover-v0", "--episodes", "2", "--out", str(tmp_path / "eval"),
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert report["seeds"] == [100000, 100001] and len(report["lengths"]) == 2


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real_update = PPOAgent.update
    calls = {"n": 0}

    def poisoned(self: PPOAgent, progress: float = 0.0) -> dict[str, float]:
        metrics = real_update(self, progress)
        calls["n"] += 1
        if calls["n"] == 6:  # updates of 64 x 16 steps: evaluations at 2048 and 4096, then the NaN at 6144
            with torch.no_grad():
                next(self.actor.parameters()).fill_(float("nan"))
            metrics["policy_loss"] = float("nan")
        return metrics

    monkeypatch.setattr(PPOAgent, "update", poisoned)
    run = tmp_path / "run"
    cfg = hover("num_envs=64", "ppo.steps_per_env=16", "eval_every_steps=2048", "eval_episodes=2",
                "total_steps=100000")
    with pytest.raises(TrainingError, match=r"update 6 \(step 6144\): policy_loss is nan.*step 4096"):
        train_rl(cfg, run, progress=False)
    policy = Policy.load(run / "policy")  # the last good one: loads, finite, from the evaluation before the NaN
    assert policy.version == 4096
    tensors = load_file(str(run / "policy" / "model.safetensors"))
    assert all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point())
    assert (run / "learning_curve.png").is_file()


class NaNReward(gym.Env):  # type: ignore[type-arg]
    """A float observation and action; the reward turns NaN at the 5th step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.zeros(3, np.float32), float("nan") if self.t >= 5 else 0.0, False, self.t >= 50, {}


def test_non_finite_rewards_stop_training_with_a_clear_error(tmp_path: Path) -> None:
    if "test_rl/NaNReward-v0" not in gym.registry:
        gym.register("test_rl/NaNReward-v0", entry_point=NaNReward)
    cfg = RLConfig(env_id="test_rl/NaNReward-v0", vector="sync", num_envs=2, total_steps=1000, eval_episodes=1)
    with pytest.raises(TrainingError, match=r"step 8: test_rl/NaNReward-v0 returned non-finite reward\(s\)"):
        train_rl(cfg, tmp_path / "run", progress=False)


@pytest.mark.slow
def test_cli_reports_bad_configs_and_existing_runs(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", "rl", "train", str(HOVER), "--out",
                          str(tmp_path / "x"), "--set", "env_id=robot_rl/Nope-v0", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "robot-rl rl: error: env_id: cannot make 'robot_rl/Nope-v0'" in bad.stdout
    (tmp_path / "y" / "policy").mkdir(parents=True)
    taken = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", "rl", "train", str(HOVER), "--out",
                            str(tmp_path / "y"), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert taken.returncode == 2 and "already holds a run" in taken.stdout


@pytest.mark.slow
def test_sac_learns_arm_reach(tmp_path: Path) -> None:
    """The smoke test of config/rl/arm_reach.yaml (SAC): 90% of 50 goals reached within 3 cm in 40k env steps.

    Evaluated every 5000 steps, so the run stops as soon as it gets there (25k steps here: 86% at 20k)."""
    cfg = load_config(RLConfig, REPO / "config" / "rl" / "arm_reach.yaml",
                      ["time_budget_s=null", "total_steps=40000", "eval_every_steps=5000"])
    result = train_rl(cfg, tmp_path / "run", progress=False)
    assert result.final_row["success_at_last_step"] >= 0.9, result.summary()
    assert result.evaluations[0]["success_at_last_step"] < 0.5  # learnt here, not by chance at the start
    assert Policy.load(tmp_path / "run" / "policy").config.squash == "tanh"  # type: ignore[attr-defined]
