"""Fleet operations, timed: a new actor joining a running learner, and the fleet resuming after a learner kill.

    .venv/bin/python benchmarks/fleet_join_resume.py

A real learner process (residual RL on the quadrotor stand-in, TCP endpoint on 127.0.0.1) and two actor
processes (``robot-rl online actor --connect``, niced: on a fleet they run on other machines) are running when:

1. join: (a) an authenticated connection from this process (handshake, resume mark, config) is timed alone;
   (b) a third actor process is started and timed until the learner reports steps from it (Python, torch
   and MuJoCo start-up included, which dominates).
2. resume: the learner is SIGKILLed and started again on its port; timed until it serves (checkpoint
   loaded, buffers cut back to their commit) and until both actors stream to it again (they keep stepping
   into their outboxes meanwhile and re-send what the new learner's checkpoint does not hold).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robot_rl.core.config import load_config, save_config
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.fleet_status import STATUS_FILE
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.wire import CONFIG_FILE
from robot_rl.learners.online_config import OnlineConfig

QUAD = "robot_rl/QuadHover-RealStandIn-v0"


def status(run: Path) -> dict:
    try:
        return json.loads((run / STATUS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def steps_of(run: Path, actor: str) -> int:
    rows = [a for a in status(run).get("actors", []) if a["actor"] == actor and a.get("connected", True)]
    return rows[0]["steps"] if rows else 0


def wait(cond, seconds: float = 120.0) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > seconds:
            raise TimeoutError
        time.sleep(0.01)
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cfg = load_config(OnlineConfig, None, [
            f"actor.env_id={QUAD}", "actor.human_risk=action", "learner.algorithm=residual",
            "learner.residual.base=expert", "learner.residual.reward=env", "learner.device=cpu",
            "learner.update_to_data=0.05", "learner.checkpoint_every_s=2", "actor.episodes=100000",
            f"fleet.listen=127.0.0.1:{port}", "fleet.status_every_s=0.05"])
        run = tmp / "run"
        run.mkdir()
        save_config(cfg, run / CONFIG_FILE)
        roles = [sys.executable, "-m", "robot_rl.learners.roles"]
        log = (tmp / "log").open("w")

        def learner() -> subprocess.Popen[bytes]:
            return subprocess.Popen([*roles, "learner", "--run", str(run)], stdout=log, stderr=log)

        def actor(name: str, nice: int = 0) -> subprocess.Popen[bytes]:
            return subprocess.Popen(["nice", "-n", str(nice), *roles, "actor", "--connect", f"127.0.0.1:{port}",
                                     "--secret-file", str(run / "learner.key"), "--name", name, "--workdir",
                                     str(tmp / name)], stdout=log, stderr=log)

        procs = [learner()]
        wait(lambda: (run / "learner.json").is_file())
        # the running actors step flat out; niced, they stand for actors on other machines (robots step at
        # their control rate), so the joining actor's start-up is not timed against two busy simulators
        procs.append(actor("a0", 19))
        first = wait(lambda: steps_of(run, "a0") > 0)  # the machine is quiet: as an actor on its own machine
        procs.append(actor("a1", 19))
        wait(lambda: steps_of(run, "a1") > 0)
        try:
            key = bytes.fromhex((run / "learner.key").read_text())
            handshakes = []
            for k in range(5):
                client = TcpActorClient(("127.0.0.1", port), key, f"probe{k}", Outbox(tmp / f"probe{k}"))
                t0 = time.perf_counter()
                client.connect()
                handshakes.append(time.perf_counter() - t0)
                client.close()
            t0 = time.perf_counter()
            procs.append(actor("a2"))
            join = wait(lambda: steps_of(run, "a2") > 0)
            t_import = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch, mujoco, gymnasium, robot_rl.sim"], check=True)
            imports = time.perf_counter() - t_import
            print(f"join: authenticated connection (handshake + resume mark + config) {1000 * min(handshakes):.1f} ms "
                  f"(best of 5); a new actor process to its first step at the learner: {first:.2f} s on a quiet "
                  f"machine, {join:.2f} s beside the learner and two busy actors (Python + torch + MuJoCo imports "
                  f"alone take {imports:.2f} s)")

            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            killed_at = time.perf_counter()
            before = {a: steps_of(run, a) for a in ("a0", "a1")}
            (run / STATUS_FILE).unlink(missing_ok=True)
            procs[0] = learner()
            old_pid = procs[0].pid
            serving = wait(lambda: json.loads((run / "learner.json").read_text()).get("pid") == old_pid)
            wait(lambda: all(steps_of(run, a) > 0 for a in ("a0", "a1")))
            total = time.perf_counter() - killed_at
            print(f"resume after a learner SIGKILL: restarted learner serving after {serving:.2f} s, both actors "
                  f"streaming to it {total:.2f} s after the kill (connections had {before} steps)")
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
