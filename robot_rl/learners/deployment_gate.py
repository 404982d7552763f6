"""Deployment gate: a new version acts on the robot only after a hands-off trial as good as the best one so far.

Online fine-tuning changes the policy that acts on the robot while it learns, and a learner's newest weights
are not always its best: on ``ArmPickLift`` DSRL took a 100 % policy to 93 %, and HG-DAgger on a robot
outside its randomised band took 80 % to 52 % (benchmarks/README.md). The gate keeps the *deployed* version
apart from the *newest*, as conservative policy iteration (Kakade & Langford, 2002) and the checkpoint
selection of real-robot fine-tuning (PA-RL, arXiv:2412.06685; EXPO, arXiv:2507.07986) do, judged by the
robot's own episodes:

* a version on *trial* is published with ``"gate": "trial"`` in its marker file; actors run its episodes
  *hands-off* (the simulated human stands by; on a real robot a person's takeover is still possible and
  counts as a failure), so its success is the policy's own, not the human's. Episodes with a human on a
  shared judgement would not do: a cautious human takes over in a third of the episodes of a 100 % policy;
* the run's starting weights go first: ``start_episodes`` clean episodes (every step acted by that
  version; a mixed one counts for nobody) measure them;
* a candidate is kept when, after ``trial_episodes`` clean episodes, the upper end of the Wilson interval of
  its success (``confidence``) reaches the *bar*: the success rate of the best version so far; it is not
  worse than the best by more than the noise of its own estimate. It is refused as soon as no remaining
  outcome could get it there;
* what is *deployed* is always the best kept version: the one with the highest lower Wilson bound over all
  its hands-off episodes, not the last one kept. Ten lucky episodes cannot tell 80 % from 100 % (measured: a
  chain of 10/10 candidates ended on a version that scored 80 % on 50 seeds), so every other trial slot
  tries a kept version *again* (``retry_until``): the one with the fewest episodes among those whose
  interval still reaches the best one's lower bound (the best itself included), so that the estimates that
  decide what is deployed keep sharpening, as LUCB's best-arm identification does (Kalyanakrishnan et
  al., 2012);
* after each verdict the deployed weights are published again without the mark (the human helps again)
  and act for ``gap_episodes`` episodes; then the next trial starts.

The learner goes on training throughout: only what is deployed is gated. Success comes from the task's
observed success rule (robot_rl.learners.task_success), the one the learner's credit uses.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from robot_rl.core.transition import Transition
from robot_rl.learners.open_episodes import OpenEpisodes
from robot_rl.runtime.weights import WeightsPublisher
from robot_rl.training.evaluate import wilson_interval

EpisodeSuccess = Callable[[Sequence[Transition]], bool]
"""A finished episode -> whether its task succeeded (at any step)."""
GATE_KEY = "gate"
"""Key of a published marker file: ``trial`` (actors run hands-off) or ``deployed``."""


@dataclass
class GateConfig:
    """``learner.gate``: whether new versions go out on trial (off by default)."""

    enabled: bool = False
    """Gate deployment (see robot_rl.learners.deployment_gate)."""
    trial_episodes: int = 10
    """Hands-off clean episodes of a trial (a candidate is refused earlier once it cannot pass)."""
    start_episodes: int = 30
    """Hands-off clean episodes of the run's start: its success is the first bar, so a lucky or unlucky short
    trial of the start does not set it."""
    retry_until: int = 50
    """A kept version is tried again (every other trial, ``trial_episodes`` at a time) until it has this many
    hands-off clean episodes or its interval falls below the best one's; 0: never tried again."""
    gap_episodes: int = 10
    """Episodes of the deployed version, with the human, between the end of a trial and the next one."""
    confidence: float = 0.95
    """Two-sided level of the Wilson interval on a candidate's success: it is kept when the interval's upper
    end reaches the best version's success rate. Higher: fewer good candidates refused, more bad ones kept."""

    def __post_init__(self) -> None:
        if self.trial_episodes < 1 or self.start_episodes < 1 or self.gap_episodes < 0 or self.retry_until < 0:
            raise ValueError(f"gate.trial_episodes and gate.start_episodes must be >= 1, gate.gap_episodes and "
                             f"gate.retry_until >= 0, got {self.trial_episodes}, {self.start_episodes}, "
                             f"{self.gap_episodes} and {self.retry_until}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"gate.confidence must be in (0, 1), got {self.confidence}")

    @cached_property
    def z(self) -> float:
        """The normal quantile of ``confidence`` (two-sided; computed once: every interval asks for it)."""
        from statistics import NormalDist

        return NormalDist().inv_cdf(0.5 + self.confidence / 2.0)


def on_trial(weights: Path, marker: str, version: int, gated: bool) -> bool:
    """Whether version ``version`` of ``weights`` acts hands-off (an actor asks at each episode's start).

    Version 0 (nothing published yet: an algorithm whose start is its frozen base) is the start's trial.
    """
    if not gated:
        return False
    if version == 0:
        return True
    try:
        meta = json.loads((weights / f"v{version}" / marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # pruned or being replaced: act as usual
        return False
    return isinstance(meta, dict) and meta.get(GATE_KEY) == "trial"


@dataclass
class Decision:
    """One verdict at the end of a trial."""

    kept: bool
    """The version on trial is kept: one of the versions the deployed one is chosen from (the best of them)."""
    candidate: int
    """The version on trial."""
    successes: int
    """Its hands-off clean episodes that succeeded without a human step."""
    episodes: int
    """Its hands-off clean episodes."""
    incumbent: int
    """The best version it was judged against (-1: none, the run's start)."""
    incumbent_rate: float
    """The bar: that version's success rate then."""
    upper: float
    """The upper end of the candidate's interval (its best case when refused early)."""
    reason: str
    """Why, in words."""
    back_to: int = 0
    """Identity whose weights are deployed now (published again without the trial mark)."""
    published: int = 0
    """The version that carries them (0: none published yet)."""
    retrial: bool = False
    """The trial tried a kept version again (its episodes pooled with its earlier ones; nothing refused)."""

    def line(self) -> dict[str, Any]:
        """A learner-log line."""
        return {GATE_KEY: "retried" if self.retrial else "kept" if self.kept else "refused", **asdict(self)}


@dataclass
class DeploymentGate:
    """The gate's state: which weights are deployed, which are on trial, and each one's trial outcomes.

    Versions are the publisher's numbers; a version republished from another one's weights has that one's
    *identity* (its first version), and outcomes are pooled by identity. Identity 0 is the run's start when
    the algorithm published nothing for it (e.g. DSRL: the base samples its own noise).
    """

    config: GateConfig
    incumbent: int = -1
    """Identity of the deployed weights, the best kept one (-1: none yet)."""
    candidate: int | None = None
    """Version on trial (None: none)."""
    identity: dict[int, int] = field(default_factory=dict)
    """Version -> identity of its weights."""
    trials: list[int] = field(default_factory=list)
    """Versions published on trial (their episodes run hands-off)."""
    outcomes: dict[int, list[int]] = field(default_factory=dict)
    """Identity -> [successes, hands-off clean episodes]."""
    deployed: list[int] = field(default_factory=list)
    """Identities kept (the deployed one is the best of them)."""
    since: int = 0
    """Finished episodes outside trials since the last verdict."""
    retrial: bool = False
    """The trial running (or the last one) tried a kept version again."""
    trial_from: int = 0
    """Hands-off clean episodes the version on trial had when its trial began."""

    # ------------------------------------------------------------------------------------------ events
    def published(self, version: int) -> None:
        """``version`` went out on trial (the first one: the run's start)."""
        self._on_trial(version, version)

    def retried(self, version: int, identity: int) -> None:
        """``version`` carries the weights of ``identity``, kept before, on trial again (see :meth:`to_retry`)."""
        self._on_trial(version, identity)

    def _on_trial(self, version: int, identity: int) -> None:
        if self.candidate is not None:
            raise RuntimeError(f"gate: v{version} published while v{self.candidate} is still on trial")
        self.identity[version] = identity
        self.trials.append(version)
        self.candidate, self.retrial, self.trial_from = version, identity != version, self.counts(identity)[1]

    def republished(self, version: int, identity: int) -> None:
        """``version`` carries the weights of ``identity``, deployed (not on trial)."""
        self.identity[version] = identity

    def observe(self, episode: Sequence[Transition], success: bool) -> None:
        """One finished episode and whether the task succeeded; a trial's clean episodes are its outcomes."""
        versions = {t.policy_version for t in episode}
        version = versions.pop() if len(versions) == 1 else None
        if version is None or version not in self.trials:
            self.since += 1
            return
        own = success and not any(t.is_intervention for t in episode)
        counts = self.outcomes.setdefault(self.identity[version], [0, 0])
        counts[0] += int(own)
        counts[1] += 1

    # ------------------------------------------------------------------------------------------ questions
    def counts(self, identity: int) -> tuple[int, int]:
        """(successes, hands-off clean episodes) of ``identity``."""
        k, n = self.outcomes.get(identity, (0, 0))
        return int(k), int(n)

    def rate(self, identity: int) -> float:
        """Success rate of ``identity`` over its trial episodes (0 before the first)."""
        k, n = self.counts(identity)
        return k / n if n else 0.0

    def interval(self, identity: int) -> tuple[float, float]:
        """The Wilson interval of the success of ``identity`` at the gate's confidence."""
        lo, hi = wilson_interval(*self.counts(identity), self.config.z)
        return float(lo), float(hi)

    def best(self) -> int:
        """Among the kept identities, the one with the highest lower Wilson bound (-1: none yet)."""
        if not self.deployed:
            return -1
        return max(self.deployed, key=lambda i: (self.interval(i)[0], self.rate(i)))

    def to_retry(self) -> int | None:
        """The kept identity the next trial tries again, or None (the learner's newest goes on trial).

        Every other trial at most: among the kept identities with fewer than ``retry_until`` episodes whose
        interval still reaches the best one's lower bound (the best itself included), the one with the fewest.
        """
        if self.retrial or len(self.trials) < 2:  # after a retrial or the start's trial: the newest goes first
            return None
        open_ = self.contending()
        return min(open_, key=lambda i: (self.counts(i)[1], -self.interval(i)[1])) if open_ else None

    def contending(self) -> list[int]:
        """Kept identities still to be tried again.

        Those with fewer than ``retry_until`` episodes and an interval that reaches the best one's lower bound.
        """
        if not self.deployed:
            return []
        floor = self.interval(self.best())[0]
        return [i for i in self.deployed
                if self.counts(i)[1] < self.config.retry_until and self.interval(i)[1] >= floor]

    def may_publish(self) -> bool:
        """Whether the next trial may start: none running, and the deployed version acted ``gap_episodes``."""
        return self.candidate is None and bool(self.deployed) and self.since >= self.config.gap_episodes

    def decide(self, finish: bool = False) -> Decision | None:
        """The verdict on the version on trial when one is due (``finish``: the run ends, decide now).

        The run's start is always kept (there is nothing to go back to). A candidate is kept when its Wilson
        upper bound reaches the best version's rate after ``trial_episodes`` clean episodes, refused once even
        successes in all its remaining trial episodes could not get it there, or when the run ends first. A
        version tried again adds ``trial_episodes`` to its record (fewer when the run ends).
        """
        if self.candidate is None:
            return None
        cfg, z = self.config, self.config.z
        identity = self.identity[self.candidate]
        k, n = self.counts(identity)
        if not self.deployed:
            if n >= cfg.start_episodes or finish:
                return self._close(True, k, n, -1, 0.0, 1.0, f"{k}/{n}: the run's start")
            return None
        best = self.best()
        bar = self.rate(best)
        if self.retrial:
            if n - self.trial_from >= cfg.trial_episodes or finish:
                lo, hi = self.interval(identity)
                return self._close(True, k, n, best, bar, hi, f"{k}/{n} in all: v{identity} tried again, its "
                                                              f"interval now {lo:.2f}-{hi:.2f}")
            return None
        best_case = wilson_interval(k + max(0, cfg.trial_episodes - n), max(n, cfg.trial_episodes), z)[1]
        if best_case < bar:
            reason = f"{k}/{n}: its best case ({best_case:.2f}) is below v{best}'s rate {bar:.2f}"
            return self._close(False, k, n, best, bar, best_case, reason)
        if n >= cfg.trial_episodes:
            upper = wilson_interval(k, n, z)[1]
            return self._close(True, k, n, best, bar, upper, f"{k}/{n}: upper bound {upper:.2f} reaches v{best}'s "
                                                             f"rate {bar:.2f}")
        if finish:
            return self._close(False, k, n, best, bar, best_case, f"{k}/{n}: the run ended before its trial did")
        return None

    def _close(self, kept: bool, k: int, n: int, best: int, bar: float, upper: float, reason: str) -> Decision:
        assert self.candidate is not None
        identity = self.identity[self.candidate]
        if kept and identity not in self.deployed:
            self.deployed.append(identity)
        self.incumbent = self.best()
        decision = Decision(kept, self.candidate, k, n, best, bar, upper, reason, self.incumbent,
                            retrial=self.retrial)
        self.candidate, self.since = None, 0
        return decision

    def keep_copies(self, most: int = 5) -> set[int]:
        """The identities whose weights a run should keep.

        The deployed one, the ``most`` best, and those still to be tried again.
        """
        ranked = sorted(self.deployed, key=lambda i: self.interval(i)[0], reverse=True)
        return {self.incumbent, *ranked[:most], *self.contending()}

    # ------------------------------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """What a restarted learner needs (JSON)."""
        return {"incumbent": self.incumbent, "candidate": self.candidate,
                "identity": {str(k): v for k, v in self.identity.items()}, "trials": self.trials,
                "outcomes": {str(k): v for k, v in self.outcomes.items()}, "deployed": self.deployed,
                "since": self.since, "retrial": self.retrial, "trial_from": self.trial_from}

    @classmethod
    def restore(cls, config: GateConfig, state: dict[str, Any]) -> DeploymentGate:
        """The gate of :meth:`state` (its verdicts are in the learner log, not here)."""
        return cls(config, int(state["incumbent"]), None if state["candidate"] is None else int(state["candidate"]),
                   {int(k): int(v) for k, v in state["identity"].items()}, [int(v) for v in state["trials"]],
                   {int(k): [int(v[0]), int(v[1])] for k, v in state["outcomes"].items()},
                   [int(i) for i in state["deployed"]], int(state["since"]), bool(state.get("retrial", False)),
                   int(state.get("trial_from", 0)))


class GatedPublisher:
    """The learner's side of the gate: marks trials, sees the episodes, publishes the deployed weights again.

    ``<run>/deployed/v<N>/`` keeps a copy of each deployed version that may be needed again (published versions
    are pruned); after every verdict the deployed identity's copy is published as the next version (its marker
    file's ``version`` restamped, ``"gate": "deployed"``), or, for an algorithm's unpublished start, its
    ``publish_start``. The state is saved in ``<run>/checkpoint/gate.json`` with every checkpoint.
    """

    def __init__(self, config: GateConfig, run_dir: Path, publisher: WeightsPublisher, algorithm: Any,
                 episode_success: EpisodeSuccess) -> None:
        self.publisher, self.algorithm, self.success = publisher, algorithm, episode_success
        self.copies = run_dir / "deployed"
        self.state_file = run_dir / "checkpoint" / "gate.json"
        state = json.loads(self.state_file.read_text(encoding="utf-8")) if self.state_file.is_file() else None
        self.gate = DeploymentGate(config) if state is None else DeploymentGate.restore(config, state)
        if state is None and hasattr(algorithm, "publish_start"):  # its actors start on the base: version 0
            self.gate.published(0)
        elif state is None and not algorithm.can_publish():
            raise ValueError(f"learner.gate: {type(algorithm).__name__} acts before its first version and cannot "
                             "publish that start again; the gate works with hg_dagger and dsrl")
        self.episodes = OpenEpisodes()

    def may_publish(self, start: bool) -> bool:
        """Whether the learner may publish its weights now (``start``: its starting weights, before any)."""
        if start and self.publisher.version == 0 and not self.gate.trials:
            return True
        return self.gate.may_publish()

    def retry(self) -> int | None:
        """Publish a kept version's weights on trial again when the next trial is its turn; returns that version.

        None: not its turn (DeploymentGate.to_retry) or no trial due; the learner's newest may go out if
        :meth:`may_publish`.
        """
        if not self.gate.may_publish():
            return None
        identity = self.gate.to_retry()
        return None if identity is None else self._publish_again(identity, trial=True)

    def trial(self, write: Callable[[Path, int], Any]) -> Callable[[Path, int], None]:
        """``write`` (an algorithm's publish), then the marker file stamped as a trial."""
        def stamped(folder: Path, version: int) -> None:
            write(folder, version)
            self._stamp(folder, version, "trial")

        return stamped

    def published(self, version: int) -> None:
        """The learner published ``version`` through :meth:`trial`."""
        self.gate.published(version)

    def add(self, transitions: Sequence[Transition]) -> list[Decision]:
        """Count the episodes ``transitions`` finish; the verdicts they bring (the deployed weights go out again)."""
        decisions = []
        for episode in self.episodes.add(transitions):
            self.gate.observe(episode, self.success(episode))
            decision = self.gate.decide()
            if decision is not None:
                decisions.append(self._apply(decision))
        return decisions

    def finish(self) -> Decision | None:
        """The run ends: a trial still running is decided now (the newest version is then the deployed one)."""
        decision = self.gate.decide(finish=True)
        return None if decision is None else self._apply(decision)

    def save(self) -> None:
        """The gate's state into the checkpoint (atomic)."""
        tmp = self.state_file.with_name(".gate.json.tmp")
        tmp.write_text(json.dumps(self.gate.state()), encoding="utf-8")
        os.replace(tmp, self.state_file)

    @property
    def deployed(self) -> int:
        """The version whose weights are deployed (its first publication; 0: an unpublished start; -1: none)."""
        return self.gate.incumbent

    def _apply(self, decision: Decision) -> Decision:
        if decision.kept and decision.candidate > 0:
            self._copy(decision.candidate)
        decision.published = self._publish_again(decision.back_to)
        keep = self.gate.keep_copies()
        for folder in self.copies.glob("v*"):
            if folder.name[1:].isdigit() and int(folder.name[1:]) not in keep:
                shutil.rmtree(folder, ignore_errors=True)
        return decision

    def _copy(self, version: int) -> None:
        """Copy ``weights/v<version>`` to ``deployed/v<version>`` (beside it, then renamed into place)."""
        target = self.copies / f"v{version}"
        if target.exists():
            return
        tmp = self.copies / f".v{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(self.publisher.folder / f"v{version}", tmp)
        os.replace(tmp, target)

    def _publish_again(self, identity: int, trial: bool = False) -> int:
        """Publish the weights of ``identity`` again as the next version, deployed or on trial; its number."""
        source = self.copies / f"v{identity}"

        def copy(folder: Path, version: int) -> None:
            if identity == 0:
                self.algorithm.publish_start(folder, version)
            else:
                for item in source.iterdir():
                    if item.name != self.publisher.marker:
                        shutil.copy2(item, folder / item.name)
                shutil.copy2(source / self.publisher.marker, folder / self.publisher.marker)
            self._stamp(folder, version, "trial" if trial else "deployed")

        version = self.publisher.publish(copy)
        if trial:
            self.gate.retried(version, identity)
        else:
            self.gate.republished(version, identity)
        return version

    def _stamp(self, folder: Path, version: int, state: str) -> None:
        """Set ``version`` and the gate state in the marker file of ``folder`` (not yet renamed into place)."""
        path = folder / self.publisher.marker
        meta = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**meta, "version": version, GATE_KEY: state}), encoding="utf-8")
