"""Deployment gate: new versions go out on trial, and what is deployed is never worse than the best one so far.

Online fine-tuning changes the policy that acts on the robot while it learns, and a learner's newest weights
are not always its best: on ``ArmPickLift`` DSRL took a 100 % policy to 93 %, its own success swinging
between 20 % and 90 % (benchmarks/README.md), and HG-DAgger on a robot outside its randomised band lost what
the simulator stage had gained. The gate keeps the *deployed* version apart from the *newest*, as
conservative policy iteration (Kakade & Langford, 2002) and the best-checkpoint selection of real-robot
fine-tuning (PA-RL, arXiv:2412.06685; EXPO, arXiv:2507.07986) do, judged by the robot's own episodes:

* every version has an online estimate: its own success over its *clean* episodes (every step acted by that
  version; a mixed one counts for nobody); the *best* version is the deployed-at-some-time one with the
  highest lower Wilson bound (so a lucky short run does not win), and the *bar* is its success rate;
* the deployed version acts until it has ``trial_episodes`` clean episodes; then the learner publishes its
  newest weights as a *candidate* and nothing else until the verdict;
* the candidate is kept (deployed) when, after ``trial_episodes`` clean episodes, the upper end of the
  Wilson interval of its success (``confidence``) reaches the bar: it is not worse than the best version by
  more than the noise of its own estimate; it is refused as soon as no remaining outcome could get it there,
  and the deployed weights are published again as the next version (actors swap them in between chunks);
* the deployed version stays under watch: once the upper end of its own interval falls below the bar (more
  episodes sharpen it), it is withdrawn and the best version's weights are published again.

An episode counts as a success of the policy only when the task succeeded *without* a human step: a
takeover is the human's judgement that the policy was failing (RLIF, arXiv:2311.12996). A version's rate
pools every clean episode of its weights, republished copies included. Success comes from the task's
observed success rule (robot_rl.learners.task_success), the one the learner's credit uses. The learner goes
on training throughout: only what is deployed is gated.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.core.transition import Transition
from robot_rl.learners.open_episodes import OpenEpisodes
from robot_rl.runtime.weights import WeightsPublisher
from robot_rl.training.evaluate import wilson_interval

EpisodeSuccess = Callable[[Sequence[Transition]], bool]
"""A finished episode -> whether its task succeeded (at any step)."""


@dataclass
class GateConfig:
    """``learner.gate``: whether new versions go out on trial (off by default)."""

    enabled: bool = False
    """Gate deployment (see robot_rl.learners.deployment_gate)."""
    trial_episodes: int = 10
    """Clean episodes a candidate runs before it is kept (fewer when it is refused early); also the clean
    episodes the deployed version needs before the next candidate goes out."""
    confidence: float = 0.95
    """Two-sided level of the Wilson interval on a candidate's success: it is kept when the interval's upper
    end reaches the deployed version's success rate. Higher: fewer good candidates refused, more bad ones
    kept for a while."""

    def __post_init__(self) -> None:
        if self.trial_episodes < 1:
            raise ValueError(f"gate.trial_episodes must be >= 1, got {self.trial_episodes}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"gate.confidence must be in (0, 1), got {self.confidence}")

    @property
    def z(self) -> float:
        """The normal quantile of ``confidence`` (two-sided)."""
        from scipy.stats import norm

        return float(norm.ppf(0.5 + self.confidence / 2.0))


@dataclass
class Decision:
    """One verdict: on a candidate at the end of its trial, or on the deployed version while it acts."""

    kept: bool
    """The version judged is (still) deployed."""
    candidate: int
    """The version judged (for a withdrawal: the identity of the deployed weights)."""
    successes: int
    """Its clean episodes that succeeded without a human step."""
    episodes: int
    """Its clean episodes."""
    incumbent: int
    """The best version it was judged against (its first publication; 0: the run's start, unpublished)."""
    incumbent_rate: float
    """The bar: that version's success rate over its clean episodes then."""
    upper: float
    """The upper end of the judged version's interval (a candidate's best case while its trial runs)."""
    reason: str
    """Why, in words."""
    back_to: int = -1
    """Identity whose weights are published again (-1: none, the candidate was kept)."""
    kind: str = "trial"
    """``trial`` (a candidate's verdict) or ``watch`` (the deployed version withdrawn)."""
    published: int = 0
    """The version that carries ``back_to``'s weights again (0: none published)."""

    def line(self) -> dict[str, Any]:
        """A learner-log line."""
        verdict = "kept" if self.kept else ("withdrawn" if self.kind == "watch" else "refused")
        return {"gate": verdict, **asdict(self)}


@dataclass
class DeploymentGate:
    """The gate's state: which weights are deployed, which are on trial, and each one's clean outcomes.

    Versions are the publisher's numbers; a version republished from another one's weights has that one's
    *identity* (its first version), and outcomes are pooled by identity. Identity 0 is the run's start when
    the algorithm published nothing for it (e.g. DSRL's warm-up: the base samples its own noise).
    """

    config: GateConfig
    incumbent: int = 0
    """Identity of the deployed weights."""
    candidate: int | None = None
    """Version on trial (None: none)."""
    identity: dict[int, int] = field(default_factory=lambda: {0: 0})
    """Version -> identity of its weights."""
    outcomes: dict[int, list[int]] = field(default_factory=dict)
    """Identity -> [successes, clean episodes]."""
    deployed: list[int] = field(default_factory=lambda: [0])
    """Identities that were deployed (the candidates for best)."""
    decisions: list[Decision] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------ events
    def started(self, version: int) -> None:
        """``version`` is the run's starting weights (published before any candidate): deployed as it is."""
        self.identity[version] = version
        self.incumbent = version
        self.deployed = [version]

    def republished(self, version: int, identity: int) -> None:
        """``version`` carries the weights of ``identity`` (a refused or withdrawn version's replacement)."""
        self.identity[version] = identity

    def published(self, version: int) -> None:
        """``version`` went out as a candidate."""
        if self.candidate is not None:
            raise RuntimeError(f"gate: v{version} published while v{self.candidate} is still on trial")
        self.identity[version] = version
        self.candidate = version

    def observe(self, episode: Sequence[Transition], success: bool) -> None:
        """One finished episode and whether the task succeeded; counted when one known version acted it all."""
        versions = {t.policy_version for t in episode}
        if len(versions) != 1:
            return
        identity = self.identity.get(versions.pop())
        if identity is None:  # a version from before a restart, or one the gate never saw
            return
        own = success and not any(t.is_intervention for t in episode)
        counts = self.outcomes.setdefault(identity, [0, 0])
        counts[0] += int(own)
        counts[1] += 1

    # ------------------------------------------------------------------------------------------ questions
    def counts(self, identity: int) -> tuple[int, int]:
        """(successes, clean episodes) of ``identity``."""
        k, n = self.outcomes.get(identity, (0, 0))
        return int(k), int(n)

    def rate(self, identity: int) -> float:
        """Success rate of ``identity`` over its clean episodes (NaN before the first)."""
        k, n = self.counts(identity)
        return k / n if n else math.nan

    def best(self) -> int:
        """The deployed-at-some-time identity with the highest lower Wilson bound (measured ones; else the deployed)."""
        measured = [i for i in self.deployed if self.counts(i)[1] >= self.config.trial_episodes]
        if not measured:
            return self.incumbent
        return max(measured, key=lambda i: (wilson_interval(*self.counts(i), self.config.z)[0], self.rate(i)))

    def may_publish(self) -> bool:
        """Whether a new candidate may go out now: none on trial and the deployed one measured."""
        return self.candidate is None and self.counts(self.incumbent)[1] >= self.config.trial_episodes

    def decide(self, finish: bool = False) -> Decision | None:
        """A verdict when one is due: on the candidate (``finish``: the run ends, decide now) or on the deployed one.

        Candidate kept: its Wilson upper bound reaches the best version's rate after ``trial_episodes`` clean
        episodes. Refused: even successes in all its remaining trial episodes could not get it there, or the
        run ends before its trial does. Deployed version withdrawn: its own upper bound fell below the bar.
        """
        cfg, z = self.config, self.config.z
        best = self.best()
        bar = self.rate(best)
        if self.candidate is None:
            k, n = self.counts(self.incumbent)
            if best == self.incumbent or n < cfg.trial_episodes or math.isnan(bar):
                return None
            upper = wilson_interval(k, n, z)[1]
            if upper >= bar:
                return None
            reason = f"{k}/{n}: upper bound {upper:.2f} fell below v{best}'s rate {bar:.2f}"
            decision = Decision(False, self.incumbent, k, n, best, bar, upper, reason, best, "watch")
            self.incumbent = best
            self.decisions.append(decision)
            return decision
        candidate = self.identity[self.candidate]
        k, n = self.counts(candidate)
        best_case = wilson_interval(k + max(0, cfg.trial_episodes - n), max(n, cfg.trial_episodes), z)[1]
        if best_case < bar:
            reason = f"{k}/{n}: its best case ({best_case:.2f}) is below v{best}'s rate {bar:.2f}"
            return self._close(False, k, n, best, bar, best_case, reason)
        if n >= cfg.trial_episodes:
            upper = wilson_interval(k, n, z)[1]
            reason = f"{k}/{n}: upper bound {upper:.2f} reaches v{best}'s rate {bar:.2f}"
            return self._close(True, k, n, best, bar, upper, reason)
        if finish:
            return self._close(False, k, n, best, bar, best_case, f"{k}/{n}: the run ended before its trial did")
        return None

    def _close(self, kept: bool, k: int, n: int, best: int, bar: float, upper: float, reason: str) -> Decision:
        assert self.candidate is not None
        identity = self.identity[self.candidate]
        if kept:
            self.incumbent = identity
            self.deployed.append(identity)
        decision = Decision(kept, self.candidate, k, n, best, bar, upper, reason, -1 if kept else self.incumbent)
        self.candidate = None
        self.decisions.append(decision)
        return decision

    def keep_copies(self, most: int = 5) -> set[int]:
        """The identities whose weights a run should keep: the deployed one and the ``most`` best measured."""
        ranked = sorted(self.deployed, key=lambda i: wilson_interval(*self.counts(i), self.config.z)[0], reverse=True)
        return {self.incumbent, self.best(), *ranked[:most]}

    # ------------------------------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """What a restarted learner needs (JSON)."""
        return {"incumbent": self.incumbent, "candidate": self.candidate,
                "identity": {str(k): v for k, v in self.identity.items()},
                "outcomes": {str(k): v for k, v in self.outcomes.items()}, "deployed": self.deployed,
                "decisions": len(self.decisions)}

    @classmethod
    def restore(cls, config: GateConfig, state: dict[str, Any]) -> DeploymentGate:
        """The gate of :meth:`state` (decisions before it are in the learner log, not kept here)."""
        return cls(config, int(state["incumbent"]),
                   None if state["candidate"] is None else int(state["candidate"]),
                   {int(k): int(v) for k, v in state["identity"].items()},
                   {int(k): [int(v[0]), int(v[1])] for k, v in state["outcomes"].items()},
                   [int(i) for i in state["deployed"]])


class GatedPublisher:
    """The learner's side of the gate: sees the episodes, holds new versions back, publishes kept weights again.

    ``<run>/deployed/v<N>/`` keeps a copy of each deployed version that may be needed again (published versions
    are pruned); a refused candidate or a withdrawn version is followed by the chosen copy published as the
    next version (its marker file's ``version`` restamped), or, for the run's unpublished start, by the
    algorithm's ``publish_start``. The gate's state is saved in ``<run>/checkpoint/gate.json`` with every
    checkpoint.
    """

    def __init__(self, config: GateConfig, run_dir: Path, publisher: WeightsPublisher, algorithm: Any,
                 episode_success: EpisodeSuccess) -> None:
        self.publisher, self.algorithm, self.success = publisher, algorithm, episode_success
        self.copies = run_dir / "deployed"
        self.state_file = run_dir / "checkpoint" / "gate.json"
        state = json.loads(self.state_file.read_text(encoding="utf-8")) if self.state_file.is_file() else None
        self.gate = DeploymentGate(config) if state is None else DeploymentGate.restore(config, state)
        self.episodes = OpenEpisodes()

    def may_publish(self, start: bool) -> bool:
        """Whether the learner may publish its weights now (``start``: the run's starting weights)."""
        if self.gate.incumbent == 0 and not hasattr(self.algorithm, "publish_start"):
            return True  # nothing to go back to: the first version becomes the deployed one
        return (start and self.publisher.version == 0) or self.gate.may_publish()

    def published(self, version: int) -> None:
        """The learner published ``version``: the start (nothing deployed, or nothing to go back to) or a candidate."""
        first = self.gate.incumbent == 0 and len(self.gate.identity) == 1
        if first and (self.gate.counts(0)[1] == 0 or not hasattr(self.algorithm, "publish_start")):
            self.gate.started(version)
            self._copy(version)
        else:
            self.gate.published(version)

    def add(self, transitions: Sequence[Transition]) -> list[Decision]:
        """Count the episodes ``transitions`` finish; the verdicts they bring (weights go back where one says so)."""
        decisions = []
        for episode in self.episodes.add(transitions):
            self.gate.observe(episode, self.success(episode))
            decision = self.gate.decide()
            if decision is not None:
                decisions.append(self._apply(decision))
        return decisions

    def finish(self) -> Decision | None:
        """The run ends: a candidate still on trial is refused (the newest version is then the deployed one)."""
        decision = self.gate.decide(finish=True)
        return None if decision is None else self._apply(decision)

    def save(self) -> None:
        """The gate's state into the checkpoint (atomic)."""
        tmp = self.state_file.with_name(".gate.json.tmp")
        tmp.write_text(json.dumps(self.gate.state()), encoding="utf-8")
        os.replace(tmp, self.state_file)

    @property
    def deployed(self) -> int:
        """The version whose weights are deployed (its first publication; 0: the run's unpublished start)."""
        return self.gate.incumbent

    def _apply(self, decision: Decision) -> Decision:
        if decision.kept:
            self._copy(decision.candidate)
        else:
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

    def _publish_again(self, identity: int) -> int:
        """Publish the weights of ``identity`` again as the next version; returns its number."""
        marker, source = self.publisher.marker, self.copies / f"v{identity}"

        def copy(folder: Path, version: int) -> None:
            for item in source.iterdir():
                if item.name != marker:
                    shutil.copy2(item, folder / item.name)
            meta = json.loads((source / marker).read_text(encoding="utf-8"))
            (folder / marker).write_text(json.dumps({**meta, "version": version}), encoding="utf-8")

        version = self.publisher.publish(self.algorithm.publish_start if identity == 0 else copy)
        self.gate.republished(version, identity)
        return version
