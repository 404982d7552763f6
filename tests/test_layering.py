"""The package's layers only depend downwards: checked on the source of every module, not assumed.

The core (everything but ``robot_rl/cli`` and ``robot_rl/ros``) must be usable as a library: it never
reaches up into the command line or the ROS nodes, and modules talk to each other through public names
only, so a private helper can change without breaking another module. Imports inside functions count
too (an import test would not execute them). That the core never imports rclpy or ROS messages is
checked in ``test_imports.py``.

Floors: a module imports only its own floor and the ones below (type-only and function-level imports
included), and nothing imports in a circle, neither modules nor packages. A new top-level package fails
:func:`test_every_import_respects_the_floors` until it is given a floor in :data:`FLOORS`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import robot_rl

ROOT = Path(robot_rl.__file__).parent

FLOORS: tuple[tuple[str, ...], ...] = (
    ("core",),  # with the top-level modules (robot_rl/paths.py)
    ("robots", "policies", "sensors"),
    ("control",),
    ("runtime",),
    ("sim",),
    ("data", "teleop", "hardware"),
    ("training",),
    ("fleet",),
    ("learners",),
    ("rl",),
    ("align",),
    ("ros",),
    ("cli",),
)
"""The layers, lowest first: a package may import its own floor and those below, never one above."""



@dataclass(frozen=True)
class Import:
    """One imported module (and, for ``from m import a, b``, the names) at a line of a module."""

    module: str
    target: str
    names: tuple[str, ...]
    where: str

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.where}: {self.target}{names}"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports() -> list[Import]:
    """Every import statement of every module, relative imports resolved to absolute names."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        where = str(path.relative_to(ROOT.parent))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out += [Import(module, a.name, (), f"{where}:{node.lineno}") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join([*base, *([target] if target else [])])
                out.append(Import(module, target, tuple(a.name for a in node.names), f"{where}:{node.lineno}"))
    return out


