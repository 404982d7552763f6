"""Many copies of one MuJoCo model stepped together: ``mujoco.batch`` on CPU threads, or MuJoCo Warp.

A batched env (:class:`robot_rl.sim.batched_quad.BatchedQuadHover`) reads and writes the host arrays
``qpos``, ``qvel`` and ``ctrl`` of shape (num_worlds, n) and calls :meth:`step` between; the physics
behind them is one of:

* :class:`MujocoBatch` — MuJoCo's C ``mujoco.batch.Batch``: the arrays are views of its data (no copy),
  ``nthread`` C threads step the worlds. The embedded default, fast on CPU.
* :class:`WarpBatch` — MuJoCo Warp (``mujoco_warp``, NVIDIA Warp kernels, float32): on a CUDA device it
  steps thousands of worlds in parallel (Zakka et al. 2025, MuJoCo Playground; MuJoCo Warp's README), on
  ``cpu`` it runs the same kernels slowly, which is how its results are checked without a GPU. The
  host arrays are mirrors: ``ctrl`` is uploaded before each step and ``qpos``/``qvel`` downloaded after,
  so an env's numpy controller runs unchanged between GPU physics steps.

Both step a subset of worlds: worlds left out keep their state (``mujoco.batch`` skips them; Warp steps
every world, so their ``qpos``/``qvel`` are put back).
"""

from __future__ import annotations

from typing import Protocol

import mujoco
import numpy as np

from robot_rl.core import SpecError


class BatchPhysics(Protocol):
    """What a batched env needs of its simulator."""

    qpos: np.ndarray
    """(num_worlds, nq) positions; write a world's then :meth:`commit` it."""
    qvel: np.ndarray
    """(num_worlds, nv) velocities."""
    ctrl: np.ndarray
    """(num_worlds, nu) controls, applied by the next :meth:`step`."""

    def reset(self, ids: np.ndarray) -> None:
        """Put worlds ``ids`` back to the model's default state (``qpos0``, at rest, time 0)."""

    def commit(self, ids: np.ndarray) -> None:
        """Hand the simulator the ``qpos``/``qvel`` written for worlds ``ids`` (and compute their kinematics)."""

    def step(self, ids: np.ndarray | None = None) -> None:
        """One physics step of worlds ``ids`` (all when None) with the current ``ctrl``."""


class MujocoBatch:
    """``mujoco.batch.Batch``: C threads, float64, the host arrays ARE the simulator's."""

    def __init__(self, model: mujoco.MjModel, num_worlds: int, nthread: int = 2) -> None:
        from mujoco import batch as mj_batch

        self.batch = mj_batch.Batch(model, nsim=num_worlds, nthread=nthread)
        self.qpos, self.qvel, self.ctrl = self.batch.bind("qpos"), self.batch.bind("qvel"), self.batch.bind("ctrl")

    def reset(self, ids: np.ndarray) -> None:
        """See :meth:`BatchPhysics.reset`."""
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)

    def commit(self, ids: np.ndarray) -> None:
        """See :meth:`BatchPhysics.commit`."""
        self.batch.forward(ids)

    def step(self, ids: np.ndarray | None = None) -> None:
        """See :meth:`BatchPhysics.step`."""
        self.batch.step(ids)


def resolve_warp_device(device: str) -> str:
    """``auto`` -> ``cuda:0`` when Warp sees a CUDA device, else ``cpu``; other names are checked."""
    import warp as wp

    wp.config.log_level = 30  # warnings only: no line per kernel module loaded
    wp.init()
    if device == "auto":
        return "cuda:0" if wp.is_cuda_available() else "cpu"
    if device.startswith("cuda") and not wp.is_cuda_available():
        raise SpecError(f"device: {device!r} asked for, but Warp finds no CUDA device (use 'auto' or 'cpu')")
    return device


class WarpBatch:
    """MuJoCo Warp on ``device`` (``auto``: CUDA when present); host mirrors synced around each step.

    ``nconmax`` / ``njmax``: contacts and constraint rows allocated per world (Warp's defaults suit a
    model without many contacts; a legged robot needs more, or Warp drops constraints and warns).
    """

    def __init__(self, model: mujoco.MjModel, num_worlds: int, device: str = "auto", nconmax: int | None = None,
                 njmax: int | None = None) -> None:
        try:
            import mujoco_warp as mjw
            import warp as wp
        except ImportError as exc:
            raise SpecError("physics: warp needs the 'gpu' extra (pip install mujoco-warp)") from exc
        self._wp, self._mjw = wp, mjw
        self.device = resolve_warp_device(device)
        self.qpos0 = model.qpos0.copy()
        with wp.ScopedDevice(self.device):
            self.model = mjw.put_model(model)
            self.data = mjw.make_data(model, nworld=num_worlds, nconmax=nconmax, njmax=njmax)
            self._mask = wp.zeros(num_worlds, dtype=bool)
        self.qpos = self.data.qpos.numpy().astype(np.float64)
        self.qvel = self.data.qvel.numpy().astype(np.float64)
        self.ctrl = np.zeros((num_worlds, model.nu))

    def reset(self, ids: np.ndarray) -> None:
        """Warp's ``reset_data`` for the masked worlds, and the host mirrors to ``qpos0`` / rest."""
        mask = np.zeros(len(self.qpos), dtype=bool)
        mask[ids] = True
        self._mask.assign(mask)
        self._mjw.reset_data(self.model, self.data, reset=self._mask)
        self.qpos[ids] = self.qpos0
        self.qvel[ids] = 0.0

    def commit(self, ids: np.ndarray) -> None:
        """Uploads every world's mirrors (one copy each; Warp computes kinematics inside its step)."""
        self._upload()

    def set(self, name: str, values: np.ndarray) -> None:
        """Write a whole (num_worlds, ...) Data field on the device, e.g. ``xfrc_applied`` (pushes)."""
        getattr(self.data, name).assign(np.ascontiguousarray(values, dtype=np.float32))

    def _upload(self) -> None:
        self.data.qpos.assign(self.qpos.astype(np.float32))
        self.data.qvel.assign(self.qvel.astype(np.float32))

    def step(self, ids: np.ndarray | None = None) -> None:
        """Upload ctrl, step every world, download; worlds not in ``ids`` get their state put back."""
        keep = None
        if ids is not None:
            keep = np.ones(len(self.qpos), dtype=bool)
            keep[ids] = False
            held = self.qpos[keep].copy(), self.qvel[keep].copy()
        self.data.ctrl.assign(self.ctrl.astype(np.float32))
        with self._wp.ScopedDevice(self.device):
            self._mjw.step(self.model, self.data)
        self.qpos[:] = self.data.qpos.numpy()
        self.qvel[:] = self.data.qvel.numpy()
        if keep is not None and keep.any():
            self.qpos[keep], self.qvel[keep] = held
            self._upload()


def make_batch_physics(model: mujoco.MjModel, num_worlds: int, physics: str = "mujoco", nthread: int = 2,
                       device: str = "auto") -> BatchPhysics:
    """``physics``: ``mujoco`` (C threads, the default) or ``warp`` (MuJoCo Warp on ``device``)."""
    if physics == "mujoco":
        return MujocoBatch(model, num_worlds, nthread)
    if physics == "warp":
        return WarpBatch(model, num_worlds, device)
    raise SpecError(f"physics: 'mujoco' or 'warp', got {physics!r}")
