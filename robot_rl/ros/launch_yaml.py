"""Run ROS 2 YAML launch files with real processes, for installs without ``ros2 launch``.

``ros2 launch`` cannot be installed from PyPI, so pip-only users and CI bring up the very same graph
with ``robot-rl launch <file>.launch.yaml``. This module reads the subset of the ROS 2 YAML launch
format that robot_rl's launch files use and that ``ros2 launch`` reads identically:

* entities: ``arg``, ``let``, ``set_env``, ``node``, ``executable``, ``include``, ``group``
  (``scoped``, ``children``) and ``push_ros_namespace``;
* attributes ``if`` / ``unless`` on every entity;
* node fields ``pkg``, ``exec``, ``name``, ``namespace``, ``param`` (``from`` a file, or
  ``name``/``value``), ``remap``, ``ros_args``, ``args``, ``output``; executable fields ``cmd``, ``name``,
  ``output``; on both ``respawn``, ``respawn_delay`` and ``on_exit: shutdown``;
* substitutions ``$(var x)``, ``$(env X [default])``, ``$(optenv X [default])``,
  ``$(find-pkg-share pkg)``, ``$(dirname)``, nested innermost first.

Anything else is an error naming the entity, never silently ignored. Nothing is evaluated as code.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from robot_rl.paths import PACKAGE, package_share_dir


class LaunchError(ValueError):
    """A launch file uses something this runner does not support, or is malformed."""


@dataclass
class ProcessSpec:
    """One process of the graph, fully resolved."""

    name: str
    """Unique name (node name, or executable name)."""
    cmd: list[str]
    """Command line."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment additions (from ``set_env``)."""
    output: str = "screen"
    """``screen`` (prefixed lines on stdout) or ``log`` (file only)."""
    respawn: bool = False
    """Restart the process when it exits."""
    respawn_delay: float = 1.0
    """Seconds to wait before a respawn."""
    shutdown_on_exit: bool = False
    """The whole graph stops when this process exits (``on_exit: shutdown``)."""


@dataclass
class LaunchDescription:
    """A resolved launch file: declared arguments and the processes to start."""

    arguments: dict[str, str]
    """Final values of every declared ``arg``."""
    processes: list[ProcessSpec]
    """Processes in start order."""


_SUBST = re.compile(r"\$\(([^()$]*)\)")
_NODE_KEYS = {"pkg", "exec", "name", "namespace", "param", "remap", "ros_args", "args", "output", "respawn",
              "respawn_delay", "on_exit", "if", "unless"}


@dataclass
class _Context:
    variables: dict[str, str]
    env: dict[str, str]
    namespace: str
    file: Path


def _substitute(text: Any, ctx: _Context) -> str:
    value = str(text)
    for _ in range(32):
        match = _SUBST.search(value)
        if match is None:
            return value
        kind, *rest = match.group(1).split(None, 1)
        arg = rest[0].strip() if rest else ""
        value = value[: match.start()] + _resolve(kind, arg, ctx) + value[match.end():]
    raise LaunchError(f"{ctx.file}: substitutions nested too deeply in {text!r}")


def _resolve(kind: str, arg: str, ctx: _Context) -> str:
    if kind == "var":
        if arg not in ctx.variables:
            raise LaunchError(f"{ctx.file}: $(var {arg}) is not a declared argument")
        return ctx.variables[arg]
    if kind in ("env", "optenv"):
        name, _, default = arg.partition(" ")
        value = ctx.env.get(name, os.environ.get(name))
        if value is None:
            if default or kind == "optenv":
                return default
            raise LaunchError(f"{ctx.file}: environment variable {name} is not set")
        return value
    if kind == "find-pkg-share":
        if arg == PACKAGE:
            return str(package_share_dir())
        for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
            if (Path(prefix) / "share" / arg / "package.xml").is_file():
                return str(Path(prefix) / "share" / arg)
        raise LaunchError(f"{ctx.file}: package {arg!r} not found (AMENT_PREFIX_PATH)")
    if kind == "dirname":
        return str(ctx.file.parent)
    raise LaunchError(f"{ctx.file}: unsupported substitution $({kind} ...)")


