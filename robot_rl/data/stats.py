"""Dataset statistics for policy normalisation in one streaming pass: mean, std, min, max, quantiles.

Mean and variance use Chan's parallel update (:class:`RunningMeanVar`: exact, numerically stable,
mergeable). Quantiles come from a per-dimension *dyadic histogram*: ``nbins`` bins of width 2**k on a fixed
grid; when a value falls outside the window, pairs of bins merge (k += 1) until everything fits. No second
pass and no sample is kept, histograms of different batches or episodes merge exactly, and a quantile is off
by at most one bin width, i.e. below ``2 * (max - min) / (nbins - 1)`` (0.1 % of the data range for 2048
bins). uint8 images are counted exactly per channel (256 bins) and reported on the [0, 1] scale, with shape
(C, 1, 1), as LeRobot does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.data.schema import DatasetError

if TYPE_CHECKING:
    from robot_rl.data.store import EpisodeStore

QUANTILES: dict[str, float] = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
_MIN_EXP = -40  # finest bin width 2**-40: constant columns still get a valid histogram


class _DyadicHistogram:
    """Counts of one scalar dimension on the grid [i * 2**k, (i + 1) * 2**k)."""

    def __init__(self, nbins: int) -> None:
        self.nbins = nbins
        self.k = _MIN_EXP
        self.b0 = 0  # absolute index of counts[0]
        self.counts: np.ndarray | None = None

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        values = values.astype(np.float64, copy=False)
        lo, hi = float(values.min()), float(values.max())
        if self.counts is None:
            span = hi - lo
            self.k = max(_MIN_EXP, math.ceil(math.log2(span / (self.nbins - 1)))) if span > 0 else _MIN_EXP
            self.b0 = math.floor(lo / 2.0**self.k)
            self.counts = np.zeros(self.nbins, dtype=np.int64)
        self._cover(lo, hi)
        idx = np.floor(values / 2.0**self.k).astype(np.int64) - self.b0
        self.counts += np.bincount(np.clip(idx, 0, self.nbins - 1), minlength=self.nbins)

    def merge(self, other: _DyadicHistogram) -> None:
        if other.counts is None:
            return
        if self.counts is None:
            self.k, self.b0, self.counts = other.k, other.b0, other.counts.copy()
            return
        other = other.copy()
        while other.k < self.k:
            other._coarsen()
        while self.k < other.k:
            self._coarsen()
        assert other.counts is not None
        occ = np.flatnonzero(other.counts)
        if occ.size == 0:
            return
        width = 2.0**self.k
        self._cover((other.b0 + occ[0]) * width, (other.b0 + occ[-1]) * width)
        while other.k < self.k:
            other._coarsen()
        idx = other.b0 + np.arange(self.nbins) - self.b0
        assert other.counts is not None and self.counts is not None
        keep = other.counts > 0
        self.counts += np.bincount(idx[keep], weights=other.counts[keep], minlength=self.nbins).astype(np.int64)

    def copy(self) -> _DyadicHistogram:
        out = _DyadicHistogram(self.nbins)
        out.k, out.b0 = self.k, self.b0
        out.counts = None if self.counts is None else self.counts.copy()
        return out

    def quantile(self, q: float, lo: float, hi: float) -> float:
        assert self.counts is not None
        cum = np.cumsum(self.counts)
        target = q * cum[-1]
        j = int(np.searchsorted(cum, target, side="left"))
        before = cum[j - 1] if j else 0
        frac = (target - before) / max(self.counts[j], 1)
        value = (self.b0 + j + frac) * 2.0**self.k
        return float(min(max(value, lo), hi))

    def _cover(self, lo: float, hi: float) -> None:
        """Coarsen and shift until [lo, hi] and every counted bin fit in the window."""
        assert self.counts is not None
        while True:
            width = 2.0**self.k
            occ = np.flatnonzero(self.counts)
            first = min(math.floor(lo / width), self.b0 + int(occ[0]) if occ.size else math.floor(lo / width))
            last = max(math.floor(hi / width), self.b0 + int(occ[-1]) if occ.size else math.floor(hi / width))
            if last - first < self.nbins:
                if first != self.b0:
                    shifted = np.zeros_like(self.counts)
                    if occ.size:
                        shifted[occ + self.b0 - first] = self.counts[occ]
                    self.counts, self.b0 = shifted, first
                return
            self._coarsen()

    def _coarsen(self) -> None:
        assert self.counts is not None
        new_b0 = self.b0 // 2
        idx = (self.b0 + np.arange(self.nbins)) // 2 - new_b0
        self.counts = np.bincount(idx, weights=self.counts, minlength=self.nbins)[: self.nbins].astype(np.int64)
        self.b0, self.k = new_b0, self.k + 1


class RunningMeanVar:
    """Running count, mean and (population) variance of ``dim``-vectors, merged batch by batch.

    Chan et al.'s parallel update: exact, numerically stable, mergeable. The one implementation of running
    moments: :class:`RunningStats` (dataset statistics) and robot_rl.rl.normalization.RunningNorm (the
    observation normaliser of RL from scratch) build on it. Before any data: mean 0, variance 1, count 0.
    """

    def __init__(self, dim: int) -> None:
        self.mean = np.zeros(dim, dtype=np.float64)
        self.var = np.ones(dim, dtype=np.float64)
        self.count = 0.0

    def update(self, batch: np.ndarray) -> None:
        """Merge the mean and variance of a (B, dim) batch (any shape with B * dim values)."""
        x = np.asarray(batch, dtype=np.float64).reshape(-1, self.mean.shape[0])
        if x.shape[0]:
            self.merge_moments(x.shape[0], x.mean(axis=0), x.var(axis=0))

    def merge_moments(self, n: float, mean: np.ndarray, var: np.ndarray) -> None:
        """Merge ``n`` samples of mean ``mean`` and population variance ``var``."""
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + var * n + delta**2 * self.count * n / total) / total
        self.count = total


class RunningStats(RunningMeanVar):
    """Streaming statistics of one feature; update with batches (T, *shape), merge across workers."""

    def __init__(self, shape: Sequence[int], image: bool = False, nbins: int = 2048) -> None:
        self.shape = tuple(shape)
        self.image = image
        self.dims = self.shape[-1] if image else int(np.prod(self.shape, dtype=np.int64))
        super().__init__(self.dims)
        self.min = np.full(self.dims, np.inf)
        self.max = np.full(self.dims, -np.inf)
        self.samples = 0  # steps seen (LeRobot's "count")
        self._image_counts = np.zeros((self.dims, 256), dtype=np.int64) if image else None
        self._hists = [] if image else [_DyadicHistogram(nbins) for _ in range(self.dims)]

    def update(self, batch: np.ndarray) -> None:
        """Add a batch of steps with shape (T, *shape)."""
        batch = np.asarray(batch)
        if batch.shape[1:] != self.shape:
            raise ValueError(f"expected steps of shape {self.shape}, got a batch of shape {batch.shape}")
        if batch.shape[0] == 0:
            return
        self.samples += batch.shape[0]
        if self.image:
            if batch.dtype != np.uint8:
                raise ValueError(f"image statistics need uint8 images, got {batch.dtype}")
            flat = batch.reshape(-1, self.dims)
            assert self._image_counts is not None
            for c in range(self.dims):
                self._image_counts[c] += np.bincount(flat[:, c], minlength=256)
            values = flat.astype(np.float64) / 255.0
        else:
            values = batch.reshape(batch.shape[0], -1).astype(np.float64)
            for d, hist in enumerate(self._hists):
                hist.add(values[:, d])
        super().update(values)
        self.min = np.minimum(self.min, values.min(axis=0))
        self.max = np.maximum(self.max, values.max(axis=0))

    def merge(self, other: RunningStats) -> None:
        """Fold another accumulator of the same feature into this one (exact)."""
        if other.shape != self.shape or other.image != self.image:
            raise ValueError(f"cannot merge statistics of shape {other.shape} into {self.shape}")
        if other.count == 0:
            return
        self.merge_moments(other.count, other.mean, other.var)
        self.min, self.max = np.minimum(self.min, other.min), np.maximum(self.max, other.max)
        self.samples += other.samples
        if self._image_counts is not None and other._image_counts is not None:
            self._image_counts += other._image_counts
        for mine, theirs in zip(self._hists, other._hists):
            mine.merge(theirs)

    def result(self) -> dict[str, np.ndarray]:
        """mean, std, min, max, count and q01/q10/q50/q90/q99 (images: (C, 1, 1) on the [0, 1] scale)."""
        if self.count == 0:
            raise ValueError("no data: statistics of an empty feature")
        out = {"mean": self.mean.copy(), "std": np.sqrt(self.var), "min": self.min.copy(),
               "max": self.max.copy()}
        for name, q in QUANTILES.items():
            out[name] = np.array([self._quantile(d, q) for d in range(self.dims)])
        shaped = {k: (v.reshape(self.dims, 1, 1) if self.image else v.reshape(self.shape)) for k, v in out.items()}
        shaped["count"] = np.array([self.samples])
        return shaped

    def _quantile(self, d: int, q: float) -> float:
        if self._image_counts is not None:
            cum = np.cumsum(self._image_counts[d])
            return float(np.searchsorted(cum, q * cum[-1], side="left")) / 255.0
        return self._hists[d].quantile(q, float(self.min[d]), float(self.max[d]))


def compute_stats(batches: Iterable[Mapping[str, np.ndarray]], image_keys: Iterable[str] = ()) -> dict[str, Any]:
    """Statistics of every key over a stream of column batches ({key: (T, ...)}) in one pass."""
    images = set(image_keys)
    acc: dict[str, RunningStats] = {}
    for batch in batches:
        for key, values in batch.items():
            if key not in acc:
                acc[key] = RunningStats(np.shape(values)[1:], image=key in images)
            acc[key].update(np.asarray(values))
    return {key: a.result() for key, a in acc.items()}


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Nested lists (what meta/stats.json holds)."""
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def store_stats(store: EpisodeStore, columns: Sequence[str] | None = None, batch_frames: int = 256,
                progress: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Statistics of a store's per-step columns (default: observations, actions, reward) in one pass.

    ``policy_action`` / ``base_action`` rows that were not proposed (NaN) are left out.
    """
    from tqdm import tqdm

    schema = store.schema
    if schema is None or store.num_frames == 0:
        raise DatasetError(f"{store.path}: no data to compute statistics of")
    if columns is None:
        columns = [f"observation.{k}" for k in schema.observation] + ["action", "policy_action", "base_action",
                                                                     "reward"]
    images = {f"observation.{k}" for k in schema.image_keys}
    specs = schema.columns()
    acc = {c: RunningStats(specs[c][0] or (1,), image=c in images) for c in columns}
    for start in tqdm(range(0, store.num_frames, batch_frames), desc="stats", unit="batch", disable=not progress):
        stop = min(start + batch_frames, store.num_frames)
        for c in columns:
            try:
                values = np.asarray(store.array(c)[start:stop])
            except Exception as exc:
                raise DatasetError(f"field {c}: rows {start}..{stop - 1} cannot be read ({exc})") from exc
            if c not in images:
                values = values.reshape(len(values), -1)
                values = values[~np.isnan(values.astype(np.float64)).any(axis=1)]
            acc[c].update(values)
    return {c: a.result() for c, a in acc.items() if a.count}
