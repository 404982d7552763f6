"""Weights pushed in a narrower float type: half the bytes for every actor to receive, hash and write.

What remains of a weight push is each actor's CPU (SHA-256 and the write into its weights folder), so the
learner may send floating tensors as float16 or bfloat16 (``learner.push_dtype``). Each published
safetensors file is re-encoded once on the learner; the actors' loaders copy the tensors into their float32
networks (``load_state_dict`` casts), so the policy still runs in float32, with rounded weights. Integer and
bool tensors, the names in ``exact`` (a policy's buffers: its normaliser statistics) and any tensor the
narrow type cannot hold (beyond its range, or not finite: the actor refuses those as before) go as they are.

The file is written here rather than by ``safetensors.torch.save`` so that it is built in one pass into its
final buffer while another thread hashes what is done (SHA-256 is the slower half): packing 40 MB of float32
takes ~15 ms, no longer than hashing the 20 MB it becomes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

PUSH_DTYPES = ("float32", "float16", "bfloat16")
"""What ``learner.push_dtype`` may say: float32 sends the published files as they are."""
SOURCE = {"F32": torch.float32, "F64": torch.float64}
"""Safetensors types a narrow push re-encodes."""
CODE = {"float16": "F16", "bfloat16": "BF16"}
ITEMSIZE = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2}
"""Bytes per element (others: 1); tensors are laid out widest first so that each stays aligned."""
SLICE = 1 << 19
"""Elements converted at a time (a hash update follows each, on the other core, while the slice is in cache)."""
_warned: set[tuple[str, ...]] = set()


def restamp_policy_digest(name: str, data: memoryview, narrowed: dict[str, str]) -> bytes | None:
    """policy.json (``name``, bytes ``data``) recording the narrowed model.safetensors' SHA-256, or None.

    ``narrowed``: file name -> digest of what is sent. Policy loaders check that digest
    (robot_rl.policies.checkpoint.DIGEST_KEY) and the actor's copy is the narrowed file, so its policy.json must
    describe that one. Anything else (no policy.json, or one that records no digest) goes as is: None.
    """
    from robot_rl.policies.checkpoint import DIGEST_KEY, META_FILE, WEIGHTS_FILE

    if name != META_FILE or WEIGHTS_FILE not in narrowed:
        return None
    try:
        meta = json.loads(bytes(data))
    except ValueError:
        return None  # the actor's loader refuses it with its own message
    if not isinstance(meta, dict) or DIGEST_KEY not in meta:
        return None
    meta[DIGEST_KEY] = narrowed[WEIGHTS_FILE]
    return json.dumps(meta, indent=2).encode()


def check_push_dtype(dtype: str) -> str:
    """``dtype`` if it is one of :data:`PUSH_DTYPES`; ValueError naming them otherwise."""
    if dtype not in PUSH_DTYPES:
        raise ValueError(f"push_dtype: must be one of {', '.join(PUSH_DTYPES)}, got {dtype!r}")
    return dtype


class _Unfit(Exception):
    """A tensor the narrow type cannot hold (found while converting it)."""


def narrow_safetensors(path: str | Path, dtype: str, exact: Collection[str] = ()) -> tuple[bytearray, str]:
    """The safetensors file ``path`` with its float32/float64 tensors in ``dtype`` (metadata kept), and its SHA-256.

    A tensor in ``exact`` or beyond what ``dtype`` holds keeps its type (the latter logged once: that push is
    larger, not wrong). ValueError when ``path`` is not a safetensors file.
    """
    target = getattr(torch, check_push_dtype(dtype))
    try:
        with open(path, "rb") as f:  # copy-on-write: torch views it writable, nothing is ever written
            src = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        length = int.from_bytes(src[:8], "little")
        header = json.loads(src[8:8 + length])
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        for name, info in tensors.items():
            begin, end = info["data_offsets"]
            if not (0 <= begin <= end <= len(src) - 8 - length and isinstance(info["dtype"], str)
                    and (end - begin) % ITEMSIZE.get(info["dtype"], 1) == 0 and isinstance(info["shape"], list)):
                raise ValueError(f"tensor {name!r}: {info}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # an empty file: mmap's ValueError
        raise ValueError(f"{path}: not a safetensors file ({exc})") from None
    unfit: list[str] = []
    while True:
        try:
            encoded = _encode(src, 8 + length, tensors, header.get("__metadata__"), target, {*exact, *unfit})
            break
        except _Unfit as exc:
            unfit.append(str(exc))
    if unfit and tuple(unfit) not in _warned:
        _warned.add(tuple(unfit))
        log.warning("push_dtype %s: %s in %s beyond its range (or not finite): sent as they are",
                    dtype, ", ".join(unfit[:5]) + (f" (+{len(unfit) - 5} more)" if len(unfit) > 5 else ""),
                    Path(path).name)
    return encoded


def _encode(src: mmap.mmap, base: int, tensors: dict[str, Any], metadata: Any, target: torch.dtype,
            keep: Collection[str]) -> tuple[bytearray, str]:
    """The re-encoded file and its SHA-256; _Unfit naming a tensor ``target`` cannot hold."""
    narrowed = {name for name, info in tensors.items() if info["dtype"] in SOURCE and name not in keep}
    code = CODE[str(target).removeprefix("torch.")]
    layout, offset = {}, 0
    for name, info in sorted(tensors.items(), key=lambda kv: (-ITEMSIZE.get(kv[1]["dtype"], 1), kv[0])):
        kind = code if name in narrowed else info["dtype"]
        begin, end = info["data_offsets"]
        size = (end - begin) // ITEMSIZE[info["dtype"]] * ITEMSIZE[kind] if name in narrowed else end - begin
        layout[name] = {"dtype": kind, "shape": info["shape"], "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps({**({"__metadata__": metadata} if metadata is not None else {}), **layout},
                      separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    out = bytearray(8 + len(head) + offset)
    out[:8 + len(head)] = len(head).to_bytes(8, "little") + head
    view, start, limit = memoryview(out), 8 + len(head), torch.finfo(target).max
    digest = hashlib.sha256()
    with ThreadPoolExecutor(1) as hasher:  # one worker: the updates run in order
        hasher.submit(digest.update, view[:start])
        for name, placed in layout.items():
            (begin, end), (at, upto) = tensors[name]["data_offsets"], placed["data_offsets"]
            if name not in narrowed:
                view[start + at:start + upto] = src[base + begin:base + end]
                hasher.submit(digest.update, view[start + at:start + upto])
                continue
            count = (end - begin) // ITEMSIZE[tensors[name]["dtype"]]
            if not count:
                continue
            values = torch.frombuffer(src, dtype=SOURCE[tensors[name]["dtype"]], count=count, offset=base + begin)
            dest = torch.frombuffer(out, dtype=target, count=count, offset=start + at)
            width = dest.element_size()
            for a in range(0, count, SLICE):
                lo, hi = torch.aminmax(values[a:a + SLICE])
                if not (-limit <= lo and hi <= limit):  # NaN compares False
                    raise _Unfit(name)
                dest[a:a + SLICE].copy_(values[a:a + SLICE])
                piece = start + at + a * width
                hasher.submit(digest.update, view[piece:piece + min(SLICE, count - a) * width])
    return out, digest.hexdigest()
