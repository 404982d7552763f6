"""Camera calibration files -> intrinsics and distortion, scaled to the size a node publishes.

Two formats are read, the two a robot's cameras usually come with:

* OpenCV's ``cv::FileStorage`` output (``calibrateCamera`` samples, ``%YAML:1.0`` / XML / JSON):
  ``camera_matrix``, ``distortion_coefficients``, ``image_width``, ``image_height``;
* ROS's ``camera_calibration`` output (``ost.yaml``, what ``camera_info_manager`` loads):
  ``image_width``, ``image_height``, ``camera_matrix: {rows, cols, data}``, ``distortion_model``,
  ``distortion_coefficients: {data}`` and optionally ``rectification_matrix`` / ``projection_matrix``.

A calibration belongs to a resolution: :meth:`CameraCalibration.scaled` maps it to another (pixel units
scale, distortion does not), so a 640x480 calibration serves a camera node publishing 224x224 frames
resized from the same sensor. A file that does not parse, or holds non-finite or inconsistent values,
is a :class:`CalibrationError` naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml

DISTORTION_MODELS = ("plumb_bob", "rational_polynomial", "equidistant")
"""sensor_msgs/CameraInfo distortion models this reader passes on (5, 8 and 4 coefficients)."""


class CalibrationError(ValueError):
    """A calibration file that cannot be used, with the file and the field in the message."""


@dataclass(frozen=True, eq=False)
class CameraCalibration:
    """A pinhole camera with lens distortion at one resolution."""

    k: np.ndarray
    """3x3 camera matrix [px]."""
    d: np.ndarray
    """Distortion coefficients (OpenCV order: k1 k2 p1 p2 [k3 [k4 k5 k6]]; equidistant: k1..k4)."""
    width: int
    """Image width the calibration was made at [px]."""
    height: int
    """Image height the calibration was made at [px]."""
    distortion_model: str = "plumb_bob"
    """sensor_msgs/CameraInfo's name for the lens model."""

    def __post_init__(self) -> None:
        if self.k.shape != (3, 3) or not np.all(np.isfinite(self.k)) or self.k[0, 0] <= 0 or self.k[1, 1] <= 0:
            raise CalibrationError(f"camera_matrix must be a finite 3x3 with positive focal lengths, got {self.k}")
        if self.d.ndim != 1 or not np.all(np.isfinite(self.d)):
            raise CalibrationError(f"distortion coefficients must be finite numbers, got {self.d}")
        if self.width <= 0 or self.height <= 0:
            raise CalibrationError(f"image size must be positive, got {self.width}x{self.height}")
        if self.distortion_model not in DISTORTION_MODELS:
            raise CalibrationError(f"distortion_model must be one of {DISTORTION_MODELS}, "
                                   f"got {self.distortion_model!r}")

    def scaled(self, width: int, height: int) -> CameraCalibration:
        """The same camera seen at ``width`` x ``height`` (frames resized, not cropped)."""
        sx, sy = width / self.width, height / self.height
        k = self.k.copy()
        k[0, :] *= sx
        k[1, :] *= sy
        # pixel centres: OpenCV's principal point is in pixel units from the first pixel's centre
        k[0, 2] = (self.k[0, 2] + 0.5) * sx - 0.5
        k[1, 2] = (self.k[1, 2] + 0.5) * sy - 0.5
        return CameraCalibration(k, self.d.copy(), width, height, self.distortion_model)

    def undistort_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """cv2.remap maps that rectify a frame at this resolution (the camera matrix kept)."""
        size = (self.width, self.height)
        if self.distortion_model == "equidistant":
            return cv2.fisheye.initUndistortRectifyMap(self.k, self.d, np.eye(3), self.k, size, cv2.CV_16SC2)
        return cv2.initUndistortRectifyMap(self.k, self.d, None, self.k, size, cv2.CV_16SC2)


def _matrix(value: Any, name: str, path: Path) -> np.ndarray:
    """A ROS-style {rows, cols, data} mapping or a plain list -> float array."""
    if isinstance(value, dict):
        try:
            rows, cols = int(value.get("rows", 1)), int(value.get("cols", len(value["data"])))
            return np.asarray(value["data"], dtype=np.float64).reshape(rows, cols)
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{path}: {name}: {exc}") from None
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{path}: {name}: {exc}") from None


def _read_opencv(path: Path) -> CameraCalibration:
    fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_READ)
    try:
        k, d = fs.getNode("camera_matrix").mat(), fs.getNode("distortion_coefficients").mat()
        width, height = fs.getNode("image_width").real(), fs.getNode("image_height").real()
    finally:
        fs.release()
    if k is None or d is None:
        raise CalibrationError(f"{path}: camera_matrix and distortion_coefficients are required")
    d = np.asarray(d, dtype=np.float64).ravel()
    model = "rational_polynomial" if d.size >= 8 else "plumb_bob"
    return CameraCalibration(np.asarray(k, dtype=np.float64), d, int(width), int(height), model)


def _read_ros(path: Path, doc: dict[str, Any]) -> CameraCalibration:
    for key in ("image_width", "image_height", "camera_matrix", "distortion_coefficients"):
        if key not in doc:
            raise CalibrationError(f"{path}: missing {key}")
    k = _matrix(doc["camera_matrix"], "camera_matrix", path)
    d = _matrix(doc["distortion_coefficients"], "distortion_coefficients", path).ravel()
    model = str(doc.get("distortion_model", "plumb_bob"))
    try:
        return CameraCalibration(k.reshape(3, 3), d, int(doc["image_width"]), int(doc["image_height"]), model)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{path}: {exc}") from None


def load_calibration(path: str | Path) -> CameraCalibration:
    """Read an OpenCV (FileStorage) or ROS (camera_calibration) calibration file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CalibrationError(f"calibration file not found: {path}")
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith(("%YAML", "<?xml", "<opencv_storage", "{")):
        try:
            return _read_opencv(path)
        except cv2.error as exc:
            raise CalibrationError(f"{path}: OpenCV cannot read it: {exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CalibrationError(f"{path}: not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path}: expected a mapping of calibration fields")
    return _read_ros(path, doc)
