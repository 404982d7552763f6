"""HG-DAgger: training on human-gated segments cuts the action error on the states the human corrected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.toy import toy_episode

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.algorithms.hg_dagger import HGDAggerConfig, HGDAggerLearner
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.training.dataset import ChunkDataset

HORIZON = 4


def expert_action(pos: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """Straight to goals on the left; for goals on the right (no demonstrations) a different motion, so
    behaviour cloning on the demonstrations cannot extrapolate to it."""
    delta = 2.0 * (goal - pos)
    if goal[0] > 0:
        delta = np.array([-delta[1], delta[0]])
    return np.clip(delta, -1.0, 1.0).astype(np.float32)


def episode(rng: np.random.Generator, goal_x: tuple[float, float], length: int = 20) -> dict[str, np.ndarray]:
    return toy_episode(rng, length, goal_x, expert=expert_action)


def demos(n: int, seed: int) -> ChunkDataset:
    rng = np.random.default_rng(seed)
    eps = [episode(rng, (-1.0, 0.0)) for _ in range(n)]  # demonstrations only cover goals on the left
    cat = {k: np.concatenate([e[k] for e in eps]) for k in ("pos", "goal", "action")}
    return ChunkDataset({"pos": cat["pos"], "goal": cat["goal"]}, cat["action"],
                        np.cumsum([len(e["action"]) for e in eps]), [""] * n, [], 1, HORIZON)


def human_rollout(rng: np.random.Generator, episode_id: int) -> list[Transition]:
    """A rollout toward a goal on the right: the policy acts 5 steps (ignored), then the human corrects."""
    e = episode(rng, (0.5, 1.0))
    out = []
    for t in range(20):
        human = t >= 5
        obs = {"pos": e["pos"][t], "goal": e["goal"][t]}
        nxt = {"pos": e["pos"][min(t + 1, 19)], "goal": e["goal"][t]}
        action = e["action"][t] if human else np.zeros(2, np.float32)  # wrong policy actions: must not be learned
        out.append(Transition(obs, nxt, action, 0.0, False, False, episode_id, t, is_intervention=human,
                              segment_source=SegmentSource.HUMAN if human else SegmentSource.POLICY,
                              segment_id=int(human)))
    return out


def action_error(policy: FlowPolicy, transitions: list[Transition]) -> float:
    obs = {k: np.stack([t.observation[k] for t in transitions])[:, None] for k in ("pos", "goal")}
    chunk = policy.predict_chunk(obs, generator=torch.Generator().manual_seed(0))
    target = np.stack([t.action for t in transitions])
    return float(np.mean(np.abs(chunk[:, 0] - target)))


def make_policy(data: ChunkDataset) -> FlowPolicy:
    torch.manual_seed(0)
    cfg = FlowConfig(horizon=HORIZON, n_obs_steps=1, unet_channels=(32,), kernel_size=3, num_inference_steps=5,
                     executor=ExecutorConfig(n_action_steps=2))
    return FlowPolicy(cfg, data.spec)


@pytest.mark.slow
def test_hg_dagger_reduces_error_on_intervened_states(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data = demos(30, seed=0)
    policy = make_policy(data)
    cfg = HGDAggerConfig(batch_size=32, lr=2e-3, updates_per_round=150, ema_decay=0.0)  # the raw weights go out
    learner = HGDAggerLearner(policy, cfg, data)
    learner.update()  # plain BC on the demonstrations
    rng = np.random.default_rng(1)
    rollouts = [human_rollout(rng, i) for i in range(12)]
    kept = sum(learner.add_rollout(r) for r in rollouts)
    assert kept == 12 * 15 == learner.num_intervention_steps  # autonomous steps are discarded
    assert learner.intervention_dataset().num_episodes == 12  # type: ignore[union-attr]
    held_out = [t for r in (human_rollout(np.random.default_rng(7), 100 + i) for i in range(4)) for t in r
                if t.is_intervention]
    # control: the same number of extra steps on demonstrations only
    control = make_policy(data)
    control.load_state_dict(policy.state_dict())
    control_learner = HGDAggerLearner(control, HGDAggerConfig(batch_size=32, lr=2e-3, ema_decay=0.0), data)
    before = action_error(policy, held_out)
    learner.update(100)
    control_learner.update(100)
    after, control_after = action_error(policy, held_out), action_error(control, held_out)
    print(f"error on corrected states: BC {before:.3f}, +demos only {control_after:.3f}, HG-DAgger {after:.3f}")
    assert after < 0.4 * before
    assert after < 0.5 * control_after

    learner.save(tmp_path / "ckpt")
    fresh = HGDAggerLearner(FlowPolicy.load(tmp_path / "ckpt" / "policy"), learner.config, data)
    fresh.restore_interventions(tmp_path / "ckpt")
    assert fresh.num_intervention_steps == learner.num_intervention_steps
    assert action_error(fresh.policy, held_out) == pytest.approx(after, abs=1e-6)  # type: ignore[arg-type]


def test_rejects_rollouts_missing_policy_keys() -> None:
    data = demos(2, seed=0)
    learner = HGDAggerLearner(make_policy(data), HGDAggerConfig(), data)
    obs = {"pos": np.zeros(2, np.float32)}
    bad = Transition(obs, obs, np.zeros(2, np.float32), 0.0, False, False, 0, 0, is_intervention=True,
                     segment_source=SegmentSource.HUMAN)
    with pytest.raises(SpecError, match="goal"):
        learner.add_rollout([bad])
    assert learner.num_intervention_steps == 0
    with pytest.raises(ValueError, match="intervention_fraction"):
        HGDAggerConfig(intervention_fraction=1.5)


def _camera_steps(rng: np.random.Generator, n: int, with_label: bool, episode_id: int = 0) -> list[Transition]:
    """Human steps of a camera policy; a simulator's carry the object position, a real robot's do not."""
    out = []
    for t in range(n):
        obs = {"pos": rng.normal(size=2).astype(np.float32),
               "image_front": rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)}
        if with_label:
            obs["object_pos"] = rng.normal(size=3).astype(np.float32)
        out.append(Transition(obs, obs, rng.normal(size=2).astype(np.float32), 0.0, False, False, episode_id, t,
                              is_intervention=True, segment_source=SegmentSource.HUMAN, segment_id=1))
    return out


@pytest.mark.parametrize("robot_has_labels", [True, False])
def test_a_camera_policy_with_an_aux_head_fine_tunes_on_labelled_and_unlabelled_corrections(
        robot_has_labels: bool) -> None:
    """Demos carry the privileged label; a simulator's corrections carry it too, a real robot's do not."""
    rng = np.random.default_rng(0)
    n = 60
    columns = {"pos": rng.normal(size=(n, 2)).astype(np.float32),
               "image_front": rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8),
               "object_pos": rng.normal(size=(n, 3)).astype(np.float32)}
    data = ChunkDataset(columns, rng.normal(size=(n, 2)).astype(np.float32), np.array([30, 60]), ["", ""],
                        ["image_front"], 1, HORIZON, aux_keys=["object_pos"])
    torch.manual_seed(0)
    cfg = FlowConfig(horizon=HORIZON, n_obs_steps=1, unet_channels=(16,), kernel_size=3, image_keys=["image_front"],
                     image_feature_dim=8, crop_pad=1, aux_keys=["object_pos"],
                     executor=ExecutorConfig(n_action_steps=2))
    policy = FlowPolicy(cfg, data.spec)
    learner = HGDAggerLearner(policy, HGDAggerConfig(batch_size=8, updates_per_round=3), demos=data)
    assert learner.add_rollout(_camera_steps(rng, 12, robot_has_labels)) == 12
    result = learner.update()
    assert np.isfinite(result["loss"])
    # with labelled corrections the head trains on every batch; without, the mixed batches drop the label
    assert ("aux_loss" in result) is robot_has_labels
    assert learner.update(steps=2)["loss"] > 0
    learner.config.intervention_fraction = 0.0  # demonstrations only: their labels train the head again
    assert "aux_loss" in learner.update(steps=2)


def test_demo_part_of_each_batch_oversamples_episode_starts_when_asked() -> None:
    """A camera policy is cloned with episode starts oversampled; fine-tuning must keep doing so."""
    data = demos(10, seed=3)
    frame_of = {tuple(np.round(p, 5)): i for i, p in enumerate(data.columns["pos"])}
    offset = np.concatenate([np.arange(e - s) for s, e in zip(data.starts, data.ends)])

    def start_share(cfg: HGDAggerConfig) -> float:
        learner = HGDAggerLearner(make_policy(data), cfg, demos=data)
        learner.add_rollout(human_rollout(np.random.default_rng(0), 1))
        batch = learner._batch()
        demo_part = batch["obs"]["pos"][-(cfg.batch_size - round(cfg.batch_size * cfg.intervention_fraction)):, -1]
        frames = [frame_of[tuple(np.round(p, 5))] for p in demo_part.numpy()]
        return float(np.mean(offset[frames] < 3))

    assert start_share(HGDAggerConfig(batch_size=256, start_fraction=0.0)) < 0.3  # uniform: ~3 of 20 frames
    assert start_share(HGDAggerConfig(batch_size=256, start_fraction=1.0, start_steps=3)) == 1.0
    with pytest.raises(ValueError, match="start_fraction"):
        HGDAggerConfig(start_fraction=1.5)


def test_segments_handed_back_mid_motion_have_no_labels_past_their_end() -> None:
    """A takeover ends with the human handing control back: the chunk steps after it are the policy's, not
    labels (with 15-step takeovers and 16-step chunks, padding them as "hold" was half of every target)."""
    data = demos(4, seed=0)
    learner = HGDAggerLearner(make_policy(data), HGDAggerConfig(batch_size=256, intervention_fraction=0.5), data)
    handed_back = human_rollout(np.random.default_rng(0), 1)
    finished = human_rollout(np.random.default_rng(1), 2)
    last = finished[-1]
    finished[-1] = Transition(last.observation, last.next_observation, last.action, 1.0, True, False, 2, last.step,
                              is_intervention=True, segment_source=SegmentSource.HUMAN, segment_id=1)
    learner.add_rollout(handed_back + finished)
    segments = learner.intervention_dataset()
    assert segments is not None and segments.open_ends.tolist() == [True, False]
    pads = segments.batch(np.array([14, 29]))["action_is_pad"]  # the last frame of each segment
    assert pads[0].tolist() == [False] + [True] * (HORIZON - 1) and not pads[1].any()
    batch = learner._batch()
    pad = batch["action_is_pad"]
    assert pad.shape == (256, HORIZON) and not pad[128:].any()  # the demonstrations' part: every step a label
    assert pad[:128, 1:].any() and not pad[:, 0].any()


def test_published_weights_are_a_moving_average_and_are_what_is_saved(tmp_path: Path) -> None:
    data = demos(4, seed=0)
    policy = make_policy(data)
    learner = HGDAggerLearner(policy, HGDAggerConfig(batch_size=16, lr=1e-2, ema_decay=0.9), data)
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    assert all(torch.equal(v, learner.published.state_dict()[k]) for k, v in start.items())  # starts at the policy
    learner.update(1)
    raw, avg = policy.state_dict(), learner.published.state_dict()
    name = next(k for k, v in start.items() if v.is_floating_point() and not torch.equal(raw[k], v))
    assert torch.allclose(avg[name], 0.9 * start[name] + 0.1 * raw[name], atol=1e-6)  # no warm-up: 0.9 at once
    learner.update(5)
    assert not torch.equal(learner.published.state_dict()[name], policy.state_dict()[name])
    learner.save(tmp_path / "ckpt")
    saved = FlowPolicy.load(tmp_path / "ckpt" / "policy")
    assert torch.equal(saved.state_dict()[name], learner.published.state_dict()[name])
    with pytest.raises(ValueError, match="ema_decay"):
        HGDAggerConfig(ema_decay=1.0)


def _pick_lift_episode(episode_id: int, sources: str, lifted_from: int | None) -> list[Transition]:
    """Toy-policy observations plus the cube's position, which the pick-and-lift success rule reads."""
    out = []
    for t, who in enumerate(sources):
        human = who == "H"
        cube_z = 0.2 if lifted_from is not None and t + 1 >= lifted_from else 0.025
        obs = {"pos": np.zeros(2, np.float32), "goal": np.full(2, -0.5, np.float32),
               "object_pos": np.array([0.5, 0.0, 0.025], np.float32)}
        nxt = {**obs, "object_pos": np.array([0.5, 0.0, cube_z], np.float32)}
        out.append(Transition(obs, nxt, np.full(2, 0.1 * t, np.float32), 0.0, False, t == len(sources) - 1,
                              episode_id, t, is_intervention=human,
                              segment_source=SegmentSource.HUMAN if human else SegmentSource.POLICY,
                              segment_id=sources[:t + 1].count("PH") + sources[:t + 1].count("HP")))
    return out


