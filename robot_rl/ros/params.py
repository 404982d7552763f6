"""ROS parameters that mirror a config dataclass: the dataclass is the only place defaults live.

A node calls :func:`declare_config` with its config class; every field becomes a declared parameter
(with the field's docstring as its description), values from ``--params-file`` / ``-p`` override the
defaults, and the result is built and validated by the same loader as YAML configs, so a bad value
stops the node at start-up with the field's name.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, TypeVar

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from robot_rl.core.config import field_docs, load_config

T = TypeVar("T")
_ARRAY_TYPES = {str: Parameter.Type.STRING_ARRAY, float: Parameter.Type.DOUBLE_ARRAY, int: Parameter.Type.INTEGER_ARRAY,
                bool: Parameter.Type.BOOL_ARRAY}


def _ros_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def declare_config(node: Node, cls: type[T], prefix: str = "") -> T:
    """Declare one parameter per field of ``cls`` and return the validated config.

    Optional fields with a None default are declared as strings where "" means None. Nested dataclass
    fields become ``<field>.<subfield>`` parameters.
    """
    return load_config(cls, _declare(node, cls, prefix))


def _declare(node: Node, cls: type, prefix: str) -> dict[str, Any]:
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = _declare(node, hints[f.name], f"{name}.")
            continue
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        optional = default is None
        ros_default = "" if optional else _ros_default(default)
        descriptor = ParameterDescriptor(description=docs.get(f.name, ""), dynamic_typing=True)
        value: Any
        if isinstance(ros_default, list) and not ros_default:  # rclpy cannot type an empty list
            param_type = _ARRAY_TYPES.get(typing.get_args(hints[f.name])[0], Parameter.Type.STRING_ARRAY)
            typed = ParameterDescriptor(description=descriptor.description)
            value = node.declare_parameter(name, param_type, typed).value
            value = default if value is None else value
        else:
            value = node.declare_parameter(name, ros_default, descriptor).value
        if optional and value == "":
            value = None
        elif isinstance(value, list) and typing.get_origin(hints[f.name]) is tuple:
            value = tuple(value)
        values[f.name] = value
    return values
