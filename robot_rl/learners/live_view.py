"""A running online run (or fleet) in rerun: follow the files the learner and the actors write, as they grow.

Nothing here talks to the processes: the follower polls the run folder, so it works beside a run started by
anyone (``robot-rl online run``, the learner and actors by hand) and on a copy of a finished run. In a Ray
fleet the learner's files grow live but the driver writes the actor logs only when the actors are done.
What it reads (see robot_rl.learners.learner_process):

    learner_log.jsonl          learner/loss, learner/<metric> (critic and actor losses, Q, temperature...),
                               learner/{version,updates,steps,human_steps}; ``error`` and ``gate`` lines as
                               learner/events text
    actor_<i>.jsonl            actors/<i>/{success,intervention_rate,takeovers,version,episode_steps} per
                               episode, and fleet/success_rate (the last 10 episodes of all actors)
    fleet_status.json          status/learner/{updates_per_s,steps_per_s}, status/actors/<id>/{steps,steps_per_s,
                               lag,interventions} each time the learner rewrites it
    checkpoint/steps/          the received steps the learner checkpoints (every learner.checkpoint_every_s):
                               camera frames as actors/<i>/camera/<key>, when the observations hold images

Timelines: ``time`` (wall clock) on everything; ``episode`` (per actor) on the episode series,
``fleet_episode`` (all actors' episodes in the order read) on fleet/success_rate, ``updates`` on the
learner's, ``received_step`` (the row in the learner's step buffer) on camera frames, which carry the time
their checkpoint was written. A log that shrinks (a new run in the same folder) is read again from
its start.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.data.viewer import close_stream, rerun_module, spawn_viewer
from robot_rl.fleet.fleet_status import STATUS_FILE
from robot_rl.learners.buffers import MANIFEST

LEARNER_LOG = "learner_log.jsonl"
STEPS_BUFFER = Path("checkpoint") / "steps"
SUCCESS_WINDOW = 10
"""Episodes (of all actors) in fleet/success_rate."""
LEARNER_COUNTERS = ("version", "updates", "steps", "human_steps")
ACTOR_EPISODE_BASE = 1_000_000
"""Episode ids of actor ``i`` start at ``i * ACTOR_EPISODE_BASE`` (robot_rl.learners.actor_process)."""


@dataclass
class FollowCounts:
    """What a follower has logged so far."""

    learner_lines: int = 0
    episodes: dict[int, int] = field(default_factory=dict)
    """Actor index -> episodes logged."""
    statuses: int = 0
    frames: int = 0
    image_keys: list[str] = field(default_factory=list)
    """Observation keys holding camera frames in the learner's step buffer (empty: no frames on disk)."""


class JsonlTail:
    """The complete lines appended to a JSON-lines file since the last read (a torn last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        """New records; after the file shrank (rewritten), every record again."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self.offset = 0
            return []
        if size < self.offset:
            self.offset = 0
        if size == self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n") + 1
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line torn by a killed writer
                continue
        return records