def test_success_fraction_keeps_the_policy_steps_that_ran_to_the_end_of_a_successful_episode(tmp_path: Path) -> None:
    """HABC's credit as labels: the policy's last segment of a successful episode (here after a human
    correction) is kept with its executed actions; a failed episode's, a taken-over segment's and the human's
    steps are not. Episodes arrive interleaved in batches, and the kept steps survive a restart."""
    from robot_rl.core.config import load_config
    from robot_rl.learners.algorithms.hg_dagger import HGDAggerAlgorithm
    from robot_rl.learners.online_config import OnlineConfig

    data = demos(4, seed=0)
    policy = make_policy(data)
    policy.set_stats(data.stats())
    policy.save(tmp_path / "policy")
    cfg = load_config(OnlineConfig, {"policy": str(tmp_path / "policy"),
                                     "actor": {"env_id": "robot_rl/ArmPickLift-v0"},
                                     "learner": {"device": "cpu", "hg_dagger": {"success_fraction": 0.25}}})
    algo = HGDAggerAlgorithm(cfg, tmp_path / "ckpt")
    won = _pick_lift_episode(1, "PPPPPHHHHHPPPPPPPPPP", lifted_from=15)   # the policy finishes after a correction
    lost = _pick_lift_episode(2, "PPPPPHHHHHPPPPPPPPPP", lifted_from=None)
    human_won = _pick_lift_episode(3, "PPPPPHHHHHHHHHHHHHHH", lifted_from=15)
    stream = [t for group in zip(won, lost, human_won) for t in group]  # three actors' steps interleaved
    for k in range(0, len(stream), 7):
        algo.add(stream[k:k + 7])
    kept = algo.learner.successes
    assert kept.total_added == 10 and len(algo.learner.interventions) == 5 + 5 + 15
    rows = kept.rows(np.arange(10))
    assert rows["episode_id"].tolist() == [1] * 10 and rows["step"].tolist() == list(range(10, 20))
    np.testing.assert_allclose(rows["action"][:, 0], 0.1 * np.arange(10, 20), rtol=1e-6)  # what was executed
    batch = algo.learner._batch()
    assert batch["action"].shape[0] == algo.learner.config.batch_size
    algo.checkpoint()
    assert HGDAggerAlgorithm(cfg, tmp_path / "ckpt").learner.successes.total_added == 10
    with pytest.raises(ValueError, match="success_fraction"):
        HGDAggerConfig(intervention_fraction=0.8, success_fraction=0.3)


