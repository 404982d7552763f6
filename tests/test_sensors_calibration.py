"""Calibration files (OpenCV and ROS formats), scaling to the published size, rectification, frame fitting."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.calibration_files import D, K, ros_calibration_text

from robot_rl.core.spaces import SpecError
from robot_rl.sensors.calibration import CalibrationError, load_calibration
from robot_rl.sensors.camera import CameraConfig, CameraSource
from robot_rl.sensors.frames import fit_frame


def _opencv_file(path: Path) -> Path:
    fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_WRITE)
    fs.write("image_width", 640)
    fs.write("image_height", 480)
    fs.write("camera_matrix", K)
    fs.write("distortion_coefficients", D.reshape(1, 5))
    fs.release()
    return path


def test_both_formats_read_the_same_camera(tmp_path: Path) -> None:
    a = load_calibration(_opencv_file(tmp_path / "cam.yaml"))
    (tmp_path / "ost.yaml").write_text(ros_calibration_text())
    b = load_calibration(tmp_path / "ost.yaml")
    for c in (a, b):
        np.testing.assert_allclose(c.k, K)
        np.testing.assert_allclose(c.d, D)
        assert (c.width, c.height, c.distortion_model) == (640, 480, "plumb_bob")


def test_scaling_maps_the_same_ray_to_the_same_place(tmp_path: Path) -> None:
    """A 3D point projects to the same relative position in a 640x480 frame and in its 160x120 resize."""
    calib = load_calibration(_opencv_file(tmp_path / "cam.yaml"))
    small = calib.scaled(160, 120)
    point = np.array([[[0.1, -0.05, 1.0]]])
    big_px = cv2.projectPoints(point, np.zeros(3), np.zeros(3), calib.k, calib.d)[0].ravel()
    small_px = cv2.projectPoints(point, np.zeros(3), np.zeros(3), small.k, small.d)[0].ravel()
    np.testing.assert_allclose((small_px + 0.5) * 4.0 - 0.5, big_px, atol=1e-6)


def test_rectified_frames_put_a_distorted_point_back_on_its_pinhole_position(tmp_path: Path) -> None:
    calib = load_calibration(_opencv_file(tmp_path / "cam.yaml"))
    point = np.array([[[0.35, 0.25, 1.0]]])  # far from the centre: barrel distortion moves it ~10 px
    distorted = cv2.projectPoints(point, np.zeros(3), np.zeros(3), calib.k, calib.d)[0].ravel()
    ideal = cv2.projectPoints(point, np.zeros(3), np.zeros(3), calib.k, None)[0].ravel()
    assert np.linalg.norm(distorted - ideal) > 5.0
    frame = np.zeros((480, 640, 3), np.uint8)
    cv2.circle(frame, tuple(int(v) for v in np.round(distorted)), 3, (255, 255, 255), -1)
    rectified = cv2.remap(frame, *calib.undistort_maps(), interpolation=cv2.INTER_LINEAR)
    ys, xs = np.nonzero(rectified[..., 0] > 100)
    assert np.linalg.norm([xs.mean() - ideal[0], ys.mean() - ideal[1]]) < 1.5


def test_camera_source_rectifies_and_reports_the_scaled_calibration(tmp_path: Path) -> None:
    calib_path = tmp_path / "ost.yaml"
    calib_path.write_text(ros_calibration_text())
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 30, (640, 480))
    for _ in range(3):
        writer.write(np.full((480, 640, 3), 128, np.uint8))
    writer.release()
    cfg = CameraConfig(source=str(video), width=160, height=120, calibration_file=str(calib_path), rectify=True)
    c = cfg.calibration()
    assert c.k[0, 0] == pytest.approx(125.0) and np.all(c.d == 0)  # rectified: no distortion left to report
    with CameraSource(cfg) as source:
        frame, _ = source.read()
    assert frame.shape == (120, 160, 3)
    assert frame[60, 80, 0] == pytest.approx(128, abs=3)  # centre untouched; the corners are outside the lens
    unrectified = CameraConfig(source=str(video), width=160, height=120, calibration_file=str(calib_path))
    np.testing.assert_allclose(unrectified.calibration().d, D)


def test_bad_calibration_files_are_refused_with_the_field(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="not found"):
        load_calibration(tmp_path / "missing.yaml")
    (tmp_path / "a.yaml").write_text("image_width: 640\nimage_height: 480\ncamera_matrix: {rows: 3, cols: 3, "
                                     "data: [1, 0, 0, 0, 1, 0, 0, 0, 1]}\n")
    with pytest.raises(CalibrationError, match="missing distortion_coefficients"):
        load_calibration(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text(ros_calibration_text(k=K * np.nan))
    with pytest.raises(CalibrationError, match="finite 3x3"):
        load_calibration(tmp_path / "b.yaml")
    (tmp_path / "c.yaml").write_text("[1, 2, 3]")
    with pytest.raises(CalibrationError, match="mapping"):
        load_calibration(tmp_path / "c.yaml")
    with pytest.raises(ValueError, match="rectify needs a calibration_file"):
        CameraConfig(rectify=True)
    with pytest.raises(CalibrationError):
        CameraConfig(calibration_file=str(tmp_path / "b.yaml"))


def test_fit_frame_resizes_and_converts_channels() -> None:
    frame = np.zeros((480, 640, 3), np.uint8)
    frame[:240] = (255, 0, 0)  # top half red
    small = fit_frame(frame, (96, 96, 3))
    assert small.shape == (96, 96, 3) and small[10, 50, 0] == 255 and small[90, 50, 0] == 0
    mono = fit_frame(frame, (48, 64, 1))
    assert mono.shape == (48, 64, 1) and mono[5, 5, 0] == pytest.approx(76, abs=2)  # 0.299 * 255
    assert fit_frame(mono, (48, 64, 3)).shape == (48, 64, 3)
    assert fit_frame(small, (96, 96, 3)) is small
    with pytest.raises(SpecError, match="expected uint8"):
        fit_frame(frame.astype(np.float32), (96, 96, 3))
