"""Fleet transport, side by side in one run: ingest at the learner, weight push, actor scaling.

    .venv/bin/python benchmarks/fleet_transport.py [--seconds 4] [--skip-ray] [--weights-only --push-actors 1,4]
        [--push-dtypes float32,float16]

1. Ingest: sender processes stream pre-built transition batches (state-only, or with a 64x64 RGB camera in
   the observation and the next observation) to a receiver that decodes them, as the learner does. Three
   transports: this machine's socket (robot_rl.fleet.transport), TCP with the exactly-once outbox (every
   batch fsynced on the actor before it is sent; robot_rl.fleet.tcp_transport), and Ray actor calls
   (a sink actor's method takes the safetensors bytes; what using Ray itself for transitions would give).
2. Weight push: a 10 M-parameter policy (40 MB of float32 safetensors) published to 1 and to 4 actor processes
   over TCP, the path before issue 40 (benchmarks/_weight_push_legacy.py, float32) and today's in each of
   ``--push-dtypes`` (float32, and float16: ``learner.push_dtype``) alternating push by push (``--weights-only``):
   median and best of N, the median of each stage (pack, first header, receive, check + write) and the ratio
   of medians to the old path; each actor checks the SHA-256s and writes ``v<N>/`` into its weights folder
   (kept in /dev/shm). With Ray: one ``ray.put``, 4 ``ray.get``, checked and written the same way. Time from
   publish (packing included) until the last actor holds it.
3. Scaling: QuadHover env steps/s of 1, 2 and 4 simulated actor processes, each with the hover expert,
   streaming to one TCP learner endpoint; ratio to linear (1 actor x N).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _weight_push_legacy import pack_weights as legacy_pack_weights

from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions, encode_transitions
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.tcp_transport import TcpTransitionServer
from robot_rl.fleet.transport import SocketTransitionClient, SocketTransitionServer
from robot_rl.fleet.wire import map_weights, pack_weights

KEY = b"b" * 32


def batch(n: int, camera: bool) -> list[Transition]:
    rng = np.random.default_rng(0)
    out = []
    for k in range(n):
        obs: dict[str, np.ndarray] = {"state": rng.standard_normal(32).astype(np.float32)}
        if camera:
            obs["front"] = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
        out.append(Transition(observation=obs, next_observation=obs, action=rng.standard_normal(7).astype(np.float32),
                              reward=0.0, terminated=False, truncated=False, episode_id=0, step=k))
    return out


# ---------------------------------------------------------------------------------------------- ingest
def _socket_sender(address: str, n: int, camera: bool, seconds: float) -> None:
    client = SocketTransitionClient(address, KEY)
    items = batch(n, camera)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        client.send(items)
    client.close()


def _tcp_sender(port: int, n: int, camera: bool, seconds: float, folder: str, name: str) -> None:
    client = TcpActorClient(("127.0.0.1", port), KEY, name, Outbox(folder))
    client.connect()
    items = batch(n, camera)
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        client.send(items)
        sent += 1
        if sent % 50 == 0:
            client.outbox.ack(client.outbox.next_seq - 1)  # the benchmark's learner never checkpoints
    client.close()


def ingest(kind: str, senders: int, n: int, camera: bool, seconds: float) -> float:
    """Transitions/s decoded at the receiver."""
    procs: list[mp.Process] = []
    received = 0
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "socket":
            server: Any = SocketTransitionServer(os.path.join(tmp, "s.sock"), KEY)
            args = [(server.address, n, camera, seconds) for _ in range(senders)]
            target: Any = _socket_sender
        else:
            server = TcpTransitionServer(KEY, host="127.0.0.1")
            args = [(server.address[1], n, camera, seconds, os.path.join(tmp, f"o{i}"), f"a{i}")
                    for i in range(senders)]
            target = _tcp_sender
        procs = [mp.get_context("spawn").Process(target=target, args=a) for a in args]
        for p in procs:
            p.start()
        while not received:  # clock starts at the first batch (process start-up is not transport)
            received += len(server.receive(timeout=0.1))
        t0 = time.perf_counter()
        received = 0
        while any(p.is_alive() for p in procs):
            received += len(server.receive(timeout=0.05))
        received += len(server.receive(timeout=0.2))
        elapsed = time.perf_counter() - t0
        server.close()
    return received / elapsed


def ingest_ray(senders: int, n: int, camera: bool, seconds: float) -> float:
    import ray

    @ray.remote(num_cpus=0)
    class Sink:
        def __init__(self) -> None:
            self.count = 0

        def put(self, payload: bytes) -> int:
            self.count += len(decode_transitions(payload))
            return self.count

        def total(self) -> int:
            return self.count

    @ray.remote(num_cpus=0)
    def send(sink: Any, n: int, camera: bool, seconds: float) -> int:
        payload = encode_transitions(batch(n, camera))
        end = time.monotonic() + seconds
        pending: list[Any] = []
        k = 0
        while time.monotonic() < end:
            pending.append(sink.put.remote(payload))
            k += 1
            if len(pending) > 8:
                ray.wait(pending, num_returns=len(pending) - 8)
                pending = pending[-8:]
        ray.get(pending)
        return k

    sink = Sink.remote()
    ray.get(sink.total.remote())
    t0 = time.perf_counter()
    ray.get([send.remote(sink, n, camera, seconds) for _ in range(senders)])
    total = ray.get(sink.total.remote())
    return float(total) / (time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------- weights
def _weights_folder(root: Path, params: int) -> Path:
    from safetensors.numpy import save_file

    folder = root / "v1"
    folder.mkdir(parents=True)
    side = int(np.sqrt(params / 4))
    save_file({f"layer{i}.weight": np.random.default_rng(i).standard_normal((side, side)).astype(np.float32)
               for i in range(4)}, str(folder / "actor.safetensors"))
    (folder / "actor.json").write_text('{"version": 1}')
    return folder


class _TimedActorClient(TcpActorClient):
    """Today's actor; ``report`` gets (version, header arrived, header arrived, installed) of each weights frame."""

    report: Any = None

    def _take_weights(self, sock: Any, header: dict[str, Any], size: int) -> None:
        started = time.time()
        super()._take_weights(sock, header, size)
        if self.report is not None and self.received_versions:
            self.report((self.received_versions[-1][0], started, started, self.received_versions[-1][1]))


