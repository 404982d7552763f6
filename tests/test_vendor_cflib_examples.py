"""Bitcraze's own cflib example scripts, run as written against the emulated Crazyflie.

Bitcraze ships the examples in cflib's source distribution (``examples/`` of crazyflie-lib-python);
``scripts/setup.sh`` extracts the ones of the installed cflib version next to the venv. Each script runs
unmodified in its own process, pointed at an emulator on a free UDP port through ``CFLIB_URI`` (the variable
``cflib.utils.uri_helper.uri_from_env`` reads in every example), while this test samples the simulated vehicle:
the script must exit 0 and the vehicle must have flown what the script commands.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cflib")
from helpers.ports import free_udp_port

from robot_rl.hardware.crazyflie_emulator import CrazyflieUdpServer, EmulatedCrazyflie

pytestmark = [pytest.mark.slow, pytest.mark.realtime("beside")]  # cflib flies the emulator on the wall clock


def _examples_dir() -> Path | None:
    override = os.environ.get("ROBOT_RL_CFLIB_EXAMPLES")
    if override:
        return Path(override)
    version = importlib.metadata.version("cflib")
    folder = Path(sys.prefix) / "share" / "robot_rl_vendor" / f"cflib-{version}" / "examples"
    return folder if folder.is_dir() else None


EXAMPLES = _examples_dir()


def _run_example(script: str, tmp_path: Path, timeout: float = 120.0) -> tuple[subprocess.CompletedProcess, np.ndarray]:
    """Run ``script`` against a fresh emulator; return the process and the sampled (t, x, y, z, thrust) rows."""
    assert EXAMPLES is not None
    vehicle = EmulatedCrazyflie()
    port = free_udp_port()
    server = CrazyflieUdpServer(vehicle, port=port)
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    rows: list[tuple[float, ...]] = []
    done = threading.Event()

    def sample() -> None:
        t0 = time.monotonic()
        while not done.is_set():
            x, y, z = (float(v) for v in vehicle.sim.data.qpos[:3])
            rows.append((time.monotonic() - t0, x, y, z, float(np.sum(vehicle.thrusts))))
            time.sleep(0.02)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    (tmp_path / "cache").mkdir(exist_ok=True)  # the examples' rw_cache='./cache' (TOC cache)
    try:
        proc = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "CFLIB_URI": f"udp://127.0.0.1:{port}"})
    finally:
        done.set()
        server.stop()
        serving.join(5)
        sampler.join(5)
    return proc, np.array(rows)


def _figure8(track: np.ndarray) -> None:
    """autonomous_sequence_high_level.py: take off to 1 m, a relative figure-8 (x +-1 m, y +-0.6 m), land."""
    z = track[:, 3]
    airborne = track[z > 0.8]
    assert len(airborne) > 100, z.max()
    span_x, span_y = np.ptp(airborne[:, 1]), np.ptp(airborne[:, 2])
    assert span_x > 1.8 and span_y > 1.0, (span_x, span_y)
    assert z[-1] < 0.15  # landed


def _motion_commander(track: np.ndarray) -> None:
    """motion_commander_demo.py: take off to 0.3 m, forward and back 0.8 m, up 0.5 m, ... , land."""
    z = track[:, 3]
    assert 0.7 < z.max() < 0.95, z.max()  # 0.3 m take-off + up(0.5)
    assert np.ptp(track[z > 0.2, 1]) > 0.7, np.ptp(track[z > 0.2, 1])  # forward(0.8)
    assert z[-1] < 0.15 and track[-1, 4] == 0.0  # landed, motors off


def _grounded(track: np.ndarray) -> None:
    """Logging and parameter examples never fly."""
    assert track[:, 3].max() < 0.1 and track[:, 4].max() == 0.0


CASES: list[tuple[str, Callable[[np.ndarray], None], list[str]]] = [
    ("autonomy/autonomous_sequence_high_level.py", _figure8, ["The sequence is 7.3 seconds long"]),
    ("autonomy/motion_commander_demo.py", _motion_commander, []),
    ("logging/basiclog_sync.py", _grounded, ["stabilizer.roll", "stabilizer.pitch", "stabilizer.yaw"]),
    ("parameters/basicparam.py", _grounded, ["pid_attitude.pitch_kd"]),
]


@pytest.mark.skipif(EXAMPLES is None, reason="cflib's examples are not extracted (scripts/setup.sh does it, or set "
                                              "ROBOT_RL_CFLIB_EXAMPLES to crazyflie-lib-python's examples/)")
@pytest.mark.parametrize(("script", "check", "printed"), CASES, ids=[c[0].split("/")[-1] for c in CASES])
def test_bitcraze_example_runs_unmodified(script: str, check: Callable[[np.ndarray], None], printed: list[str],
                                          tmp_path: Path) -> None:
    proc, track = _run_example(script, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for text in printed:
        assert text in proc.stdout, proc.stdout[-2000:]
    check(track)
