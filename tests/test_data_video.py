"""MP4 writing and reading (robot_rl.data.video): frames come back where they were put, and a closed writer
holds nothing (an encoder's threads, a file) and refuses more frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.scheduling import process_threads
from robot_rl.data.video import VideoWriter, pick_encoder, read_video


def _threads() -> int:
    return len(process_threads())


def test_frames_come_back_at_their_timestamps_and_close_lets_the_encoder_go(tmp_path: Path) -> None:
    encoder = pick_encoder()[0]
    frames = [np.full((48, 64, 3), 30 * i, np.uint8) for i in range(6)]
    before = _threads()
    with VideoWriter(tmp_path / "v.mp4", 15, 48, 64) as writer:
        for frame in frames:
            writer.add(frame)
        during = _threads()
    assert writer.frames == 6 and writer.encoder == encoder
    assert _threads() == before, (before, during, _threads())  # the writer is still referenced, its threads gone
    writer.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        writer.add(frames[0])
    back = read_video(tmp_path / "v.mp4", 15, start_s=2 / 15, count=3)
    assert back.shape == (3, 48, 64, 3)
    np.testing.assert_allclose(back.mean(axis=(1, 2, 3)), [60, 90, 120], atol=3)  # lossy, but the right frames
    with pytest.raises(ValueError, match="not in the video"):
        read_video(tmp_path / "v.mp4", 15, start_s=5 / 15, count=2)