def test_without_demonstrations_the_batch_is_the_human_steps_and_the_credited_own_steps() -> None:
    data = demos(4, seed=0)
    learner = HGDAggerLearner(make_policy(data), HGDAggerConfig(batch_size=40, success_fraction=0.25), None)
    learner.policy.set_stats(data.stats())
    with pytest.raises(ValueError, match="no data"):
        learner._batch()
    own = [t.replace(segment_source=SegmentSource.POLICY, is_intervention=False, segment_id=0)
           for t in human_rollout(np.random.default_rng(0), 1)]
    learner.add_successes(own)
    assert learner._batch()["action"].shape[0] == 40  # only own steps: the whole batch
    learner.add_rollout(human_rollout(np.random.default_rng(1), 2))
    batch = learner._batch()
    assert batch["action"].shape[0] == 40 and learner.update(2)["loss"] > 0


def test_action_steps_sets_how_much_of_each_chunk_every_published_version_executes(tmp_path: Path) -> None:
    from robot_rl.core.config import load_config
    from robot_rl.learners.algorithms.hg_dagger import HGDAggerAlgorithm
    from robot_rl.learners.online_config import OnlineConfig
    from robot_rl.policies.base import Policy

    data = demos(2, seed=0)
    policy = make_policy(data)
    policy.set_stats(data.stats())
    policy.save(tmp_path / "policy")
    came_with = policy.config.executor.n_action_steps
    assert came_with != 1
    for steps, expected in ((1, 1), (None, came_with)):
        cfg = load_config(OnlineConfig, {"policy": str(tmp_path / "policy"), "learner": {
            "device": "cpu", "hg_dagger": {"action_steps": steps}}})
        algo = HGDAggerAlgorithm(cfg, tmp_path / f"ckpt{steps}")
        (tmp_path / f"v{steps}").mkdir()
        algo.publish(tmp_path / f"v{steps}", 1)
        assert Policy.load(tmp_path / f"v{steps}").config.executor.n_action_steps == expected
    with pytest.raises(ValueError, match="action_steps"):
        HGDAggerConfig(action_steps=0)


