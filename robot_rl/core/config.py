"""Typed configs: dataclasses loaded from YAML, strictly.

Every config in robot_rl is a dataclass with a docstring under each field and checks in
``__post_init__``. :func:`load_config` builds one from a YAML file or dict plus ``a.b=c`` overrides:
unknown keys are an error (a typo must not silently fall back to a default), nested dataclasses,
tuples, enums and optionals are converted, and nothing in YAML can name a class or run code.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override does not match its dataclass; the message names the key."""


def load_config(cls: type[T], source: str | Path | Mapping[str, Any] | None = None,
                overrides: Sequence[str] = ()) -> T:
    """Build ``cls`` from a YAML file (or dict), then apply ``key.sub=value`` overrides.

    Args:
        cls: A dataclass type.
        source: Path to a YAML file, a dict, or None for the defaults.
        overrides: Strings such as ``"learner.lr=3e-4"``; values are parsed as YAML scalars.

    Raises:
        ConfigError: naming the key for unknown keys, wrong types or failing ``__post_init__`` checks.
    """
    if source is None:
        data: dict[str, Any] = {}
    elif isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise ConfigError(f"{path}: not valid UTF-8 YAML ({type(exc).__name__}: {first})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(loaded).__name__}")
        _check_size(loaded, path)
        data = loaded or {}
        try:
            return _build(cls, _apply_overrides(data, overrides), prefix="")
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return _build(cls, _apply_overrides(data, overrides), prefix="")


MAX_NODES = 100_000
"""Most values a config file may expand to: YAML aliases can make a few lines mean billions of values."""


def _check_size(loaded: Any, path: Path) -> None:
    """Refuse a document whose aliases expand past :data:`MAX_NODES` values (or refer to themselves)."""
    stack, seen = [loaded], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ConfigError(f"{path}: more than {MAX_NODES} values once aliases are expanded "
                              "(an alias bomb or a self-referencing alias)")
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``data`` with ``key.sub=value`` overrides applied (values parsed as YAML scalars)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value")
        node = data
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        try:
            node[leaf] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:  # e.g. randomization={ : one line naming the override
            raise ConfigError(f"override {item!r}: the value is not YAML ({' '.join(str(exc).split())})") from None
    return data


def config_to_dict(cfg: Any) -> Any:
    """A plain-YAML representation of a config (enums as values, tuples as lists)."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: config_to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, enum.Enum):
        return cfg.value
    if isinstance(cfg, (list, tuple)):
        return [config_to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: config_to_dict(v) for k, v in cfg.items()}
    return cfg


def save_config(cfg: Any, path: str | Path) -> None:
    """Write a config as YAML that :func:`load_config` reads back."""
    Path(path).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False), encoding="utf-8")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of a dataclass (read from its source)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in itertools.pairwise(body):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _build(cls: type[T], data: Any, prefix: str) -> T:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known), key=repr)  # YAML keys may be numbers, None, ...
    if unknown:
        raise ConfigError(f"{prefix or cls.__name__}: unknown key(s) {unknown}; valid keys: {sorted(known)}")
    kwargs = {name: _convert(hints[name], value, f"{prefix}{name}") for name, value in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from exc


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError("; ".join(errors))
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {list(args)}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, prefix=f"{key}.")  # type: ignore[arg-type]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(f"{key}: expected one of {[m.value for m in tp]}, got {value!r}") from None
    if origin in (tuple, list, Sequence):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"{key}: expected {len(args)} items, got {len(value)}")
            return tuple(_convert(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _convert(vt, v, f"{key}.{k if isinstance(k, str) and k.isprintable() else repr(k)}")
                for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if tp is Path:
        return Path(value)
    raise ConfigError(f"{key}: unsupported field type {tp!r}")
