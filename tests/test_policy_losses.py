"""Chunk steps past a handed-back human segment are not labels: they are marked and left out of the loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from robot_rl.policies import get_policy_class
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.losses import chunk_mse
from robot_rl.training.dataset import ChunkDataset

HORIZON = 4


def two_segments(open_first: bool) -> ChunkDataset:
    """Two 6-step segments; the first handed back to the policy mid-motion when ``open_first``."""
    rng = np.random.default_rng(0)
    columns = {"pos": rng.normal(size=(12, 2)).astype(np.float32)}
    return ChunkDataset(columns, rng.uniform(-1, 1, (12, 2)).astype(np.float32), np.array([6, 12]), ["", ""], [],
                        1, HORIZON, open_ends=[open_first, False])


def test_windows_mark_only_the_steps_past_an_open_end() -> None:
    batch = two_segments(open_first=True).batch(np.array([2, 4, 5, 11]))
    assert batch["action_is_pad"].tolist() == [
        [False] * 4,                   # the whole chunk lies inside the segment
        [False, False, True, True],    # two steps past the hand-back
        [False, True, True, True],
        [False] * 4,                   # a real episode end: holding the last action is a label
    ]
    assert torch.equal(batch["action"][2, 1:], batch["action"][2, :1].expand(3, 2))  # still padded, for shape
    assert "action_is_pad" not in two_segments(open_first=False).batch(np.array([5]))  # nothing to mark
    with pytest.raises(ValueError, match="open_ends"):
        ChunkDataset({"pos": np.zeros((4, 2), np.float32)}, np.zeros((4, 2), np.float32), np.array([4]), [""], [],
                     1, HORIZON, open_ends=[True, False])


class Blind(nn.Module):
    """Stands in for the action network: its output does not depend on the noisy chunk it is given, so the loss
    depends on the targets only through the loss itself (a real network also sees them inside the noisy chunk,
    as LeRobot's masked diffusion loss does)."""

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = x * 0 + 0.1
        return out, out.flatten(1)


@pytest.mark.parametrize("name", ["flow", "diffusion", "meanflow"])
def test_the_loss_ignores_the_marked_targets_and_only_them(name: str) -> None:
    data = two_segments(open_first=True)
    torch.manual_seed(0)
    cls = get_policy_class(name)
    policy = cls(cls.config_cls(horizon=HORIZON, n_obs_steps=1, unet_channels=(16,), kernel_size=3,
                                executor=ExecutorConfig(n_action_steps=2)), data.spec)
    policy.set_stats(data.stats())
    policy.net = Blind()
    batch = data.batch(np.array([1, 4, 5, 9]))

    def loss(action: torch.Tensor, mask: bool = True) -> float:
        torch.manual_seed(1)  # the same noise and times for every call
        b = {**batch, "action": action}
        if not mask:
            b.pop("action_is_pad")
        loss, metrics = policy.compute_loss(b)
        return metrics.get("meanflow_mse", float(loss))  # MeanFlow's adaptive weighting keeps its loss near 1

    pad = batch["action_is_pad"]
    moved = batch["action"].clone()
    moved[pad] = 3.0 - moved[pad]  # other targets where no one recorded anything
    assert loss(moved) == pytest.approx(loss(batch["action"]), rel=1e-6)
    assert loss(moved, mask=False) != pytest.approx(loss(batch["action"], mask=False), rel=1e-3)  # unmasked: counts
    labelled = batch["action"].clone()
    labelled[1, 0] = 3.0 - labelled[1, 0]  # a recorded step does count
    assert loss(labelled) != pytest.approx(loss(batch["action"]), rel=1e-3)


def test_chunk_mse_averages_over_the_valid_steps_only() -> None:
    pred, target = torch.zeros(2, 3, 2), torch.ones(2, 3, 2)
    target[0, 2] = 10.0
    valid = torch.tensor([[True, True, False], [True, False, False]])
    assert float(chunk_mse(pred, target, valid)) == pytest.approx(1.0)  # the 10s are not counted
    assert float(chunk_mse(pred, target)) == pytest.approx((10 * 1 + 2 * 100) / 12)