def test_an_episode_with_a_step_without_an_action_is_refused_and_a_diverged_update_keeps_the_last_good_state(
        tmp_path: Path) -> None:
    """Bad input on the robot: a human step with no action refuses its episode (named), the batch's other
    episodes are kept; an update that turns the weights non-finite stops training and publishing, and the
    checkpoint keeps the last good networks with every step received, after the failure too."""
    from robot_rl.core.config import load_config
    from robot_rl.learners.algorithms.hg_dagger import HGDAggerAlgorithm
    from robot_rl.learners.online_config import OnlineConfig

    data = demos(4, seed=0)
    policy = make_policy(data)
    policy.set_stats(data.stats())
    policy.save(tmp_path / "policy")
    cfg = load_config(OnlineConfig, {"policy": str(tmp_path / "policy"), "learner": {"device": "cpu"}})
    algo = HGDAggerAlgorithm(cfg, tmp_path / "ckpt")
    rng = np.random.default_rng(0)
    good, bad = human_rollout(rng, 1), human_rollout(rng, 2)
    bad[7] = bad[7].replace(action=np.zeros(0, np.float32))  # the teleop gave nothing at that step
    algo.add([t for pair in zip(good, bad) for t in pair])
    assert len(algo.refused) == 1 and "episode 2 step 7" in algo.refused[0]
    assert algo.steps.total_added == 20 and algo.learner.num_intervention_steps == 15  # episode 1 whole
    algo.update(2)
    assert algo.failure is None and algo.can_publish()
    algo.checkpoint()
    updates = algo.updates
    with torch.no_grad():
        next(algo.learner.policy.parameters()).fill_(float("nan"))  # a diverged step
    algo.update(1)
    assert algo.failure is not None and "non-finite" in algo.failure
    assert not algo.can_publish() and algo.train_allowed() == 0
    algo.add(human_rollout(rng, 3))  # the robot goes on sending: nothing it sends is lost
    algo.checkpoint()  # the buffers, and the last good networks
    again = HGDAggerAlgorithm(cfg, tmp_path / "ckpt")
    assert again.updates == updates and again.failure is None
    assert again.steps.total_added == 40 and again.learner.num_intervention_steps == 30
    assert all(bool(torch.isfinite(p).all()) for p in again.learner.policy.parameters())
