"""DSRL (latent-noise RL on a frozen generative policy): noise-steered sampling, frozen base, learning, checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.config import load_config
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.dsrl import DSRLConfig, DSRLLearner, decisions_from_steps
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import CheckpointError, Policy, PolicySpec
from robot_rl.policies.flow import FlowConfig, FlowPolicy

H, A = 4, 2
"""Chunk length and action size of the toy policies."""


# ----------------------------------------------------------------------------------------- predict_chunk(noise=)
def small_policy(name: str) -> Policy:
    torch.manual_seed(0)
    klass = get_policy_class(name)
    extra: dict[str, object] = {"image_keys": ["cam"], "text_encoder": "hash"} if name == "vla" else {}
    spec = PolicySpec({"pos": 2}, {"cam": (16, 16, 3)} if name == "vla" else {}, A)
    cfg = load_config(klass.config_cls, {"horizon": H, "n_obs_steps": 2, "unet_channels": [16, 32],
                                         "executor": {"n_action_steps": 2}, **extra})
    policy = klass(cfg, spec)
    policy.set_stats({"pos": {"min": -np.ones(2), "max": np.ones(2)},
                      "action": {"min": -np.ones(A), "max": np.ones(A)}})
    return policy


@pytest.mark.parametrize("name", ["flow", "diffusion", "meanflow", "vla"])
def test_predict_chunk_is_a_function_of_the_given_noise(name: str) -> None:
    policy = small_policy(name)
    rng = np.random.default_rng(0)
    obs: dict[str, np.ndarray] = {"pos": rng.uniform(-1, 1, (2, 2)).astype(np.float32)}
    if name == "vla":
        obs["cam"] = rng.integers(0, 255, (2, 16, 16, 3), dtype=np.uint8)
    w1, w2 = rng.normal(size=(H, A)).astype(np.float32), rng.normal(size=(H, A)).astype(np.float32)
    torch.manual_seed(1)
    first = policy.predict_chunk(obs, noise=w1)
    torch.manual_seed(2)  # the global RNG must not matter once the noise is given
    assert np.array_equal(policy.predict_chunk(obs, noise=w1), first)
    assert np.abs(policy.predict_chunk(obs, noise=w2) - first).max() > 1e-4
    batched = {k: np.stack([v, v]) for k, v in obs.items()}
    both = policy.predict_chunk(batched, noise=torch.from_numpy(np.stack([w1, w2])))
    assert both.shape == (2, H, A) and np.allclose(both[0], first, atol=1e-5)
    with pytest.raises(SpecError, match="noise: expected shape"):
        policy.predict_chunk(obs, noise=np.zeros((H + 1, A), np.float32))
    with pytest.raises(SpecError, match="noise: expected shape"):
        policy.predict_chunk(batched, noise=w1)  # a batch needs one noise per row
    with pytest.raises(SpecError, match="NaN"):
        policy.predict_chunk(obs, noise=np.full((H, A), np.nan, np.float32))


# ----------------------------------------------------------------------------------------- toy task
def toy_actions(target: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Demonstrations: the target plus a one-sided offset drawn uniformly from [0, 0.8] per dimension, held
    over the chunk. The base policy's typical chunk (random or zero noise) misses the target by about 0.4
    per dimension; the noises at the low end of the prior decode close to it."""
    offset = rng.uniform(0.0, 0.8, size=target.shape)
    return np.repeat((target + offset)[:, None, :], H, 1).astype(np.float32)


def toy_policy(updates: int = 300) -> FlowPolicy:
    """A flow policy on obs "target" (one step of history), fitted to :func:`toy_actions`."""
    torch.manual_seed(0)
    policy = FlowPolicy(load_config(FlowConfig, {"horizon": H, "n_obs_steps": 1, "unet_channels": [16, 32],
                                                 "num_inference_steps": 2, "executor": {"n_action_steps": 1}}),
                        PolicySpec({"target": 2}, {}, A))
    policy.set_stats({"target": {"min": -np.ones(2), "max": np.ones(2)},
                      "action": {"min": -np.ones(A), "max": 1.8 * np.ones(A)}})
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(updates):
        target = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
        loss, _ = policy.compute_loss({"obs": {"target": torch.from_numpy(target[:, None])},
                                       "action": torch.from_numpy(toy_actions(target, rng))})
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy.eval()


