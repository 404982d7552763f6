"""The documented topic table (robot_rl.ros.topics) against the code: every publisher and subscription the nodes
create is in it with its message type, every row is used, and the README shows the table as generated. The
launched graphs' tests check the live topics against it too (helpers.ros_frames.undocumented_topics)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import robot_rl
from robot_rl.ros.topics import TOPICS, find, markdown_table

ROS_DIR = Path(robot_rl.__file__).parent / "ros"
README = ROS_DIR.parent.parent / "README.md"
NAMESPACED = {"camera_node": "<camera>/"}
"""Nodes whose relative topics live in a namespace of their own (one camera node per camera)."""


def _constants(trees: list[ast.Module]) -> dict[str, str]:
    """Module-level ``NAME = "text"`` of every ROS module (ODOM_TOPIC, CMD_VEL_TOPIC, ...)."""
    return {t.id: n.value.value for tree in trees for n in tree.body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def _topic_name(node: ast.expr, constants: dict[str, str]) -> str | None:
    """A topic argument as text: a literal, a module constant, or an f-string with ``<camera>`` for its fields."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "<camera>" for v in node.values)  # type: ignore[misc]
    return None  # a variable (the safety node's watched topics, a mode's command topic)


def created_endpoints() -> list[tuple[str, str, str]]:
    """(module, topic, message class name) of each create_publisher / create_subscription with a known topic."""
    out = []
    trees = {path.stem: ast.parse(path.read_text()) for path in sorted(ROS_DIR.glob("*.py"))}
    constants = _constants(list(trees.values()))
    for stem, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("create_publisher", "create_subscription") and len(node.args) >= 2):
                continue
            kind, topic = node.args[0], _topic_name(node.args[1], constants)
            if isinstance(kind, ast.Name) and topic is not None and kind.id[0].isupper():
                out.append((stem, NAMESPACED.get(stem, "") + topic, kind.id))
    return out


def test_every_publisher_and_subscription_is_documented_with_its_type() -> None:
    endpoints = created_endpoints()
    assert len(endpoints) > 60  # the scan sees the nodes
    wrong = []
    for module, topic, kind in endpoints:
        doc = find(topic)
        if doc is None or doc.type.rsplit("/", 1)[-1] != kind:
            wrong.append(f"{module}: {topic} ({kind}) -> {doc.type if doc else 'not documented'}")
    assert not wrong, wrong


def test_every_documented_topic_is_used_and_the_table_renders() -> None:
    names = [t.name for t in TOPICS]
    assert len(names) == len(set(names))
    import yaml

    remapped = [r["to"] for path in sorted((ROS_DIR.parent.parent / "launch").glob("*.launch.yaml"))
                for entry in yaml.safe_load(path.read_text())["launch"] if "node" in entry
                for r in entry["node"].get("remap", [])]
    topics = [topic for _, topic, _ in created_endpoints()] + remapped
    used = {doc.name for topic in topics if (doc := find(topic)) is not None}
    dynamic = {"target_joint", "target_body_rates", "target_wrench", "target_stiffness", "policy/target_pose",
               "policy/target_gripper"}
    """Created through variables: the command publisher's topic per control mode, subscribe_targets' loop."""
    assert set(names) - used <= dynamic, sorted(set(names) - used - dynamic)
    table = markdown_table()
    assert table.count("\n") == len(TOPICS) + 2 and "| `odom` | nav_msgs/msg/Odometry |" in table


def test_readme_shows_the_generated_table() -> None:
    text = README.read_text()
    section = text[text.index("## ROS 2 graph"):]
    section = section[:section.find("\n## ", 3) % len(section)]
    if "| topic | type | frame |" not in section:
        pytest.skip("README's 'ROS 2 graph' section has no topic table yet")
    assert markdown_table() in section, "README's 'ROS 2 graph' table: paste robot_rl.ros.topics.markdown_table()"
