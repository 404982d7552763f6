"""Train a policy from a config file and a dataset in one call: what ``robot-rl train`` and the demo run.

:func:`robot_rl.training.loop.train` takes a ready :class:`TrainConfig`; this adds the steps around it
that every caller needs (load the YAML with ``key=value`` overrides, accept an episode store or a
LeRobot v3 folder), so the command line stays a thin layer of argument parsing and printing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from robot_rl.core.config import load_config
from robot_rl.training.loop import TrainConfig, TrainResult, train


@dataclass
class TrainRun:
    """A finished training call: the config it ran with and what it produced."""

    config: TrainConfig
    """The loaded config, overrides applied and the dataset resolved."""
    result: TrainResult
    """Steps, time, losses and the exported policy's folder."""

    def summary(self) -> str:
        """One line: policy type, steps, time, final loss and where the policy went."""
        r = self.result
        last = f"{r.losses[-1]:.4f}" if r.losses else "n/a"
        return (f"trained {self.config.policy_type} to step {r.steps} in {r.seconds:.0f} s (final loss {last}); "
                f"policy: {r.policy_path}")


def resolve_dataset(path: Path, out: Path) -> Path:
    """An episode store as is; a LeRobot v3 folder (meta/info.json) is imported once into <out>/dataset.zarr."""
    if (path / ".zgroup").is_file():
        return path
    if (path / "meta" / "info.json").is_file():
        dest = out / "dataset.zarr"
        if not (dest / ".zgroup").is_file():
            from robot_rl.data.lerobot_import import import_lerobot

            out.mkdir(parents=True, exist_ok=True)
            import_lerobot(path, dest, progress=False).close()
        return dest
    raise FileNotFoundError(f"{path}: neither an episode store (.zgroup) nor a LeRobot v3 dataset (meta/info.json)")


def train_policy(config: str | Path | TrainConfig, out: str | Path, dataset: str | Path | None = None,
                 overrides: Sequence[str] = (), resume: bool = False, progress: bool = True,
                 log: Callable[[int, dict[str, float]], None] | None = None) -> TrainRun:
    """Train on ``dataset`` (default: the config's) into the run folder ``out``.

    ``config`` is a YAML path or a config object; ``overrides`` are ``key=value`` strings applied to
    the YAML (as ``--set``). Raises ``ConfigError``, ``DatasetError``, ``CheckpointError`` or
    ``FileNotFoundError`` with a message meant for the user.
    """
    if isinstance(config, TrainConfig):
        if overrides:
            raise ValueError("overrides apply to a config file; change the TrainConfig object instead")
        cfg = replace(config)  # the dataset is resolved on a copy
    else:
        cfg = load_config(TrainConfig, config, list(overrides))
    source = dataset or cfg.dataset
    if source:
        cfg.dataset = str(resolve_dataset(Path(source), Path(out)))
    return TrainRun(cfg, train(cfg, out, resume=resume, progress=progress, log=log))
