"""Offline diagnosis of pixel policies on held-out demonstrations: first-action error by step from the start.

The copycat shortcut shows as a large error at the episode start (only the cameras know where the cube is)
and a small one later (the proprioceptive history carries the answer); see robot_rl/training/diagnose.py.
Errors are shown for x/y (finding the cube) and for the yaw (turning the hand to the cube's faces), per task
when the demonstrations hold several (a language-conditioned policy). Also, for policies with an auxiliary
head, how far each of its estimates is from the truth at the start (positions in cm).

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

XY, YAW = [0, 1], 5
"""Action dimensions of the arm's Cartesian delta: x, y of the translation and the yaw of the rotation."""


def aux_errors(policy: Policy, data: ChunkDataset) -> list[str]:
    """One line per auxiliary estimate and task: its mean error at the episode starts (``data`` holds the labels)."""
    tasks = np.array(data.tasks)
    batch = data.batch(data.starts)
    obs = {k: batch["obs"][k].numpy() for k in (*policy.state_keys, *policy.image_keys)}
    guess = policy.predict_aux(obs, task=batch["task"])
    lines = []
    for key, got in guess.items():
        want = batch["obs"][key][:, -1].numpy().reshape(len(got), -1)
        if key == "object_yaw_in_hand":  # (cos 4d, sin 4d): the angle between, in the cube's 90-deg symmetry
            turn = np.angle((got[:, 0] + 1j * got[:, 1]) / (want[:, 0] + 1j * want[:, 1]))
            error, unit = np.degrees(np.abs(turn) / 4), "deg"
        else:
            error, unit = np.linalg.norm(got - want, axis=1) * 100, "cm"
        for task in sorted(set(tasks)):
            mask = tasks == task
            lines.append(f"  aux head at the start: {key} error {error[mask].mean():.1f} {unit}"
                         + (f" [{task}]" if len(set(tasks)) > 1 else ""))
    return lines


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
                                       policy.config.horizon, aux_keys=policy.aux_keys)  # labels: never inputs
        tasks = np.array(data.tasks)
        print(f"{path} ({policy.name}, {policy.config.n_obs_steps} obs steps, aux {policy.aux_keys or 'none'})")
        for sampling in [int(n) for n in args.sampling_steps.split(",") if n] or [None]:
            print(f"  sampling steps: {sampling or 'the policy default'}")
            for row in first_action_error(policy, data, steps, num_steps=sampling):
                print(f"    {row.summary(XY)}; yaw {float(row.error[YAW]):.3f}")
                if len(set(tasks)) > 1 and row.per_episode is not None:
                    for task in sorted(set(tasks)):
                        err = row.per_episode[tasks == task]
                        print(f"      x/y {float(err[:, XY].mean()):.3f}, yaw {float(err[:, YAW].mean()):.3f} "
                              f"({len(err)} episodes) {task}")
        if policy.aux_keys:
            print("\n".join(aux_errors(policy, data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
