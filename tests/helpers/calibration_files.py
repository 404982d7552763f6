"""A known camera (640x480, barrel distortion) written as ROS's camera_calibration would write it."""

from __future__ import annotations

import numpy as np

K = np.array([[500.0, 0.0, 319.5], [0.0, 480.0, 239.5], [0.0, 0.0, 1.0]])
D = np.array([-0.28, 0.09, 0.001, -0.0005, 0.0])


def ros_calibration_text(k: np.ndarray = K, d: np.ndarray = D, width: int = 640, height: int = 480) -> str:
    """An ost.yaml as ROS's camera_calibration writes it."""
    return (f"image_width: {width}\nimage_height: {height}\ncamera_name: wrist\n"
            f"camera_matrix:\n  rows: 3\n  cols: 3\n  data: {k.ravel().tolist()}\n"
            f"distortion_model: plumb_bob\ndistortion_coefficients:\n  rows: 1\n  cols: 5\n"
            f"  data: {d.tolist()}\n")