def _tcp_weights_actor(port: int, folder: str, name: str, legacy: bool, ready: Any, done: Any) -> None:
    """An actor process that reports when each weights version is checked and in its (RAM) weights folder."""
    from _weight_push_legacy import LegacyActorClient

    from robot_rl.fleet.remote_run import weights_in_memory

    weights_in_memory(Path(folder))  # as run_remote_actor does
    cls = LegacyActorClient if legacy else _TimedActorClient
    client = cls(("127.0.0.1", port), KEY, name, Outbox(os.path.join(folder, "outbox")),
                 weights_dir=os.path.join(folder, "weights"))
    client.report = done.put  # from the reader thread: nothing polls
    client.connect()
    ready.put(name)
    while client.connected:
        time.sleep(0.2)


class PushGroup:
    """``actors`` actor processes on one TCP learner endpoint, old (``legacy``) or today's weights path.

    ``dtype``: what today's path sends floating tensors as (``learner.push_dtype``); the old one sends float32.
    """

    def __init__(self, actors: int, legacy: bool, tmp: str, dtype: str = "float32") -> None:
        ctx = mp.get_context("spawn")
        self.ready, self.done, self.legacy, self.dtype = ctx.Queue(), ctx.Queue(), legacy, dtype
        self.server = TcpTransitionServer(KEY, host="127.0.0.1")
        self.procs = [ctx.Process(target=_tcp_weights_actor, daemon=True, args=(
            self.server.address[1], os.path.join(tmp, f"{'old' if legacy else 'new'}-{dtype}-{i}"), f"a{i}", legacy,
            self.ready, self.done)) for i in range(actors)]
        for proc in self.procs:
            proc.start()

    def wait_ready(self) -> None:
        for _ in self.procs:
            self.ready.get(timeout=120)
        while self.server.num_actors < len(self.procs):
            time.sleep(0.01)

    def push(self, folder: Path, version: int) -> dict[str, float]:
        """One publish: seconds from its start to each stage (pack done, first header, last actor holds it)."""
        t0 = time.time()
        header, payload = (legacy_pack_weights(folder, version) if self.legacy
                           else map_weights(folder, version, self.dtype))
        packed = time.time()
        self.server.broadcast(version, header, payload)
        got = [self.done.get(timeout=60) for _ in self.procs]
        assert all(g[0] == version for g in got), got
        return {"pack": packed - t0, "first header": min(g[1] for g in got) - packed,
                "receive": max(g[2] - g[1] for g in got), "check + write": max(g[3] - g[2] for g in got),
                "total": max(g[3] for g in got) - t0, "MB": sum(f["size"] for f in header["files"]) / 1e6}

    def close(self) -> None:
        self.server.close()
        for proc in self.procs:
            proc.join(timeout=10)


