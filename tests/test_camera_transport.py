"""Camera frames between processes: freed frame buffers are reused, the camera node builds images only for
subscribed topics, typed Image subscribers and publishers see what they always saw, bad frames are refused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.ros_spin import spin_until  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CameraInfo, CompressedImage, Image  # noqa: E402

from robot_rl.ros import camera_node  # noqa: E402
from robot_rl.ros.camera_inputs import CameraInput  # noqa: E402
from robot_rl.ros.conversions import compressed_image_from_msg, image_to_msg, stamp_to_ns  # noqa: E402
from robot_rl.sensors.camera import CameraConfig, CameraSource  # noqa: E402

pytestmark = pytest.mark.ros

FAULTS = """
import resource
import numpy as np
from robot_rl.ros.camera_inputs import reuse_freed_memory


def faults_per_frame():  # four 640x480 rgb8 buffers alive at once, as along a camera frame's path
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        buffers = [np.ones(921_600, np.uint8) for _ in range(4)]
        del buffers
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 20


before = faults_per_frame()
reuse_freed_memory()
faults_per_frame()  # the heap grows once
print(before, faults_per_frame())
"""


def test_reuse_freed_memory_keeps_frame_buffers_mapped() -> None:
    """glibc's defaults give every frame fresh pages (~225 page faults per MB); afterwards the same pages."""
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True, timeout=60)
    before, after = (float(v) for v in out.stdout.split())
    assert before > 400, out.stdout
    assert after < 5, out.stdout


def _video(path: Path, size: tuple[int, int] = (64, 48), frames: int = 8) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), 30, size)
    rng = np.random.default_rng(0)
    for _ in range(frames):
        writer.write(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))
    writer.release()
    return path


def test_camera_node_builds_images_only_for_subscribed_topics(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A typed Image subscriber gets the camera's exact pixels, encoding, step and header; no JPEG is encoded
    until someone subscribes to ``image_raw/compressed``, then it arrives; camera_info always does."""
    video = _video(tmp_path / "clip.avi")
    built: list[str] = []

    def counted(name: str) -> Callable[..., object]:
        original = getattr(camera_node, name)

        def build(*args: object, **kwargs: object) -> object:
            built.append(name)
            return original(*args, **kwargs)
        return build

    for name in ("image_to_msg", "compressed_image_to_msg"):
        monkeypatch.setattr(camera_node, name, counted(name))
    rclpy.init(args=["--ros-args", "-p", f"source:={video}", "-p", "width:=64", "-p", "height:=48",
                     "-p", "frame_id:=wrist_optical"])
    try:
        cam = camera_node.CameraNode()
        probe = rclpy.create_node("camera_probe")
        expected = CameraSource(CameraConfig(source=str(video), width=64, height=48))  # same file, same frames
        raw: list[Image] = []
        jpeg: list[CompressedImage] = []
        info: list[CameraInfo] = []
        probe.create_subscription(CameraInfo, "camera_info", info.append, qos_profile_sensor_data)
        cam._tick()
        expected.read()
        assert built == [] and spin_until(probe, 2, lambda: info), "camera_info without any image subscriber"

        probe.create_subscription(Image, "image_raw", raw.append, qos_profile_sensor_data)
        assert spin_until(probe, 2, lambda: cam.pub_raw is not None and cam.pub_raw.get_subscription_count())
        for i in range(3):
            cam._tick()
            frame, _ = expected.read()
            assert spin_until(probe, 2, lambda i=i: len(raw) > i)
            msg = raw[i]
            assert (msg.encoding, msg.height, msg.width, msg.step, msg.is_bigendian) == ("rgb8", 48, 64, 192, 0)
            assert msg.header.frame_id == "wrist_optical" and stamp_to_ns(msg.header.stamp) > 0
            np.testing.assert_array_equal(np.frombuffer(msg.data, np.uint8).reshape(48, 64, 3), frame)
        assert built == ["image_to_msg"] * 3
        assert np.all(np.diff([stamp_to_ns(m.header.stamp) for m in raw]) > 0)

        probe.create_subscription(CompressedImage, "image_raw/compressed", jpeg.append, qos_profile_sensor_data)
        assert spin_until(probe, 2, lambda: cam.pub_jpeg is not None and cam.pub_jpeg.get_subscription_count())
        cam._tick()
        frame, _ = expected.read()
        assert spin_until(probe, 2, lambda: jpeg and len(raw) == 4)
        assert built[3:] == ["image_to_msg", "compressed_image_to_msg"]
        assert jpeg[0].header.stamp == raw[3].header.stamp
        assert np.abs(compressed_image_from_msg(jpeg[0]).astype(int) - frame).mean() < 12  # JPEG is lossy
        cam.close()
    finally:
        rclpy.shutdown()


def test_camera_input_reads_typed_images_and_refuses_bad_ones() -> None:
    """Typed publishers -> CameraInput: rgb8 and bgr8 come out as the same RGB pixels, mono8 fitted to the
    first frame's 3 channels; a
    wrong step, a truncated buffer, an unknown encoding or an empty image is skipped with its reason and the
    node keeps the last good frame."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 255, (6, 10, 3), dtype=np.uint8)
    mono = rng.integers(0, 255, (6, 10), dtype=np.uint8)
    wrong_step, truncated, unknown, empty = (image_to_msg(rgb, 5, "cam") for _ in range(4))
    wrong_step.step = 29
    truncated.data = truncated.data[:-1]
    unknown.encoding = "yuv422"
    empty.height, empty.data = 0, b""
    rclpy.init()
    try:
        node = rclpy.create_node("camera_input_probe")
        warnings: list[str] = []
        cam = CameraInput(node, "cam/image_raw", None, warnings.append)
        pub = node.create_publisher(Image, "cam/image_raw", qos_profile_sensor_data)
        assert spin_until(node, 2, lambda: pub.get_subscription_count())
        for msg, want in ((image_to_msg(rgb, 1, "cam"), rgb), (image_to_msg(rgb[..., ::-1], 2, "cam", "bgr8"), rgb),
                          (image_to_msg(mono, 3, "cam", "mono8"), np.repeat(mono[..., None], 3, axis=2))):
            pub.publish(msg)
            assert spin_until(node, 2, lambda msg=msg: cam.stamp_ns == stamp_to_ns(msg.header.stamp))
            np.testing.assert_array_equal(cam.frame, want)
        for bad in (wrong_step, truncated, unknown, empty):
            pub.publish(bad)
        assert spin_until(node, 2, lambda: len(warnings) == 4), warnings
        assert cam.frames == 3 and cam.stamp_ns == 3
        np.testing.assert_array_equal(cam.frame, np.repeat(mono[..., None], 3, axis=2))
        reasons = ["180 bytes / step 29 do not match 6x10x3", "179 bytes / step 30 do not match 6x10x3",
                   "unsupported encoding 'yuv422'", "empty (0x10)"]
        for warning, reason in zip(warnings, reasons, strict=True):
            assert warning.startswith("skipping cam/image_raw: image: ") and reason in warning, warning
    finally:
        rclpy.shutdown()
