"""The YAML launch runner: resolves the ROS 2 YAML launch format and supervises real processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from robot_rl.paths import package_share_dir
from robot_rl.ros.launch_processes import launch
from robot_rl.ros.launch_yaml import LaunchError, load_launch_file, parse_launch_arguments

PY = sys.executable


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


GRAPH = """
launch:
- arg: {name: robot, default: panda}
- arg: {name: with_cam, default: "false"}
- set_env: {name: ROBOT_RL_TEST_ENV, value: "$(var robot)-x"}
- node:
    pkg: robot_rl
    exec: robot-rl
    name: sim
    namespace: "$(var robot)"
    param:
    - from: "$(dirname)/params.yaml"
    - {name: rate, value: 500}
    - {name: label, value: "$(var robot)"}
    remap:
    - {from: target_pose, to: "/$(var robot)/target"}
- node:
    if: "$(var with_cam)"
    pkg: robot_rl
    exec: robot-rl
    name: camera
- group:
    children:
    - push_ros_namespace: {namespace: inner}
    - let: {name: robot, value: shadowed}
    - executable: {cmd: "echo $(var robot)", name: echo, output: log}
- executable: {cmd: "echo $(var robot) $(env ROBOT_RL_TEST_ENV)", name: after, unless: "$(var with_cam)"}
"""


def test_resolves_arguments_substitutions_and_conditions(tmp_path: Path) -> None:
    _write(tmp_path, "params.yaml", "/**:\n  ros__parameters: {rate: 1}\n")
    path = _write(tmp_path, "g.launch.yaml", GRAPH)
    desc = load_launch_file(path, {"robot": "g1"})
    assert desc.arguments == {"robot": "g1", "with_cam": "false"}
    assert [p.name for p in desc.processes] == ["g1/sim", "echo", "after"]
    sim = desc.processes[0]
    ros = sim.cmd[sim.cmd.index("--ros-args") + 1:]
    assert ros[:4] == ["-r", "__node:=sim", "-r", "__ns:=/g1"]
    assert ["--params-file", str(tmp_path / "params.yaml")] == ros[4:6]
    assert "rate:=500" in ros and "label:=g1" in ros and "target_pose:=/g1/target" in ros
    assert sim.env == {"ROBOT_RL_TEST_ENV": "g1-x"}
    assert "robot_rl.cli.main" in sim.cmd[2]  # console script resolved through its entry point
    assert desc.processes[1].cmd == ["echo", "shadowed"] and desc.processes[1].output == "log"
    assert desc.processes[2].cmd == ["echo", "g1", "g1-x"]  # the scoped group did not leak `let`
    with_cam = load_launch_file(path, {"with_cam": "true"})
    assert [p.name for p in with_cam.processes] == ["panda/sim", "camera", "echo"]


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        ("launch:\n- arg: {name: a}\n", {}, "has no default"),
        ("launch:\n- arg: {name: a, default: x}\n", {"b": "1"}, r"unknown launch argument\(s\) \['b'\]"),
        ("launch:\n- node: {pkg: robot_rl, exec: robot-rl, colour: red}\n", {}, "unsupported node field"),
        ("launch:\n- node: {pkg: robot_rl, exec: no_such_node}\n", {}, "executable 'no_such_node'"),
        ("launch:\n- timer: {period: 1}\n", {}, "unsupported entity 'timer'"),
        ("launch:\n- executable: {cmd: 'echo $(var nope)'}\n", {}, r"\$\(var nope\) is not a declared"),
        ("launch:\n- executable: {cmd: 'echo $(eval 1+1)'}\n", {}, "unsupported substitution"),
        ("launch:\n- executable: {cmd: x, if: maybe}\n", {}, "condition must be"),
        ("nodes: []\n", {}, "top-level 'launch'"),
        ("launch:\n- executable: {cmd: a, name: x}\n- executable: {cmd: b, name: x}\n", {}, "duplicate process"),
    ],
)
def test_bad_launch_files_fail_with_a_reason(tmp_path: Path, text: str, args: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        load_launch_file(_write(tmp_path, "bad.launch.yaml", text), args)


def test_include_passes_arguments(tmp_path: Path) -> None:
    _write(tmp_path, "inner.launch.yaml", "launch:\n- arg: {name: who, default: nobody}\n"
                                          "- executable: {cmd: 'echo $(var who)', name: inner}\n")
    outer = _write(tmp_path, "outer.launch.yaml",
                   "launch:\n- include:\n    file: '$(dirname)/inner.launch.yaml'\n    arg: [{name: who, value: me}]\n")
    (proc,) = load_launch_file(outer).processes
    assert proc.cmd == ["echo", "me"]
    assert parse_launch_arguments(["a:=1", "b:=x:=y"]) == {"a": "1", "b": "x:=y"}
    with pytest.raises(LaunchError):
        parse_launch_arguments(["a=1"])


def test_supervises_processes_respawn_kill_and_shutdown_on_exit(tmp_path: Path) -> None:
    text = f"""
