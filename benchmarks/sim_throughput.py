"""Simulation throughput: env steps/s against a raw mj_step loop of the same model, vectorised
throughput (sync vs async Gymnasium vector envs, mujoco.rollout threads) and offscreen render FPS.

Everything in one run so the ratios are measured side by side on the same (shared, 2-core) machine; the
env rows compare the compiled physics loops (robot_rl.control.kernels) with the Python callback loop:

    MUJOCO_GL=egl .venv/bin/python benchmarks/sim_throughput.py [--seconds 2] [--repeats 3] [--only-env]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import mujoco
import numpy as np

import robot_rl.sim  # noqa: F401
from robot_rl.sim.batched_quad import BatchedQuadHover
from robot_rl.sim.experts import expert_for
from robot_rl.sim.threaded import ThreadedVectorEnv
from robot_rl.sim.vector import batch_rollout, full_state, make_vector_env


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Units per second of ``fn`` (returns units done per call), run for about ``seconds``."""
    fn()  # warm-up
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        done += fn()
    return done / (time.perf_counter() - t0)


def raw_vs_env(env_id: str, seconds: float, repeats: int) -> dict[str, float]:
    """Physics steps/s of a raw mj_step loop and of the env, compiled and Python paths, side by side.

    Per repeat, in one run: ``raw`` (Python loop of mj_step, zero ctrl), ``loop_c``/``loop_py`` (the env's
    physics stretch alone, ``run_physics``: controller + actuator pipeline at every physics step, compiled
    loop / Python callback loop) and ``env_c``/``env_py`` (whole ``env.step`` with the scripted expert:
    observation, reward, IK and expert included). Returns medians over repeats of rates and of ratios to raw.
    """
    env = gym.make(env_id)
    base = env.unwrapped
    m = base.model
    d = mujoco.MjData(m)
    env.reset(seed=0)
    d.qpos[:] = base.data.qpos
    mujoco.mj_forward(m, d)
    start = full_state(m, d)
    env_start = full_state(m, base.data)
    sub = base.physics_steps
    chunks = max(1, 250 // sub)

    def raw() -> int:  # zero ctrl, restarted every 0.5 s so the robot stays near its task posture
        mujoco.mj_setState(m, d, start, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        for _ in range(250):
            mujoco.mj_step(m, d)
        return 250

    def physics() -> int:  # the env's policy-step stretches of physics, holding the reset targets
        mujoco.mj_setState(m, base.data, env_start, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        for _ in range(chunks):
            base.run_physics(sub)
        return chunks * sub

    expert = expert_for(env)
    state = {"obs": env.reset(seed=0)[0]}

    def env_steps() -> int:
        obs, _, terminated, truncated, _ = env.step(expert.act(state["obs"]))
        state["obs"] = env.reset()[0] if terminated or truncated else obs
        return sub

    runs: dict[str, list[float]] = {k: [] for k in ("raw", "loop_c", "loop_py", "env_c", "env_py")}
    for _ in range(repeats):
        runs["raw"].append(rate(raw, seconds))
        for compiled, tag in ((True, "c"), (False, "py")):
            base.compiled_physics = compiled
            env.reset(seed=0)
            env_start = full_state(m, base.data)
            runs[f"loop_{tag}"].append(rate(physics, seconds))
            state["obs"] = env.reset(seed=0)[0]
            runs[f"env_{tag}"].append(rate(env_steps, seconds))
    base.compiled_physics = base.backend.compiled_available
    out = {k: float(np.median(v)) for k, v in runs.items()}
    for k in ("loop_c", "loop_py", "env_c", "env_py"):
        out[k + "/raw"] = float(np.median(np.array(runs[k]) / np.array(runs["raw"])))
    out["substeps"] = sub
    return out


def episode_vs_replay(env_id: str, env_steps: int, repeats: int) -> dict[str, float]:
    """env.step physics steps/s with the expert (compiled / Python physics) and over raw mj_step on the SAME run.

    The episode's ctrl (and external forces) at every physics step are recorded once through the Python
    loop (the same physics as the compiled loop, tests/test_sim_throughput_paths.py), then a Python loop of
    ``mj_step`` replays them from the same start: the ratio is the env's whole overhead (controller, actuator
    pipeline, observation, reward, expert, IK) on the physics it really runs, contacts included.
    """
    env = gym.make(env_id)
    base = env.unwrapped
    m, d = base.model, base.data
    expert = expert_for(env)
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    ctrls: list[np.ndarray] = []
    forces: list[np.ndarray] = []

    def episode() -> int:
        obs = env.reset(seed=0)[0]
        done = 0
        for _ in range(env_steps):
            obs, _, terminated, truncated, _ = env.step(expert.act(obs))
            done += base.physics_steps
            if terminated or truncated:
                break
        return done

    base.compiled_physics = False
    piped = base._piped_control

    def recording() -> np.ndarray:
        u = piped()
        ctrls.append(u.copy())
        forces.append(d.xfrc_applied.copy())
        return u

    base._piped_control = recording
    env.reset(seed=0)
    start = np.empty(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, d, start, spec)
    n = episode()
    base._piped_control = piped
    base.compiled_physics = True
    act = base.actuators
    u_all, f_all = np.array(ctrls), np.array(forces)

    def replay() -> int:
        mujoco.mj_setState(m, d, start, spec)
        for u, f in zip(u_all, f_all):
            d.ctrl[act] = u
            d.xfrc_applied[:] = f
            mujoco.mj_step(m, d)
        return len(u_all)

    runs: dict[str, list[float]] = {"compiled": [], "python": [], "raw": []}
    for _ in range(repeats):
        for key in ("compiled", "python"):
            base.compiled_physics = key == "compiled"
            t0 = time.perf_counter()
            n_env = episode()
            runs[key].append(n_env / (time.perf_counter() - t0))
            assert n_env == n == len(u_all)
        t0 = time.perf_counter()
        replay()
        runs["raw"].append(len(u_all) / (time.perf_counter() - t0))
    base.compiled_physics = base.backend.compiled_available
    raw = np.array(runs["raw"])
    return {"compiled": float(np.median(runs["compiled"])), "python": float(np.median(runs["python"])),
            "raw": float(np.median(raw)), "compiled/raw": float(np.median(np.array(runs["compiled"]) / raw)),
            "python/raw": float(np.median(np.array(runs["python"]) / raw))}


def vector_rate(env_id: str, n: int, mode: str, seconds: float) -> float:
    """Env steps/s summed over ``n`` copies; mode: sync, async, threaded1 / threaded2 (physics threads)."""
    if mode.startswith("threaded"):
        venv: gym.vector.VectorEnv = ThreadedVectorEnv(env_id, n, nthread=int(mode[-1]))
    else:
        venv = make_vector_env(env_id, n, asynchronous=mode == "async")
    venv.reset(seed=0)
    action = np.zeros(venv.action_space.shape, np.float32)
    if env_id.startswith("robot_rl/Quad"):
        action[:, 0] = 0.55
    r = rate(lambda: (venv.step(action), n)[1], seconds)
    venv.close()
    return r


def batched_rate(n: int, nthread: int, seconds: float) -> float:
    """Env steps/s of BatchedQuadHover (mujoco.batch + numpy rate loop), summed over drones."""
    venv = BatchedQuadHover(n, nthread=nthread)
    venv.reset(seed=0)
    action = np.tile(np.array([0.55, 0.0, 0.0, 0.0], np.float32), (n, 1))
    return rate(lambda: (venv.step(action), n)[1], seconds)


def rollout_rates(seconds: float) -> dict[str, float]:
    """Open-loop humanoid physics steps/s: Python mj_step loop vs mujoco.rollout with 1 and 2 threads."""
    env = gym.make("robot_rl/HumanoidStand-v0")
    m = env.unwrapped.model
    d = mujoco.MjData(m)
    env.reset(seed=0)
    d.qpos[:] = env.unwrapped.data.qpos
    mujoco.mj_forward(m, d)
    s0 = full_state(m, d)
    nbatch, nstep = 32, 100
    controls = np.zeros((nbatch, nstep, m.nu))

    def loop() -> int:
        for _ in range(nbatch):
            mujoco.mj_setState(m, d, s0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
            for _ in range(nstep):
                mujoco.mj_step(m, d)
        return nbatch * nstep

    out = {"python loop": rate(loop, seconds)}
    for nthread in (1, 2):
        out[f"rollout {nthread} thread(s)"] = rate(
            lambda nt=nthread: (batch_rollout(m, s0, controls, nthread=nt), nbatch * nstep)[1], seconds)
    return out


def vector_tables(s: float, repeats: int) -> None:
    """Vector envs side by side: gym's sync and async, ThreadedVectorEnv on 1 and 2 threads, mujoco.batch."""
    print("\n## vectorised env steps/s (sum over envs; medians of alternating repeats)")
    print("| env | 1 env | 16 sync | 16 threaded, 1 thread | 16 threaded, 2 threads | threaded 2 / sync | 4 async |")
    print("|---|---|---|---|---|---|---|")
    for env_id in ("robot_rl/HumanoidWalk-v0", "robot_rl/ArmReach-v0", "robot_rl/QuadTrack-v0"):
        runs: dict[str, list[float]] = {m: [] for m in ("sync", "threaded1", "threaded2")}
        for _ in range(repeats):
            for mode, values in runs.items():
                values.append(vector_rate(env_id, 16, mode, s))
        med = {mode: float(np.median(v)) for mode, v in runs.items()}
        ratio = float(np.median(np.array(runs["threaded2"]) / np.array(runs["sync"])))
        print(f"| {env_id} | {vector_rate(env_id, 1, 'sync', s):,.0f} | {med['sync']:,.0f} | {med['threaded1']:,.0f} "
              f"| {med['threaded2']:,.0f} | {ratio:.2f} | {vector_rate(env_id, 4, 'async', s):,.0f} |", flush=True)
    print("\n## QuadHover on mujoco.batch (BatchedQuadHover), env steps/s summed over drones")
    print("| drones | 1 thread | 2 threads |")
    print("|---|---|---|")
    for n in (16, 64, 256):
        print(f"| {n} | {batched_rate(n, 1, s):,.0f} | {batched_rate(n, 2, s):,.0f} |")


def render_fps(size: int, shadows: bool, seconds: float) -> float:
    env = gym.make("robot_rl/ArmPickLift-v0", cameras=("front",), image_size=(size, size), render_shadows=shadows,
                   render_reflections=shadows)
    base = env.unwrapped
    env.reset(seed=0)
    return rate(lambda: (base.backend.render("front", size, size), 1)[1], seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats of the raw-vs-env runs")
    parser.add_argument("--only-env", action="store_true", help="stop after the raw-vs-env table (P2)")
    parser.add_argument("--only-vector", action="store_true", help="only the vector env tables")
    args = parser.parse_args()
    s = args.seconds
    if args.only_vector:
        vector_tables(s, args.repeats)
        return
    print("## raw mj_step vs env physics steps/s (P2, goal >= 0.85; medians of alternating repeats)")
    print("physics stretch = run_physics: controller + actuator pipeline at every physics step, holding targets;")
    print("env.step = the same plus observation, reward and the scripted expert at policy rate")
    print("| env | raw mj_step | stretch compiled | / raw | stretch Python | / raw | env.step compiled | / raw "
          "| env.step Python | / raw | env steps/s compiled |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for env_id in ("robot_rl/ArmPickLift-v0", "robot_rl/HumanoidStand-v0", "robot_rl/QuadHover-v0"):
        r = raw_vs_env(env_id, s, args.repeats)
        print(f"| {env_id} | {r['raw']:,.0f} | {r['loop_c']:,.0f} | {r['loop_c/raw']:.2f} | {r['loop_py']:,.0f} "
              f"| {r['loop_py/raw']:.2f} | {r['env_c']:,.0f} | {r['env_c/raw']:.2f} | {r['env_py']:,.0f} "
              f"| {r['env_py/raw']:.2f} | {r['env_c'] / r['substeps']:,.0f} |", flush=True)
    print("\n## env.step with the expert vs raw mj_step replaying the episode's own ctrl (the same physics)")
    print("| env | raw replay steps/s | env.step compiled | / raw | env.step Python | / raw |")
    print("|---|---|---|---|---|---|")
    for env_id, n in (("robot_rl/ArmPickLift-v0", 60), ("robot_rl/HumanoidStand-v0", 150),
                      ("robot_rl/QuadHover-v0", 250)):
        e = episode_vs_replay(env_id, n, args.repeats)
        print(f"| {env_id} | {e['raw']:,.0f} | {e['compiled']:,.0f} | {e['compiled/raw']:.2f} | {e['python']:,.0f} "
              f"| {e['python/raw']:.2f} |", flush=True)
    if args.only_env:
        return
    vector_tables(s, args.repeats)
    print("\n## open-loop G1 physics steps/s (32 x 100 steps)")
    for name, value in rollout_rates(s).items():
        print(f"| {name} | {value:,.0f} |")
    print("\n## render FPS, Panda scene, front camera (EGL / llvmpipe)")
    print("| size | shadows+reflections off | on | off / on |")
    print("|---|---|---|---|")
    for size in (96, 128, 224):
        off, on = render_fps(size, False, s), render_fps(size, True, s)
        print(f"| {size}x{size} | {off:.1f} | {on:.1f} | {off / on:.2f} |")


if __name__ == "__main__":
    main()