IMPORTS = _imports()


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _offenders(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """Imports of any of ``forbidden`` by modules outside ``packages``."""
    return [str(i) for i in IMPORTS if not any(_inside(i.module, p) for p in packages)
            and any(_inside(i.target, f) for f in forbidden)]


def test_the_walk_sees_the_imports() -> None:
    """Guards the checks below against passing because they look at nothing."""
    by_module = {i.module for i in IMPORTS}
    assert {"robot_rl.cli.main", "robot_rl.learners.online", "robot_rl.ros.learner_node"} <= by_module
    assert any(i.module == "robot_rl.ros.learner_node" and i.target.startswith("robot_rl.learners") for i in IMPORTS)


def test_only_the_command_line_imports_the_command_line() -> None:
    offenders = _offenders(("robot_rl.cli",), ("robot_rl.cli",))
    assert not offenders, "modules outside robot_rl/cli import it:\n" + "\n".join(offenders)


def test_only_the_ros_layer_imports_rclpy() -> None:
    """The ROS nodes adapt messages to the core; everything else (the command line too) stays free of rclpy."""
    offenders = _offenders(("robot_rl.ros",), ("rclpy",))
    assert not offenders, "modules outside robot_rl/ros import rclpy:\n" + "\n".join(offenders)


def test_the_core_does_not_import_the_ros_layer() -> None:
    """Only the top layer, the command line (``robot-rl launch`` runs a ROS graph), may use the nodes."""
    offenders = _offenders(("robot_rl.ros", "robot_rl.cli"), ("robot_rl.ros",))
    assert not offenders, "core modules import robot_rl/ros:\n" + "\n".join(offenders)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_names_across_modules() -> None:
    """``from robot_rl.x import _y`` (or ``import robot_rl.x._y``) from another module, or from another
    package for a private module, reaches into what ``x`` is free to change."""
    offenders = []
    for i in IMPORTS:
        if not _inside(i.target, "robot_rl"):
            continue
        parts = i.target.split(".")
        for k, part in enumerate(parts):
            # a private module (robot_rl.robots._mjspec) is public to its own package only
            if _private(part) and not _inside(i.module, ".".join(parts[:k])):
                offenders.append(str(i))
        if i.target != i.module:
            private = [n for n in i.names if _private(n)]
            # ``from robot_rl.robots import _mjspec`` inside robot_rl.robots is the module, not a name
            if private and not _inside(i.module, i.target):
                offenders.append(str(i))
    assert not offenders, "private names imported from other modules:\n" + "\n".join(sorted(set(offenders)))


def _robots_import_sim() -> list[str]:
    return [str(i) for i in IMPORTS if _inside(i.module, "robot_rl.robots") and _inside(i.target, "robot_rl.sim")]


def test_robot_models_do_not_import_the_simulation() -> None:
    """Robot models are built by the simulation, never the other way round."""
    offenders = _robots_import_sim()
    assert not offenders, "robot_rl/robots imports robot_rl/sim:\n" + "\n".join(offenders)


# ---- floors and circles ---------------------------------------------------------------------------------
MODULES = {_module_name(p) for p in ROOT.rglob("*.py")}
FLOOR_OF = {package: k for k, packages in enumerate(FLOORS) for package in packages}


TOP_LEVEL = {_module_name(p) for p in ROOT.glob("*.py")}


def _package(module: str) -> str:
    """Top-level package of a robot_rl module; the top-level modules (robot_rl, robot_rl.paths) count as core."""
    return "core" if module in TOP_LEVEL else module.split(".")[1]


def _resolve(name: str) -> str:
    """The robot_rl module ``name`` is or lies in (``robot_rl.x.Thing`` -> ``robot_rl.x``)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _edges() -> dict[tuple[str, str], str]:
    """(importer, imported module) -> where, over every import of robot_rl modules.

    ``from pkg import sub`` is an edge to the submodule ``pkg.sub``, not to ``pkg/__init__``; a name that is
    not a submodule is an edge to the module it comes from.
    """
    out: dict[tuple[str, str], str] = {}
    for i in IMPORTS:
        if not _inside(i.target, "robot_rl"):
            continue
        subs = [f"{i.target}.{n}" for n in i.names if f"{i.target}.{n}" in MODULES]
        targets = subs if subs and len(subs) == len(i.names) else [*subs, _resolve(i.target)]
        for target in targets:
            if target != i.module:
                out.setdefault((i.module, target), i.where)
    return out


EDGES = _edges()


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_floors_name_every_package() -> None:
    """A new package must be given a floor (and the walk must see the edges it checks)."""
    unknown = sorted({_package(m) for m in MODULES} - set(FLOOR_OF))
    assert not unknown, f"packages without a floor in FLOORS: {unknown}"
    assert any(a == "robot_rl.ros.learner_node" and b.startswith("robot_rl.learners.") for a, b in EDGES)
    assert ("robot_rl.sim.base_env", "robot_rl.sim.alignment") in EDGES  # an import inside a function
    # ``from robot_rl.robots import cf2x`` inside robots would be an edge to robot_rl.robots.cf2x only
    assert ("robot_rl.robots", "robot_rl.robots.cf2x") in EDGES


def test_every_import_respects_the_floors() -> None:
    """No module imports a higher floor: module-level, function-level and TYPE_CHECKING imports alike."""
    offenders = []
    for (module, target), where in sorted(EDGES.items()):
        low, high = _package(module), _package(target)
        if low not in FLOOR_OF or high not in FLOOR_OF:
            offenders.append(f"{where}: {module} -> {target} (package without a floor)")
        elif FLOOR_OF[high] > FLOOR_OF[low]:
            offenders.append(f"{where}: {module} ({low}) -> {target} ({high}, a higher floor)")
    assert not offenders, "imports of higher floors:\n" + "\n".join(offenders)


def test_no_import_circle_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in EDGES:
        graph.setdefault(a, set()).add(b)
    circles = [sorted(c) for c in _circles(graph)]
    assert not circles, "module import circles:\n" + "\n".join(map(str, circles))


def test_no_import_circle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in EDGES:
        if _package(a) != _package(b):
            graph.setdefault(_package(a), set()).add(_package(b))
    circles = [sorted(c) for c in _circles(graph)]
    where = {(_package(a), _package(b)): f"{w}: {a} -> {b}" for (a, b), w in EDGES.items()
             if _package(a) != _package(b)}
    details = [f"{c}: " + "; ".join(where[(p, q)] for p in c for q in c if (p, q) in where) for c in circles]
    assert not circles, "package import circles:\n" + "\n".join(details)


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert [sorted(c) for c in _circles(graph)] == [["a", "b", "c"]]
