"""The Ray fleet's own logic without a Ray cluster (fast tier): weights through the object store, the learner's
address asked without blocking, and the checks made before a cluster is touched.

``ray.put`` / ``ray.get`` / ``ray.wait`` are replaced by an in-memory object store, so the code paths the actors
take run in this process; the runs on a real local cluster are tests/test_fleet_ray.py's (slow, ``ray``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="the Ray fleet needs ray (the 'fleet' extra)")
from robot_rl.core.config import load_config  # noqa: E402
from robot_rl.fleet.security import PLAINTEXT_ENV, InsecureTransportError  # noqa: E402
from robot_rl.fleet.wire import WeightsPacker  # noqa: E402
from robot_rl.learners.online_config import OnlineConfig  # noqa: E402
from robot_rl.learners.ray_fleet import ActorWorker, LearnerAddress, LearnerWorker, run_on_ray  # noqa: E402


class ObjectStore:
    """Stands in for Ray's: ``put`` keeps an object under a reference, ``get`` resolves references."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.objects: dict[int, Any] = {}
        self.ready: set[int] = set()
        monkeypatch.setattr(ray, "put", self.put)
        monkeypatch.setattr(ray, "get", self.get)
        monkeypatch.setattr(ray, "wait", self.wait)

    def put(self, value: Any) -> int:
        ref = len(self.objects) + 1
        self.objects[ref] = value
        self.ready.add(ref)
        return ref

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        value = self.objects[ref]
        return value() if callable(value) else value  # a pending remote call runs when its result is asked for

    def wait(self, refs: list[int], timeout: float = 0) -> tuple[list[int], list[int]]:
        return [r for r in refs if r in self.ready], [r for r in refs if r not in self.ready]


def published(folder: Path, version: int, content: bytes) -> None:
    (folder / f"v{version}").mkdir(parents=True)
    (folder / f"v{version}" / "model.safetensors").write_bytes(content)
    (folder / f"v{version}" / "policy.json").write_text(f'{{"v": {version}}}')


def learner_worker(weights: Path, version: list[int]) -> LearnerWorker:
    """A LearnerWorker around a stand-in learner whose published version the test sets."""
    worker = LearnerWorker.__new__(LearnerWorker)  # no OnlineLearner, no serving thread
    publisher = type("P", (), {"version": property(lambda self: version[0])})()
    worker.learner = type("L", (), {"publisher": publisher, "packer": WeightsPacker(weights)})()
    worker._weights_ref = None
    return worker


def test_each_version_goes_into_the_object_store_once_and_actors_write_it_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ObjectStore(monkeypatch)
    weights, version = tmp_path / "learner" / "weights", [0]
    worker = learner_worker(weights, version)
    assert worker.weights_since(0) == []  # nothing published yet
    published(weights, 1, b"\x01" * 1000)
    version[0] = 1
    first = worker.weights_since(0)
    assert first == worker.weights_since(0) and len(store.objects) == 1  # every actor shares one copy
    assert worker.weights_since(1) == []  # the actor has it already
    version[0] = 2  # announced, but its folder was pruned meanwhile: the next call finds the newer one
    assert worker.weights_since(1) == []

    published(weights, 3, b"\x03" * 2000)
    version[0] = 3
    handle = type("H", (), {})()
    handle.weights_since = type("R", (), {"remote": staticmethod(
        lambda have: store.put(lambda: worker.weights_since(have)))})()
    actor = ActorWorker()
    folder = tmp_path / "actor" / "weights"
    follow = threading.Thread(target=actor._follow, args=(handle, folder, 0.01))
    follow.start()
    try:
        for _ in range(500):
            if (folder / "v3" / "policy.json").is_file():
                break
            time.sleep(0.01)
    finally:
        actor._done.set()
        follow.join(timeout=5)
    assert (folder / "v3" / "model.safetensors").read_bytes() == b"\x03" * 2000
    assert (folder / "v3" / "policy.json").read_text() == '{"v": 3}'
    actor.stop()
    assert actor.stop_event.is_set()  # the actor ends after its current episode


def test_learner_address_is_asked_once_and_never_blocks_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    store = ObjectStore(monkeypatch)
    asked: list[int] = []

    def remote() -> int:
        asked.append(1)
        ref = len(store.objects) + 1
        store.objects[ref] = ("10.0.0.5", 7450)  # not ready until the test says so
        return ref

    learner = type("L", (), {"address": type("R", (), {"remote": staticmethod(remote)})()})()
    where = LearnerAddress(learner)
    with pytest.raises(TimeoutError, match="not known yet"):
        where()
    with pytest.raises(TimeoutError):
        where()
    assert len(asked) == 1  # the question is pending: not asked again
    store.ready.add(1)
    assert where() == ("10.0.0.5", 7450)
    with pytest.raises(TimeoutError):
        where()  # a later reconnection asks again (the learner may have moved)
    assert len(asked) == 2


def test_a_cluster_learner_without_tls_is_refused_before_ray_starts(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PLAINTEXT_ENV, raising=False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init must not be reached"))
    cfg = load_config(OnlineConfig, None, ["fleet.listen=0.0.0.0:0"])
    with pytest.raises(InsecureTransportError, match="Ray fleet learner"):
        run_on_ray(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "online.yaml").exists()  # nothing of the run was written
