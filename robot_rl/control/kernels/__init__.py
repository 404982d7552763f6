"""Compiled control kernels: the default path of every law run at each physics step; numpy stays the reference.

Why: the laws are a few dozen operations on 3- to 7-element arrays, and in numpy each costs ~0.5-1 µs of
interpreter and dispatch overhead, so before these kernels a Panda Cartesian impedance step cost 4x a Panda
``mj_step``, the Crazyflie cascade 17x its ``mj_step``, and the envs stepped physics at 0.13x (arm) and
0.14x (quadrotor) of a raw ``mj_step`` loop (benchmarks/README.md). :mod:`.compiled` holds numba
(https://numba.pydata.org) versions of the laws, of the actuator pipeline and of whole per-policy-step
physics loops that call MuJoCo's C API directly (:mod:`.mujoco_c`).

numba and the C binding are loaded on first use (:func:`load`, ~0.3 s of imports; compiled code is cached
on disk next to the sources, so only the first run after an edit compiles). ``ROBOT_RL_KERNELS=numpy``
switches every controller and env to the numpy reference (debugging; platforms where numba or the binding
fail, which :func:`unavailable_reason` then names and the code falls back to by itself).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType


@functools.cache
def unavailable_reason() -> str:
    """"" when the compiled kernels can be used here, else why not (the numpy reference is used then)."""
    if os.environ.get("ROBOT_RL_KERNELS", "compiled") == "numpy":
        return "ROBOT_RL_KERNELS=numpy"
    try:
        import numba  # noqa: F401
    except ImportError as exc:
        return f"numba is not installed: {exc}"
    from robot_rl.control.kernels import mujoco_c

    return mujoco_c.unavailable_reason()


def load() -> ModuleType | None:
    """The compiled kernels module (:mod:`.compiled`), or None when :func:`unavailable_reason` says why not."""
    if unavailable_reason():
        return None
    from robot_rl.control.kernels import compiled

    return compiled


class CompiledLaw:
    """A controller whose law runs compiled by default, with the numpy reference one switch away.

    Subclasses call :meth:`_init_kernels` at the end of ``__init__`` and pack their constants for the kernel
    in :meth:`_prepare_kernels` (once, the first time the compiled path is on).
    """

    _kernels: ModuleType | None
    _params: object

    def _init_kernels(self) -> None:
        self._kernels, self._params = load(), None
        if self._kernels is not None:
            self._prepare_kernels()

    def _prepare_kernels(self) -> None:
        raise NotImplementedError

    @property
    def compiled(self) -> bool:
        """Whether :meth:`compute` runs the compiled law (False: the numpy reference)."""
        return self._kernels is not None

    @compiled.setter
    def compiled(self, value: bool) -> None:
        self._kernels = load() if value else None
        if value and self._kernels is None:
            raise RuntimeError(f"compiled kernels unavailable: {unavailable_reason()}")
        if self._kernels is not None and self._params is None:
            self._prepare_kernels()
