"""Online fine-tuning as processes: the human's state risk, reconnecting actors, a learner killed and restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import load_config, save_config
from robot_rl.core.transition import Transition
from robot_rl.fleet.delivery import read_commit
from robot_rl.fleet.transport import ReconnectingSender, SocketTransitionServer, load_or_create_key, socket_address
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.online import CONFIG_FILE, read_jsonl
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.simulated_human import SimulatedHuman, SimulatedHumanConfig
from robot_rl.learners.task_risk import PickLiftGraspRisk, pick_lift_grasp_risk, task_risk
from robot_rl.runtime.episode import run_episode
from robot_rl.runtime.weights import list_versions
from robot_rl.sim.experts.arm import expert_for


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    e = gym.make("robot_rl/ArmPickLift-v0")
    yield e
    e.close()


def grasp_human(env: gym.Env, seed: int = 0) -> SimulatedHuman:
    cfg = SimulatedHumanConfig(action_risk=False, min_takeover_steps=15, seed=seed)
    return SimulatedHuman(expert_for(env), cfg, state_risk=task_risk("robot_rl/ArmPickLift-v0"))


def test_grasp_risk_reads_the_state(env: gym.Env) -> None:
    obs, _ = env.reset(seed=0)
    cube = obs["object_pos"].astype(np.float64)
    hover = {**obs, "tcp_pos": cube + np.array([0, 0, 0.08])}
    assert pick_lift_grasp_risk(hover) == 0.0  # high above the cube: nothing to fear yet
    assert pick_lift_grasp_risk({**obs, "tcp_pos": cube + np.array([0.03, 0, 0.01])}) == 1.0  # low and 3 cm off
    assert pick_lift_grasp_risk({**hover, "gripper_width": np.array([0.005], np.float32)}) == 1.0  # closed on air
    holding = {**obs, "tcp_pos": cube + np.array([0.002, 0, 0.0]), "gripper_width": np.array([0.05], np.float32)}
    assert pick_lift_grasp_risk(holding) == 0.0
    with pytest.raises(ValueError, match="human_risk: action"):
        task_risk("robot_rl/ArmPush-v0")


@pytest.mark.slow
def test_grasp_human_leaves_the_expert_alone_and_rescues_a_blind_policy(env: gym.Env) -> None:
    expert = expert_for(env)
    for seed in range(3):  # a supervisor who watches the state never interrupts a correct grasp
        human = grasp_human(env, seed)
        result = run_episode(env, expert.act, seed, human=human, seed=seed)
        assert result.success and result.takeovers == 0

    def blind(obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Goes straight down 3 cm beside the cube and closes: a grasp that cannot work."""
        a = expert.act(obs)
        a[:2] = np.clip((obs["object_pos"][:2] + np.array([0.03, 0.0]) - obs["tcp_pos"][:2]) / 0.04, -1, 1)
        a[2] = -1.0 if obs["tcp_pos"][2] > 0.03 else 0.0
        a[6] = -1.0 if obs["tcp_pos"][2] < 0.035 else 1.0
        return a

    rescued = [run_episode(env, blind, 10 + s, human=grasp_human(env, s), seed=10 + s) for s in range(3)]
    alone = [run_episode(env, blind, 20 + s, seed=10 + s) for s in range(3)]
    assert not any(r.success for r in alone)
    assert all(r.takeovers >= 1 for r in rescued) and sum(r.success for r in rescued) >= 2


def test_grasp_risk_remembers_an_abandoned_grasp(env: gym.Env) -> None:
    obs, _ = env.reset(seed=0)
    cube, opened = obs["object_pos"].astype(np.float64), np.array([0.075], np.float32)
    obs = {**obs, "object_quat": obs["tcp_quat"]}  # the hand turned to the cube's faces
    at = {**obs, "tcp_pos": cube + np.array([0.003, 0, 0.01]), "gripper_width": opened}
    back_up = {**obs, "tcp_pos": cube + np.array([0, 0, 0.06]), "gripper_width": opened}
    risk = PickLiftGraspRisk()
    assert risk(back_up) == 0.0 and risk(at) == 0.0  # coming down: nothing wrong
    assert risk(back_up) == 1.0 and pick_lift_grasp_risk(back_up) == 0.0  # went back up without closing
    lifted = {**back_up, "object_pos": cube + np.array([0, 0, 0.05]), "gripper_width": np.array([0.05], np.float32)}
    assert risk(lifted) == 0.0  # up with the cube in a closed hand
    risk.reset()
    assert risk(back_up) == 0.0  # a new episode forgets


