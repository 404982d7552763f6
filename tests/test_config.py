"""The YAML -> dataclass loader: strict keys, type conversion, overrides, field docs."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from robot_rl.core.config import ConfigError, config_to_dict, field_docs, load_config, save_config


class Mode(str, enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass(frozen=True)
class Inner:
    lr: float = 1e-3
    """Learning rate."""
    layers: tuple[int, ...] = (256, 256)
    """Hidden sizes."""

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")


@dataclass(frozen=True)
class Outer:
    name: str = "run"
    """Run name."""
    mode: Mode = Mode.SAFE
    """Mode."""
    steps: int = 10
    """Number of steps."""
    inner: Inner = field(default_factory=Inner)
    """Nested section."""
    gain: float | None = None
    """Optional gain."""


def test_defaults_file_and_overrides(tmp_path: Path) -> None:
    assert load_config(Outer) == Outer()
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nmode: fast\ninner:\n  layers: [64, 32]\n")
    cfg = load_config(Outer, path, overrides=["inner.lr=0.5", "steps=3", "gain=2"])
    assert cfg == Outer(name="a", mode=Mode.FAST, steps=3, inner=Inner(lr=0.5, layers=(64, 32)), gain=2.0)
    save_config(cfg, tmp_path / "back.yaml")
    assert load_config(Outer, tmp_path / "back.yaml") == cfg
    assert config_to_dict(cfg)["mode"] == "fast"


@pytest.mark.parametrize(
    ("data", "overrides", "message"),
    [
        ({"nmae": "x"}, (), r"unknown key\(s\) \['nmae'\]"),
        ({"inner": {"lrr": 1}}, (), r"inner\.: unknown key"),
        ({"steps": "ten"}, (), "steps: expected an integer"),
        ({"steps": True}, (), "steps: expected an integer"),
        ({"mode": "reckless"}, (), "mode: expected one of"),
        ({"inner": {"layers": "wide"}}, (), "inner.layers: expected a list"),
        ({}, ["inner.lr=-1"], "lr must be positive"),
        ({}, ["steps"], "expected key=value"),
    ],
)
def test_bad_config_names_the_key(data: dict, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(Outer, data, overrides)


def test_missing_file_and_bad_top_level(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(Outer, tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(Outer, tmp_path / "list.yaml")


def test_field_docs_read_from_source() -> None:
    docs = field_docs(Outer)
    assert docs["steps"] == "Number of steps." and docs["inner"] == "Nested section."
    assert set(docs) == {"name", "mode", "steps", "inner", "gain"}
