"""No pickle on a file or network path: an ``ast`` scan of the whole package for unpickling in any form.

Unpickling runs code chosen by whoever wrote the bytes, so a checkpoint, a dataset or a peer's message read
through pickle is remote code execution on the robot or the learner. The scan flags:

* imports of ``pickle``, ``_pickle``, ``cPickle``, ``cloudpickle``, ``dill``, ``joblib``, ``marshal``, ``shelve``;
* ``torch.load`` without ``weights_only=True``;
* ``numpy.load`` with ``allow_pickle`` set to anything but a literal ``False``;
* ``yaml.load`` / ``yaml.load_all`` without ``Loader=SafeLoader`` (or ``CSafeLoader``), and ``yaml.unsafe_load``,
  ``yaml.full_load`` and friends;
* ``pandas.read_pickle``;
* ``Connection.recv()`` of :mod:`multiprocessing` (a ``.recv()`` call without arguments: a socket's ``recv``
  needs a size), which unpickles what the other end sent;
* Ray (``import ray``): it moves arguments and results between machines with cloudpickle.

Names are resolved through the module's imports (``import torch as th; th.load(...)`` is ``torch.load``).
A legitimate use is listed in :data:`ALLOWED` with its reason, and an entry that no longer matches anything
fails the test too, so the list stays exact.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "robot_rl"

PICKLING_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "joblib", "marshal", "shelve"}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader"}
UNSAFE_YAML = {"unsafe_load", "unsafe_load_all", "full_load", "full_load_all"}

ALLOWED: dict[tuple[str, str], str] = {
    ("learners/ray_fleet.py", "ray"):
        "Ray's own serialization (cloudpickle) carries only the start arguments, the weights frames and the "
        "episode records between the Ray actors of one run on the user's own cluster; transitions go over the "
        "authenticated fleet TCP transport, and weights frames are checked (names, sizes, SHA-256) on arrival",
    ("sim/sharded.py", "multiprocessing recv()"):
        "an anonymous multiprocessing.Pipe to a simulator worker this process forked itself: no file, no "
        "socket anyone else can reach, both ends run the same code",
}
"""(file relative to robot_rl/, rule) -> why it is not a pickle on a file or network path."""


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_const(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def scan(source: str) -> list[tuple[int, str]]:
    """(line, rule) of every unpickling use in ``source``."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                root = a.name.split(".")[0]
                if root in PICKLING_MODULES:
                    found.append((node.lineno, f"import {root}"))
                if root == "ray":
                    found.append((node.lineno, "ray"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            if root in PICKLING_MODULES:
                found.append((node.lineno, f"import {root}"))
            if root == "ray":
                found.append((node.lineno, "ray"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is not None:
            head, _, rest = name.partition(".")
            name = aliases.get(head, head) + (f".{rest}" if rest else "")
        if name == "torch.load" and not _is_const(_keyword(node, "weights_only"), True):
            found.append((node.lineno, "torch.load without weights_only=True"))
        elif name == "numpy.load" and _keyword(node, "allow_pickle") is not None \
                and not _is_const(_keyword(node, "allow_pickle"), False):
            found.append((node.lineno, "numpy.load with allow_pickle"))
        elif name in ("yaml.load", "yaml.load_all"):
            loader = _keyword(node, "Loader") or (node.args[1] if len(node.args) > 1 else None)
            loader_name = (_dotted(loader) if loader is not None else None) or ""
            if loader_name.rpartition(".")[2] not in SAFE_YAML_LOADERS:
                found.append((node.lineno, "yaml.load without SafeLoader"))
        elif name is not None and name.startswith("yaml.") and name[5:] in UNSAFE_YAML:
            found.append((node.lineno, f"{name}"))
        elif name == "pandas.read_pickle":
            found.append((node.lineno, "pandas.read_pickle"))
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "recv" and not node.args \
                and not node.keywords:
            found.append((node.lineno, "multiprocessing recv()"))
    return found


def test_the_scanner_catches_every_unpickling_form_and_passes_the_safe_ones() -> None:
    unsafe = """
import pickle
import dill as d
from cloudpickle import loads
import marshal, shelve
import torch as th
import numpy as np
import yaml
from yaml import load
import ray
th.load("ckpt.pt")
th.load("ckpt.pt", weights_only=False)
np.load("x.npy", allow_pickle=True)
yaml.load(text)
load(text, Loader=yaml.Loader)
yaml.unsafe_load(text)
conn.recv()
"""
    rules = [rule for _, rule in scan(unsafe)]
    for rule in ("import pickle", "import dill", "import cloudpickle", "import marshal", "import shelve", "ray",
                 "numpy.load with allow_pickle", "yaml.unsafe_load", "multiprocessing recv()"):
        assert rule in rules, (rule, rules)
    assert rules.count("torch.load without weights_only=True") == 2
    assert rules.count("yaml.load without SafeLoader") == 2
    safe = """
import torch
import numpy
import yaml
torch.load("ckpt.pt", weights_only=True)
numpy.load("x.npy")
numpy.load("x.npy", allow_pickle=False)
yaml.load(text, Loader=yaml.SafeLoader)
yaml.safe_load(text)
sock.recv(4096)
"""
    assert scan(safe) == []


def test_the_package_never_unpickles_a_file_or_a_peers_bytes() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50  # the package itself, not an empty folder
    used: set[tuple[str, str]] = set()
    offending: list[str] = []
    for path in files:
        rel = path.relative_to(PACKAGE).as_posix()
        for line, rule in scan(path.read_text(encoding="utf-8")):
            if (rel, rule) in ALLOWED:
                used.add((rel, rule))
            else:
                offending.append(f"robot_rl/{rel}:{line}: {rule}")
    assert not offending, "unpickling on a file or network path:\n" + "\n".join(offending)
    assert used == set(ALLOWED), f"exceptions that match nothing any more: {set(ALLOWED) - used}"


# ---------------------------------------------------------------------------- plaintext TCP: config and --insecure
def _fleet_run(tmp: Path, *overrides: str) -> Path:
    """A run folder whose learner listens on every interface (not loopback) without TLS."""
    import socket

    from robot_rl.core.config import load_config, save_config
    from robot_rl.fleet.wire import CONFIG_FILE
    from robot_rl.learners.online_config import OnlineConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = load_config(OnlineConfig, None, [
        "actor.env_id=robot_rl/QuadHover-RealStandIn-v0", "actor.human_risk=action", "learner.algorithm=residual",
        "learner.residual.base=expert", "learner.residual.reward=env", "learner.residual.sac.hidden=32",
        "learner.residual.sac.num_critics=2", "learner.device=cpu", f"fleet.listen=0.0.0.0:{port}", *overrides])
    run = tmp / "run"
    run.mkdir(parents=True)
    save_config(cfg, run / CONFIG_FILE)
    (run / "STOP").touch()  # a learner that serves stops at once
    return run


def test_a_learner_off_loopback_without_tls_is_refused_unless_the_config_or_insecure_allows_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import signal

    from robot_rl.core.config import load_config
    from robot_rl.fleet.security import PLAINTEXT_ENV
    from robot_rl.learners.online_config import OnlineConfig
    from robot_rl.learners.roles import main

    monkeypatch.delenv(PLAINTEXT_ENV, raising=False)
    assert load_config(OnlineConfig, None, []).fleet.allow_plaintext is False  # refused by default
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}  # the learner sets its own
    try:
        refused_run = _fleet_run(tmp_path / "refused")
        assert main(["learner", "--run", str(refused_run)]) == 2
        assert "must be TLS" in capsys.readouterr().err and not (refused_run / "learner.json").exists()  # no serving
        cfg_run = _fleet_run(tmp_path / "cfg", "fleet.allow_plaintext=true")
        for how, argv in (("--insecure", ["learner", "--run", str(refused_run), "--insecure"]),
                          ("fleet.allow_plaintext", ["learner", "--run", str(cfg_run)])):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="robot_rl.fleet.security"):
                assert main(argv) == 0, (how, capsys.readouterr())
            assert "INSECURE" in caplog.text and "unencrypted" in caplog.text, how
            assert (Path(argv[2]) / "learner.json").exists(), how  # it served
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_a_remote_actor_to_a_non_loopback_learner_without_tls_needs_insecure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import os

    import robot_rl.learners.actor_process as actor_process
    from robot_rl.fleet.security import PLAINTEXT_ENV
    from robot_rl.learners.roles import main

    monkeypatch.delenv(PLAINTEXT_ENV, raising=False)
    secret = tmp_path / "learner.key"
    secret.write_text((b"k" * 32).hex(), encoding="ascii")
    os.chmod(secret, 0o600)
    joined: list[object] = []

    def run_remote_actor(remote: Any, *_: Any, **__: Any) -> list[dict[str, Any]]:
        joined.append(remote.client.allow_plaintext)  # no learner to join: how the actor would connect is enough
        return []

    monkeypatch.setattr(actor_process, "run_remote_actor", run_remote_actor)
    actor = ["actor", "--connect", "192.0.2.7:7450", "--secret-file", str(secret), "--workdir", str(tmp_path / "w")]
    assert main(actor) == 2
    assert "must be TLS" in capsys.readouterr().err and not joined
    with caplog.at_level(logging.WARNING, logger="robot_rl.fleet.security"):
        assert main([*actor, "--insecure"]) == 0
    assert joined == [True]
    assert "INSECURE" in caplog.text and "192.0.2.7" in caplog.text
