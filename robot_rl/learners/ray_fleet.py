"""Online runs on a Ray cluster: the learner and the simulated actors as Ray actors, placed by Ray.

``robot-rl online run --ray [ADDRESS]`` calls :func:`run_on_ray`. The learner is a Ray actor that declares
``fleet.learner_resources`` (e.g. ``num_gpus: 1`` puts it on a GPU node) and serves the same TCP endpoint
robots join (robot_rl.fleet.tcp_transport); each simulated actor declares ``fleet.actor_resources`` and
joins it exactly like a robot would, from whichever node Ray placed it on. So one protocol carries every
actor: the same authentication, the same exactly-once delivery (outboxes on each node's disk, numbered
per actor id) and the same per-actor status. Ray does the placement, the processes and their lifetime;
nothing travels through Ray's own (pickled) channels but the start arguments and the episode records.

The single-machine process runner (robot_rl.learners.online) stays the default; Ray is the ``fleet`` extra.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from robot_rl.core.config import save_config
from robot_rl.fleet.security import PLAINTEXT_ENV, check_transport, is_loopback, plaintext_allowed
from robot_rl.fleet.transport import load_or_create_key
from robot_rl.fleet.wire import CONFIG_FILE, parse_address
from robot_rl.learners.online import OnlineResult, read_jsonl
from robot_rl.learners.online_config import OnlineConfig


class LearnerWorker:
    """The learner of a run folder, serving on a thread inside its Ray actor from the moment it exists.

    Ray restarts it (``fleet.learner_restarts``) when its process or its node dies; the new one resumes from
    the run folder's checkpoint (which must be on storage the new node sees) and serves on a new address,
    which actors ask for (:meth:`address`) when their connection breaks.
    """

    def __init__(self, run: str) -> None:
        import os

        from robot_rl.core.config import load_config
        from robot_rl.learners.learner_process import OnlineLearner

        self.pid = os.getpid()
        self.learner = OnlineLearner(load_config(OnlineConfig, Path(run) / CONFIG_FILE), run)
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self._weights_ref: tuple[int, Any] | None = None
        self._thread = threading.Thread(target=self._serve, name="learner", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self.result = self.learner.run(handle_signals=False)
        except Exception as exc:  # reported to the driver by address()/join()
            self.error = f"{type(exc).__name__}: {exc}"
            raise

    def address(self, timeout: float = 120.0) -> tuple[str, int]:
        """The (node IP, port) actors connect to, once the learner serves."""
        import ray

        deadline = time.monotonic() + timeout
        while self.learner.tcp is None:
            if self.error or not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the learner did not come up: {self.error or 'timeout'}")
            time.sleep(0.05)
        host, port = self.learner.tcp.address[:2]
        return (host if is_loopback(host) else ray.util.get_node_ip_address()), int(port)

    def where(self) -> dict[str, Any]:
        """The Ray node and the process this learner runs in."""
        import ray

        return {"node": str(ray.get_runtime_context().get_node_id()), "pid": self.pid}

    def status(self) -> dict[str, Any]:
        """The learner's counters (for the driver's progress bar)."""
        return self.learner.status()

    def weights_since(self, have: int) -> list[Any]:
        """``[ref]`` to the newest published version when it is newer than ``have``, else ``[]``.

        Each version is packed and put into Ray's object store once; every actor gets the same reference
        (actors on one node share one copy in its shared memory).
        """
        import ray

        version = self.learner.publisher.version
        if version <= have:
            return []
        if self._weights_ref is None or self._weights_ref[0] != version:
            try:
                header, parts = self.learner.packer.frame(version)  # the TCP broadcast's, hashed once
                packed = (header, b"".join(parts))
            except FileNotFoundError:  # pruned meanwhile: the next call finds the newer one
                return []
            self._weights_ref = (version, ray.put(packed))
        return [self._weights_ref[1]]

    def stop(self) -> dict[str, Any] | None:
        """Checkpoint, publish once more and stop; returns the final counters."""
        self.learner.stop()
        self._thread.join()
        if self.error:
            raise RuntimeError(self.error)
        return self.result


class ActorWorker:
    """One simulated actor, joining the learner over TCP from whichever node Ray placed it on."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self._done = threading.Event()

    def run(self, learner: Any, address: tuple[str, int], key: bytes, run_id: str, index: int,
            overrides: list[str], tls_ca: str = "") -> list[dict[str, Any]]:
        """Run the actor's episodes; its outbox and weights live on this node's disk under the run's id.

        Transitions go over TCP (acknowledged, exactly once; TLS checked against ``tls_ca`` when given, a file
        on this node); weights come from Ray's object store.
        """
        import ray

        from robot_rl.fleet.fleet_status import this_host
        from robot_rl.fleet.remote_run import RemoteRun
        from robot_rl.fleet.wire import tls_client_context
        from robot_rl.learners.actor_process import run_remote_actor

        workdir = Path(tempfile.gettempdir()) / "robot_rl_fleet" / run_id / f"actor-{index}"
        remote = RemoteRun((address[0], address[1]), key, workdir, f"ray-{index}", info={"host": this_host()},
                           resolve=LearnerAddress(learner), weights="ray",
                           tls=tls_client_context(tls_ca) if tls_ca else None)
        follow = threading.Thread(target=self._follow, args=(learner, remote.folder / "weights"), daemon=True)
        follow.start()
        try:
            records = run_remote_actor(remote, index, overrides, stop=self.stop_event)
        finally:
            self._done.set()
        node = str(ray.get_runtime_context().get_node_id())
        return [{**r, "node": node} for r in records]

    def _follow(self, learner: Any, folder: Path, every_s: float = 0.05) -> None:
        """Write each newer version from the object store into ``folder`` (where the actor's follower looks)."""
        import ray

        from robot_rl.fleet.wire import FrameError, unpack_weights

        have = 0
        while not self._done.is_set():
            try:
                refs = ray.get(learner.weights_since.remote(have), timeout=30)
            except Exception:  # the learner is restarting (RayActorError, timeout): ask again
                self._done.wait(0.5)
                continue
            if refs:
                header, payload = ray.get(refs[0])
                try:
                    unpack_weights(header, payload, folder)
                    have = int(header["version"])
                except (FrameError, OSError) as exc:
                    print(f"refused weights v{header.get('version')}: {exc}", flush=True)
            self._done.wait(every_s)

    def stop(self) -> None:
        """End after the current episode."""
        self.stop_event.set()


