"""MP4 video files of camera frames, written and read with PyAV (which bundles FFmpeg; no system ffmpeg).

LeRobot v3 stores each camera as one long video per file, episodes one after another; frame ``i`` of the
file has presentation time ``i / fps`` exactly (time base 1/fps), which is what LeRobot's loaders expect.
AV1 (``libsvtav1``, LeRobot's default) is used when this PyAV build can encode it, else H.264. SVT-AV1 puts
its threads and the caller's on SCHED_FIFO 99 when run as root; every call into the encoder is wrapped in
:class:`~robot_rl.core.scheduling.KeepScheduling`, so a recorder never outranks the robot's controller.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any

import av
import numpy as np

from robot_rl.core.scheduling import KeepScheduling

# Preferred encoders: (PyAV encoder name, codec name in info.json, encoder options).
ENCODERS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("libsvtav1", "av1", {"g": "2", "crf": "30", "preset": "10"}),
    ("libx264", "h264", {"g": "2", "crf": "23", "preset": "veryfast"}),
    ("mpeg4", "mpeg4", {"g": "2", "qscale": "3"}),
)


def pick_encoder(preferred: str | None = None) -> tuple[str, str, dict[str, str]]:
    """The first encoder this PyAV build has (or the ``preferred`` one); raises if none works."""
    for name, codec, options in ENCODERS:
        if preferred not in (None, name, codec):
            continue
        try:
            av.codec.Codec(name, "w")
        except Exception:  # PyAV raises several types for a missing codec
            continue
        return name, codec, dict(options)
    raise RuntimeError(f"no usable video encoder (wanted {preferred or [e[0] for e in ENCODERS]}) in this PyAV build")


class VideoWriter:
    """Appends RGB uint8 frames (H, W, 3) to one MP4 file at a fixed frame rate."""

    def __init__(self, path: str | Path, fps: float, height: int, width: int, encoder: str | None = None) -> None:
        if height % 2 or width % 2:
            raise ValueError(f"video frames need even height and width for yuv420p, got {height}x{width}")
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole config at info level
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.encoder, self.codec_name, options = pick_encoder(encoder)
        self.fps, self.height, self.width = fps, height, width
        self._container: Any = av.open(str(self.path), mode="w")
        rate = Fraction(fps).limit_denominator(1000)
        stream: Any = self._container.add_stream(self.encoder, rate=rate, options=options)
        self._stream = stream
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"
        self._stream.time_base = 1 / rate
        self.frames = 0
        self.bytes = 0  # encoded so far (the file itself is written lazily)

    def add(self, frame: np.ndarray) -> None:
        """Encode one frame; its timestamp is ``frames / fps``."""
        if self._container is None:
            raise ValueError(f"{self.path.name}: the video is closed")
        if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
            raise ValueError(f"{self.path.name}: expected a uint8 ({self.height}, {self.width}, 3) frame, "
                             f"got {frame.dtype} {frame.shape}")
        vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        vf.pts = self.frames
        with KeepScheduling():  # the first call opens the encoder and starts its threads
            for packet in self._stream.encode(vf):
                self.bytes += packet.size
                self._container.mux(packet)
        self.frames += 1

    def close(self) -> None:
        """Flush the encoder, finish the file and let go of the encoder (idempotent).

        SVT-AV1 holds ~40 threads until its codec context is freed, which PyAV does only with the stream object.
        """
        if self._container is None:
            return
        with KeepScheduling():
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
        self._container = self._stream = None

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def read_video(path: str | Path, fps: float, start_s: float = 0.0, count: int | None = None) -> np.ndarray:
    """Frames [start_s * fps, start_s * fps + count) of a video as uint8 (N, H, W, 3), located by timestamp."""
    first = round(start_s * fps)
    frames: dict[int, np.ndarray] = {}
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if first > 0 and stream.time_base is not None:
            container.seek(int(max(first - 2, 0) / fps / stream.time_base), stream=stream, backward=True)
        for frame in container.decode(stream):
            index = round(float(frame.time) * fps) if frame.time is not None else len(frames)
            if index < first:
                continue
            if count is not None and index >= first + count:
                break
            frames[index] = frame.to_ndarray(format="rgb24")
    wanted = range(first, first + count) if count is not None else sorted(frames)
    missing = [i for i in wanted if i not in frames]
    if missing:
        raise ValueError(f"{Path(path).name}: frames {missing[:5]}{'...' if len(missing) > 5 else ''} "
                         f"(at {fps} fps) are not in the video")
    return np.stack([frames[i] for i in wanted])
