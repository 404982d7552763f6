"""Offline diagnosis of pixel policies on held-out demonstrations: first-action error by step from the start.

The copycat shortcut shows as a large error at the episode start (only the cameras know where the cube is)
and a small one later (the proprioceptive history carries the answer); see robot_rl/training/diagnose.py.
Errors are shown for x/y (finding the cube) and for the yaw (turning the hand to the cube's faces). Also, for
policies with an auxiliary head, how far its cube position and yaw estimates are from the truth at the start.

    python benchmarks/pixel_diagnosis.py DATASET POLICY [POLICY ...]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from robot_rl.policies.base import Policy
from robot_rl.training.dataset import ChunkDataset
from robot_rl.training.diagnose import first_action_error

XY, YAW = (0, 1), 5
"""Action dimensions of the arm's Cartesian delta: x, y of the translation and the yaw of the rotation."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="held-out demonstrations (episode store with the policy's cameras)")
    parser.add_argument("policies", nargs="+", help="policy checkpoint folders")
    parser.add_argument("--steps", default="0,5,10,20", help="offsets from the episode start")
    parser.add_argument("--sampling-steps", default="", help="comma-separated sampling steps to compare "
                        "(default: the policy's own)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    steps = [int(s) for s in args.steps.split(",")]
    for path in args.policies:
        policy = Policy.load(path).eval()
        data = ChunkDataset.from_store(args.dataset, policy.state_keys, policy.image_keys, policy.config.n_obs_steps,
                                       policy.config.horizon)
        print(f"{path} ({policy.name}, {policy.config.n_obs_steps} obs steps, aux {policy.aux_keys or 'none'})")
        for sampling in [int(n) for n in args.sampling_steps.split(",") if n] or [None]:
            print(f"  sampling steps: {sampling or 'the policy default'}")
            for row in first_action_error(policy, data, steps, num_steps=sampling):
                print(f"    {row.summary(XY)}; yaw {float(row.error[YAW]):.3f}")
        labels = ChunkDataset.from_store(args.dataset, policy.state_keys, policy.image_keys,
                                         policy.config.n_obs_steps, policy.config.horizon,
                                         aux_keys=["object_pos", "object_yaw_in_hand"])
        batch = labels.batch(labels.starts)
        obs = {k: batch["obs"][k].numpy() for k in (*policy.state_keys, *policy.image_keys)}
        guess = policy.predict_aux(obs) if policy.aux_keys else {}
        if "object_pos" in guess:
            truth = batch["obs"]["object_pos"][:, -1].numpy()
            error_cm = np.linalg.norm(guess["object_pos"] - truth, axis=1).mean() * 100
            print(f"  aux head at the start: cube position error {error_cm:.1f} cm")
        if "object_yaw_in_hand" in guess:
            want = batch["obs"]["object_yaw_in_hand"][:, -1].numpy()
            got = guess["object_yaw_in_hand"]
            angle = np.abs(np.angle((got[:, 0] + 1j * got[:, 1]) / (want[:, 0] + 1j * want[:, 1]))) / 4
            print(f"  aux head at the start: cube yaw in the hand error {np.degrees(angle).mean():.1f} deg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