def test_grasp_human_takes_over_a_policy_that_never_closes(env: gym.Env) -> None:
    """A policy that goes down to the cube but never closes and retries from above, as the last failures of
    fine-tuned policies on the stand-in did: no single state of it is risky for long, so only the memory of
    the hand having been at the cube calls the human in."""
    expert = expert_for(env)

    def hesitant(obs: Mapping[str, np.ndarray]) -> np.ndarray:
        a = expert.act(obs)
        a[6] = 1.0  # the fingers stay open: the expert sees it stuck, opens and retries from above
        return a

    stateless = SimulatedHuman(expert_for(env), SimulatedHumanConfig(action_risk=False, min_takeover_steps=15),
                               state_risk=pick_lift_grasp_risk)
    alone = [run_episode(env, hesitant, 30 + s, seed=30 + s) for s in range(2)]
    unseen = [run_episode(env, hesitant, 40 + s, human=stateless, seed=30 + s) for s in range(2)]
    rescued = [run_episode(env, hesitant, 50 + s, human=grasp_human(env, s), seed=30 + s) for s in range(2)]
    assert not any(r.success for r in alone) and all(r.takeovers == 0 and not r.success for r in unseen)
    assert all(r.takeovers >= 1 and r.success for r in rescued)


def step(i: int) -> Transition:
    obs = {"x": np.array([i], np.float32)}
    return Transition(obs, obs, np.zeros(1, np.float32), 0.0, False, False, 0, i)