PATHS = {"old": "read + hash + join; recv to bytes, hash, write",
         "new": "mmap (or narrow) + hash once; recv_into + hash + write per chunk"}


def push_side_by_side(folder: Path, actors: int, repeats: int,
                      dtypes: list[str]) -> dict[tuple[str, str], list[dict[str, float]]]:
    """The old float32 push and today's in each of ``dtypes`` to ``actors`` actor processes each, alternating
    push by push (same load); keyed by (path, dtype)."""
    with tempfile.TemporaryDirectory() as tmp:
        groups = {("old", "float32"): PushGroup(actors, True, tmp)}
        groups.update({("new", dtype): PushGroup(actors, False, tmp, dtype) for dtype in dtypes})
        for group in groups.values():
            group.wait_ready()
        times: dict[tuple[str, str], list[dict[str, float]]] = {key: [] for key in groups}
        for version in range(1, repeats + 2):  # the first push of each warms up (page cache, /dev/shm, sockets)
            for key, group in groups.items():
                result = group.push(folder, version)
                if version > 1:
                    times[key].append(result)
        for group in groups.values():
            group.close()
    return times


def print_side_by_side(times: dict[tuple[str, str], list[dict[str, float]]], actors: int) -> None:
    """One row per (path, dtype): median and best of N (every push), the median of each stage, ratio to old."""
    print(f"   {actors} actor{'s' if actors > 1 else ''}, publish -> the last holds the checked version:")
    print(f"     {'path':<5} {'dtype':<9} {'MB':>4} {'median':>7} {'best':>5} {'/ old':>6}  "
          "pushes (ms); median stages (ms)")
    old = float(np.median([t["total"] for t in times[("old", "float32")]]))
    for (path, dtype), pushes in times.items():
        totals = [1000 * t["total"] for t in pushes]
        stages = ", ".join(f"{stage} {1000 * float(np.median([t[stage] for t in pushes])):.0f}"
                           for stage in ("pack", "first header", "receive", "check + write"))
        median = float(np.median(totals))
        print(f"     {path:<5} {dtype:<9} {pushes[0]['MB']:4.0f} {median:5.0f} ms {min(totals):5.0f} "
              f"{median / 1000 / old:6.2f}  {', '.join(f'{t:.0f}' for t in totals)}; {stages}", flush=True)


def push_ray(folder: Path, actors: int, pack: Any = pack_weights) -> float:
    import ray

    from robot_rl.fleet.wire import unpack_weights

    @ray.remote(num_cpus=0)
    class Holder:
        def __init__(self, root: str) -> None:
            self.root = root

        def take(self, refs: list[Any]) -> float:
            header, payload = ray.get(refs[0])
            unpack_weights(header, payload, self.root)
            return time.time()

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        holders = [Holder.remote(os.path.join(tmp, f"a{i}")) for i in range(actors)]
        ray.get([h.__ray_ready__.remote() for h in holders])
        t0 = time.time()
        ref = ray.put(pack(folder, 1))  # checked and written to RAM as TCP actors do
        last = max(ray.get([h.take.remote([ref]) for h in holders]))
    return last - t0


# ---------------------------------------------------------------------------------------------- scaling
def _sim_actor(port: int, folder: str, name: str, seconds: float, out: Any) -> None:
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401
    from robot_rl.runtime.episode import EpisodeHooks, run_episode
    from robot_rl.sim.experts import expert_for

    os.environ["OMP_NUM_THREADS"] = "1"
    env = gym.make("robot_rl/QuadHover-v0")
    client = TcpActorClient(("127.0.0.1", port), KEY, name, Outbox(folder))
    client.connect()
    pending: list[Transition] = []

    def add(t: Transition) -> None:
        pending.append(t)
        if len(pending) >= 64:
            client.send(pending)
            pending.clear()

    expert = expert_for(env)
    run_episode(env, expert, episode_id=0, seed=0)  # warm-up: JIT-compiled kernels are built (or loaded) here
    steps, k = 0, 0
    end = time.monotonic() + seconds
    t0 = time.perf_counter()
    while time.monotonic() < end:
        steps += run_episode(env, expert, episode_id=k, seed=k, hooks=EpisodeHooks(on_transition=add)).length
        k += 1
    out.put(steps / (time.perf_counter() - t0))


