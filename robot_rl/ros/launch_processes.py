"""Start, watch and stop the processes of a resolved launch description.

Each process gets its output prefixed with its name (``output: screen``) and always kept in a log
file; ``respawn`` restarts it; ``on_exit: shutdown`` stops the whole graph; stopping sends SIGINT
(rclpy's clean shutdown), then SIGTERM, then SIGKILL, each after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from robot_rl.ros.launch_yaml import LaunchDescription, ProcessSpec


class _Managed:
    def __init__(self, spec: ProcessSpec, log_dir: Path, echo: bool) -> None:
        self.spec = spec
        self.log_path = log_dir / f"{spec.name.replace('/', '_')}.log"
        self.echo = echo and spec.output == "screen"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._pumps: list[threading.Thread] = []
        self._log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()

    def start(self) -> None:
        env = dict(os.environ, **self.spec.env, PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
        self.proc = subprocess.Popen(self.spec.cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        pump = threading.Thread(target=self._pump, args=(self.proc,), daemon=True)
        pump.start()
        self._pumps.append(pump)

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            try:
                self._log.write(line)
                self._log.flush()
            except ValueError:  # closed by close() after its join timed out (a child kept the pipe open)
                return
            if self.echo:
                sys.stdout.write(f"[{self.spec.name}] {line.decode(errors='replace')}")
                sys.stdout.flush()

    def close(self) -> None:
        for pump in self._pumps:  # the pumps end at the process's EOF; wait so no line is lost
            pump.join(timeout=2.0)
        self._log.close()


class LaunchedGraph:
    """A running graph. Use :func:`launch` to get one; :meth:`shutdown` stops everything."""

    def __init__(self, description: LaunchDescription, log_dir: Path, echo: bool = True) -> None:
        self.description = description
        self.log_dir = log_dir
        self._procs = {spec.name: _Managed(spec, log_dir, echo) for spec in description.processes}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> LaunchedGraph:
        """Start every process, then watch them for respawn and on_exit: shutdown."""
        for managed in self._procs.values():
            managed.start()
        self._watcher.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            for managed in self._procs.values():
                proc = managed.proc
                if proc is None or proc.poll() is None:
                    continue
                if managed.spec.shutdown_on_exit:
                    self._stop.set()
                    threading.Thread(target=self.shutdown, daemon=True).start()
                    return
                if managed.spec.respawn and not self._stop.is_set():
                    time.sleep(managed.spec.respawn_delay)
                    managed.restarts += 1
                    managed.start()

    @property
    def names(self) -> list[str]:
        """Process names in start order."""
        return list(self._procs)

    def is_running(self, name: str) -> bool:
        """Whether the named process is alive now."""
        proc = self._procs[name].proc
        return proc is not None and proc.poll() is None

    def returncode(self, name: str) -> int | None:
        """Exit code of the named process, or None while it runs."""
        proc = self._procs[name].proc
        return None if proc is None else proc.poll()

    def log(self, name: str) -> str:
        """Everything the named process printed so far."""
        return self._procs[name].log_path.read_text(errors="replace")

    def wait_for_log(self, name: str, text: str, timeout: float = 10.0) -> bool:
        """Wait until the named process has printed ``text``; False after ``timeout``.

        A line reaches the log through a pipe and a pump thread, so it can trail what the process published
        just before it.
        """
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send a signal to one process (tests use this to simulate a crashed node)."""
        proc = self._procs[name].proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every process has exited (or the graph was shut down); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while any(self.is_running(n) for n in self._procs) and not self._stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def shutdown(self, grace: float = 5.0) -> dict[str, int | None]:
        """SIGINT, then SIGTERM, then SIGKILL; returns each process's exit code."""
        self._stop.set()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            alive = [n for n in self._procs if self.is_running(n)]
            if not alive:
                break
            for name in alive:
                self.kill(name, sig)
            deadline = time.monotonic() + grace
            while any(self.is_running(n) for n in alive) and time.monotonic() < deadline:
                time.sleep(0.05)
        codes = {}
        for name, managed in self._procs.items():
            if managed.proc is not None:
                with suppress(subprocess.TimeoutExpired):
                    managed.proc.wait(timeout=grace)
            codes[name] = self.returncode(name)
        for managed in self._procs.values():
            managed.close()
        return codes


@contextmanager
def launch(description: LaunchDescription, log_dir: str | Path | None = None,
           echo: bool = False) -> Iterator[LaunchedGraph]:
    """Run a graph for the duration of a ``with`` block (tests), always shutting it down."""
    folder = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="robot_rl_launch_"))
    folder.mkdir(parents=True, exist_ok=True)
    graph = LaunchedGraph(description, folder, echo=echo).start()
    try:
        yield graph
    finally:
        graph.shutdown()
