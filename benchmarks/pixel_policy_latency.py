"""Pixel policies on the robot (issue 20): per-chunk latency, and camera-to-command latency through the ROS graph.

(a) ``predict_chunk`` on one observation of the pixel flow policy (``config/policies/flow_pick_lift_pixels.yaml``)
and the VLA (``config/policies/vla_pick_lift.yaml``), both with the front and wrist cameras at 64x64 and the
arm's proprioception (joint_pos 7, joint_vel 7, gripper_width 1, tcp_pos 3, tcp_quat 4; 7-D Cartesian-delta
actions; the pixel policy's auxiliary object_pos head), built as the training loop builds them from the
config, with random weights and fitted normaliser statistics (latency does not depend on the weights'
values). Median and p95 per device: cpu (with each ``--threads`` count; 0 = torch's default, one thread per
core), and ``auto`` (cuda) when a GPU is present. ``--policy PATH`` times a trained checkpoint folder instead.

(b) The real ``policy_node`` (a process launched from a launch file, as the ROS tests do) runs the saved
checkpoint at ``rate_hz`` 10 and 20 while this process publishes two ``sensor_msgs/Image`` streams
(``front/image_raw``, ``wrist/image_raw``, rgb8) at 30 Hz plus ``joint_states``, ``current_pose`` and
``task/object_pose``, and measures:

* the command rate: ``target_pose`` messages per second received here (the command of a ``cartesian_delta``
  policy), of which "fresh" carry a new action (``policy/action`` published in the same tick) and the rest
  re-publish the last target while inference is late;
* camera-to-command latency, first use: the commands carry no frame id, so the cameras switch between an
  all-black and an all-white scene every ``--phase`` seconds, and the latency is the time from the header
  stamp (= publish time) of the first frame of the new scene to the arrival here of the first action that
  differs from every action the old scene produces (a scene lasts ``--phase`` s plus a random 0-0.25 s, and
  the switch's frame is published off the 30 Hz grid, so that switches fall at every phase of the node's
  timer). For that the node runs a probe copy of the checkpoint whose chunk is a function of the
  observation alone: the U-Net's first layer ignores the noisy chunk, the network outputs the clean chunk
  (``prediction: sample``, same network evaluations per chunk), the newest chunk is executed
  (``executor.mode: latest``, same steps per chunk) and the image features are scaled up x10 so that the
  scenes' actions stay far apart (compute per chunk does not depend on weight values). Every action the
  old and new scenes can give (each history step and camera black or white) is computed here first; an
  action is "new" when it is farther than a quarter of the smallest old/new distance from all of the old
  scene's actions;
* stamp to next command: the same frame stamp to the next ``target_pose`` received, whatever it was
  computed from (the figure a measurement without frame identification gives);
* the node's CPU use (one core = 100%).

Each row launches the node afresh: per device, per ``--threads`` count (the node's ``num_threads``, whose
default is 1) and per rate.

    .venv/bin/python benchmarks/pixel_policy_latency.py [--repeats 50] [--threads 0 1] [--rates 10 20]
        [--switches 10] [--phase 1.0] [--frame-size 64 64] [--only "pixel flow" vla] [--policy PATH] [--skip-graph]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _quad_graph_latency import cpu_ticks

from robot_rl.core.config import load_config
from robot_rl.core.device import resolve_device
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import Policy, PolicySpec, replace_config
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.flow import FlowConfig
from robot_rl.robots import panda
from robot_rl.training.loop import TrainConfig

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"pixel flow": REPO / "config/policies/flow_pick_lift_pixels.yaml",
           "vla": REPO / "config/policies/vla_pick_lift.yaml"}
STATE_DIMS = {"joint_pos": 7, "joint_vel": 7, "gripper_width": 1, "tcp_pos": 3, "tcp_quat": 4}
AUX_DIMS = {"object_pos": 3}
IMAGE_SHAPE = (64, 64, 3)
CAMERA_HZ = 30.0
JITTER_S = 0.25
"""Each scene lasts ``--phase`` s plus up to this much at random (covers a chunk period at 10 Hz)."""
# What this process publishes, and so what the node observes (float32, as ObservationSources casts).
TCP_POS, TCP_QUAT, OBJECT_POS = np.array([0.5, 0.0, 0.3]), np.array([0.0, 1.0, 0.0, 0.0]), np.array([0.5, 0.0, 0.02])
FINGERS = np.array([0.04, 0.04])
NODE_VALUES = {"joint_pos": panda.HOME_Q, "joint_vel": np.zeros(7), "gripper_width": np.array([FINGERS.sum()]),
               "tcp_pos": TCP_POS, "tcp_quat": TCP_QUAT, "object_pos": OBJECT_POS}


# ============================================================================ (a) per-chunk latency
def build(config_file: Path, seed: int = 0) -> Policy:
    """The policy ``config_file`` trains (as ``robot_rl.training.loop.train`` builds it), random weights."""
    cfg = load_config(TrainConfig, config_file)
    pcfg = cfg.policy_config()
    spec = PolicySpec({k: STATE_DIMS[k] for k in (pcfg.state_keys or STATE_DIMS)},
                      {k: IMAGE_SHAPE for k in pcfg.image_keys}, 7, robot=panda.NAME, control_mode="cartesian_delta",
                      aux_dims={k: AUX_DIMS[k] for k in pcfg.aux_keys})
    torch.manual_seed(seed)
    policy = get_policy_class(cfg.policy_type)(pcfg, spec)
    rng = np.random.default_rng(seed)  # statistics fitted to a synthetic sample, as set_stats gets them from data
    stats = {}
    for key, dim in {**spec.state_dims, **spec.aux_dims, "action": spec.action_dim}.items():
        x = rng.uniform(-1.0, 1.0, (1000, dim))
        stats[key] = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    policy.set_stats(stats)
    return policy.eval()


def observation(policy: Policy, images: tuple[int, ...] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """One observation history as the node sees it; camera pixels random, or uniform per (step, camera).

    ``images`` gives the grey level of every history step of every camera, camera by camera (the node's
    scenes are all black or all white).
    """
    rng, to = np.random.default_rng(seed), policy.config.n_obs_steps
    obs = {k: np.tile(np.asarray(NODE_VALUES[k], np.float32), (to, 1)) for k in policy.state_keys}
    for i, key in enumerate(policy.image_keys):
        shape = policy.spec.image_shapes[key]
        obs[key] = (rng.integers(0, 256, (to, *shape), dtype=np.uint8) if images is None else
                    np.stack([np.full(shape, images[i * to + j], np.uint8) for j in range(to)]))
    return obs


def chunk_latency(policy: Policy, repeats: int) -> tuple[float, float]:
    """(median, p95) ms of ``predict_chunk`` on one observation (a few calls first to warm up)."""
    obs = observation(policy)
    for _ in range(3):
        policy.predict_chunk(obs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        policy.predict_chunk(obs)  # numpy out: includes the copy back from a GPU
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), 1e3 * float(np.percentile(times, 95))


# ============================================================================ (b) through the ROS graph
def probe_copy(policy: Policy, folder: Path) -> Path | None:
    """Save the probe copy of ``policy`` described in the module docstring; None for non-flow policies."""
    config = policy.config
    if not isinstance(config, FlowConfig):
        return None
    config = replace_config(config, prediction="sample",
                            executor=ExecutorConfig(mode="latest", n_action_steps=config.executor.n_action_steps))
    probe = type(policy)(config, policy.spec)
    probe.load_state_dict({k: v.cpu() for k, v in policy.state_dict().items()})
    probe.task = policy.task
    first = probe.net.down[0].res1
    assert isinstance(first.skip, torch.nn.Conv1d), "the U-Net's first block passes the noisy chunk through"
    with torch.no_grad():
        first.block1[0].weight.zero_()
        first.skip.weight.zero_()
        for cnn in probe.encoder.cnns.values():
            cnn.out.weight.mul_(10.0)
            cnn.out.bias.mul_(10.0)
    return probe.save(folder)


@dataclass
class Scenes:
    """Every action the black (0) and the white (255) scene can produce, and the distance that tells them apart."""

    actions: dict[int, np.ndarray]
    """Grey level -> the (horizon, action_dim) chunk of that scene on every camera and history step."""
    tolerance: float
    """A quarter of the smallest distance between a scene's actions and any action of a history that saw the
    other scene on some camera or step."""


def scenes(checkpoint: Path, device: str) -> Scenes:
    """Compute the black and white scenes' actions of the probe copy where the node computes (``device``)."""
    probe = Policy.load(checkpoint).to(resolve_device(device)).eval()
    n = probe.config.n_obs_steps * len(probe.image_keys)
    chunks = {combo: probe.predict_chunk(observation(probe, combo)) for combo in itertools.product((0, 255), repeat=n)}
    again = probe.predict_chunk(observation(probe, (0,) * n), generator=torch.Generator().manual_seed(1))
    if not np.allclose(again, chunks[(0,) * n], atol=1e-5):
        raise RuntimeError("the probe copy's chunk still depends on the noise")
    actions = {v: chunks[(v,) * n] for v in (0, 255)}
    sep = min(float(np.linalg.norm(actions[v][:, None] - c[None], axis=-1).min())
              for v in (0, 255) for combo, c in chunks.items() if combo != (v,) * n)
    return Scenes(actions, sep / 4)