class RunFollower:
    """Logs what a run folder gained since the last :meth:`poll` to the rerun recording ``rec``."""

    def __init__(self, run: str | Path, rec: Any, frames: bool = True, max_frames: int = 200) -> None:
        self.run = Path(run)
        self.rec = rec
        self.rr = rerun_module()
        self.frames = frames
        self.max_frames = max_frames
        """At most this many (the newest) camera frames per poll, so a follower that starts late catches up."""
        self.counts = FollowCounts()
        self._learner = JsonlTail(self.run / LEARNER_LOG)
        self._actors: dict[Path, JsonlTail] = {}
        self._recent: deque[float] = deque(maxlen=SUCCESS_WINDOW)
        self._status_time = 0.0
        self._rows_seen = 0
        self._formats: set[str] = set()  # camera entities whose image format was sent

    def poll(self) -> int:
        """Read and log everything new; returns the number of points (and frames) logged."""
        new = self._poll_learner() + self._poll_actors() + self._poll_status()
        if self.frames:
            new += self._poll_frames()
        return new

    # ------------------------------------------------------------------ sending
    def _send(self, entity: str, values: list[float], times: list[float], seq: tuple[str, list[int]]) -> None:
        rr = self.rr
        indexes = [rr.TimeColumn("time", timestamp=np.asarray(times, np.float64)),
                   rr.TimeColumn(seq[0], sequence=np.asarray(seq[1], np.int64))]
        self.rec.send_columns(entity, indexes=indexes, columns=rr.Scalars.columns(scalars=np.asarray(values, float)))

    def _poll_learner(self) -> int:
        lines = self._learner.read()
        if not lines:
            return 0
        series: dict[str, tuple[list[float], list[float], list[int]]] = {}
        for line in lines:
            t, updates = float(line.get("t", time.time())), int(line.get("updates", 0))
            fields = {k: line.get(k) for k in (*LEARNER_COUNTERS, "loss")}
            fields.update({k: v for k, v in (line.get("metrics") or {}).items() if k != "loss"})
            for key, value in fields.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                    s = series.setdefault(f"learner/{key}", ([], [], []))
                    s[0].append(float(value))
                    s[1].append(t)
                    s[2].append(updates)
            for key in ("error", "gate"):
                if line.get(key):
                    self.rec.set_time("time", timestamp=t)
                    self.rec.log("learner/events", self.rr.TextLog(f"{key}: {json.dumps(line[key])}",
                                                                   level="ERROR" if key == "error" else "INFO"))
        for entity, (values, times, updates_seq) in series.items():
            self._send(entity, values, times, ("updates", updates_seq))
        self.counts.learner_lines += len(lines)
        return sum(len(s[0]) for s in series.values())

    def _poll_actors(self) -> int:
        for path in sorted(self.run.glob("actor_*.jsonl")):
            self._actors.setdefault(path, JsonlTail(path))
        new = 0
        for tail in self._actors.values():
            records = tail.read()
            by_actor: dict[int, list[dict[str, Any]]] = {}
            for r in records:
                by_actor.setdefault(int(r.get("actor", 0)), []).append(r)
            for actor, rows in by_actor.items():
                times = [float(r["t"]) for r in rows]
                seq = ("episode", [int(r.get("episode", 0)) for r in rows])
                columns = {
                    "success": [float(bool(r.get("success"))) for r in rows],
                    "intervention_rate": [r.get("intervention_steps", 0) / max(1, r.get("steps", 0)) for r in rows],
                    "takeovers": [float(r.get("takeovers", 0)) for r in rows],
                    "version": [float(r.get("version_end", 0)) for r in rows],
                    "episode_steps": [float(r.get("steps", 0)) for r in rows],
                }
                for name, values in columns.items():
                    self._send(f"actors/{actor}/{name}", values, times, seq)
                rates = []
                for value in columns["success"]:
                    self._recent.append(value)
                    rates.append(float(np.mean(self._recent)))
                done = sum(self.counts.episodes.values())
                self._send("fleet/success_rate", rates, times, ("fleet_episode", list(range(done, done + len(rows)))))
                self.counts.episodes[actor] = self.counts.episodes.get(actor, 0) + len(rows)
                new += len(rows)
        return new

    def _poll_status(self) -> int:
        try:
            status = json.loads((self.run / STATUS_FILE).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):  # not written yet (it is replaced atomically)
            return 0
        t = float(status.get("time", 0.0))
        if t <= self._status_time:
            return 0
        self._status_time = t
        seq = ("status", [self.counts.statuses])
        points = 0
        learner = status.get("learner", {})
        for key in ("updates_per_s", "steps_per_s"):
            if isinstance(learner.get(key), (int, float)):
                self._send(f"status/learner/{key}", [float(learner[key])], [t], seq)
                points += 1
        for actor in status.get("actors", []):
            for key in ("steps", "steps_per_s", "lag", "interventions"):
                if isinstance(actor.get(key), (int, float)):
                    self._send(f"status/actors/{actor['actor']}/{key}", [float(actor[key])], [t], seq)
                    points += 1
        self.counts.statuses += 1
        return points

    def _poll_frames(self) -> int:
        folder = self.run / STEPS_BUFFER
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return 0
        total = int(manifest.get("total_added", 0))
        if total < self._rows_seen:  # a new run in this folder
            self._rows_seen = 0
        first_wanted = max(self._rows_seen, total - self.max_frames)
        logged = 0
        for begin, end in manifest.get("chunks", []):
            if end <= first_wanted:
                continue
            try:
                logged += self._log_chunk(folder / f"chunk_{int(begin):012d}.safetensors", int(begin),
                                          max(first_wanted - int(begin), 0))
            except FileNotFoundError:  # dropped from the ring since the manifest was read
                continue
        self._rows_seen = total
        return logged

    def _log_chunk(self, file: Path, begin: int, skip: int) -> int:
        from safetensors import safe_open

        with safe_open(str(file), framework="numpy") as f:
            keys = [k for k in f.keys()  # noqa: SIM118 - a safetensors handle is not a dict
                    if k.startswith("obs.") and f.get_slice(k).get_dtype() == "U8"
                    and len(f.get_slice(k).get_shape()) == 4]
            if not keys:
                return 0
            actors = f.get_tensor("episode_id")[skip:] // ACTOR_EPISODE_BASE
            images = {k[4:]: f.get_tensor(k)[skip:] for k in keys}
        self.counts.image_keys = sorted(set(self.counts.image_keys) | set(images))
        when = file.stat().st_mtime
        rows = begin + skip + np.arange(len(actors))
        rr = self.rr
        for actor in np.unique(actors):
            mine = actors == actor
            indexes = [rr.TimeColumn("time", timestamp=np.full(int(mine.sum()), when)),
                       rr.TimeColumn("received_step", sequence=rows[mine])]
            for key, frames in images.items():
                h, w, c = frames.shape[1:]
                entity = f"actors/{int(actor)}/camera/{key}"
                if entity not in self._formats:
                    self._formats.add(entity)
                    self.rec.log(entity, rr.Image.from_fields(format=rr.components.ImageFormat(
                        width=w, height=h, color_model={1: "L", 3: "RGB", 4: "RGBA"}[c], channel_datatype="U8")),
                        static=True)
                self.rec.send_columns(entity, indexes=indexes,
                                      columns=rr.Image.columns(buffer=frames[mine].reshape(int(mine.sum()), -1)))
        self.counts.frames += len(actors)
        return len(actors) * len(images)


