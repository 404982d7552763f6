"""SAC/RLPD learns a tiny 1-D reach task within seconds; checkpoints resume exactly; residual starts at base."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.buffers import ReplayBuffer, mixed_sample, route
from robot_rl.learners.sac_rlpd import SACLearner, SACLearnerConfig


class Reach1D:
    """x in [-1, 1] moves by 0.2 * a toward a goal g; reward -|x - g|, success within 0.05 terminates (+1)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self) -> dict[str, np.ndarray]:
        self.x, self.g, self.t = self.rng.uniform(-1, 1), self.rng.uniform(-1, 1), 0
        return self.obs()

    def obs(self) -> dict[str, np.ndarray]:
        return {"x": np.array([self.x], np.float32), "goal": np.array([self.g], np.float32)}

    def step(self, a: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        self.x = float(np.clip(self.x + 0.2 * float(a[0]), -1, 1))
        self.t += 1
        dist = abs(self.x - self.g)
        done = dist < 0.05
        return self.obs(), (1.0 if done else -dist), done, self.t >= 15


def rollout(env: Reach1D, act, episode: int, human=None) -> tuple[list[Transition], float]:
    obs, out, ret = env.reset(), [], 0.0
    for step in range(15):
        a = np.asarray(act(obs), np.float32)
        source, intervention = SegmentSource.POLICY, False
        if human is not None and human(obs):
            a, source, intervention = np.clip(3 * (obs["goal"] - obs["x"]), -1, 1).astype(np.float32), \
                SegmentSource.HUMAN, True
        nxt, r, term, trunc = env.step(a)
        ret += r
        out.append(Transition(obs, nxt, a, r, term, trunc and not term, episode, step, is_intervention=intervention,
                              segment_source=source))
        obs = nxt
        if term or trunc:
            break
    return out, ret


def evaluate(learner: SACLearner, n: int = 20) -> float:
    env = Reach1D(seed=123)
    return float(np.mean([rollout(env, lambda o: learner.act(o, deterministic=True), i)[1] for i in range(n)]))


def small_config(**kw: object) -> SACLearnerConfig:
    base = dict(state_keys=["x", "goal"], hidden=64, num_critics=5, batch_size=64, utd_ratio=4, gamma=0.9,
                lr=1e-3, init_temperature=0.05)
    base.update(kw)
    return SACLearnerConfig(**base)  # type: ignore[arg-type]


def test_sac_rlpd_learns_1d_reach_with_interventions(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    learner = SACLearner(small_config(), {"x": 1, "goal": 1}, 1, seed=0)
    env, rng = Reach1D(seed=1), np.random.default_rng(0)
    online, demo = ReplayBuffer(5000), ReplayBuffer(5000)
    before = evaluate(learner)
    t0 = time.perf_counter()
    for ep in range(40):
        human = (lambda o: rng.random() < 0.3) if ep < 10 else None  # early episodes: a human helps sometimes
        transitions, _ = rollout(env, lambda o: learner.act(o), ep, human)
        route(transitions, online, demo)
        if len(online) >= 64:
            for _ in range(len(transitions) // 2):
                learner.update([mixed_sample(online, demo, 64, 0.5, rng) for _ in range(4)])
    after = evaluate(learner)
    print(f"1-D reach return {before:.2f} -> {after:.2f} in {time.perf_counter() - t0:.1f}s, "
          f"{learner.updates} updates, demo rows {len(demo)}")
    assert len(demo) > 0 and all(demo.columns["is_intervention"][: len(demo)])
    assert after > before + 1.0
    assert after > -1.5  # reaches the goal on most episodes (a random policy scores around -5)

    learner.save(tmp_path / "ckpt")
    again = SACLearner.load(tmp_path / "ckpt")
    obs = {"x": np.array([0.3], np.float32), "goal": np.array([-0.4], np.float32)}
    assert np.allclose(again.act(obs, deterministic=True), learner.act(obs, deterministic=True))
    assert again.updates == learner.updates
    batch = mixed_sample(online, demo, 64, 0.5, np.random.default_rng(5))
    torch.manual_seed(0)
    m1 = learner.update([batch])
    torch.manual_seed(0)
    m2 = again.update([batch])  # optimiser moments restored: the next update is identical
    assert m1["critic_loss"] == pytest.approx(m2["critic_loss"], rel=1e-5)
    assert np.allclose(again.act(obs, deterministic=True), learner.act(obs, deterministic=True), atol=1e-6)


def test_residual_actor_starts_at_base_action_and_stays_within_scale() -> None:
    learner = SACLearner(small_config(residual_scale=0.1), {"x": 1, "goal": 1}, 1, seed=0)
    obs = {"x": np.zeros((8, 1), np.float32), "goal": np.linspace(-1, 1, 8, dtype=np.float32)[:, None]}
    base = np.linspace(-0.5, 0.5, 8, dtype=np.float32)[:, None]
    assert np.allclose(learner.act(obs, base, deterministic=True), base, atol=1e-6)
    sampled = learner.act(obs, base)
    assert np.all(np.abs(sampled - base) <= 0.1 + 1e-6)
    with pytest.raises(SpecError, match="base_action"):
        learner.act(obs)


def test_bad_observation_is_refused() -> None:
    learner = SACLearner(small_config(), {"x": 1, "goal": 1}, 1)
    with pytest.raises(SpecError, match="goal"):
        learner.act({"x": np.zeros(1, np.float32)})
    with pytest.raises(SpecError, match="NaN"):
        learner.act({"x": np.array([np.nan], np.float32), "goal": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match="num_target_critics"):
        small_config(num_target_critics=9)