@dataclass
class GraphResult:
    """One launch of the policy node."""

    seconds: float = 0.0
    commands: int = 0
    fresh: int = 0
    first_use_ms: list[float] = field(default_factory=list)
    next_command_ms: list[float] = field(default_factory=list)
    switches: int = 0
    missed: int = 0
    settled: int = 0
    settled_matched: int = 0
    cpu: float = float("nan")


class Feed:
    """The benchmark's ROS node: cameras, joint_states, current_pose and task/object_pose out; commands in."""

    def __init__(self, frame_hw: tuple[int, int]) -> None:
        import rclpy
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Float64MultiArray

        from robot_rl.ros.conversions import image_to_msg, joint_state_to_msg, pose_to_msg

        self.rclpy, self.image_to_msg = rclpy, image_to_msg
        self.node = rclpy.create_node("pixel_latency_feed")
        self.targets: list[int] = []
        """Arrival times of target_pose (wall clock, ns)."""
        self.actions: list[tuple[int, np.ndarray]] = []
        """(arrival time ns, raw action) of policy/action."""
        self.node.create_subscription(PoseStamped, "/target_pose", lambda m: self.targets.append(time.time_ns()), 50)
        self.node.create_subscription(Float64MultiArray, "/policy/action",
                                      lambda m: self.actions.append((time.time_ns(), np.asarray(m.data))), 50)
        self.cams = [self.node.create_publisher(Image, f"/{c}/image_raw", qos_profile_sensor_data)
                     for c in ("front", "wrist")]
        self.frames = {v: np.full((*frame_hw, 3), v, np.uint8) for v in (0, 255)}
        js = self.node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
        poses = [(self.node.create_publisher(PoseStamped, topic, qos_profile_sensor_data), pos, quat)
                 for topic, pos, quat in (("/current_pose", TCP_POS, TCP_QUAT),
                                          ("/task/object_pose", OBJECT_POS, np.array([1.0, 0, 0, 0])))]
        names, q = [*panda.JOINT_NAMES, *panda.GRIPPER_JOINTS], np.r_[panda.HOME_Q, FINGERS]

        def state(now: int) -> None:
            js.publish(joint_state_to_msg(names, q, np.zeros(9), np.zeros(9), now))
            for pub, pos, quat in poses:
                pub.publish(pose_to_msg(pos, quat, now, "base"))

        self.state = state

    def publish(self, level: int) -> int:
        """State and both cameras showing the ``level`` scene, all stamped now; returns the stamp [ns]."""
        now = time.time_ns()
        self.state(now)
        for pub, cam in zip(self.cams, ("front", "wrist")):
            pub.publish(self.image_to_msg(self.frames[level], now, cam))
        return now

    def run(self, seconds: float, level: int, switch_every: float = 0.0,
            until: Any = None) -> list[tuple[int, int]]:
        """Publish at the camera rate for ``seconds`` (or until ``until()``), switching scene every
        ``switch_every`` s plus a random 0..JITTER_S s (0: never; the last scene lasts ``switch_every`` s at
        least); returns the (stamp ns, new level) of each switch."""
        t0 = time.monotonic()
        rng = np.random.default_rng(len(self.actions))
        jitter = lambda: float(rng.uniform(0.0, JITTER_S)) if switch_every else float("inf")  # noqa: E731
        next_pub, next_switch, switches = t0, t0 + switch_every + jitter(), []
        while time.monotonic() - t0 < seconds and not (until is not None and until()):
            now = time.monotonic()
            if now >= next_switch:  # off the camera's frame grid, so switches fall at every phase of the node's timer
                level, next_switch, next_pub = 255 - level, next_switch + switch_every + jitter(), now
                if next_switch + switch_every > t0 + seconds:  # every scene lasts at least switch_every
                    next_switch = float("inf")
                switches.append((self.publish(level), level))
                next_pub += 1.0 / CAMERA_HZ
            elif now >= next_pub:
                self.publish(level)
                next_pub += 1.0 / CAMERA_HZ
            self.rclpy.spin_once(self.node, timeout_sec=max(0.0, min(next_pub, next_switch) - time.monotonic()))
        return switches


