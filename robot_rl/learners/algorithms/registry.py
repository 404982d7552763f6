"""Online algorithms as plug-ins: each one module that registers an :class:`OnlineAlgorithm` under its name.

``learner.algorithm`` names an entry; every place that used to compare the name (the learner, the actors,
evaluation, the graph actor and policy node, the CLI, the alignment fine-tuning) asks the entry instead.
The built-in algorithms (:data:`BUILTIN`) register when their module is imported; an algorithm defined
anywhere else (another package, a test file) registers the same way::

    register(OnlineAlgorithm(name="toy", make_learner=..., make_agent=..., evaluation_agent=...,
                             marker="toy.json", module=__name__))

Processes find it by the module: the entry records where it was defined (``module``, and the file of a
module that is not a package's), :class:`~robot_rl.learners.online_config.LearnerConfig` writes that into
``learner.algorithm_module`` of the run's config, and :func:`get` imports it in the learner and actor
processes (and Ray actors) before looking the name up. This module imports nothing of robot_rl's above
the core: the entries' callables take the run's ``OnlineConfig`` (typed here as :class:`RunSettings`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

BUILTIN = ("robot_rl.learners.algorithms.hg_dagger", "robot_rl.learners.algorithms.residual",
           "robot_rl.learners.algorithms.rlpd", "robot_rl.learners.algorithms.dsrl_online")
"""Modules of the algorithms that ship with robot_rl (imported on the first lookup)."""


class RunSettings(Protocol):
    """What the entries' callables read of an online run's config (an ``OnlineConfig``)."""

    policy: str
    learner: Any
    actor: Any


StreamCheck = Callable[[Any, str, Sequence[str], str], list[str]]
"""(run config, control mode, observation keys, node's policy) -> warnings; ValueError: cannot stream."""


@dataclass(frozen=True)
class OnlineAlgorithm:
    """One online algorithm: what the learner, the actors, evaluation and a ROS graph need of it."""

    name: str
    """What ``learner.algorithm`` says."""
    make_learner: Callable[[Any, Path], Any]
    """(run config, checkpoint folder) -> the learner side (the learner loop's ``LearnerAlgorithm``), resumed
    from the folder when it holds a checkpoint."""
    make_agent: Callable[[Any, Any, Path], tuple[Any, Any, Any]]
    """(run config, env, run folder) -> (env wrapped in the reward it stores, agent, base agent or None) of an
    actor process; the agent follows ``<run>/weights``."""
    evaluation_agent: Callable[[Any, Path, Any], Any]
    """(run config, published ``v<N>`` folder, env) -> what acts for that version without a human, at its mean."""
    marker: str
    """File that marks a complete published ``weights/v<N>/`` folder (written last)."""
    config: type | None = None
    """Dataclass of its settings, ``learner.<name>`` (a built-in's field of LearnerConfig, a plug-in's entry of
    ``learner.sections``); None: it has none."""
    streams: bool = False
    """Whether a ROS graph can act in its runs (the policy node as its actor)."""
    graph_agent: Callable[..., Any] | None = None
    """With ``streams``: (run config, weights folder, on_swap, on_error) -> an object with ``act(obs, action)``
    (the executed action on top of the node's policy action) and ``version``, swapped between steps; None:
    the node's policy runner itself swaps in the published policies."""
    check_graph: StreamCheck | None = None
    """With ``streams``: extra checks of a graph actor (see :data:`StreamCheck`)."""
    needs_policy: Callable[[Any], bool] = lambda cfg: True
    """Whether a run needs ``policy`` (a checkpoint to start from, or a frozen base)."""
    frozen_start: Callable[[Any, Any], Any] | None = None
    """(run config, env) -> what acts before any online update (its base); None: the run's ``policy``."""
    module: str = ""
    """Importable module that registers this entry (filled in by :func:`register` from ``make_learner``)."""

    def section(self, learner: Any) -> Any:
        """Its settings in a ``LearnerConfig``: ``learner.<name>``, or a plug-in's ``learner.sections[name]``."""
        if self.config is None:
            return None
        value = getattr(learner, self.name, None)
        if isinstance(value, self.config):
            return value
        from robot_rl.core.config import load_config

        return load_config(self.config, dict(getattr(learner, "sections", {}).get(self.name) or {}))

    @property
    def source(self) -> str:
        """Where another process imports it from: the module name, or ``name@file`` outside a package.

        A module outside a package (e.g. a test file) is importable only with its folder on ``sys.path``.
        """
        mod = sys.modules.get(self.module)
        file = getattr(mod, "__file__", None)
        if self.module in BUILTIN or file is None or "." in self.module:
            return self.module
        return f"{self.module}@{Path(file).resolve()}"


_REGISTRY: dict[str, OnlineAlgorithm] = {}


def register(entry: OnlineAlgorithm) -> OnlineAlgorithm:
    """Add ``entry`` (re-registering a name replaces it, so a re-imported module is harmless); returns it."""
    if not entry.name or not entry.name.isidentifier():
        raise ValueError(f"algorithm name {entry.name!r}: must be an identifier (it names a config section)")
    if not entry.module:
        object.__setattr__(entry, "module", getattr(entry.make_learner, "__module__", ""))
    _REGISTRY[entry.name] = entry
    return entry


def load_module(source: str) -> None:
    """Import what :attr:`OnlineAlgorithm.source` names (``module`` or ``module@file``)."""
    name, _, file = source.partition("@")
    if name in sys.modules:
        return
    try:
        importlib.import_module(name)
        return
    except ImportError:
        if not file:
            raise
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"algorithm module {source!r}: cannot load {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def _load_builtin() -> None:
    for name in BUILTIN:
        if name not in sys.modules:
            importlib.import_module(name)


def names() -> tuple[str, ...]:
    """Every registered algorithm (the built-in ones first)."""
    _load_builtin()
    order = {module: i for i, module in enumerate(BUILTIN)}
    return tuple(sorted(_REGISTRY, key=lambda n: order.get(_REGISTRY[n].module, len(order))))


def get(name: str, module: str = "") -> OnlineAlgorithm:
    """The algorithm ``name``; ``module`` (a ``learner.algorithm_module``) is imported first when it is not known.

    ValueError for a name nobody registered.
    """
    _load_builtin()
    if name not in _REGISTRY and module:
        load_module(module)
    if name not in _REGISTRY:
        raise ValueError(f"algorithm: must be one of {names()}, got {name!r}"
                         + (f" (after importing {module})" if module else ""))
    return _REGISTRY[name]


def of(learner: Any) -> OnlineAlgorithm:
    """The algorithm a ``LearnerConfig`` names (its ``algorithm_module`` imported when needed)."""
    return get(learner.algorithm, getattr(learner, "algorithm_module", ""))
