"""What a process of the stack imports at start-up: every node, actor and learner is a process of its own (a test
run starts hundreds, a robot a dozen at each launch), and some libraries cost 0.3-1 s of CPU to import. Those
stay out of the entry points' import path and are imported where they are used."""

from __future__ import annotations

import json
import subprocess
import sys

LIGHT = ["robot_rl.cli.main", "robot_rl.ros.controller_node", "robot_rl.ros.safety_node", "robot_rl.ros.sim_node",
         "robot_rl.ros.camera_node", "robot_rl.ros.target_gate_node", "robot_rl.ros.teleop_node",
         "robot_rl.ros.recorder_node", "robot_rl.hardware.unitree_emulator", "robot_rl.hardware.crazyflie_emulator",
         "robot_rl.hardware.px4_emulator"]
"""Entry points that run no network: no torch either."""
TORCH = ["robot_rl.learners.actor_process", "robot_rl.learners.learner_process", "robot_rl.ros.policy_node",
         "robot_rl.ros.learner_node"]
HEAVY = ["scipy.stats", "scipy.spatial", "scipy.optimize", "matplotlib", "pandas", "pyarrow", "ray", "numba", "av",
         "rerun"]
"""CPU to import each beside numpy, measured on the 2-core machine: scipy.stats ~0.9 s, matplotlib.pyplot 0.45 s,
ray 0.4 s, numba 0.3 s, scipy.spatial ~0.3 s; pandas, pyarrow and PyAV ~0.05 s each but pull in more."""

PROBE = """
import json, sys
out = {}
for phase, names in json.loads(sys.argv[1]):
    for name in names:
        __import__(name)
    out[phase] = sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)
print(json.dumps(out))
"""


def test_entry_points_leave_the_slow_imports_to_where_they_are_used() -> None:
    phases = [["light", LIGHT], ["torch", TORCH]]
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(phases), json.dumps([*HEAVY, "torch"])],
                         capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["light"] == [], seen  # not even torch: these processes run no network
    assert seen["torch"] == ["torch"], seen
