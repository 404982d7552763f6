"""Streaming statistics: exact moments, bounded quantile error, exact merges, images per channel."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.data.stats import QUANTILES, RunningStats, compute_stats


def test_moments_and_quantiles_match_numpy_in_one_pass(rng: np.random.Generator) -> None:
    data = np.concatenate([rng.normal(0, 1, (4000, 3)), rng.normal(40, 5, (6000, 3)) * [1, 0, 1e-3]])
    data[:, 1] = 2.5  # a constant column
    data = rng.permutation(data)
    acc = RunningStats((3,))
    for part in np.array_split(data, 53):  # batches of odd sizes, ranges growing as data arrives
        acc.update(part)
    out = acc.result()
    np.testing.assert_allclose(out["mean"], data.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["std"], data.std(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(out["min"], data.min(axis=0))
    np.testing.assert_array_equal(out["max"], data.max(axis=0))
    assert out["count"].tolist() == [len(data)]
    bound = 2 * (data.max(axis=0) - data.min(axis=0)) / 2047 + 1e-12  # the documented error bound
    for name, q in QUANTILES.items():
        exact = np.quantile(data, q, axis=0, method="inverted_cdf")
        assert np.all(np.abs(out[name] - exact) <= bound), (name, out[name], exact, bound)


def test_merge_equals_single_pass(rng: np.random.Generator) -> None:
    a, b = rng.normal(0, 1, (500, 2)), rng.normal(1000, 1, (700, 2))  # far apart: forces coarsening on merge
    one = RunningStats((2,))
    one.update(np.concatenate([a, b]))
    left, right = RunningStats((2,)), RunningStats((2,))
    left.update(a)
    right.update(b)
    left.merge(right)
    r1, r2 = one.result(), left.result()
    for key in ("mean", "std", "min", "max", "count"):
        np.testing.assert_allclose(r1[key], r2[key], rtol=1e-9)
    span = 1010 * 2 / 2047
    for name in QUANTILES:
        assert np.all(np.abs(r1[name] - r2[name]) <= 2 * span)


def test_image_stats_are_exact_per_channel(rng: np.random.Generator) -> None:
    images = rng.integers(0, 256, (12, 16, 16, 3), dtype=np.uint8)
    images[..., 2] //= 4
    out = compute_stats(({"cam": images[i:i + 5]} for i in range(0, 12, 5)), image_keys=["cam"])["cam"]
    pixels = images.reshape(-1, 3) / 255.0
    assert out["mean"].shape == (3, 1, 1)
    np.testing.assert_allclose(out["mean"].ravel(), pixels.mean(axis=0))
    np.testing.assert_allclose(out["std"].ravel(), pixels.std(axis=0))
    np.testing.assert_allclose(out["q50"].ravel(), np.quantile(pixels, 0.5, axis=0, method="inverted_cdf"))
    assert out["max"].ravel()[2] <= 63 / 255


def test_bad_batches_are_rejected() -> None:
    acc = RunningStats((3,))
    with pytest.raises(ValueError, match=r"expected steps of shape \(3,\)"):
        acc.update(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="no data"):
        acc.result()
    with pytest.raises(ValueError, match="uint8"):
        RunningStats((2, 2, 3), image=True).update(np.zeros((1, 2, 2, 3), np.float32))
