"""One camera stream in, raw or compressed, as frames of the size a consumer expects.

Real robots' cameras are often only reachable as ``sensor_msgs/CompressedImage`` (image_transport's
``<topic>/compressed``: JPEG over Wi-Fi or from a driver that only compresses) and at their own
resolution. :class:`CameraInput` subscribes either message type (chosen by the topic: a name ending in
``/compressed`` is a CompressedImage), decodes, and fits each frame to the consumer's shape
(:func:`robot_rl.sensors.frames.fit_frame`). A frame that cannot be decoded is skipped with a
rate-limited warning and the previous frame stays; nothing downstream sees a partial image.

Processes that move camera frames call :func:`reuse_freed_memory` (CameraInput and the camera node do): a
640x480 frame is copied through several fresh ~1 MB buffers per hop, and glibc returned each to the OS, so
every frame paid for page faults again.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image

from robot_rl.core.spaces import SpecError
from robot_rl.ros.conversions import compressed_image_from_msg, image_from_msg
from robot_rl.sensors.frames import fit_frame

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20
"""Allocations below this come from the heap (32 MiB, glibc's maximum: a 4K rgb8 frame is 25 MB)."""
TRIM_THRESHOLD = 64 << 20
"""Free heap kept for reuse before glibc gives memory back to the OS."""


def reuse_freed_memory() -> None:
    """Keep freed frame-sized buffers in this process's heap for the next frame (a no-op without glibc).

    glibc serves large blocks with mmap from a threshold it raises as blocks are freed (~1 MB here) and
    trims the heap top above twice that, so the image message, CDR buffer, DDS payload and Python copy of
    each 640x480 rgb8 frame kept landing on fresh pages: ~800 page faults per frame in the camera node and
    ~650 in a subscriber, half of the 5 ms p50 latency (benchmarks/ros_transport.py). With fixed thresholds
    above a frame's size the same pages are reused (< 3 faults per frame). Process-wide and idempotent.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


TRANSPORTS = ("raw", "compressed")
"""image_transport names: ``raw`` = ``<camera>/image_raw`` (Image), ``compressed`` = ``.../compressed``."""


def camera_topic(camera: str, transport: str) -> str:
    """The topic a camera's frames arrive on for ``transport`` (``front`` -> ``front/image_raw[/compressed]``)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"image_transport must be one of {TRANSPORTS}, got {transport!r}")
    return f"{camera}/image_raw" + ("/compressed" if transport == "compressed" else "")


def decode_frame(msg: Image | CompressedImage) -> np.ndarray:
    """An (H, W, C) uint8 RGB (or mono) array from either message type; SpecError when it cannot be read."""
    if isinstance(msg, CompressedImage):
        return compressed_image_from_msg(msg)
    return image_from_msg(msg)


class CameraInput:
    """Keeps the latest frame of one camera topic, fitted to ``shape`` (None: as received)."""

    def __init__(self, node: Node, topic: str, shape: tuple[int, int, int] | None,
                 warn: Callable[[str], Any], qos: Any = qos_profile_sensor_data) -> None:
        reuse_freed_memory()
        self.topic, self.shape, self._warn = topic, shape, warn
        self.frame: np.ndarray | None = None
        self.stamp_ns = 0
        self.frames = 0
        self.received: float | None = None
        """time.monotonic() at the last frame's arrival (a clock no sim-time jump moves)."""
        msg_type = CompressedImage if topic.rstrip("/").endswith("/compressed") else Image
        self.subscription = node.create_subscription(msg_type, topic, self._on_msg, qos)

    def _on_msg(self, msg: Image | CompressedImage) -> None:
        try:
            frame = fit_frame(decode_frame(msg), self.shape)
        except SpecError as exc:
            self._warn(f"skipping {self.topic}: {exc}")
            return
        if self.shape is None:  # the first frame fixes the size: a consumer's columns cannot change shape
            self.shape = (int(frame.shape[0]), int(frame.shape[1]), int(frame.shape[2]))
        self.frame = frame
        self.received = time.monotonic()
        self.stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self.frames += 1
