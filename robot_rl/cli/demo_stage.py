"""What a stage of ``robot-rl demo`` sees of the demo, and the one line it prints of an evaluation.

The stage modules beside ``robot_rl.cli.demo`` (``demo_real``: the robot that plays the real one; ``demo_rl``:
reinforcement learning on the fine-tuned policy) are functions of this protocol, so they need not import the
demo that lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from robot_rl.training.evaluate import EvalReport


class Demo(Protocol):
    """What the stages use of ``robot_rl.cli.demo.Demo``."""

    settings: Any
    out: Path
    results: Any

    @property
    def demos(self) -> Path:
        """The demonstrations' episode store."""

    def env_options(self) -> dict[str, Any]:
        """Keyword arguments of ``gymnasium.make`` for every env of the demo."""

    def fine_tuned(self) -> Path:
        """The newest policy of the nominal HG-DAgger stage."""

    def evaluate(self, name: str, policy_dir: Path | None = None, rl_run: Path | None = None,
                 env_id: str = ...) -> EvalReport:
        """An evaluation on the demo's unseen seeds, saved under ``eval_<name>``."""


def eval_line(report: EvalReport) -> str:
    """One line: successes, rate and its 95% interval."""
    lo, hi = report.interval()
    k, n = sum(report.successes), len(report.successes)
    return f"success {k}/{n} = {report.success_rate:.0%} (95% CI {lo:.0%}-{hi:.0%})"
