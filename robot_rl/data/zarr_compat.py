"""The one place that knows zarr 2 from zarr 3.

zarr 3 needs Python >= 3.11, so Python 3.10 users get zarr 2.18. Both read and write the zarr
*format* 2 on disk, so stores always use format 2: a store written on one machine opens on the other.
Both local stores write each chunk and metadata file atomically (temporary file, then rename), which
is what makes a killed writer leave every committed episode readable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr

ZARR_MAJOR = int(zarr.__version__.split(".")[0])


def open_group(path: str | Path, mode: str) -> Any:
    """Open (mode "r", "r+", "a") or create (mode "w-") a format-2 group on the local disk."""
    if ZARR_MAJOR >= 3:
        return zarr.open_group(store=str(path), mode=mode, zarr_format=2)  # type: ignore[arg-type,unused-ignore]
    return zarr.open_group(str(path), mode=mode)  # type: ignore[arg-type,unused-ignore]


def image_compressor() -> Any:
    """Blosc-zstd with bit shuffle: smooth uint8 images shrink 2-4x at ~100 MB/s per core."""
    return numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.BITSHUFFLE)


def lowdim_compressor() -> Any:
    """Blosc-lz4 with byte shuffle: fast for small float/int columns."""
    return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)


def create_array(group: Any, name: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype,
                 compressor: Any) -> Any:
    """A new array in ``group`` (zarr 3 ``create_array`` / zarr 2 ``create_dataset``).

    Every chunk is written, even one equal to the fill value, so a chunk file that is missing on
    disk always means damage (an incomplete copy), never "all zeros" (see :func:`get_array`).
    """
    fill = np.zeros((), dtype=dtype).item()
    if ZARR_MAJOR >= 3:
        return group.create_array(name, shape=shape, chunks=chunks, dtype=dtype, compressor=compressor,
                                  fill_value=fill, config={"write_empty_chunks": True})
    return group.create_dataset(name, shape=shape, chunks=chunks, dtype=dtype, compressor=compressor,
                                fill_value=fill, write_empty_chunks=True)


def get_array(group: Any, name: str) -> Any:
    """Open an existing array so that it, too, writes chunks equal to the fill value (zarr 3 skips them)."""
    if ZARR_MAJOR >= 3:
        with zarr.config.set({"array.write_empty_chunks": True}):
            return group[name]
    return group[name]  # zarr 2 writes empty chunks by default


def chunk_file(array_dir: Path, chunk_index: int, ndim: int) -> Path:
    """Path of the chunk holding rows ``chunk_index * chunks[0] ...`` (format 2, "." separator)."""
    return array_dir / ".".join([str(chunk_index)] + ["0"] * (ndim - 1))


def array_names(group: Any) -> list[str]:
    """Names of the arrays directly in ``group``."""
    return sorted(group.array_keys())