def scaling(actors: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    server = TcpTransitionServer(KEY, host="127.0.0.1")
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_sim_actor, args=(server.address[1], os.path.join(tmp, f"a{i}"), f"a{i}", seconds,
                                                       out)) for i in range(actors)]
        for p in procs:
            p.start()
        while any(p.is_alive() for p in procs):
            server.receive(timeout=0.05)
        rates = [out.get(timeout=10) for _ in procs]
    server.close()
    return float(sum(rates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--senders", type=int, default=2, help="sender processes in the ingest test")
    parser.add_argument("--actors", default="2,4", help="actor counts of the scaling test (besides 1)")
    parser.add_argument("--repeats", type=int, default=5, help="weight pushes timed per path (after one warm-up)")
    parser.add_argument("--parts", default="ingest,push,scaling", help="which of the three measurements to run")
    parser.add_argument("--push-actors", default="4", help="actor counts of the weight push (e.g. 1,4)")
    parser.add_argument("--push-dtypes", default="float32,float16",
                        help="what today's path sends floating weights as (learner.push_dtype), e.g. float32,bfloat16")
    parser.add_argument("--weights-only", action="store_true", help="only the weight push (= --parts push)")
    args = parser.parse_args()
    if args.weights_only:
        args.parts = "push"
    print(f"machine: {os.cpu_count()} cores")
    use_ray = not args.skip_ray
    if use_ray:
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    parts = args.parts.split(",")
    if "ingest" in parts:
        print(f"\n1. ingest at the learner (transitions/s decoded), {args.senders} sender processes")
        print(f"{'payload':<34} {'socket':>10} {'TCP+outbox':>11} {'Ray calls':>10}")
    payloads = [("state-only, batches of 64", 64, False), ("state-only, batches of 5", 5, False),
                ("64x64 camera, batches of 16", 16, True)]
    for label, n, camera in payloads if "ingest" in parts else []:
        sock = ingest("socket", args.senders, n, camera, args.seconds)
        tcp = ingest("tcp", args.senders, n, camera, args.seconds)
        ray_rate = ingest_ray(args.senders, n, camera, args.seconds) if use_ray else float("nan")
        print(f"{label:<34} {sock:>10.0f} {tcp:>11.0f} {ray_rate:>10.0f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = _weights_folder(Path(tmp), 10_000_000)
        size = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
        if "push" in parts:
            import torch

            torch.set_num_threads(1)  # as the learner (learner.num_threads: 1), which narrows the weights
            print(f"\n2. weight push, 10 M parameters ({size:.0f} MB), TCP, old path and today's side by side "
                  f"(pushes alternate; load average now {os.getloadavg()[0]:.2f})")
            for path, what in PATHS.items():
                print(f"   {path}: {what}")
            for n in [int(a) for a in args.push_actors.split(",")]:
                print_side_by_side(push_side_by_side(folder, n, args.repeats, args.push_dtypes.split(",")), n)
            print(f"   load average after: {os.getloadavg()[0]:.2f}")
        if use_ray and "push" in parts:
            for label, pack in (("before", legacy_pack_weights), ("after", pack_weights)):
                rr = [push_ray(folder, 4, pack) for _ in range(args.repeats)]
                print(f"   Ray object store, 4 actors, {label}: {1000 * min(rr):.0f} ms (best of {args.repeats}; "
                      f"{', '.join(f'{1000 * t:.0f}' for t in rr)})", flush=True)
    if use_ray:
        import ray

        ray.shutdown()
    if "scaling" not in parts:
        return
    print("\n3. scaling: QuadHover env steps/s with the expert, streaming to one TCP learner endpoint")
    one = scaling(1, args.seconds)
    print(f"   1 actor : {one:8.0f} steps/s")
    for n in [int(a) for a in args.actors.split(",")]:
        rate = scaling(n, args.seconds)
        print(f"   {n} actors: {rate:8.0f} steps/s = {rate / (n * one):.2f} x linear", flush=True)


if __name__ == "__main__":
    main()
