"""MuJoCo's C library for compiled code: symbols, raw struct addresses and the warning counters.

The ``mujoco`` wheel ships ``libmujoco.so`` next to its Python extension, which links against it. Loading
the same file into LLVM's process-wide symbol table (``llvmlite.binding.load_library_permanently``, a
``dlopen`` of the already loaded library, so the very same code and globals) lets numba-compiled functions
call ``mj_step1``, ``mj_jacSite``, ... by name, as C code would; the bindings' ``MjModel._address`` /
``MjData._address`` are the ``mjModel*`` / ``mjData*`` to pass. The numpy arrays the bindings return
(``data.qpos``, ``data.ctrl``, ``model.opt.gravity``, ...) alias that C memory, so compiled loops read and
write them directly.

``mjData.warning`` (per-warning counters) has no numpy view in the bindings; :func:`warning_counts` builds
one from the struct layout of ``include/mujoco/mjdata.h`` (the fields before ``warning``, mirrored with
``ctypes``) and refuses, making the compiled loops unavailable, unless a probe MjData shows the counters
exactly where that layout says.

A MuJoCo error (``mju_error``, e.g. an exhausted stack) raised inside compiled code cannot unwind into
Python as the bindings' ``mujoco.FatalError``; it ends the process. Warnings (what diverging physics
raises) are counted as usual.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import mujoco
import numpy as np

_NWARNING = int(mujoco.mjtWarning.mjNWARNING)


class _SolverStat(ctypes.Structure):
    _fields_ = [("improvement", ctypes.c_double), ("gradient", ctypes.c_double), ("lineslope", ctypes.c_double),
                ("nactive", ctypes.c_int), ("nchange", ctypes.c_int), ("neval", ctypes.c_int),
                ("nupdate", ctypes.c_int)]


class _DataHead(ctypes.Structure):
    """mjData up to and including ``warning`` (mujoco 4.0, include/mujoco/mjdata.h)."""

    _fields_ = [("narena", ctypes.c_int64), ("nbuffer", ctypes.c_int64), ("nplugin", ctypes.c_int),
                ("pstack", ctypes.c_size_t), ("pbase", ctypes.c_size_t), ("parena", ctypes.c_size_t),
                ("threadpool", ctypes.c_size_t), ("threadlock", ctypes.c_ubyte),
                ("maxuse_stack", ctypes.c_int64), ("maxuse_arena", ctypes.c_int64), ("maxuse_con", ctypes.c_int),
                ("maxuse_efc", ctypes.c_int), ("solver", _SolverStat * (mujoco.mjNISLAND * mujoco.mjNSOLVER)),
                ("solver_niter", ctypes.c_int * mujoco.mjNISLAND), ("solver_nnz", ctypes.c_int * mujoco.mjNISLAND),
                ("solver_fwdinv", ctypes.c_double * 2), ("warning", ctypes.c_int * (2 * _NWARNING))]


_WARNING_OFFSET = _DataHead.warning.offset


def library_path() -> str | None:
    """The libmujoco shared library inside the installed ``mujoco`` package (None if not found)."""
    found = sorted(glob.glob(os.path.join(os.path.dirname(mujoco.__file__), "libmujoco.so*")))
    return found[0] if found else None


def _raw_counts(data: mujoco.MjData) -> np.ndarray:
    buf = (ctypes.c_int * (2 * _NWARNING)).from_address(data._address + _WARNING_OFFSET)
    return np.ctypeslib.as_array(buf)[1::2]  # (lastinfo, number) pairs -> number


@functools.cache
def unavailable_reason() -> str:
    """"" when compiled code can call MuJoCo's C API here, else why not (checked once per process)."""
    path = library_path()
    if path is None:
        return "no libmujoco shared library in the mujoco package"
    try:
        from llvmlite import binding
    except ImportError as exc:  # numba's dependency
        return f"llvmlite missing: {exc}"
    probe = mujoco.MjData(mujoco.MjModel.from_xml_string("<mujoco/>"))
    if not (hasattr(probe, "_address") and hasattr(mujoco.MjModel, "_address")):
        return "the mujoco bindings expose no _address of MjModel/MjData"
    for w in range(_NWARNING):
        probe.warning[w].number = 1000 + w
    if not np.array_equal(_raw_counts(probe), 1000 + np.arange(_NWARNING)):
        return "mjData.warning is not where mujoco 4.0's mjdata.h puts it (another MuJoCo version?)"
    try:
        binding.load_library_permanently(path)
    except RuntimeError as exc:
        return f"cannot load {path}: {exc}"
    return ""


def address(obj: mujoco.MjModel | mujoco.MjData) -> int:
    """The ``mjModel*`` / ``mjData*`` behind a bindings object."""
    return int(obj._address)


def warning_counts(data: mujoco.MjData) -> np.ndarray:
    """A live int32 view of ``data.warning[:].number`` (valid while ``data`` lives; keep a reference to it)."""
    if unavailable_reason():
        raise RuntimeError(unavailable_reason())
    return _raw_counts(data)
