"""An online RL stage with and without the deployment gate, side by side, from the same policy.

Runs the online config (default: the demo's DSRL stage, config/learners/online_pick_lift_dsrl.yaml) twice
for the same wall-clock budget, ``learner.gate.enabled`` false then true, then evaluates what each run
leaves as its newest version (what a user deploys after the stage) on unseen seeds without the human, and
the starting policy on the same seeds. Also reports the online record: each version's own success (task
done, no human step, the whole episode on that version) and, with the gate, its verdicts.

    python benchmarks/deployment_gate.py --policy runs/online/weights/v57 --demos runs/demo/demos.zarr

Writes ``<out>/deployment_gate.json`` and a plot (online own success per block of episodes, both runs; with
the gate its trials run hands-off, so its blocks mix hands-off and helped episodes).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pick_lift_online import CONFIGS, ROOT, success_rate

from robot_rl.core.config import load_config
from robot_rl.learners.actor_process import published_marker
from robot_rl.learners.online import OnlineResult, run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.runtime.weights import list_versions
from robot_rl.training.evaluate import wilson_interval


def own_success(result: OnlineResult) -> list[bool]:
    """Per finished episode: the task done without a human step."""
    return [bool(e["success"]) and e["intervention_steps"] == 0 for e in result.episodes]


def version_table(result: OnlineResult) -> list[dict[str, Any]]:
    """Each version's clean episodes (one version throughout; with the gate, its hands-off trial episodes) and
    its own success with a 95% interval."""
    by: dict[int, list[bool]] = {}
    gated = any(e.get("hands_off") for e in result.episodes)
    for e, ok in zip(result.episodes, own_success(result)):
        if e["version_start"] == e["version_end"] and (e.get("hands_off") or not gated):
            by.setdefault(int(e["version_start"]), []).append(ok)
    rows = []
    for v, oks in sorted(by.items()):
        lo, hi = wilson_interval(sum(oks), len(oks))
        rows.append({"version": v, "episodes": len(oks), "success": float(np.mean(oks)), "lo": lo, "hi": hi})
    return rows


def run_variant(args: argparse.Namespace, gate: bool) -> dict[str, Any]:
    """One run of the stage (gate on or off) and the evaluation of its newest version."""
    config = ROOT / "config" / "learners" / CONFIGS[args.method]
    cfg = load_config(OnlineConfig, config, ["actor.episodes=100000", f"learner.gate.enabled={str(gate).lower()}",
                                             f"learner.gate.trial_episodes={args.trial_episodes}", *args.overrides])
    cfg.policy, cfg.learner.demos = str(Path(args.policy).resolve()), args.demos
    if args.env:
        cfg.actor.env_id = args.env
    cfg.actor.env_options = json.loads(args.env_options)
    run = Path(args.out) / ("gate" if gate else "no_gate")
    t0 = time.time()
    result = run_online(cfg, run, budget_s=args.seconds, timeout=args.seconds + 900)
    versions = list_versions(run / "weights", published_marker(cfg))
    newest = versions[-1][1] if versions else None
    rate = success_rate(cfg, newest, args.eval_episodes, args.eval_seed)
    log = [json.loads(x) for x in (run / "learner_log.jsonl").read_text().splitlines()]
    own = own_success(result)
    blocks = [float(np.mean(b)) for b in np.array_split(np.array(own, float), 8) if len(b)]
    return {"gate": gate, "episodes": len(result.episodes), "seconds": time.time() - t0,
            "newest": None if newest is None else newest.name, "final_success": rate,
            "online_own_success": float(np.mean(own)) if own else None, "blocks": blocks,
            "versions": version_table(result), "verdicts": [x for x in log if "gate" in x],
            "updates": max((x.get("updates", 0) for x in log), default=0)}


def plot(report: dict[str, Any], path: Path) -> None:
    """Online own success per eighth of each run, and the final evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for r in report["runs"]:
        label = "gate" if r["gate"] else "no gate"
        ax.plot(np.arange(1, len(r["blocks"]) + 1), r["blocks"], marker="o", label=f"{label} ({r['episodes']} ep)")
    ax.set_xlabel("eighth of the run (episodes)")
    ax.set_ylabel("own success online (no human step)")
    ax.set_ylim(0, 1.05)
    ax.legend()
    names = ["start"] + ["gate" if r["gate"] else "no gate" for r in report["runs"]]
    rates = [report["start_success"]] + [r["final_success"] for r in report["runs"]]
    bx.bar(names, rates, color=["grey", "tab:blue", "tab:orange"][: len(rates)])
    bx.set_ylim(0, 1.05)
    bx.set_ylabel(f"success on {report['eval_episodes']} unseen seeds")
    for i, v in enumerate(rates):
        bx.text(i, v + 0.01, f"{v:.0%}", ha="center")
    fig.suptitle(f"{report['method']} for {report['seconds']:.0f} s from {Path(report['policy']).name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="the starting policy (e.g. the demo's HG-DAgger policy)")
    p.add_argument("--demos", default="", help="demonstrations' episode store (as the demo passes)")
    p.add_argument("--method", choices=sorted(CONFIGS), default="dsrl")
    p.add_argument("--seconds", type=float, default=300.0, help="wall-clock budget of each run (the demo's 300)")
    p.add_argument("--trial-episodes", type=int, default=10)
    p.add_argument("--env", default="", help="run and evaluate on this env instead of the config's")
    p.add_argument("--env-options", default="{}", help="JSON env options (a robot a test defines)")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--eval-seed", type=int, default=100_000)
    p.add_argument("--only", choices=["gate", "no_gate"], default=None, help="run one variant only")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--out", default="outputs/deployment_gate")
    p.add_argument("--png", default=str(ROOT / "benchmarks" / "deployment_gate.png"))
    args = p.parse_args()
    torch.set_num_threads(1)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"method": args.method, "policy": args.policy, "seconds": args.seconds,
                              "eval_episodes": args.eval_episodes, "eval_seed": args.eval_seed, "env": args.env}
    config = load_config(OnlineConfig, ROOT / "config" / "learners" / CONFIGS[args.method], args.overrides)
    config.policy = str(Path(args.policy).resolve())
    if args.env:
        config.actor.env_id = args.env
    config.actor.env_options = json.loads(args.env_options)
    report["start_success"] = success_rate(config, None, args.eval_episodes, args.eval_seed)
    print(f"start: {report['start_success']:.0%}", flush=True)
    report["runs"] = []
    for gate in (False, True):
        if args.only and args.only != ("gate" if gate else "no_gate"):
            continue
        r = run_variant(args, gate)
        report["runs"].append(r)
        lo, hi = wilson_interval(round(r["final_success"] * args.eval_episodes), args.eval_episodes)
        print(f"{'gate' if gate else 'no gate'}: {r['episodes']} episodes, {r['updates']} updates, newest "
              f"{r['newest']}: {r['final_success']:.0%} (95% CI {lo:.0%}-{hi:.0%}); online own success "
              f"{r['online_own_success']:.0%}, blocks {[round(b, 2) for b in r['blocks']]}; "
              f"{len(r['verdicts'])} verdicts ({sum(v['gate'] == 'kept' for v in r['verdicts'])} kept)", flush=True)
    (Path(args.out) / "deployment_gate.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    plot(report, Path(args.png))


if __name__ == "__main__":
    main()
