"""Inference latency per action chunk for each policy on CPU, and 1-step vs 100-step sampling on one network.

Policies are built with the pick-and-lift shapes (32 state features, 7-D actions, 2 observation steps,
16-step chunks, U-Net channels 32/64, as in config/policies/*_pick_lift.yaml); latency does not depend on
the weights' values, so untrained weights are used and no dataset is needed.

    .venv/bin/python benchmarks/policy_latency.py [--repeats 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from robot_rl.core.config import load_config
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import Policy, PolicySpec

SPEC = PolicySpec({"state": 32}, {}, 7)
IMAGE_SPEC = PolicySpec({"state": 32}, {"front": (84, 84, 3)}, 7)
COMMON = {"n_obs_steps": 2, "horizon": 16, "unet_channels": [32, 64]}


def build(name: str, spec: PolicySpec = SPEC, **extra: object) -> Policy:
    klass = get_policy_class(name)
    policy = klass(load_config(klass.config_cls, {**COMMON, **extra}), spec)
    stats = {k: {"min": -np.ones(d), "max": np.ones(d)} for k, d in spec.state_dims.items()}
    stats["action"] = {"min": -np.ones(spec.action_dim), "max": np.ones(spec.action_dim)}
    policy.set_stats(stats)
    return policy.eval()


def obs_for(spec: PolicySpec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs: dict[str, np.ndarray] = {k: rng.standard_normal((2, d)).astype(np.float32) for k, d in spec.state_dims.items()}
    for k, shape in spec.image_shapes.items():
        obs[k] = rng.integers(0, 255, (2, *shape), dtype=np.uint8)
    return obs


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases: list[tuple[str, Policy, PolicySpec, int | None]] = [
        ("diffusion DDIM 10 steps", build("diffusion"), SPEC, 10),
        ("diffusion DDPM 100 steps", build("diffusion", sampler="ddpm"), SPEC, None),
        ("flow Euler 10 steps", build("flow"), SPEC, 10),
        ("meanflow 1 step", build("meanflow"), SPEC, 1),
        ("vla (84x84 camera + text) flow 10 steps", build("vla", IMAGE_SPEC, image_keys=["front"]), IMAGE_SPEC, 10),
    ]
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}; ms per chunk (16 x 7)")
    for label, policy, spec, steps in cases:
        obs = obs_for(spec)
        ms = median_ms(lambda p=policy, o=obs, s=steps: p.predict_chunk(o, num_steps=s), args.repeats)
        print(f"  {label:44s} {ms:8.2f} ms")
    print("same network, 1 step vs 100 steps:")
    for name in ("meanflow", "flow"):
        policy, obs = build(name), obs_for(SPEC)
        one = median_ms(lambda p=policy, o=obs: p.predict_chunk(o, num_steps=1), args.repeats)
        hundred = median_ms(lambda p=policy, o=obs: p.predict_chunk(o, num_steps=100), max(5, args.repeats // 5))
        print(f"  {name:10s} 1 step {one:7.2f} ms, 100 steps {hundred:8.2f} ms, ratio {hundred / one:6.1f}x")


if __name__ == "__main__":
    main()
