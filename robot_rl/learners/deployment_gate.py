"""Deployment gate: a new version goes out on trial and stays only if it does not do worse than the deployed one.

Online fine-tuning changes the policy that acts on the robot while it learns, and a learner's newest weights
are not always its best: on ``ArmPickLift`` DSRL took a 100 % policy to 93 %, its own success swinging
between 20 % and 90 % (benchmarks/README.md), and HG-DAgger on a robot outside its randomised band lost what
the simulator stage had gained. The gate keeps the *deployed* version apart from the *newest*, as
conservative policy iteration (Kakade & Langford, 2002) and the best-checkpoint selection of real-robot
fine-tuning (PA-RL, arXiv:2412.06685; EXPO, arXiv:2507.07986) do, judged by the robot's own episodes:

* the deployed version (the incumbent) acts until it has ``trial_episodes`` clean episodes (every step of an
  episode acted by one version; a mixed one counts for nobody);
* then the learner publishes its newest weights as a candidate and publishes nothing else until the gate
  decides; the candidate acts for up to ``trial_episodes`` clean episodes;
* it is kept when the upper end of the Wilson interval of its own success (``confidence``) reaches the
  incumbent's success rate, i.e. when it is not worse than the deployed version by more than the noise of
  its own online estimate; it is refused as soon as no remaining outcome could make it so;
* a refused candidate is replaced by a copy of the incumbent's weights published as the next version
  (actors swap it in between chunks, as any version), and the learner goes on training.

An episode counts as a success of the policy only when the task succeeded *without* a human step: a
takeover is the human's judgement that the policy was failing (RLIF, arXiv:2311.12996). The incumbent's
rate pools every clean episode of its weights, its republished copies included, so it sharpens while it
acts. Success comes from the task's observed success rule (robot_rl.learners.task_success), the same one
the learner's credit uses.
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
    """One verdict on a candidate."""

    kept: bool
    """The candidate became the deployed version."""
    candidate: int
    """Its version."""
    successes: int
    """Its clean episodes that succeeded without a human step."""
    episodes: int
    """Its clean episodes."""
    incumbent: int
    """The deployed version it was judged against (its first publication; 0: the run's start, unpublished)."""
    incumbent_rate: float
    """The deployed version's success rate over its clean episodes then."""
    upper: float
    """The upper end of the candidate's interval (at the end of the trial, if it ran to the end)."""
    reason: str
    """Why, in words."""

    def line(self) -> dict[str, Any]:
        """A learner-log line."""
        return {"gate": "kept" if self.kept else "refused", **asdict(self)}


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
    decisions: list[Decision] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------ events
    def started(self, version: int) -> None:
        """``version`` is the run's starting weights (published before any candidate): deployed as it is."""
        self.identity[version] = version
        self.incumbent = version

    def republished(self, version: int, identity: int) -> None:
        """``version`` carries the weights of ``identity`` (a refused candidate's replacement)."""
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

    def may_publish(self) -> bool:
        """Whether a new candidate may go out now: none on trial and the deployed one measured."""
        return self.candidate is None and self.counts(self.incumbent)[1] >= self.config.trial_episodes

    def decide(self, finish: bool = False) -> Decision | None:
        """The verdict on the candidate once its trial allows one (``finish``: the run ends, decide now).

        Kept: its Wilson upper bound reaches the incumbent's rate after ``trial_episodes`` clean episodes.
        Refused: even successes in all its remaining trial episodes could not get it there, or the run ends
        before its trial does.
        """
        if self.candidate is None:
            return None
        cfg, z = self.config, self.config.z
        candidate = self.identity[self.candidate]
        k, n = self.counts(candidate)
        bar = self.rate(self.incumbent)
        best_case = wilson_interval(k + max(0, cfg.trial_episodes - n), max(n, cfg.trial_episodes), z)[1]
        if best_case < bar:
            reason = f"{k}/{n}: its best case ({best_case:.2f}) is below the deployed rate {bar:.2f}"
            return self._close(False, k, n, bar, best_case, reason)
        if n >= cfg.trial_episodes:
            upper = wilson_interval(k, n, z)[1]
            reason = f"{k}/{n}: upper bound {upper:.2f} reaches the deployed rate {bar:.2f}"
            return self._close(True, k, n, bar, upper, reason)
        if finish:
            return self._close(False, k, n, bar, best_case, f"{k}/{n}: the run ended before its trial did")
        return None

    def _close(self, kept: bool, k: int, n: int, bar: float, upper: float, reason: str) -> Decision:
        assert self.candidate is not None
        decision = Decision(kept, self.candidate, k, n, self.incumbent, bar, upper, reason)
        if kept:
            self.incumbent = self.identity[self.candidate]
        self.candidate = None
        self.decisions.append(decision)
        return decision

    # ------------------------------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """What a restarted learner needs (JSON)."""
        return {"incumbent": self.incumbent, "candidate": self.candidate,
                "identity": {str(k): v for k, v in self.identity.items()},
                "outcomes": {str(k): v for k, v in self.outcomes.items()}, "decisions": len(self.decisions)}

    @classmethod
    def restore(cls, config: GateConfig, state: dict[str, Any]) -> DeploymentGate:
        """The gate of :meth:`state` (decisions before it are in the learner log, not kept here)."""
        return cls(config, int(state["incumbent"]),
                   None if state["candidate"] is None else int(state["candidate"]),
                   {int(k): int(v) for k, v in state["identity"].items()},
                   {int(k): [int(v[0]), int(v[1])] for k, v in state["outcomes"].items()})



class GatedPublisher:
    """The learner's side of the gate: sees the episodes, holds new versions back, takes refused ones back.

    ``<run>/deployed/`` keeps a copy of the deployed weights (published versions are pruned); a refused
    candidate is followed by that copy published as the next version (its marker file's ``version`` restamped),
    or, while the run's unpublished start is deployed, by the algorithm's ``publish_start``. The gate's state
    is saved in ``<run>/checkpoint/gate.json`` with every checkpoint.
    """

    def __init__(self, config: GateConfig, run_dir: Path, publisher: WeightsPublisher, algorithm: Any,
                 episode_success: EpisodeSuccess) -> None:
        self.publisher, self.algorithm, self.success = publisher, algorithm, episode_success
        self.deployed_dir = run_dir / "deployed"
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
        """The learner published ``version``: the start (nothing deployed yet, or nothing to go back to) or a candidate."""
        first = self.gate.incumbent == 0 and len(self.gate.identity) == 1
        if first and (self.gate.counts(0)[1] == 0 or not hasattr(self.algorithm, "publish_start")):
            self.gate.started(version)
            self._keep(version)
        else:
            self.gate.published(version)

    def add(self, transitions: Sequence[Transition]) -> list[Decision]:
        """Count the episodes ``transitions`` finish; the verdicts they bring (a refused one is taken back)."""
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
            self._keep(decision.candidate)
        else:
            self._take_back()
        return decision

    def _keep(self, version: int) -> None:
        """Copy ``weights/v<version>`` to ``deployed/`` (beside it, then swapped in)."""
        source = self.publisher.folder / f"v{version}"
        tmp, old = self.deployed_dir.with_name(".deployed.tmp"), self.deployed_dir.with_name(".deployed.old")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        if self.deployed_dir.exists():
            os.replace(self.deployed_dir, old)
        os.replace(tmp, self.deployed_dir)
        shutil.rmtree(old, ignore_errors=True)

    def _take_back(self) -> None:
        """Publish the deployed weights again as the next version."""
        marker = self.publisher.marker

        def copy(folder: Path, version: int) -> None:
            for item in self.deployed_dir.iterdir():
                if item.name != marker:
                    shutil.copy2(item, folder / item.name)
            meta = json.loads((self.deployed_dir / marker).read_text(encoding="utf-8"))
            (folder / marker).write_text(json.dumps({**meta, "version": version}), encoding="utf-8")

        identity = self.gate.incumbent
        version = self.publisher.publish(self.algorithm.publish_start if identity == 0 else copy)
        self.gate.republished(version, identity)
