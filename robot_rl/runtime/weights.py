"""Versioned weights through a folder: a learner publishes ``v<N>/``, actors and policy runners follow it.

:class:`WeightsPublisher` writes ``v<N>/`` into a temp folder and renames it into place (atomic), so a reader
never sees half a checkpoint; :class:`WeightsWatcher` finds the newest complete one (the one holding the
algorithm's marker file) and :class:`WeightsFollower` loads it, refusing a broken one. Below the runtime
(the policy runner swaps weights in with it) and the learners (who publish); no torch import here.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from safetensors import SafetensorError

T = TypeVar("T")

VERSION_DIR = re.compile(r"^v(\d+)$")
"""Name of a published version's folder."""


def list_versions(folder: str | Path, marker: str = "policy.json") -> list[tuple[int, Path]]:
    """Complete ``v<N>/`` folders (those holding ``marker``), oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if (m := VERSION_DIR.match(p.name)) and (p / marker).is_file()]
    return sorted(found)


class WeightsPublisher:
    """Writes numbered weight folders ``v<N>/`` atomically and keeps the newest ``keep``."""

    def __init__(self, folder: str | Path, keep: int = 3, marker: str = "policy.json") -> None:
        if keep < 1:
            raise ValueError(f"keep: must be >= 1, got {keep}")
        self.folder, self.keep, self.marker = Path(folder), keep, marker
        self.folder.mkdir(parents=True, exist_ok=True)
        versions = list_versions(self.folder, marker)
        self.version = versions[-1][0] if versions else 0
        """Latest published version (a restarted learner continues the numbering)."""

    def publish(self, write: Callable[[Path, int], Any]) -> int:
        """Call ``write(tmp_folder, version)`` and move the result to ``v<version>/``; returns the version."""
        version = self.version + 1
        tmp = self.folder / f".v{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            write(tmp, version)
            if not (tmp / self.marker).is_file():
                raise FileNotFoundError(f"the writer left no {self.marker} in {tmp}")
            os.replace(tmp, self.folder / f"v{version}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.version = version
        for _, old in list_versions(self.folder, self.marker)[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return version

    def publish_policy(self, policy: Any) -> int:
        """Publish a :class:`robot_rl.policies.base.Policy` (its ``version`` is set to the new number)."""
        def write(tmp: Path, version: int) -> None:
            policy.version = version
            policy.save(tmp)
        return self.publish(write)


class WeightsWatcher:
    """Actor side: reports a newer complete ``v<N>/`` folder once."""

    def __init__(self, folder: str | Path, current: int = 0, marker: str = "policy.json") -> None:
        self.folder, self.current, self.marker = Path(folder), int(current), marker

    def poll(self) -> tuple[int, Path] | None:
        """(version, folder) of the newest version above the current one, or None."""
        versions = list_versions(self.folder, self.marker)
        if versions and versions[-1][0] > self.current:
            self.current = versions[-1][0]
            return versions[-1]
        return None


class WeightsFollower(Generic[T]):
    """Actor side: the newest published version, loaded by ``load``; one that fails to load is refused.

    A refused version (pruned while being read, half-copied, corrupt, made for another base) is kept in
    :attr:`refused` with the reason, and the caller keeps what it runs now.
    """

    LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError)
    """What a broken folder raises while loading (SpecError and CheckpointError are ValueErrors)."""

    def __init__(self, folder: str | Path, marker: str, load: Callable[[Path], T]) -> None:
        self.watcher = WeightsWatcher(folder, marker=marker)
        self.load = load
        self.refused: dict[int, str] = {}
        """Versions that could not be loaded, with the reason."""

    def poll(self) -> T | None:
        """The newly published version, loaded; None when there is none or it was refused."""
        found = self.watcher.poll()
        if found is None:
            return None
        version, folder = found
        try:
            return self.load(folder)
        except self.LOAD_ERRORS as exc:
            self.refused[version] = str(exc)
            return None