def toy_batch(learner: DSRLLearner, target: np.ndarray, prior: bool = False) -> dict[str, np.ndarray]:
    """One-step bandit decisions: reward -|first action - target| (L1), every decision terminal."""
    obs = {"target": target[:, None]}
    if prior:  # the base policy's own behaviour: noise from the prior
        chunk = learner.policy.predict_chunk(obs)
    else:
        _, chunk = learner.act(obs)
    executed = chunk[:, :1]
    reward = -np.abs(executed[:, 0] - target).sum(-1)
    return {"obs.target": obs["target"], "next_obs.target": obs["target"], "action": executed,
            "reward": reward.astype(np.float32), "terminated": np.ones(len(target), np.float32)}


def first_action_error(policy: Policy, target: np.ndarray, noise: np.ndarray | None) -> float:
    chunk = policy.predict_chunk({"target": target[:, None]}, noise=noise, generator=torch.Generator().manual_seed(7))
    return float(np.abs(chunk[:, 0] - target).sum(-1).mean())


def weights(policy: Policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


@pytest.fixture(scope="module")
def trained() -> tuple[DSRLLearner, dict[str, torch.Tensor], list[dict[str, float]]]:
    """A DSRL learner after 400 updates on the toy (off-policy prior data, then its own)."""
    policy = toy_policy()
    before = weights(policy)
    learner = DSRLLearner(DSRLConfig(hidden=64, noise_scale=1.5, lr=1e-3, device="cpu"), policy, seed=0)
    rng = np.random.default_rng(1)
    data = [toy_batch(learner, rng.uniform(-1, 1, (256, 2)).astype(np.float32), prior=True) for _ in range(4)]
    log = []
    for i in range(400):
        if i % 50 == 49:  # the actor's own decisions join the data
            data.append(toy_batch(learner, rng.uniform(-1, 1, (256, 2)).astype(np.float32)))
        pool = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
        pick = rng.integers(0, len(pool["reward"]), 128)
        log.append(learner.update({k: v[pick] for k, v in pool.items()}))
    return learner, before, log


@pytest.mark.slow
def test_base_policy_weights_stay_bit_identical(trained) -> None:
    learner, before, _ = trained
    after = learner.policy.state_dict()
    assert set(after) == set(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert not any(p.requires_grad for p in learner.policy.parameters())
    owned = {id(p) for opt in learner.optimizers.values() for g in opt.param_groups for p in g["params"]}
    assert not owned & {id(p) for p in learner.policy.parameters()}


def test_actor_noise_stays_in_bounds(trained) -> None:
    learner, _, _ = trained
    target = np.random.default_rng(5).uniform(-1, 1, (512, 2)).astype(np.float32)
    noise, chunk = learner.act({"target": target[:, None]})
    assert noise.shape == (512, H, A) and chunk.shape == (512, H, A)
    assert np.abs(noise).max() <= learner.config.noise_scale + 1e-6
    assert np.abs(noise).max() > 0.5  # it explores, not a collapsed constant


def test_dsrl_steers_the_frozen_policy_toward_the_target(trained) -> None:
    learner, _, log = trained
    held_out = np.random.default_rng(99).uniform(-1, 1, (512, 2)).astype(np.float32)
    random_error = first_action_error(learner.policy, held_out, None)
    noise, _ = learner.act({"target": held_out[:, None]}, deterministic=True)
    dsrl_error = first_action_error(learner.policy, held_out, noise)
    zero_error = first_action_error(learner.policy, held_out, np.zeros((512, H, A), np.float32))
    assert min(random_error, zero_error) > 0.4, "the base policy should miss, or there is nothing to steer"
    assert dsrl_error < 0.5 * min(random_error, zero_error), (dsrl_error, random_error, zero_error)
    # the noise critic knows what a noise decodes to: it ranks fresh noises like the true reward does
    noise = np.random.default_rng(4).normal(size=(512, H, A)).clip(-1.5, 1.5).astype(np.float32)
    chunk = learner.policy.predict_chunk({"target": held_out[:, None]}, noise=noise)
    reward = -np.abs(chunk[:, 0] - held_out).sum(-1)
    with torch.no_grad():
        state, _ = learner.state_vector({"target": held_out[:, None]})
        q_noise = learner.q_noise(state, torch.from_numpy(noise).flatten(1)).mean(0).numpy()
    assert np.corrcoef(q_noise, reward)[0, 1] > 0.7  # 0.86 measured
    assert log[-1]["q_noise_loss"] < log[0]["q_noise_loss"]


@pytest.mark.slow
def test_without_the_entropy_backup_q_stays_within_the_task_returns() -> None:
    """Zero reward forever: the true return is 0. Soft Q adds -alpha * log pi(w) of a wide noise space each
    decision and drifts away; the default (no entropy backup) stays near 0."""
    def q_after(backup: bool) -> float:
        learner = DSRLLearner(DSRLConfig(hidden=32, gamma=0.9, tau=0.2, lr=1e-3, init_temperature=0.5,
                                         backup_entropy=backup, device="cpu"), toy_policy(updates=0), seed=0)
        batch = toy_batch(learner, np.random.default_rng(0).uniform(-1, 1, (64, 2)).astype(np.float32), prior=True)
        batch.update(reward=np.zeros(64, np.float32), terminated=np.zeros(64, np.float32))
        return [learner.update(batch) for _ in range(150)][-1]["q_mean"]

    assert abs(q_after(backup=False)) < 0.5  # -0.22 measured (the critic's initial offset, decaying)
    assert q_after(backup=True) > 2.0  # 5.6 measured, and still rising


@pytest.mark.slow
def test_prior_weight_keeps_the_noise_near_the_prior() -> None:
    """The toy rewards noises at the low end of the prior; a prior weight trades some of that for noise the
    base saw in training (smaller RMS), without losing the direction."""
    def rms_after(prior_weight: float) -> float:
        learner = DSRLLearner(DSRLConfig(hidden=64, lr=1e-3, prior_weight=prior_weight, device="cpu"),
                              toy_policy(), seed=0)
        rng = np.random.default_rng(1)
        data = [toy_batch(learner, rng.uniform(-1, 1, (256, 2)).astype(np.float32), prior=True) for _ in range(2)]
        pool = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
        log = [learner.update({k: v[rng.integers(0, 512, 128)] for k, v in pool.items()}) for _ in range(200)]
        return log[-1]["noise_rms"]

    free, held = rms_after(0.0), rms_after(20.0)
    assert held < 0.7 * free, (held, free)


def test_save_load_round_trip_gives_the_same_actions(trained, tmp_path: Path) -> None:
    learner, _, _ = trained
    learner.save(tmp_path / "dsrl")
    again = DSRLLearner.load(tmp_path / "dsrl", learner.policy)
    assert again.updates == learner.updates
    obs = {"target": np.random.default_rng(3).uniform(-1, 1, (16, 1, 2)).astype(np.float32)}
    for a, b in zip(learner.act(obs, deterministic=True), again.act(obs, deterministic=True)):
        assert np.array_equal(a, b)
    torch.manual_seed(4)
    first = learner.act(obs)
    torch.manual_seed(4)
    assert np.array_equal(first[0], again.act(obs)[0])  # the stochastic actor too
    for name, opt in learner.optimizers.items():
        for p, q in zip(opt.param_groups[0]["params"], again.optimizers[name].param_groups[0]["params"]):
            assert torch.equal(p, q)
            assert all(torch.equal(v, again.optimizers[name].state[q][k]) for k, v in opt.state[p].items())
    other = toy_policy(updates=1)
    with pytest.raises(CheckpointError, match="different base policy"):
        DSRLLearner.load(tmp_path / "dsrl", other)


def test_config_and_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="noise_scale"):
        DSRLConfig(noise_scale=0.0)
    with pytest.raises(ValueError, match="num_target_critics"):
        DSRLConfig(num_critics=2, num_target_critics=3)
    policy = toy_policy(updates=0)
    with pytest.raises(SpecError, match="state key"):
        DSRLLearner(DSRLConfig(state_keys=["nope"], device="cpu"), policy)
    with pytest.raises(SpecError, match="horizon"):
        DSRLLearner(DSRLConfig(action_steps=H + 1, device="cpu"), policy)
    ddpm = small_policy("diffusion")
    ddpm.config.sampler = "ddpm"  # type: ignore[attr-defined]
    with pytest.raises(SpecError, match="DDPM"):
        DSRLLearner(DSRLConfig(device="cpu"), ddpm)
    learner = DSRLLearner(DSRLConfig(hidden=16, device="cpu"), policy)
    batch = toy_batch(learner, np.zeros((4, 2), np.float32), prior=True)
    with pytest.raises(SpecError, match="action: expected"):
        learner.update({**batch, "action": np.zeros((4, H, A), np.float32)})
    with pytest.raises(SpecError, match=r"observation\.target"):
        learner.act({"target": np.zeros((3, 2), np.float32)})


def test_only_non_terminal_decisions_bootstrap_through_the_base_policy() -> None:
    learner = DSRLLearner(DSRLConfig(hidden=16, device="cpu"), toy_policy(updates=0))
    batch = toy_batch(learner, np.random.default_rng(0).uniform(-1, 1, (4, 2)).astype(np.float32), prior=True)
    batch["terminated"] = np.array([1.0, 0.0, 1.0, 0.0], np.float32)
    sizes: list[int] = []
    decode = learner.decode
    learner.decode = lambda obs, noise: (sizes.append(len(noise)), decode(obs, noise))[1]  # type: ignore[method-assign]
    metrics = learner.update(batch)
    assert sizes == [2, 8]  # next chunks for the 2 live rows; prior + actor noises for all 4 in the distillation
    assert all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", ["flow", "diffusion", "meanflow", "vla"])
def test_dsrl_steers_every_policy_type(name: str) -> None:
    """One update and one decision on each generative policy (the VLA's camera only reaches the base)."""
    policy = small_policy(name)
    before = weights(policy)
    learner = DSRLLearner(DSRLConfig(hidden=16, device="cpu"), policy)
    rng = np.random.default_rng(0)
    obs: dict[str, np.ndarray] = {"pos": rng.uniform(-1, 1, (4, 2, 2)).astype(np.float32)}
    if name == "vla":
        obs["cam"] = rng.integers(0, 255, (4, 2, 16, 16, 3), dtype=np.uint8)
    noise, chunk = learner.act(obs)
    assert noise.shape == chunk.shape == (4, H, A)
    assert np.allclose(policy.predict_chunk(obs, noise=noise), chunk, atol=1e-5)  # the chunk IS base(s, w)
    batch = {**{f"obs.{k}": v for k, v in obs.items()}, **{f"next_obs.{k}": v for k, v in obs.items()},
             "action": chunk[:, :2], "reward": np.zeros(4, np.float32), "terminated": np.zeros(4, np.float32)}
    metrics = learner.update(batch)
    assert all(np.isfinite(v) for v in metrics.values())
    assert all(torch.equal(policy.state_dict()[k], v) for k, v in before.items())


# ----------------------------------------------------------------------------------------- step stream -> decisions
def episode(ep: int, length: int, terminated: bool, human: tuple[int, ...] = (), key: str = "x", dim: int = 1
            ) -> list[Transition]:
    """Steps whose observation (``key``) and action both equal the step index; reward 1 per step."""
    def obs(i: int) -> dict[str, np.ndarray]:
        return {key: np.full(dim, i, np.float32)}
    return [Transition(obs(i), obs(i + 1), np.full(A, i, np.float32), 1.0, terminated and i == length - 1, False,
                       ep, i, is_intervention=i in human,
                       segment_source=SegmentSource.HUMAN if i in human else SegmentSource.POLICY)
            for i in range(length)]


def test_decisions_from_steps_builds_histories_chunks_and_returns() -> None:
    steps = episode(0, 7, terminated=True, human=(4,)) + episode(1, 5, terminated=False)
    cols = decisions_from_steps(steps[::-1], n_obs_steps=2, action_steps=3)  # order does not matter
    # episode 0: decisions at steps 0, 3 and a terminal one-step decision at 6; episode 1: at 0 only (3..4 pending)
    assert cols["obs.x"][:, :, 0].tolist() == [[0, 0], [2, 3], [5, 6], [0, 0]]  # first frame repeated at the start
    assert cols["next_obs.x"][:, :, 0].tolist() == [[2, 3], [5, 6], [6, 7], [2, 3]]
    assert cols["action"][:, :, 0].tolist() == [[0, 1, 2], [3, 4, 5], [6, 6, 6], [0, 1, 2]]  # terminal one padded
    assert cols["reward"].tolist() == [3, 3, 1, 3]
    assert cols["terminated"].tolist() == [False, False, True, False]
    assert cols["is_intervention"].tolist() == [False, True, False, False]
    assert cols["steps"].tolist() == [3, 3, 1, 3]
    dense = decisions_from_steps(steps, n_obs_steps=2, action_steps=3, stride=1)
    assert len(dense["reward"]) == (5 + 2) + 3  # every full window, plus the terminal partial ones (at 5 and 6)
    gap = [t for t in episode(2, 8, terminated=False) if t.step != 3]  # a lost step splits the run
    assert decisions_from_steps(gap, 1, 3)["obs.x"][:, 0, 0].tolist() == [0, 4]
    learner = DSRLLearner(DSRLConfig(hidden=16, action_steps=2, device="cpu"), toy_policy(updates=0))
    stream = episode(0, 6, True, human=(1, 2), key="target", dim=2) + episode(1, 4, False, key="target", dim=2)
    assert all(np.isfinite(v) for v in learner.update(decisions_from_steps(stream, 1, 2)).values())
