"""Camera sources: an OpenCV device or a video file, giving RGB uint8 frames with timestamps.

The ROS camera node and the dataset recorder both read frames through this, so a recorded dataset
and a live stream see identical preprocessing (colour order, resize).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from robot_rl.sensors.calibration import CameraCalibration, load_calibration


class CameraError(RuntimeError):
    """A camera could not be opened or stopped delivering frames."""


@dataclass(frozen=True)
class CameraConfig:
    """Which camera to open and what frames to deliver."""

    source: str = "0"
    """Device index (``"0"``), device path (``/dev/video2``) or a video file path."""
    width: int = 640
    """Output width in pixels (frames are resized when the source differs)."""
    height: int = 480
    """Output height in pixels."""
    fps: float = 30.0
    """Frame rate to deliver; files are paced to it, devices are asked for it."""
    loop: bool = True
    """Restart a video file at its end instead of stopping."""
    frame_id: str = "camera"
    """Optical frame name stamped on every frame."""
    horizontal_fov_deg: float = 69.0
    """Horizontal field of view used for the pinhole intrinsics when no calibration is given."""
    calibration_file: str = ""
    """OpenCV (FileStorage) or ROS (camera_calibration ost.yaml) calibration; "" = an ideal pinhole from
    ``horizontal_fov_deg``. Scaled to ``width`` x ``height`` for camera_info."""
    rectify: bool = False
    """Undistort frames with the calibration (at the sensor's resolution, before resizing); camera_info then
    reports no distortion."""

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"width/height must be positive, got {self.width}x{self.height}")
        if not (0 < self.fps <= 1000):
            raise ValueError(f"fps must be in (0, 1000], got {self.fps}")
        if not (1 < self.horizontal_fov_deg < 179):
            raise ValueError(f"horizontal_fov_deg must be in (1, 179), got {self.horizontal_fov_deg}")
        if self.rectify and not self.calibration_file:
            raise ValueError("rectify needs a calibration_file")
        if self.calibration_file:
            load_calibration(self.calibration_file)  # a bad file fails at start-up, naming the field

    def calibration(self) -> CameraCalibration:
        """The camera at the output size: the calibration file's, scaled, or an ideal pinhole."""
        if self.calibration_file:
            calib = load_calibration(self.calibration_file).scaled(self.width, self.height)
            if self.rectify:
                return CameraCalibration(calib.k, np.zeros_like(calib.d), self.width, self.height,
                                         calib.distortion_model)
            return calib
        fx = 0.5 * self.width / np.tan(np.deg2rad(self.horizontal_fov_deg) / 2)
        k = np.array([[fx, 0, (self.width - 1) / 2], [0, fx, (self.height - 1) / 2], [0, 0, 1]])
        return CameraCalibration(k, np.zeros(5), self.width, self.height)

    def intrinsics(self) -> np.ndarray:
        """3x3 camera matrix K for the output size (see :meth:`calibration`)."""
        return self.calibration().k


class CameraSource:
    """Reads RGB frames (H, W, 3) uint8 from an OpenCV device or a video file."""

    def __init__(self, config: CameraConfig) -> None:
        self.config = config
        self._is_file = not config.source.isdigit() and not config.source.startswith("/dev/")
        if self._is_file and not Path(config.source).is_file():
            raise CameraError(f"video file not found: {config.source}")
        device: int | str = int(config.source) if config.source.isdigit() else config.source
        self._cap = cv2.VideoCapture(device)
        if not self._cap.isOpened():
            raise CameraError(f"cannot open camera source {config.source!r}")
        if not self._is_file:
            self._cap.set(cv2.CAP_PROP_FRAME_WIDTH, config.width)
            self._cap.set(cv2.CAP_PROP_FRAME_HEIGHT, config.height)
            self._cap.set(cv2.CAP_PROP_FPS, config.fps)
        self.frames_read = 0
        self._calibration = load_calibration(config.calibration_file) if config.rectify else None
        self._maps: tuple[tuple[int, int], tuple[np.ndarray, np.ndarray]] | None = None

    def read(self) -> tuple[np.ndarray, float]:
        """The next frame as RGB uint8 (height, width, 3) and its capture time (``time.time()``).

        Raises:
            CameraError: when the device fails or a non-looping file has ended.
        """
        ok, bgr = self._cap.read()
        if not ok and self._is_file and self.config.loop:
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, bgr = self._cap.read()
        if not ok or bgr is None:
            raise CameraError(f"camera source {self.config.source!r} delivered no frame")
        stamp = time.time()
        h, w = bgr.shape[:2]
        if self._calibration is not None:
            if self._maps is None or self._maps[0] != (w, h):  # maps for the sensor's resolution, built once
                self._maps = ((w, h), self._calibration.scaled(w, h).undistort_maps())
            bgr = cv2.remap(bgr, *self._maps[1], interpolation=cv2.INTER_LINEAR)
        if (w, h) != (self.config.width, self.config.height):
            bgr = cv2.resize(bgr, (self.config.width, self.config.height), interpolation=cv2.INTER_AREA)
        self.frames_read += 1
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), stamp

    def close(self) -> None:
        """Release the device or file."""
        self._cap.release()

    def __enter__(self) -> CameraSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
