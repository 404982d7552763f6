"""Command-to-state latency of a Crazyflie through cflib + UDP + the emulator, next to the in-process sim.

Side by side in one run, on the same cf2x model and controller:

* ``in-process sim``: :class:`robot_rl.sim.live.LiveSim` (what ``sim_node`` steps) takes a body-rate target
  and is stepped until its yaw rate crosses the threshold: the vehicle's own response time (sim time);
* ``cflib + UDP + emulator``: the bridge core (:class:`~robot_rl.hardware.crazyflie_link.CrazyflieLink`)
  submits the same step to ``crazyflie_emulator`` running as its own process, and waits for the first state
  log sample past the threshold (wall time): response + transport + the 10 ms log period;
* ``CRTP echo``: a link-service echo round trip through cflib and UDP (transport alone).

Run: ``python benchmarks/bridge_latency_crazyflie.py [--trials 15]``.
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np

from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.hardware.crazyflie_failsafe import CrazyflieFailsafe, FailsafeConfig, PositionCommand, RateCommand
from robot_rl.hardware.crazyflie_link import CrazyflieLink, CrazyflieLinkConfig
from robot_rl.robots import cf2x
from robot_rl.sim.live import LiveSim, LiveSimConfig

HOVER = cf2x.MASS * cf2x.GRAVITY
STEP = 2.0
"""Yaw-rate step [rad/s]."""
THRESHOLD = 0.5
"""Yaw rate [rad/s] that counts as the response."""


def stats(values: list[float]) -> str:
    a = np.asarray(values) * 1000.0
    return f"median {np.median(a):6.1f} ms   p90 {np.percentile(a, 90):6.1f} ms   (n={a.size})"


def in_process(trials: int) -> list[float]:
    sim = LiveSim(LiveSimConfig(robot="cf2x", controller="quadrotor", with_object=False))
    out = []
    for _ in range(trials):
        sim.reset()
        sim.submit(FlightTarget(np.array([0.0, 0.0, 1.0])))
        sim.step(250)
        t0 = sim.time
        sim.submit(BodyRateTarget(HOVER, np.array([0.0, 0.0, STEP])))
        while sim.state().base_angvel[2] < THRESHOLD:  # type: ignore[index]
            sim.step(1)
        out.append(sim.time - t0)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def through_link(trials: int) -> tuple[list[float], list[float], float]:
    port = free_port()
    emulator = subprocess.Popen([sys.executable, "-m", "robot_rl.hardware.crazyflie_emulator", "--port", str(port),
                                 "--log-level", "WARNING"])
    crossed = threading.Event()

    def on_state(sample: object) -> None:
        if sample.rates[2] > THRESHOLD:  # type: ignore[attr-defined]
            crossed.set()

    failsafe = CrazyflieFailsafe(FailsafeConfig(watchdog_timeout=1.0, hover_time=5.0))
    link = CrazyflieLink(CrazyflieLinkConfig(uri=f"udp://127.0.0.1:{port}"), failsafe, on_state=on_state)
    try:
        time.sleep(1.5)
        t_connect = time.monotonic()
        link.start()
        while not link.connected:
            time.sleep(0.01)
        connect_s = time.monotonic() - t_connect
        latencies, echoes = [], []
        for _ in range(trials):
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                link.submit(PositionCommand(np.array([0.0, 0.0, 1.0])))
                time.sleep(0.02)
            crossed.clear()
            t0 = time.monotonic()
            link.submit(RateCommand(HOVER, np.array([0.0, 0.0, STEP])))
            while not crossed.wait(0.02):
                link.submit(RateCommand(HOVER, np.array([0.0, 0.0, STEP])))
            latencies.append(time.monotonic() - t0)
        cf = link.crazyflie
        got = threading.Event()
        cf.add_header_callback(lambda pk: got.set(), 0xF, 0)
        from cflib.crtp.crtpstack import CRTPPacket

        for _ in range(200):
            got.clear()
            pk = CRTPPacket()
            pk.set_header(0xF, 0)
            pk.data = struct.pack("<Bd", 0xAA, 0.0)  # the size of cflib's own pings, which it parses
            t0 = time.monotonic()
            cf.send_packet(pk)
            if got.wait(1.0):
                echoes.append(time.monotonic() - t0)
        return latencies, echoes, connect_s
    finally:
        link.close()
        emulator.terminate()
        emulator.wait(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()
    sim = in_process(args.trials)
    link, echo, connect_s = through_link(args.trials)
    print(f"yaw-rate step {STEP} rad/s from hover, response = first state with yaw rate > {THRESHOLD} rad/s")
    print(f"  in-process sim (LiveSim, sim time)      {stats(sim)}")
    print(f"  cflib + UDP + emulator (wall time)      {stats(link)}")
    print(f"  difference (transport + pacing + log)   {1000 * (np.median(link) - np.median(sim)):6.1f} ms (medians)")
    print(f"CRTP echo round trip (cflib + UDP)        {stats(echo)}")
    print(f"connect (TOCs, params, rate mode, first sample): {connect_s * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
