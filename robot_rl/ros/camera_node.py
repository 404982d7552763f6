"""Camera node: an OpenCV device or video file -> Image, CompressedImage and CameraInfo.

Topics (relative, so a namespace per camera works): ``image_raw`` (sensor_msgs/Image, rgb8),
``image_raw/compressed`` (sensor_msgs/CompressedImage, JPEG; what remote and Python consumers should subscribe
to) and ``camera_info`` (from ``calibration_file`` when given: OpenCV's or ROS's calibration format, scaled to
the published size; ``rectify`` undistorts the frames with it). All stamped with the capture time and
published with sensor-data QoS (best effort, keep last 5) so a slow subscriber drops frames instead of
stalling the camera. For large raw images on one machine, launch with the shared-memory Fast DDS profile
(``config/fastdds_shm.xml``): 640x480 rgb8 at 30 Hz went from ~13 ms to ~2.4 ms p50 latency.

Images are built only for topics someone subscribes to, as image_transport does: the JPEG twin costs 5-13 ms
of CPU per 640x480 frame, a quarter of a core at 30 Hz, taken from the subscribers of ``image_raw`` on a
loaded machine. Freed frame buffers are reused (:func:`~robot_rl.ros.camera_inputs.reuse_freed_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from robot_rl.ros.camera_inputs import reuse_freed_memory
from robot_rl.ros.conversions import camera_info_msg, compressed_image_to_msg, image_to_msg
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.sensors.camera import CameraConfig, CameraError, CameraSource


@dataclass(frozen=True)
class CameraNodeConfig(CameraConfig):
    """Camera node parameters: the camera itself plus what to publish."""

    publish_raw: bool = True
    """Publish ``image_raw`` (sensor_msgs/Image)."""
    publish_compressed: bool = True
    """Publish ``image_raw/compressed`` (JPEG CompressedImage)."""
    jpeg_quality: int = 90
    """JPEG quality for the compressed stream (1-100)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in 1..100, got {self.jpeg_quality}")


class CameraNode(Node):
    """Publishes frames from one camera at its configured rate."""

    def __init__(self) -> None:
        super().__init__("camera")
        reuse_freed_memory()
        self.config = declare_config(self, CameraNodeConfig)
        self.source = CameraSource(self.config)
        self.calibration = self.config.calibration()
        qos = qos_profile_sensor_data
        self.pub_raw = self.create_publisher(Image, "image_raw", qos) if self.config.publish_raw else None
        self.pub_jpeg = (self.create_publisher(CompressedImage, "image_raw/compressed", qos)
                         if self.config.publish_compressed else None)
        self.pub_info = self.create_publisher(CameraInfo, "camera_info", qos)
        self.failures = 0
        self.timer = self.create_timer(1.0 / self.config.fps, self._tick)
        self.get_logger().info(f"camera {self.config.source!r} -> {self.config.width}x{self.config.height} "
                               f"@ {self.config.fps:g} Hz")

    def _tick(self) -> None:
        try:
            frame, stamp = self.source.read()
        except CameraError as exc:
            self.failures += 1
            self.get_logger().error(f"{exc} ({self.failures} in a row)", throttle_duration_sec=1.0)
            return
        self.failures = 0
        stamp_ns = int(stamp * 1e9)
        cfg = self.config
        raw, jpeg = self.pub_raw, self.pub_jpeg  # built only when subscribed: a late joiner gets the next frame
        if raw is not None and raw.get_subscription_count() > 0:
            raw.publish(image_to_msg(frame, stamp_ns, cfg.frame_id))
        if jpeg is not None and jpeg.get_subscription_count() > 0:
            jpeg.publish(compressed_image_to_msg(frame, stamp_ns, cfg.frame_id, cfg.jpeg_quality))
        c = self.calibration
        self.pub_info.publish(camera_info_msg(c.k, cfg.width, cfg.height, stamp_ns, cfg.frame_id, c.d,
                                              c.distortion_model))

    def close(self) -> None:
        """Release the camera."""
        self.source.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl camera_node``."""
    return run_node(CameraNode, args)