def graph_run(checkpoint: Path, rate_hz: float, device: str, threads: int, ref: Scenes | None, switches: int,
              phase: float, frame_hw: tuple[int, int], folder: Path) -> GraphResult:
    """Launch the policy node on ``checkpoint`` and measure it (see the module docstring).

    ``threads``: the node's ``num_threads`` (torch CPU threads; 0: torch's default, one per core).
    """
    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.launch_yaml import load_launch_file, write_node_launch_file

    run = f"{rate_hz:g}hz_{device}_{threads}threads"
    path = write_node_launch_file(folder / f"policy_{run}.launch.yaml", "policy_node",
                                  {"policy_path": str(checkpoint), "rate_hz": float(rate_hz), "device": device,
                                   "num_threads": threads})
    out = GraphResult()
    with launch(load_launch_file(path), folder / f"logs_{run}") as graph:
        feed = Feed(frame_hw)
        try:
            feed.run(120.0, 0, until=lambda: bool(feed.actions) or not graph.is_running("policy"))
            if not feed.actions:
                raise RuntimeError(f"the policy node never acted:\n{graph.log('policy')}")
            feed.run(1.5, 0)  # first chunks (allocations, caches) left out
            pid = graph._procs["policy"].proc.pid  # type: ignore[union-attr]
            ticks0, t0, n_targets, n_actions = cpu_ticks(pid), time.time_ns(), len(feed.targets), len(feed.actions)
            marks = feed.run((phase + JITTER_S) * switches + phase, 0, switch_every=phase)
            t1 = time.time_ns()
            out.cpu = 100.0 * (cpu_ticks(pid) - ticks0) / os.sysconf("SC_CLK_TCK") / ((t1 - t0) * 1e-9)
        finally:
            feed.node.destroy_node()
    out.seconds = (t1 - t0) * 1e-9
    out.commands = sum(t0 <= t < t1 for t in feed.targets[n_targets:])
    out.fresh = sum(t0 <= t < t1 for t, _ in feed.actions[n_actions:])
    out.switches = len(marks)
    ends = [stamp for stamp, _ in marks[1:]] + [t1]
    for (stamp, level), end in zip(marks, ends):
        nxt = [t for t in feed.targets if stamp < t < end]
        if nxt:
            out.next_command_ms.append((nxt[0] - stamp) * 1e-6)
        if ref is None:
            continue
        phase_actions = [(t, a) for t, a in feed.actions if stamp < t < end]
        new = [t for t, a in phase_actions if _distance(a, ref.actions[255 - level]) > ref.tolerance]
        if new:
            out.first_use_ms.append((new[0] - stamp) * 1e-6)
        else:
            out.missed += 1
        tail = [a for t, a in phase_actions if t > stamp + 0.5 * (end - stamp)]  # settled: the scene's own actions
        out.settled += len(tail)
        out.settled_matched += sum(_distance(a, ref.actions[level]) <= ref.tolerance for a in tail)
    return out


