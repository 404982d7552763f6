"""Camera node as a real process: frames arrive at >= 25 Hz with correct encoding, size and stamps."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.calibration_files import D, ros_calibration_text  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CameraInfo, CompressedImage, Image  # noqa: E402

from robot_rl.ros.conversions import (  # noqa: E402
    compressed_image_from_msg,
    image_from_msg,
    image_to_msg,
    stamp_to_seconds,
)
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402

pytestmark = pytest.mark.ros


def _video(path: Path, frames: int = 45, size: tuple[int, int] = (320, 240)) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, size)
    assert writer.isOpened()
    for i in range(frames):
        frame = np.zeros((size[1], size[0], 3), np.uint8)
        frame[:, :, 2] = 40 + 4 * i  # BGR: red channel ramps with the frame index
        cv2.rectangle(frame, (20, 20), (120, 100), (0, 255, 0), -1)
        writer.write(frame)
    writer.release()
    return path


def _graph(tmp_path: Path, source: str, calibration: str = "") -> Path:
    text = f"""
launch:
- node:
    pkg: robot_rl
    exec: camera_node
    name: wrist_camera
    namespace: cam
    param:
    - {{name: source, value: "{source}"}}
    - {{name: width, value: 160}}
    - {{name: height, value: 120}}
    - {{name: fps, value: 30}}
    - {{name: frame_id, value: wrist_optical}}
    - {{name: calibration_file, value: "{calibration}"}}
"""
    path = tmp_path / "camera.launch.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_camera_node_streams_raw_compressed_and_info(tmp_path: Path) -> None:
    video = _video(tmp_path / "clip.avi")
    (tmp_path / "ost.yaml").write_text(ros_calibration_text())  # made at 640x480, published at 160x120
    raw: list[tuple[float, Image]] = []
    jpeg: list[CompressedImage] = []
    info: list[CameraInfo] = []
    with launch(load_launch_file(_graph(tmp_path, str(video), str(tmp_path / "ost.yaml")))) as graph:
        rclpy.init()
        node = rclpy.create_node("camera_test")
        try:
            node.create_subscription(Image, "/cam/image_raw", lambda m: raw.append((time.time(), m)),
                                     qos_profile_sensor_data)
            node.create_subscription(CompressedImage, "/cam/image_raw/compressed", jpeg.append,
                                     qos_profile_sensor_data)
            node.create_subscription(CameraInfo, "/cam/camera_info", info.append, qos_profile_sensor_data)
            deadline = time.monotonic() + 30
            while len(raw) < 5 and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.05)
            assert raw, f"no frames; camera log:\n{graph.log('cam/wrist_camera')}"
            start, n0 = time.monotonic(), len(raw)
            while time.monotonic() - start < 3.0:
                rclpy.spin_once(node, timeout_sec=0.01)
            rate = (len(raw) - n0) / (time.monotonic() - start)
        finally:
            node.destroy_node()
            rclpy.shutdown()
    assert rate >= 25.0, f"{rate:.1f} Hz"
    received_at, msg = raw[-1]
    assert (msg.encoding, msg.width, msg.height, msg.header.frame_id) == ("rgb8", 160, 120, "wrist_optical")
    frame = image_from_msg(msg, (120, 160, 3))
    assert frame[30, 30, 1] > 200 and frame[30, 30, 0] < 60  # green box, RGB order after BGR->RGB
    stamps = [stamp_to_seconds(m.header.stamp) for _, m in raw]
    assert np.all(np.diff(stamps) > 0)
    assert 0 <= received_at - stamps[-1] < 0.5  # stamped at capture, delivered promptly
    decoded = compressed_image_from_msg(jpeg[-1])
    assert decoded.shape == (120, 160, 3)
    assert info[-1].width == 160 and info[-1].distortion_model == "plumb_bob"
    np.testing.assert_allclose(np.reshape(info[-1].k, (3, 3)), [[125.0, 0, 79.5], [0, 120.0, 59.5], [0, 0, 1]])
    np.testing.assert_allclose(info[-1].d, D)  # distortion does not scale with the resize


def test_camera_node_fails_clearly_on_missing_source(tmp_path: Path) -> None:
    with launch(load_launch_file(_graph(tmp_path, str(tmp_path / "missing.avi")))) as graph:
        deadline = time.monotonic() + 30
        while graph.is_running("cam/wrist_camera") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert graph.returncode("cam/wrist_camera") not in (0, None)
        assert graph.wait_for_log("cam/wrist_camera", "video file not found")


def test_image_conversions_reject_malformed_messages() -> None:
    from robot_rl.core.spaces import SpecError

    frame = np.random.default_rng(0).integers(0, 255, (4, 6, 3), dtype=np.uint8)
    msg = image_to_msg(frame, 123, "f")
    np.testing.assert_array_equal(image_from_msg(msg), frame)
    with pytest.raises(SpecError, match="expected shape"):
        image_from_msg(msg, (6, 4, 3))
    msg.data = msg.data[:-3]
    with pytest.raises(SpecError, match="do not match"):
        image_from_msg(msg)
    msg.encoding = "yuv422"
    with pytest.raises(SpecError, match="unsupported encoding"):
        image_from_msg(msg)
    with pytest.raises(SpecError, match="encoding 'mono8' does not fit 3"):
        image_to_msg(frame, 0, "f", encoding="mono8")
    bad = CompressedImage()
    bad.data = b"not a jpeg"
    with pytest.raises(SpecError, match="cannot decode"):
        compressed_image_from_msg(bad)


def test_malformed_png_is_refused_before_opencv_decodes_it() -> None:
    """A 57-byte PNG with no IDAT whose IEND claims 3.8 GB cost OpenCV 3-4 s of CPU per frame (the reliability
    drill found it); chunks with a bad CRC are refused too, a well-formed PNG still decodes."""
    from robot_rl.core.spaces import SpecError

    slow = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000eb000000070802000000a9ecdbfd0000000049444754"
                         "35af061ee400000049454e44ae426082")
    ok, png = cv2.imencode(".png", np.full((5, 7, 3), 200, np.uint8))
    good = png.tobytes()
    flipped = bytearray(good)
    flipped[40] ^= 0x01  # inside IDAT: its CRC no longer matches
    for data in (slow, bytes(flipped), good[:-12]):  # no IEND
        t0 = time.thread_time()
        with pytest.raises(SpecError, match="malformed PNG"):
            compressed_image_from_msg(CompressedImage(format="png", data=data))
        assert time.thread_time() - t0 < 0.05
    assert ok and compressed_image_from_msg(CompressedImage(format="png", data=good)).shape == (5, 7, 3)