def follow_run(run: str | Path, rrd: str | Path | None = None, spawn: bool = False, seconds: float | None = None,
               poll_s: float = 1.0, frames: bool = True, stop: threading.Event | None = None) -> FollowCounts:
    """Follow ``run`` into a rerun viewer (``spawn``) and/or the file ``rrd`` for ``seconds`` (None: until ``stop``).

    Returns what was logged; a KeyboardInterrupt ends the follow like ``stop`` does.
    """
    rr = rerun_module()
    if rrd is None and not spawn:
        raise ValueError("follow_run: nothing to do (give rrd and/or spawn=True)")
    run = Path(run)
    if not run.is_dir():
        raise FileNotFoundError(f"{run}: no such run folder")
    rec = rr.RecordingStream("robot_rl", recording_id=f"online-{run.resolve().name}-{int(time.time())}")
    sinks: list[Any] = []
    if spawn:
        spawn_viewer(rec)
        sinks.append(rr.GrpcSink())
    if rrd is not None:
        Path(rrd).parent.mkdir(parents=True, exist_ok=True)
        sinks.append(rr.FileSink(str(rrd)))
    rec.set_sinks(*sinks)
    rec.send_recording_name(f"online run {run.name}")
    follower = RunFollower(run, rec, frames=frames)
    stop = stop or threading.Event()
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while True:
            follower.poll()
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                break
            stop.wait(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        follower.poll()
        close_stream(rec)
    return follower.counts
