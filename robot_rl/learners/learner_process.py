"""The learner process of online fine-tuning: receive transitions, train, publish weights, checkpoint.

It runs beside the robots, never in their control loop: actors stream transitions to its socket while
their episodes run; it trains an algorithm (``learner.algorithm``) and writes numbered weight folders
that actors (and the ROS policy node) swap in between action chunks. Algorithms sit behind one small
interface (:class:`LearnerAlgorithm`), each registered by name (:mod:`robot_rl.learners.algorithms.registry`):
``hg_dagger`` (:class:`~robot_rl.learners.algorithms.hg_dagger.HGDAggerAlgorithm`, behaviour cloning on the
human-gated segments plus the demonstrations), and the off-policy RL algorithms of
:mod:`robot_rl.learners.off_policy`: ``residual`` (SAC on a frozen base), ``rlpd`` (SAC from scratch with
the demonstrations in half of every batch) and ``dsrl`` (SAC in the frozen policy's noise space).

Run folder layout (everything a restart needs; nothing pickled)::

    <run>/learner.json          address of the transition socket (+ the learner's pid)
    <run>/learner.key           HMAC key actors authenticate with (mode 0600, refused if others may read it)
    <run>/weights/v<N>/         published weights, newest 3 kept: a policy (model.safetensors + policy.json)
                                or a SAC actor (actor.safetensors + actor.json; residual, rlpd)
    <run>/checkpoint/state/     HG-DAgger: policy + optimizer + counters (atomic folder swap)
    <run>/checkpoint/sac/       residual / rlpd: actor, critics, optimisers, counters (atomic folder swap)
    <run>/checkpoint/steps/     every received transition (append-only safetensors chunks)
    <run>/checkpoint/interventions/  the human-controlled steps
    <run>/checkpoint/identity.json   what the checkpoint belongs to (algorithm, tasks, observation keys, base):
                                a learner of another config is refused on this folder, never mixed in
    <run>/deployed/v<N>/        with ``learner.gate``: copies of deployed versions (robot_rl.learners.deployment_gate)
    <run>/checkpoint/gate.json  with ``learner.gate``: which version is deployed, which is on trial, their outcomes
    <run>/learner_log.jsonl     one line per publish: updates, loss, steps, version, time, the means of the
                                algorithm's other metrics since the last publish (Q, temperature...), an
                                ``error`` line if the weights turned non-finite (nothing is published after
                                it) and, with ``learner.gate``, a ``gate`` line per verdict on a candidate

A learner killed at any moment restarts from the last checkpoint with both buffers as they were then
(the buffers are saved before the state, each atomically). Stop it with SIGTERM/SIGINT or by creating
``<run>/STOP``; it checkpoints and publishes once more before exiting.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from robot_rl.core.config import load_config
from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions, encode_transitions
from robot_rl.fleet.delivery import Inbox, read_commit, write_commit
from robot_rl.fleet.fleet_status import FleetStatus, this_host
from robot_rl.fleet.tcp_transport import TcpTransitionServer
from robot_rl.fleet.transport import SocketTransitionServer, announce, load_or_create_key, socket_address
from robot_rl.fleet.wire import CONFIG_FILE, WeightsPacker, parse_address, tls_server_context
from robot_rl.learners.algorithms import registry
from robot_rl.learners.buffers import ReplayBuffer, truncate_saved
from robot_rl.learners.deployment_gate import Decision, GatedPublisher
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.task_success import episode_succeeded, observed_success
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import META_FILE, PolicySpec, read_metadata
from robot_rl.runtime.weights import WeightsPublisher


class LearnerAlgorithm(Protocol):
    """What the learner loop needs of an algorithm (the learner side an algorithm's registry entry makes)."""

    marker: str
    """File that marks a complete published ``v<N>/`` folder (what the actors' watchers look for)."""
    updates: int
    """Gradient steps (algorithm updates) so far, restored on resume."""
    steps: ReplayBuffer
    """Every received step."""
    resumed_from: dict[str, int] | None
    """Counters of the checkpoint it resumed from; None for a fresh start."""
    failure: str | None
    """Why it stopped training (e.g. non-finite weights); None while healthy."""

    @property
    def interventions(self) -> ReplayBuffer:
        """The human-controlled steps (and, for the off-policy algorithms, the demonstrations)."""
        ...

    @property
    def human_steps(self) -> int:
        """Human-controlled steps received from the actors (loaded demonstrations not counted)."""
        ...

    def add(self, transitions: Sequence[Transition]) -> None:
        """Take received steps."""

    def held(self) -> list[Transition]:
        """Received steps not yet in a buffer (waiting for their final reward); the checkpoint keeps them."""
        ...

    def train_allowed(self) -> int:
        """Gradient steps allowed now (0 while waiting for data)."""
        ...

    def updates_owed(self) -> int:
        """Updates the update-to-data ratio allows beyond those done (not capped per cycle; pacing reads it)."""
        ...

    def update(self, n: int) -> dict[str, float]:
        """``n`` gradient steps; returns metrics with a ``loss``."""
        ...

    def can_publish(self) -> bool:
        """Whether the current weights may go out."""
        ...

    def publish(self, folder: Path, version: int) -> None:
        """Write the weights actors load into ``folder`` (its ``marker`` last)."""

    def checkpoint(self) -> None:
        """Save everything a restart needs into the run's ``checkpoint/``."""


IDENTITY_FILE = "identity.json"


def run_identity(cfg: OnlineConfig) -> dict[str, Any]:
    """What a checkpoint's buffers and networks are tied to: a learner differing in any of it must not resume.

    The algorithm, the tasks (their observation and action spaces) and the algorithm's observation keys and
    base; learning rates and the like may change between restarts.
    """
    section = registry.of(cfg.learner).section(cfg.learner)
    keys, base = getattr(section, "state_keys", None), getattr(section, "base", None)
    return {"algorithm": cfg.learner.algorithm, "tasks": cfg.task_ids(),
            "state_keys": None if keys is None else list(keys), "base": base}


def check_identity(cfg: OnlineConfig, checkpoint: Path, resuming: bool) -> None:
    """Refuse (ValueError) a checkpoint of another config; a fresh one (or one from before identities) gets ours."""
    file, mine = checkpoint / IDENTITY_FILE, run_identity(cfg)
    if resuming and file.is_file():
        theirs = json.loads(file.read_text(encoding="utf-8"))
        tasks = theirs.get("tasks") or []
        if mine["tasks"][: len(tasks)] == tasks:  # tasks appended keep every stored step's task number
            theirs["tasks"] = mine["tasks"]
        diff = [f"{k}: {theirs.get(k)!r} there, {v!r} here" for k, v in mine.items() if theirs.get(k) != v]
        if diff:
            raise ValueError(f"{checkpoint}: holds a run of another config ({'; '.join(diff)}); restart with "
                             f"the run's own config or use a new run folder")
        if len(mine["tasks"]) == len(tasks):
            return
    checkpoint.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(mine), encoding="utf-8")
    os.replace(tmp, file)