class LearnerAddress:
    """Asks the (possibly restarted) learner actor where it serves, without ever blocking the caller.

    The first call sends the question and raises TimeoutError; a later call returns the answer once it is
    there. An actor's TCP client calls it when reconnecting.
    """

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        self._ref: Any = None

    def __call__(self) -> tuple[str, int]:
        """(host, port) of the learner; TimeoutError while the answer is not there yet."""
        import ray

        if self._ref is None:
            self._ref = self.learner.address.remote()
        ready, _ = ray.wait([self._ref], timeout=0)
        if not ready:
            raise TimeoutError("the learner's address is not known yet")
        ref, self._ref = self._ref, None
        host, port = ray.get(ref)
        return str(host), int(port)


def run_on_ray(cfg: OnlineConfig, run: str | Path, address: str | None = None, budget_s: float | None = None,
               timeout: float = 3600.0, progress: bool = True,
               actor_overrides: list[list[str]] | None = None) -> OnlineResult:
    """Learner + ``cfg.actors`` actors as Ray actors on the cluster at ``address`` (None: a local one).

    ``actor_overrides[i]``: config changes of actor ``i`` (e.g. ``["actor.env_id=..."]`` for mixed tasks).
    The run folder is written by the learner on its node (share it, or pin the learner to the driver's
    node with a custom resource); episode records come back to the driver as ``actor_<i>.jsonl``.
    """
    import ray
    from tqdm import tqdm

    run = Path(run).resolve()
    run.mkdir(parents=True, exist_ok=True)
    if not cfg.fleet.listen:  # a Ray cluster we start here is this machine: loopback, no TLS needed
        local = not (address or cfg.fleet.ray_address or ray.is_initialized())
        cfg.fleet.listen = "127.0.0.1:0" if local else "0.0.0.0:0"
    # Ray's nodes reach the learner over the network: TLS (fleet.tls_cert + fleet.tls_ca) or the explicit opt-out,
    # refused here rather than in a Ray actor's traceback; the opt-out travels to the Ray workers' environment
    check_transport(parse_address(cfg.fleet.listen)[0], bool(cfg.fleet.tls_cert), "Ray fleet learner")
    runtime_env: dict[str, Any] = {"runtime_env": {"env_vars": {PLAINTEXT_ENV: "1"}}} if plaintext_allowed() else {}
    for stale in [run / "STOP", *run.glob("actor_*.jsonl")]:
        stale.unlink(missing_ok=True)
    save_config(cfg, run / CONFIG_FILE)
    key = load_or_create_key(run)
    run_id = hashlib.sha1(str(run).encode()).hexdigest()[:12]
    started = not ray.is_initialized()
    if started:
        # None: a new local cluster, never whatever /tmp/ray/ray_current_cluster names (a stopped `ray start`
        # leaves it behind, and ray.init(address=None) would then wait on a dead head)
        ray.init(address=address or cfg.fleet.ray_address or "local", include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    t0 = time.perf_counter()
    res = dict(cfg.fleet.learner_resources)
    learner_opts = {"num_cpus": res.pop("num_cpus", 1.0), "num_gpus": res.pop("num_gpus", 0.0), "resources": res,
                    "max_concurrency": 4, "max_restarts": cfg.fleet.learner_restarts, "max_task_retries": -1,
                    **runtime_env}
    learner: Any = ray.remote(LearnerWorker).options(**learner_opts).remote(str(run))
    workers: list[Any] = []
    try:
        learner_address = ray.get(learner.address.remote())
        (run / "ray_learner.json").write_text(json.dumps({**ray.get(learner.where.remote()),
                                                          "address": list(learner_address)}), encoding="utf-8")
        ares = dict(cfg.fleet.actor_resources)
        actor_opts = {"num_cpus": ares.pop("num_cpus", 1.0), "num_gpus": ares.pop("num_gpus", 0.0),
                      "resources": ares, "max_concurrency": 2, "scheduling_strategy": cfg.fleet.actor_strategy,
                      # a dead node's actors start again elsewhere (same budget as the learner's) and re-run
                      "max_restarts": cfg.fleet.learner_restarts, "max_task_retries": -1, **runtime_env}
        workers = [ray.remote(ActorWorker).options(**actor_opts).remote() for _ in range(cfg.actors)]
        refs = {w.run.remote(learner, learner_address, key, run_id, i, (actor_overrides or [[]] * cfg.actors)[i],
                             cfg.fleet.tls_ca): i
                for i, w in enumerate(workers)}
        records: dict[int, list[dict[str, Any]]] = {}
        bar = tqdm(total=cfg.actors, desc="ray actors", unit="actor", disable=not progress)
        deadline = time.monotonic() + timeout
        budget_end = None if budget_s is None else time.monotonic() + budget_s
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, timeout=1.0)
            for ref in done:
                records[refs[ref]] = ray.get(ref)
                bar.update(1)
            if budget_end is not None and time.monotonic() > budget_end:
                for w in workers:
                    w.stop.remote()
                budget_end = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Ray actors did not finish within {timeout:.0f} s")
        bar.close()
        for i, recs in records.items():
            with (run / f"actor_{i}.jsonl").open("w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in recs)
        ray.get(learner.stop.remote())
    finally:
        for handle in [*workers, learner]:
            ray.kill(handle)
        if started:
            ray.shutdown()
    episodes = sorted((r for recs in records.values() for r in recs), key=lambda r: r["t"])
    return OnlineResult(episodes, read_jsonl(run / "learner_log.jsonl"), time.perf_counter() - t0)
