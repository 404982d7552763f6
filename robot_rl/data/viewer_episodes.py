"""What the viewers (rerun, MCAP) share: which episodes, how stamps become times, frames read in blocks.

An episode's images are read a block of rows at a time, so a long episode of large frames never sits in
memory whole; the low-dimensional columns of an episode are small and read at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from robot_rl.data.schema import DatasetError
from robot_rl.data.store import EpisodeStore

IMAGE_BLOCK = 64
"""Rows of image columns read (and sent) at a time."""
ABSOLUTE_STAMP_S = 1e9
"""Stamps at or above this (September 2001 in Unix seconds) are wall-clock times, as in an imported bag;
smaller ones count from the start of the episode (a simulator's ``step * dt``)."""


def select_episodes(store: EpisodeStore, episodes: Sequence[int] | None) -> list[int]:
    """The indices to show: ``episodes`` checked against the store, or every committed episode."""
    if store.num_episodes == 0:
        raise DatasetError(f"{store.path}: no committed episodes to show")
    if episodes is None:
        return list(range(store.num_episodes))
    bad = [i for i in episodes if not 0 <= i < store.num_episodes]
    if bad:
        raise DatasetError(f"episodes {bad}: out of range, the store has {store.num_episodes} episode(s)")
    return list(episodes)


def stamps_are_absolute(stamps: np.ndarray) -> bool:
    """Whether an episode's ``obs_stamp`` column holds wall-clock times (see :data:`ABSOLUTE_STAMP_S`)."""
    return bool(len(stamps)) and float(stamps[0]) >= ABSOLUTE_STAMP_S


def image_blocks(store: EpisodeStore, index: int, key: str,
                 block: int = IMAGE_BLOCK) -> Iterator[tuple[int, np.ndarray]]:
    """(first step, frames) of camera ``key`` in episode ``index``, ``block`` frames at a time."""
    start, stop = store.bounds(index)
    array = store.array(f"observation.{key}")
    for first in range(start, stop, block):
        yield first - start, np.asarray(array[first:min(first + block, stop)])


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    """A uint8 (H, W, C) RGB (or one-channel) frame as JPEG bytes."""
    import cv2

    if image.shape[-1] == 3:
        image = image[..., ::-1]  # OpenCV writes BGR
    elif image.shape[-1] == 4:
        image = image[..., [2, 1, 0]]  # JPEG has no alpha
    ok, data = cv2.imencode(".jpg", np.ascontiguousarray(image), [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise DatasetError(f"JPEG encoding of a {image.shape} frame failed")
    return bytes(data.tobytes())


def check_quality(quality: int | None) -> None:
    """JPEG quality: None (raw frames) or 1..100."""
    if quality is not None and not 1 <= quality <= 100:
        raise ValueError(f"jpeg quality: expected 1..100, got {quality}")
