"""Command-to-state latency of the Unitree path, side by side with the in-process simulation, in one run.

1. in-process ``LiveSim`` (what sim_node runs): submit a JointTarget, one physics step, read the state;
2. raw protocol round trip: this process writes ``rt/lowcmd`` (Cyclone DDS on lo) to a ``unitree_emulator``
   process and waits for the ``rt/lowstate`` whose ``tau_est`` shows the command's feed-forward torque;
3. the ROS graph (humanoid_real.launch.yaml, emulate:=true): ``target_joint`` (effort = a marker torque, all
   gains zeroed through ``target_joint_gains``) -> unitree_bridge -> DDS -> emulator -> DDS -> bridge ->
   ``joint_states`` whose effort shows the marker.
Also the CPU use of the emulator and bridge processes. Run: ``python benchmarks/bridge_latency_unitree.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("MUJOCO_GL", "egl")

from robot_rl.ros.isolation import claim_domain_id, isolated_ros_env

os.environ.update(isolated_ros_env())

from robot_rl.control.targets import JointTarget
from robot_rl.hardware import unitree_idl as idl
from robot_rl.hardware.unitree_dds import UnitreeDds
from robot_rl.robots import g1
from robot_rl.sim.live import LiveSim, LiveSimConfig

JOINT = 18  # left elbow
N = 200


def stats(ms: list[float]) -> str:
    a = np.array(ms)
    return f"median {np.median(a):7.3f} ms  p95 {np.percentile(a, 95):7.3f} ms  max {a.max():7.3f} ms  (n={a.size})"


def in_process() -> list[float]:
    sim = LiveSim(LiveSimConfig(robot="g1", controller="joint"))
    out = []
    for i in range(N):
        q = g1.STAND_Q.copy()
        q[JOINT] += 0.1 * (i % 2)
        t0 = time.perf_counter()
        sim.submit(JointTarget(q))
        sim.step(1)
        sim.state()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def raw_dds(domain: int) -> list[float]:
    emulator = subprocess.Popen([sys.executable, "-c", "import sys; from robot_rl.hardware.unitree_emulator "
                                 "import main; sys.exit(main())", "--domain-id", str(domain)])
    dds = UnitreeDds(domain, "lo", idl.LOWCMD_TOPIC, idl.LOWSTATE_TOPIC)
    out: list[float] = []
    try:
        deadline = time.monotonic() + 30
        while not dds.take() and time.monotonic() < deadline:
            time.sleep(0.01)
        for i in range(N + 10):
            marker = 1.0 + (i % 5)
            cmd = idl.MotorCommands.zeros()
            cmd.mode[:29] = idl.MOTOR_ENABLE
            cmd.tau[JOINT] = marker
            dds.take()
            t0 = time.perf_counter()
            dds.write(idl.lowcmd_image(0, 5, cmd))
            while time.perf_counter() - t0 < 1.0:
                states = dds.take()
                if states and abs(float(states[-1]["motor_state"]["tau_est"][JOINT]) - marker) < 1e-3:
                    if i >= 10:
                        out.append((time.perf_counter() - t0) * 1e3)
                    break
                time.sleep(0.0002)
            time.sleep(0.005)
    finally:
        emulator.terminate()
        emulator.wait(10)
        dds.close()
    return out


def cpu_percent(pids: list[int], seconds: float = 3.0) -> list[float]:
    def ticks(pid: int) -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    before = [ticks(p) for p in pids]
    time.sleep(seconds)
    hz = os.sysconf("SC_CLK_TCK")
    return [100.0 * (ticks(p) - b) / hz / seconds for p, b in zip(pids, before)]


def ros_graph(domain: int) -> tuple[list[float], dict[str, float]]:
    import rclpy
    from helpers.ros_spin import spin_until
    from sensor_msgs.msg import JointState

    from robot_rl.ros.conversions import joint_state_to_msg
    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.launch_yaml import load_launch_file
    from robot_rl.ros.qos import LATCHED

    desc = load_launch_file("humanoid_real.launch.yaml", {"emulate": "true", "domain_id": str(domain),
                                                          "ramp_time_s": "0.2"})
    out: list[float] = []
    with launch(desc) as graph:
        rclpy.init()
        node = rclpy.create_node("latency_probe")
        latest: list[JointState] = []
        node.create_subscription(JointState, "/joint_states", latest.append, 10)
        gains = node.create_publisher(JointState, "/target_joint_gains", LATCHED)
        target = node.create_publisher(JointState, "/target_joint", 10)
        gains.publish(joint_state_to_msg(g1.JOINT_NAMES, np.zeros(29), np.zeros(29)))
        assert spin_until(node, 60, until=lambda: len(latest) > 50)
        spin_until(node, 1.0)
        cpu = dict(zip(("emulator", "unitree_bridge"),
                       cpu_percent([graph._procs[n].proc.pid for n in ("emulator", "unitree_bridge")])))
        for i in range(N // 2 + 5):
            marker = 1.0 + (i % 5)
            effort = np.zeros(29)
            effort[JOINT] = marker
            latest.clear()
            t0 = time.perf_counter()
            target.publish(joint_state_to_msg(g1.JOINT_NAMES, g1.STAND_Q, np.zeros(29), effort))
            ok = spin_until(node, 1.0, until=lambda m=marker: bool(latest) and abs(latest[-1].effort[JOINT] - m) < 1e-3)
            if ok and i >= 5:
                out.append((time.perf_counter() - t0) * 1e3)
        node.destroy_node()
        rclpy.shutdown()
    return out, cpu


def main() -> None:
    domain = claim_domain_id()
    print(f"Unitree G1 command-to-state latency, {os.cpu_count()} CPUs")
    print(f"  in-process LiveSim submit+step+state : {stats(in_process())}")
    print(f"  LowCmd -> emulator -> LowState (DDS) : {stats(raw_dds(domain))}")
    ros, cpu = ros_graph(domain)
    print(f"  target_joint -> ... -> joint_states  : {stats(ros)}")
    print(f"  CPU (one core = 100%): emulator {cpu['emulator']:.0f}%, unitree_bridge {cpu['unitree_bridge']:.0f}%")


if __name__ == "__main__":
    main()