def _truthy(value: str, where: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise LaunchError(f"{where}: condition must be true/false/1/0, got {value!r}")


def _enabled(body: dict[str, Any], ctx: _Context, where: str) -> bool:
    if "if" in body and not _truthy(_substitute(body["if"], ctx), where):
        return False
    return not ("unless" in body and _truthy(_substitute(body["unless"], ctx), where))


def _executable_command(pkg: str, exe: str, where: str) -> list[str]:
    """How to start ``ros2 run pkg exe``: our console scripts in-process-free, others via the ament prefix."""
    if pkg == PACKAGE:
        for ep in importlib.metadata.entry_points(group="console_scripts"):
            if ep.name == exe and ep.value.startswith(f"{PACKAGE}."):
                module, func = ep.value.split(":")
                return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        candidate = Path(prefix) / "lib" / pkg / exe
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate)]
    raise LaunchError(f"{where}: executable {exe!r} of package {pkg!r} not found")


def _param_text(value: Any) -> str:
    """A YAML literal for ``-p name:=value`` (numbers, bools, lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def _supervision(body: dict[str, Any], ctx: _Context, where: str) -> dict[str, Any]:
    """Supervision fields (respawn, respawn_delay, on_exit) shared by node and executable."""
    return {
        "respawn": _truthy(_substitute(body.get("respawn", "false"), ctx), where),
        "respawn_delay": float(_substitute(body.get("respawn_delay", "1.0"), ctx)),
        "shutdown_on_exit": _substitute(body.get("on_exit", ""), ctx) == "shutdown",
    }


def _node(body: dict[str, Any], ctx: _Context, where: str) -> ProcessSpec:
    unknown = set(body) - _NODE_KEYS
    if unknown:
        raise LaunchError(f"{where}: unsupported node field(s) {sorted(unknown)}")
    for key in ("pkg", "exec"):
        if key not in body:
            raise LaunchError(f"{where}: node needs '{key}'")
    sub = lambda v: _substitute(v, ctx)  # noqa: E731
    pkg, exe = sub(body["pkg"]), sub(body["exec"])
    name = sub(body.get("name", exe))
    cmd = _executable_command(pkg, exe, where)
    cmd += shlex.split(sub(body.get("args", "")))
    ros: list[str] = ["-r", f"__node:={name}"]
    namespace = "/".join(p.strip("/") for p in (ctx.namespace, sub(body.get("namespace", ""))) if p.strip("/"))
    if namespace:
        ros += ["-r", f"__ns:=/{namespace}"]
    for entry in body.get("param", []) or []:
        if "from" in entry:
            path = Path(sub(entry["from"]))
            if not path.is_file():
                raise LaunchError(f"{where}: parameter file {path} not found")
            ros += ["--params-file", str(path)]
        elif "name" in entry and "value" in entry:
            value = entry["value"]
            text = sub(value) if isinstance(value, str) else _param_text(value)
            ros += ["-p", f"{sub(entry['name'])}:={text or repr('')}"]  # rcl refuses "name:=" (empty)
        else:
            raise LaunchError(f"{where}: param entries need 'from' or 'name'+'value', got {entry}")
    for entry in body.get("remap", []) or []:
        ros += ["-r", f"{sub(entry['from'])}:={sub(entry['to'])}"]
    ros += shlex.split(sub(body.get("ros_args", "")))
    display = f"{namespace}/{name}" if namespace else name
    return ProcessSpec(
        name=display, cmd=[*cmd, "--ros-args", *ros], env=dict(ctx.env), output=sub(body.get("output", "screen")),
        **_supervision(body, ctx, where),
    )


def _walk(entities: Any, ctx: _Context, out: list[ProcessSpec], declared: dict[str, str],
          overrides: dict[str, str]) -> None:
    if not isinstance(entities, list):
        raise LaunchError(f"{ctx.file}: expected a list of entities under 'launch'")
    for index, entity in enumerate(entities):
        where = f"{ctx.file.name}[{index}]"
        if not isinstance(entity, dict) or len(entity) != 1:
            raise LaunchError(f"{where}: each entity is a mapping with one key, got {entity!r}")
        (kind, body), = entity.items()
        body = body or {}
        if not _enabled(body, ctx, where):
            continue
        if kind == "arg":
            name = body["name"]
            if name in overrides:
                value = overrides[name]
            elif "default" in body:
                value = _substitute(body["default"], ctx)
            else:
                raise LaunchError(f"{where}: argument {name!r} has no default and was not given ({name}:=...)")
            ctx.variables[name] = declared[name] = value
        elif kind == "let":
            ctx.variables[body["name"]] = _substitute(body["value"], ctx)
        elif kind == "set_env":
            ctx.env[body["name"]] = _substitute(body["value"], ctx)
        elif kind == "push_ros_namespace":
            ctx.namespace = "/".join(p for p in (ctx.namespace, _substitute(body["namespace"], ctx).strip("/")) if p)
        elif kind in ("node", "executable"):
            if kind == "executable":
                cmd = shlex.split(_substitute(body["cmd"], ctx))
                out.append(ProcessSpec(name=_substitute(body.get("name", cmd[0]), ctx), cmd=cmd, env=dict(ctx.env),
                                       output=_substitute(body.get("output", "screen"), ctx),
                                       **_supervision(body, ctx, where)))
            else:
                out.append(_node(body, ctx, where))
        elif kind == "group":
            scoped = _truthy(_substitute(body.get("scoped", "true"), ctx), where)
            inner = _Context(dict(ctx.variables), dict(ctx.env), ctx.namespace, ctx.file) if scoped else ctx
            _walk(body.get("children", []), inner, out, declared, overrides)
        elif kind == "include":
            path = Path(_substitute(body["file"], ctx))
            args = {a["name"]: _substitute(a["value"], ctx) for a in body.get("arg", []) or []}
            included = _load(path, args, ctx.env, ctx.namespace)
            out += included.processes
        else:
            raise LaunchError(f"{where}: unsupported entity {kind!r}")


def _load(path: Path, overrides: dict[str, str], env: dict[str, str], namespace: str) -> LaunchDescription:
    if not path.is_file():
        raise LaunchError(f"launch file not found: {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "launch" not in data:
        raise LaunchError(f"{path}: a YAML launch file has a top-level 'launch' list")
    ctx = _Context(variables={}, env=dict(env), namespace=namespace, file=path)
    declared: dict[str, str] = {}
    processes: list[ProcessSpec] = []
    _walk(data["launch"], ctx, processes, declared, overrides)
    unknown = set(overrides) - set(declared)
    if unknown:
        raise LaunchError(f"{path}: unknown launch argument(s) {sorted(unknown)}; declared: {sorted(declared)}")
    names = [p.name for p in processes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise LaunchError(f"{path}: duplicate process names {duplicates}")
    return LaunchDescription(arguments=declared, processes=processes)


def load_launch_file(path: str | Path, arguments: dict[str, str] | None = None) -> LaunchDescription:
    """Resolve a YAML launch file with ``name:=value`` arguments into the processes to start.

    ``path`` may also be a bare file name found in robot_rl's ``launch/`` folder.
    """
    candidate = Path(path)
    if not candidate.is_file() and candidate.parent == Path("."):
        candidate = package_share_dir() / "launch" / candidate.name
    return _load(candidate.resolve(), dict(arguments or {}), {}, "")


def parse_launch_arguments(items: list[str]) -> dict[str, str]:
    """``["a:=1", "b:=x"]`` -> ``{"a": "1", "b": "x"}``, as ``ros2 launch`` takes them."""
    out = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep or not name:
            raise LaunchError(f"launch argument {item!r}: expected name:=value")
        out[name] = value
    return out


def write_node_launch_file(path: str | Path, executable: str, params: dict[str, Any], name: str | None = None,
                           package: str = PACKAGE) -> Path:
    """A launch file that starts one node with ``params`` (tests and benchmarks run single nodes this way)."""
    node = {"pkg": package, "exec": executable, "name": name or executable.removesuffix("_node"),
            "param": [{"name": k, "value": v} for k, v in params.items()]}
    path = Path(path)
    path.write_text(yaml.safe_dump({"launch": [{"node": node}]}, sort_keys=False), encoding="utf-8")
    return path