def _distance(action: np.ndarray, chunk: np.ndarray) -> float:
    return float(np.linalg.norm(chunk - action[None], axis=-1).min())


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


# ============================================================================ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50, help="predict_chunk calls per row")
    parser.add_argument("--policy", type=Path, help="time this trained checkpoint folder instead of the two configs")
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 20.0], help="node rate_hz values")
    parser.add_argument("--switches", type=int, default=10, help="scene switches per graph run (about)")
    parser.add_argument("--phase", type=float, default=1.0, help="seconds between scene switches")
    parser.add_argument("--frame-size", type=int, nargs=2, default=IMAGE_SHAPE[:2], metavar=("H", "W"),
                        help="published camera frames (the node resizes to the policy's)")
    parser.add_argument("--threads", type=int, nargs="+", default=[0, 1],
                        help="torch CPU threads here and the node's num_threads; 0: torch's default (one per core)")
    parser.add_argument("--only", choices=sorted(CONFIGS), nargs="+", default=sorted(CONFIGS), help="configs to time")
    parser.add_argument("--skip-graph", action="store_true", help="per-chunk latency only")
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    gpu = torch.cuda.is_available()
    devices = ["cpu", "auto"] if gpu else ["cpu"]
    policies = ({f"{Policy.load(args.policy).name} ({args.policy})": Policy.load(args.policy)} if args.policy else
                {name: build(path) for name, path in CONFIGS.items() if name in args.only})
    print(f"torch {torch.__version__}, {os.cpu_count()} CPU cores (torch's default: {default_threads} threads), "
          f"{'GPU ' + torch.cuda.get_device_name(0) if gpu else 'no CUDA device: GPU rows skipped'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"(a) predict_chunk, one observation, 2 cameras {IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]}; {args.repeats} calls")
    print(f"  {'policy':14s} {'device':12s} {'threads':>7s} {'steps':>5s} {'median ms':>10s} {'p95 ms':>8s} "
          f"{'chunks/s':>9s}")
    per_chunk: dict[tuple[str, str, int], float] = {}
    for name, policy in policies.items():
        for device, threads in itertools.product(devices, args.threads):
            torch.set_num_threads(threads or default_threads)
            policy.to(resolve_device(device))
            med, p95 = chunk_latency(policy, args.repeats)
            per_chunk[name, device, threads] = med
            label = device if device == "cpu" else f"auto ({resolve_device(device).type})"
            steps = getattr(policy.config, "num_inference_steps", 1)
            print(f"  {name:14s} {label:12s} {threads or default_threads:7d} {steps:5d} {med:10.2f} {p95:8.2f} "
                  f"{1e3 / med:9.1f}")
        policy.to("cpu")
    torch.set_num_threads(1)
    for name, threads in itertools.product(policies, args.threads if gpu else []):
        print(f"  {name}, {threads or default_threads} thread(s): cpu / cuda = "
              f"{per_chunk[name, 'cpu', threads] / per_chunk[name, 'auto', threads]:.1f}x")
    if args.skip_graph:
        return
    from robot_rl.ros.isolation import isolated_ros_env

    os.environ.update(isolated_ros_env())  # a private ROS domain for this process and the nodes it launches
    import rclpy

    rclpy.init()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="pixel_latency_") as tmp:
            for i, (name, policy) in enumerate(policies.items()):
                ckpt = probe_copy(policy, Path(tmp) / f"probe{i}") or policy.save(Path(tmp) / f"policy{i}")
                for device in devices:
                    ref = scenes(ckpt, device) if isinstance(policy.config, FlowConfig) else None
                    for threads, rate in itertools.product(args.threads, args.rates):
                        res = graph_run(ckpt, rate, device, threads, ref, args.switches, args.phase,
                                        tuple(args.frame_size), Path(tmp))
                        rows.append((name, device, threads, rate, res))
                        print(f"  ... {name} {device} {threads or 'default'} thread(s) {rate:g} Hz done", flush=True)
    finally:
        rclpy.shutdown()
    h, w = args.frame_size
    print(f"(b) policy_node through the ROS graph: 2 Image streams {h}x{w} rgb8 at {CAMERA_HZ:g} Hz + joint_states, "
          f"current_pose, task/object_pose; scenes switched every {args.phase:g}-{args.phase + JITTER_S:g} s")
    print(f"  {'policy':14s} {'device':6s} {'thr':>3s} {'rate':>5s} {'cmd/s':>6s} {'/rate':>6s} {'fresh/s':>8s} "
          f"{'switches':>8s} {'first use p50/p95 ms':>21s} {'next cmd p50/p95 ms':>20s} {'first/next':>10s} "
          f"{'matched':>8s} {'node CPU':>9s}")
    for name, device, threads, rate, res in rows:
        rate_cmd, fresh = res.commands / res.seconds, res.fresh / res.seconds
        first, nxt = res.first_use_ms, res.next_command_ms
        matched = f"{res.settled_matched}/{res.settled}" if res.settled else "n/a"
        missed = f" ({res.missed} missed)" if res.missed else ""
        print(f"  {name:14s} {device:6s} {threads or default_threads:3d} {rate:5g} {rate_cmd:6.1f} "
              f"{rate_cmd / rate:6.2f} {fresh:8.1f} {res.switches:8d} {_pct(first, 50):10.0f}/{_pct(first, 95):<10.0f} "
              f"{_pct(nxt, 50):9.0f}/{_pct(nxt, 95):<10.0f} {_pct(first, 50) / _pct(nxt, 50):10.1f} "
              f"{matched:>8s} {res.cpu:8.0f}%{missed}")
    print("  first use: frame stamp -> first action computed from the new scene (arrival here); missed: none within "
          "the scene (>= its length, left out of p50/p95); next cmd: frame stamp -> next target_pose, whatever it "
          "used; matched: actions in the second half of a scene equal to the scene's own")


if __name__ == "__main__":
    main()