launch:
- executable: {{cmd: "{PY} -c 'import time; print(1, flush=True); time.sleep(60)'", name: sleeper}}
- executable: {{cmd: "{PY} -c 'print(2)'", name: flaky, respawn: "true", respawn_delay: "0.2"}}
"""
    desc = load_launch_file(_write(tmp_path, "p.launch.yaml", text))
    assert desc.processes[1].respawn and desc.processes[1].respawn_delay == 0.2
    with launch(desc, tmp_path / "logs") as graph:
        deadline = time.monotonic() + 20
        while graph._procs["flaky"].restarts < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert graph._procs["flaky"].restarts >= 2 and graph.log("flaky").count("2") >= 2
        assert graph.is_running("sleeper") and graph.wait_for_log("sleeper", "1")
        graph.kill("sleeper")
        time.sleep(0.5)
        assert not graph.is_running("sleeper") and graph.returncode("sleeper") == -9

    stopper = f"""
launch:
- executable: {{cmd: "{PY} -c 'import time; time.sleep(60)'", name: long}}
- executable: {{cmd: "{PY} -c 'import time; time.sleep(0.5)'", name: short, on_exit: shutdown}}
"""
    desc = load_launch_file(_write(tmp_path, "s.launch.yaml", stopper))
    t0 = time.monotonic()
    with launch(desc) as graph:
        assert graph.wait(timeout=30)
        assert time.monotonic() - t0 < 15
        time.sleep(1.0)
        assert not graph.is_running("long")


def test_share_dir_holds_the_installed_folders() -> None:
    share = package_share_dir()
    for folder in ("launch", "config", "controllers", "sim"):
        assert (share / folder).is_dir()
    assert (share / "config" / "fastdds_shm.xml").is_file()


LAUNCH_DIR = package_share_dir() / "launch"
YAML_FILES = sorted(LAUNCH_DIR.glob("*.launch.yaml"))


def test_launch_folder_has_graphs() -> None:
    assert {p.name for p in YAML_FILES} >= {"sim_arm_teleop.launch.yaml", "humanoid_sim.launch.yaml",
                                            "quadrotor_sim.launch.yaml"}


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.name)
def test_every_launch_file_resolves_with_its_defaults(path: Path) -> None:
    import yaml

    required = {e["arg"]["name"]: "given" for e in yaml.safe_load(path.read_text())["launch"]
                if "arg" in e and "default" not in e["arg"]}
    desc = load_launch_file(path, required)
    assert desc.processes
    for spec in desc.processes:
        assert "--ros-args" in spec.cmd  # every process is a ROS node of a known executable
        for i, arg in enumerate(spec.cmd):
            if arg == "--params-file":
                assert Path(spec.cmd[i + 1]).is_file()


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.name)
def test_every_yaml_graph_has_a_python_twin_that_includes_it(path: Path) -> None:
    twin = path.with_name(path.name.replace(".launch.yaml", ".launch.py"))
    source = twin.read_text()
    compile(source, str(twin), "exec")
    assert f'"{path.name}"' in source and "generate_launch_description" in source


SIM_GRAPHS = [p for p in YAML_FILES if "sim" in p.name]
WALL_CLOCK = {"sim", "safety", "learner"}
"""Nodes of a sim graph that keep wall time: the sim publishes /clock, the safety node's watchdog must not run
on the clock of what it watches (a stalled sim stops /clock), the learner stands beside the graph."""


def test_sim_graphs_are_the_sim_launch_files() -> None:
    assert {p.name for p in SIM_GRAPHS} == {"sim_arm_teleop.launch.yaml", "sim_arm_policy.launch.yaml",
                                            "humanoid_sim.launch.yaml", "quadrotor_sim.launch.yaml"}


@pytest.mark.parametrize("path", SIM_GRAPHS, ids=lambda p: p.name)
def test_sim_graphs_run_on_the_simulators_clock(path: Path) -> None:
    """With every optional node switched on, each node but the wall-clock ones gets use_sim_time:=true and the
    sim node publishes /clock (its publish_clock is not switched off); use_sim_time:=false turns it off."""
    import yaml

    from robot_rl.ros.sim_node import SimNodeConfig

    args = {}
    for entry in yaml.safe_load(path.read_text())["launch"]:
        arg = entry.get("arg")
        if arg is not None and arg.get("default") in (None, "false", "true") and arg["name"] != "use_sim_time":
            args[arg["name"]] = "true" if "default" in arg else "given"
    desc = load_launch_file(path, args)
    nodes = {spec.name.rsplit("/", 1)[-1]: spec.cmd[spec.cmd.index("--ros-args"):] for spec in desc.processes}
    assert "sim" in nodes and ({"policy", "teleop"} & set(nodes))
    for name, ros in nodes.items():
        assert ("use_sim_time:=true" in ros) == (name not in WALL_CLOCK), (name, ros)
    assert SimNodeConfig.publish_clock and not any("publish_clock" in a for a in nodes["sim"])
    wall = load_launch_file(path, {**args, "use_sim_time": "false"})
    assert not any("use_sim_time:=true" in spec.cmd for spec in wall.processes)
