"""Fit a camera frame to the size and channels a policy or a dataset expects.

Real cameras deliver 640x480 (or larger) frames, colour or mono, raw or JPEG; policies are trained on
small square images (e.g. 96x96 RGB) rendered in simulation. :func:`fit_frame` resizes with area
averaging (what shrinking needs: no aliasing) and converts channels, so one camera serves any policy.
The aspect ratio is not preserved: the policy sees what the simulated camera of the same field of view
saw at its size, and a calibration scaled with :meth:`~robot_rl.sensors.calibration.CameraCalibration.scaled`
describes the result.
"""

from __future__ import annotations

import cv2
import numpy as np

from robot_rl.core.spaces import SpecError


def fit_frame(frame: np.ndarray, shape: tuple[int, int, int] | None) -> np.ndarray:
    """An (H, W, C) uint8 frame resized / converted to ``shape`` (returned unchanged when it fits or None)."""
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] not in (1, 3):
        raise SpecError(f"frame: expected uint8 (H, W, 1|3), got {frame.dtype.name} {frame.shape}")
    if shape is None or tuple(frame.shape) == tuple(shape):
        return frame
    h, w, c = (int(v) for v in shape)
    if h <= 0 or w <= 0 or c not in (1, 3):
        raise SpecError(f"frame: cannot fit to shape {shape}")
    out = frame
    if (out.shape[0], out.shape[1]) != (h, w):
        shrinking = h <= out.shape[0] and w <= out.shape[1]
        out = cv2.resize(out, (w, h), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
        if out.ndim == 2:  # cv2 drops a single channel
            out = out[..., None]
    if out.shape[2] != c:
        out = (cv2.cvtColor(out, cv2.COLOR_GRAY2RGB) if c == 3 else cv2.cvtColor(out, cv2.COLOR_RGB2GRAY)[..., None])
    return np.ascontiguousarray(out)