def test_actor_queues_while_the_learner_is_away(tmp_path: Path) -> None:
    sender = ReconnectingSender(tmp_path, limit=50)
    sender.send([step(i) for i in range(10)])  # no learner yet: nothing lost, nothing raised
    assert len(sender.queue) == 10
    key = load_or_create_key(tmp_path)
    server = SocketTransitionServer(socket_address(tmp_path), key)
    (tmp_path / "learner.json").write_text(json.dumps({"address": server.address}))
    try:
        time.sleep(0.6)  # past the reconnect back-off
        sender.send([step(10)])
        got: list[Transition] = []
        deadline = time.monotonic() + 10
        while len(got) < 11 and time.monotonic() < deadline:
            got += server.receive(timeout=0.1)
        assert [int(t.observation["x"][0]) for t in got] == list(range(11)) and not sender.queue
        sender.close()
    finally:
        server.close()
    # learner gone again (closed first: while it still listened, a loaded machine's expired back-off let the
    # sender reconnect and deliver everything): the queue is bounded
    sender.send([step(i) for i in range(11, 80)])
    for _ in range(3):
        sender.send([])
    assert len(sender.queue) == 50 and sender.dropped == 19


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A few demonstrations and a barely trained flow policy (so the human has work to do)."""
    root = tmp_path_factory.mktemp("online")
    share = Path(__file__).resolve().parent.parent
    cli = [sys.executable, "-m", "robot_rl.cli.main"]
    subprocess.run([*cli, "data", "record", "--env", "robot_rl/ArmPickLift-v0", "--episodes", "3",
                    "--out", str(root / "demos.zarr")], check=True, capture_output=True)
    subprocess.run([*cli, "train", str(share / "config/policies/flow_pick_lift.yaml"), "--dataset",
                    str(root / "demos.zarr"), "--out", str(root / "bc"), "--set", "steps=30",
                    "--set", "policy.unet_channels=[16,32]", "--no-progress"], check=True, capture_output=True)
    return root / "demos.zarr", root / "bc" / "policy"


def _checkpoint_counts(run: Path) -> dict[str, int] | None:
    state = run / "checkpoint" / "state" / "train_state.json"
    if not state.is_file():
        return None
    meta = json.loads(state.read_text())
    return {"updates": int(meta["step"]), "steps": int(meta["steps"]), "human_steps": int(meta["human_steps"])}


@pytest.mark.slow
def test_killed_learner_restarts_with_its_buffers_and_the_actor_keeps_going(tiny_run: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    demos, policy = tiny_run
    cfg = load_config(OnlineConfig, None, ["actor.episodes=200", "learner.checkpoint_every_s=1.0",
                                           "learner.min_intervention_steps=5", "learner.publish_every=20"])
    cfg.policy, cfg.learner.demos = str(policy), str(demos)
    save_config(cfg, tmp_path / CONFIG_FILE)
    cli = [sys.executable, "-m", "robot_rl.cli.main", "online"]
    log = (tmp_path / "learner.log").open("w")
    learner = subprocess.Popen([*cli, "learner", "--run", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT)
    actor = subprocess.Popen([*cli, "actor", "--run", str(tmp_path)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while (c := _checkpoint_counts(tmp_path)) is None or c["human_steps"] < 15 or c["updates"] < 1:
            assert time.monotonic() < deadline and learner.poll() is None, (tmp_path / "learner.log").read_text()
            time.sleep(0.1)
        os.kill(learner.pid, signal.SIGKILL)  # no clean-up, possibly in the middle of a checkpoint
        learner.wait(10)
        before = _checkpoint_counts(tmp_path)
        assert before is not None
        saved = ReplayBuffer.load(tmp_path / "checkpoint" / "steps")
        human = ReplayBuffer.load(tmp_path / "checkpoint" / "interventions")
        assert saved.total_added >= before["steps"] and human.total_added >= before["human_steps"]
        assert all(t.is_intervention for t in human.transitions())
        killed_version = max(v for v, _ in list_versions(tmp_path / "weights"))
        commit = read_commit(tmp_path / "checkpoint")
        assert commit is not None
        committed = {name: int(rows) for name, rows in commit["buffers"].items()}
        assert committed["steps"] <= saved.total_added and committed["interventions"] <= human.total_added
        time.sleep(1.0)  # the actor runs on without its learner, queueing steps

        (tmp_path / "learner.json").unlink()
        learner = subprocess.Popen([*cli, "learner", "--run", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT)
        while not (tmp_path / "learner.json").is_file():
            assert time.monotonic() < deadline and learner.poll() is None
            time.sleep(0.05)
        resumed = json.loads((tmp_path / "learner.json").read_text())["resumed_from"]
        # the buffers as the last commit holds them: a kill between saving them and writing the commit leaves
        # rows the restart cuts away (the state's update count is the newer one)
        assert resumed == {"updates": before["updates"], "steps": committed["steps"],
                           "human_steps": committed["interventions"]}
        # wait for the events asserted below (not for timing luck on a loaded machine): the actor has
        # finished 6 episodes and swapped in a version the restarted learner published
        deadline = time.monotonic() + 300
        while not _actor_saw_new_weights(tmp_path, min_episodes=6, version=killed_version + 1):
            assert time.monotonic() < deadline and actor.poll() is None and learner.poll() is None
            time.sleep(0.2)
        actor.send_signal(signal.SIGTERM)  # ends after the current episode, delivering its steps
        assert actor.wait(timeout=120) == 0, actor.stderr.read()  # type: ignore[union-attr]
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(60) == 0
    finally:
        for p in (learner, actor):
            if p.poll() is None:
                p.kill()
        log.close()
    after = ReplayBuffer.load(tmp_path / "checkpoint" / "steps")
    assert after.total_added > committed["steps"]  # steps sent after the restart (and queued meanwhile) arrived
    old, new = saved.transitions()[: committed["steps"]], after.transitions()[: committed["steps"]]
    assert all(a.episode_id == b.episode_id and a.step == b.step and np.array_equal(a.action, b.action)
               for a, b in zip(old, new, strict=True))  # the restarted buffer continues the old one
    episodes = read_jsonl(tmp_path / "actor_0.jsonl")
    assert len(episodes) >= 6 and episodes[-1]["version_end"] > episodes[0]["version_start"]
    assert len(episodes) < 200  # it stopped on SIGTERM, after the episode in progress


def _actor_saw_new_weights(run: Path, min_episodes: int, version: int) -> bool:
    episodes = read_jsonl(run / "actor_0.jsonl")
    return len(episodes) >= min_episodes and episodes[-1]["version_end"] >= version


@pytest.mark.slow
def test_learner_and_actors_stop_when_the_runner_is_killed(tiny_run: tuple[Path, Path], tmp_path: Path) -> None:
    """SIGKILL of the process running ``run_online`` (no clean-up there): its learner and actor notice,
    stop as on SIGTERM (the learner checkpoints) and leave no orphan behind."""
    demos, policy = tiny_run
    cfg = load_config(OnlineConfig, None, ["actor.episodes=1000", "learner.checkpoint_every_s=600"])
    cfg.policy, cfg.learner.demos = str(policy), str(demos)
    save_config(cfg, tmp_path / "cfg.yaml")
    run = tmp_path / "run"
    script = ("import sys; from robot_rl.core.config import load_config; from robot_rl.learners.online import "
              "run_online; from robot_rl.learners.online_config import OnlineConfig; "
              "run_online(load_config(OnlineConfig, sys.argv[1]), sys.argv[2], progress=False, timeout=900)")
    runner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "cfg.yaml"), str(run)])
    try:
        deadline = time.monotonic() + 180
        while not read_jsonl(run / "actor_0.jsonl") or not (run / "learner.json").is_file():
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.2)
        children = subprocess.run(["pgrep", "-f", f"robot_rl.learners.roles .* --run {run}"], capture_output=True,
                                  text=True).stdout.split()
        assert len(children) == 2  # the learner and one actor
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(10)
        deadline = time.monotonic() + 120
        while any(_alive(int(pid)) for pid in children):
            assert time.monotonic() < deadline, "a child outlived its runner"
            time.sleep(0.2)
    finally:
        if runner.poll() is None:
            runner.kill()
        subprocess.run(["pkill", "-9", "-f", f"--run {run}"], check=False)
    assert (run / "checkpoint" / "state" / "train_state.json").is_file()  # the learner stopped cleanly
    assert "parent process" in (run / "logs" / "learner.log").read_text()


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie is reaped by init, not by us)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "config" / "learners").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_online_configs_load_strictly(path: Path) -> None:
    """Every shipped online config is a valid OnlineConfig (a misspelt key fails here, not on a robot)."""
    from robot_rl.core.config import load_config
    from robot_rl.learners.online_config import OnlineConfig

    cfg = load_config(OnlineConfig, str(path))
    assert cfg.actor.env_id.startswith("robot_rl/") and cfg.learner.algorithm