def policy_buffers(folder: Path) -> frozenset[str]:
    """State-dict names of the buffers (normaliser statistics) of the policy published in ``folder``.

    Built from its ``policy.json`` on the meta device (nothing allocated); CheckpointError for a broken folder.
    """
    meta = read_metadata(folder)
    klass = get_policy_class(meta["type"])
    with torch.device("meta"):
        probe = klass(load_config(klass.config_cls, meta["config"]), PolicySpec.from_json(meta["spec"]))
    return frozenset(probe.state_dict()) - {name for name, _ in probe.named_parameters()}


def make_algorithm(cfg: OnlineConfig, checkpoint: Path) -> LearnerAlgorithm:
    """The learner side of the algorithm ``cfg.learner.algorithm`` names, resumed from ``checkpoint`` if it has one."""
    algorithm: LearnerAlgorithm = registry.of(cfg.learner).make_learner(cfg, checkpoint)
    return algorithm


class OnlineLearner:
    """One learner of one run folder; :meth:`run` loops until stopped."""

    def __init__(self, cfg: OnlineConfig, run: str | Path) -> None:
        self.cfg, self.run_dir = cfg, Path(run)
        torch.set_num_threads(cfg.learner.num_threads)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt = self.run_dir / "checkpoint"
        self.tcp: TcpTransitionServer | None = None
        """The TCP endpoint of actors on other machines while :meth:`run` serves with ``fleet.listen``."""
        self.commits = 0
        self.last_checkpoint: float | None = None
        self._local_actors: dict[int, dict[str, Any]] = {}
        self.gate: GatedPublisher | None = None
        """The deployment gate (``learner.gate.enabled``): new versions go out on trial."""
        """Per actor of this machine's socket (episode ids of actor i start at 1_000_000 * i): counters."""
        check_identity(cfg, self.ckpt, resuming=read_commit(self.ckpt) is not None)  # before anything is cut
        commit = self._restore_commit()
        self.algorithm = make_algorithm(cfg, self.ckpt)
        if commit is not None and commit.get("held"):
            self.algorithm.add(decode_transitions((self.ckpt / commit["held"]).read_bytes()))
        self.inbox = Inbox.restore(commit["inbox"] if commit else None)
        """Which batches of which TCP actor the learner holds (their marks are part of every checkpoint)."""
        if commit is None:
            self.checkpoint()  # a first, empty commit: a learner killed before its first checkpoint starts afresh
        self.resumed_from = self.algorithm.resumed_from
        self.algorithm.steps.balance_tasks = len(cfg.fleet.tasks) > 1
        self.publisher = WeightsPublisher(self.run_dir / "weights", keep=cfg.learner.keep_versions,
                                          marker=self.algorithm.marker)
        self.packer = WeightsPacker(self.run_dir / "weights", cfg.learner.push_dtype, self._exact_tensors)
        """Each version as a weights frame (floating tensors in ``learner.push_dtype``), read and hashed once for
        the TCP actors and Ray's object store."""
        self._buffers: frozenset[str] | None = None
        self._stop = False
        self._last_ckpt = time.monotonic()
        self._last_publish = self.updates
        self._losses: list[float] = []
        self._metrics: dict[str, list[float]] = {}
        """The algorithm's other metrics since the last publish (Q, temperature, entropy...), logged as means."""
        self._failure_logged = False
        if cfg.learner.gate.enabled:
            self.gate = self._make_gate()

    # ----------------------------------------------------------------------------- pieces
    @property
    def updates(self) -> int:
        """Gradient steps so far."""
        return self.algorithm.updates

    @property
    def steps(self) -> ReplayBuffer:
        """Every received step."""
        return self.algorithm.steps

    def add(self, transitions: list[Transition], local: bool = False) -> None:
        """Hand received steps to the algorithm (``local``: from this machine's socket, counted per actor)."""
        if not transitions:
            return
        self.algorithm.add(transitions)
        if self.gate is not None:
            for decision in self.gate.add(transitions):
                self._gate_verdict(decision)
        if local:
            now = time.time()
            for t in transitions:
                c = self._local_actors.setdefault(t.episode_id // 1_000_000, {"steps": 0, "interventions": 0})
                c["steps"] += 1
                c["interventions"] += int(t.is_intervention)
                c["version"], c["last_seen"] = t.policy_version, now

    def train_allowed(self) -> int:
        """Gradient steps allowed now (the algorithm decides: data, warm-up, update-to-data ratio)."""
        return self.algorithm.train_allowed()

    def train(self, n: int) -> None:
        """``n`` gradient steps."""
        metrics = self.algorithm.update(n)
        self._losses.append(metrics["loss"])
        for key, value in metrics.items():
            if key != "loss" and isinstance(value, (int, float)):
                self._metrics.setdefault(key, []).append(float(value))
        if self.algorithm.failure is not None:
            self._log_failure()

    def publish(self, start: bool = False) -> int:
        """Publish the current weights as the next version and log a line; returns the newest version.

        That is the last good one when the algorithm may not publish (during a warm-up, after a failure) or
        the deployment gate holds new versions back (one on trial, or the deployed one's gap not over yet);
        with the gate, it may be a kept version's weights on trial again instead (GatedPublisher.retry).
        ``start``: the run's first publication, its starting weights.
        """
        retried = None if self.gate is None or start else self.gate.retry()  # a kept version's turn on trial
        if retried is not None:
            assert self.gate is not None
            self._broadcast(retried)
            self._last_publish = self.updates
            self._log(retried, loss=None, retrial_of=self.gate.gate.identity[retried])
            return retried
        gated = self.gate is not None and not self.gate.may_publish(start)
        if gated or not self.algorithm.can_publish():
            self._last_publish = self.updates
            return self.publisher.version
        write = self.algorithm.publish if self.gate is None else self.gate.trial(self.algorithm.publish)
        version = self.publisher.publish(write)
        if self.gate is not None:
            self.gate.published(version)
        self._broadcast(version)
        self._last_publish = self.updates
        self._log(version, loss=float(np.mean(self._losses)) if self._losses else None,
                  metrics={k: float(np.mean(v)) for k, v in self._metrics.items()})
        self._losses, self._metrics = [], {}
        return version

    def _gate_verdict(self, decision: Decision) -> None:
        """Log a verdict of the gate; weights it published again go to the TCP actors too."""
        if decision.published:
            self._broadcast(decision.published)
        self._log(self.publisher.version, **decision.line())

    def _make_gate(self) -> GatedPublisher:
        """The deployment gate of this run; its tasks must have an observed success rule."""
        try:
            rules = [observed_success(task) for task in self.cfg.task_ids()]
        except ValueError as exc:
            raise ValueError(f"learner.gate: {exc}") from None

        def success(episode: Sequence[Transition]) -> bool:
            task = episode[0].task if episode else 0
            return task < len(rules) and episode_succeeded(rules[task], episode)

        return GatedPublisher(self.cfg.learner.gate, self.run_dir, self.publisher, self.algorithm, success)

    def _log(self, version: int, **fields: Any) -> None:
        """A line of ``learner_log.jsonl``: time, newest version, updates and steps so far, then ``fields``."""
        line = {"t": time.time(), "version": version, "updates": self.updates, "steps": self.steps.total_added,
                "human_steps": self.algorithm.human_steps, **fields}
        with (self.run_dir / "learner_log.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def _log_failure(self) -> None:
        if self._failure_logged:
            return
        self._failure_logged = True
        why = f"{self.algorithm.failure}; training and publishing stop, v{self.publisher.version} stays the newest"
        print(f"learner: {why}", file=sys.stderr, flush=True)
        self._log(self.publisher.version, loss=None, error=why)

    def _restore_commit(self) -> dict[str, Any] | None:
        """Cut the saved buffers back to what the last commit holds (parts saved after it do not count)."""
        commit = read_commit(self.ckpt)
        if commit is None:  # a fresh learner (or a checkpoint from before commit records: resumed as it is)
            return None
        self.commits = int(commit["number"])
        for name, rows in commit["buffers"].items():
            truncate_saved(self.ckpt / name, int(rows))
        return commit

    def checkpoint(self) -> None:
        """Everything a restart needs, sealed by a commit record; then the TCP actors hear what is safe.

        The algorithm saves its buffers before the state naming their counts; the commit (written last)
        names the rows, the held steps and the actors' batch marks that belong to this checkpoint.
        """
        self.algorithm.checkpoint()
        if self.gate is not None:
            self.gate.save()
        held = self.algorithm.held()
        self.commits = write_commit(self.ckpt, self.inbox, {"steps": self.steps.total_added,
                                                            "interventions": self.algorithm.interventions.total_added},
                                    encode_transitions(held) if held else None)
        marks = self.inbox.checkpoint_done()
        if self.tcp is not None:
            self.tcp.acknowledge(marks)
        self._last_ckpt = time.monotonic()
        self.last_checkpoint = time.time()

    def stop(self, *_: Any) -> None:
        """Finish the current cycle, checkpoint, publish, exit (signal handler)."""
        self._stop = True

    # ----------------------------------------------------------------------------- loop
    def run(self, max_seconds: float | None = None, handle_signals: bool = True) -> dict[str, Any]:
        """Serve until SIGTERM/SIGINT, :meth:`stop`, a STOP file or ``max_seconds``; returns the final counters.

        ``handle_signals=False`` when running on a thread (e.g. inside a ROS node that owns the signals).
        """
        lc, fleet = self.cfg.learner, self.cfg.fleet
        address = socket_address(self.run_dir)
        key = load_or_create_key(self.run_dir)
        if fleet.listen:  # first: a refused address (plaintext off loopback, a readable TLS key) opens nothing
            self.tcp = self._serve_tcp(key)
        if os.path.exists(address):
            os.unlink(address)  # a stale socket of a killed learner
        server = SocketTransitionServer(address, key)
        receivers: list[Any] = [server] + ([] if self.tcp is None else [self.tcp])
        status = FleetStatus(self.run_dir)
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self.stop)
        if self.publisher.version == 0 or self.resumed_from is not None:
            self.publish(start=True)  # actors start from (or return to) the learner's weights
        elif self.tcp is not None:
            self._broadcast(self.publisher.version)
        tcp = None if self.tcp is None else list(self.tcp.address)
        announce(self.run_dir, address, {"pid": os.getpid(), "host": this_host(), "tcp": tcp,
                                         "resumed_from": self.resumed_from})
        start = last_status = time.monotonic()
        try:
            while not self._stop and not (self.run_dir / "STOP").exists():
                if max_seconds is not None and time.monotonic() - start > max_seconds:
                    break
                n = self.train_allowed()
                behind = n > 0 and 0 < lc.max_update_lag < self.algorithm.updates_owed()
                for receiver in ([] if behind else receivers):  # behind: the actors wait on a full socket
                    self.add(receiver.receive(timeout=0.0 if n or receiver is not server else 0.05),
                             local=receiver is server)
                if n:
                    self.train(n)
                if self.updates - self._last_publish >= lc.publish_every:
                    self.publish()
                since = time.monotonic() - self._last_ckpt
                asked = self.tcp is not None and self.tcp.flush_requested and since > 1.0  # an actor is finishing
                if since >= lc.checkpoint_every_s or asked:
                    self.checkpoint()
                if time.monotonic() - last_status >= fleet.status_every_s:
                    status.update(self.status(), self.actor_status())
                    last_status = time.monotonic()
            for receiver in receivers:
                self.add(receiver.receive(timeout=0.2), local=receiver is server)  # what is still in flight
            if self.gate is not None:  # no untried version goes out last; one on trial is taken back
                decision = self.gate.finish()
                if decision is not None:
                    self._gate_verdict(decision)
            elif self.updates != self._last_publish:
                self.publish()
            self.checkpoint()  # acknowledged to the TCP actors still connected
            status.update(self.status(), self.actor_status())
        finally:
            server.close()
            if self.tcp is not None:
                self.tcp.close()
                self.tcp = None
            status.close()
        return {"updates": self.updates, "steps": self.steps.total_added,
                "human_steps": self.algorithm.human_steps, "version": self.publisher.version,
                "dropped": list(server.dropped), "failure": self.algorithm.failure, "lost": dict(self.inbox.lost),
                "duplicates": self.inbox.duplicates}

    # ----------------------------------------------------------------------------- fleet
    def _serve_tcp(self, key: bytes) -> TcpTransitionServer:
        """The TCP endpoint of ``fleet.listen`` (TLS with ``fleet.tls_cert``); actors get the run's config.

        Plaintext on a non-loopback address is refused (InsecureTransportError) unless ``fleet.allow_plaintext``,
        ``--insecure`` or ``ROBOT_RL_ALLOW_PLAINTEXT`` opts out; a TLS key readable by others is refused
        (InsecureFileError).
        """
        fleet = self.cfg.fleet
        host, port = parse_address(fleet.listen)
        tls = tls_server_context(fleet.tls_cert, fleet.tls_key) if fleet.tls_cert else None
        config = (self.run_dir / CONFIG_FILE).read_text(encoding="utf-8") if (self.run_dir / CONFIG_FILE).is_file() \
            else None
        return TcpTransitionServer(key, self.inbox, host, port, tls=tls,
                                   welcome={"config": config, "marker": self.algorithm.marker},
                                   allow_plaintext=True if fleet.allow_plaintext else None)  # None: the env var

    def _broadcast(self, version: int) -> None:
        """Offer version ``version`` (already on disk) to the TCP actors."""
        if self.tcp is not None and version > 0:
            header, payload = self.packer.frame(version)
            self.tcp.broadcast(version, header, payload)

    def _exact_tensors(self, folder: Path) -> frozenset[str]:
        """What a narrower push sends as it is: a published policy's buffers (found in the first version packed)."""
        if self._buffers is None:
            self._buffers = policy_buffers(folder) if self.algorithm.marker == META_FILE else frozenset()
        return self._buffers

    def status(self) -> dict[str, Any]:
        """The learner's counters for ``robot-rl online status`` (``task_steps``: stored steps per task)."""
        tasks = self.cfg.task_ids()
        column = self.steps.columns.get("task")
        counts = np.bincount(column[: len(self.steps)], minlength=len(tasks)) if column is not None \
            else np.zeros(len(tasks), int)
        return {"task_steps": {name: int(counts[i]) for i, name in enumerate(tasks)},
                "pid": os.getpid(), "host": this_host(), "updates": self.updates, "steps": self.steps.total_added,
                "human_steps": self.algorithm.human_steps, "version": self.publisher.version,
                "buffers": {"steps": len(self.steps), "interventions": len(self.algorithm.interventions)},
                "last_checkpoint": self.last_checkpoint, "commit": self.commits,
                "listen": None if self.tcp is None else "{}:{}".format(*self.tcp.address),
                "lost": dict(self.inbox.lost), "duplicates": self.inbox.duplicates,
                "refused": [] if self.tcp is None else self.tcp.refused[-10:], "failure": self.algorithm.failure,
                "deployed": None if self.gate is None else self.gate.deployed}

    def actor_status(self) -> list[dict[str, Any]]:
        """Every actor the learner has heard from: TCP links (connected now) and this machine's socket actors."""
        rows = [{"actor": f"local-{i}", "host": this_host(), "task": self.cfg.actor_task(i)[0], **c}
                for i, c in self._local_actors.items()]
        tasks = self.cfg.task_ids()
        remote = [] if self.tcp is None else self.tcp.status()
        return rows + [{**r, "task": tasks[r["task_index"]] if r["task_index"] < len(tasks) else "?"} for r in remote]
