"""Unitree's own DDS stack as the other side of our G1 emulator and bridge, in both directions.

``far-unitree-sdk`` (PyPI, import ``unitree_interface``) is unitree_sdk2 compiled with the Cyclone DDS 0.10.2 that
Unitree's robots run; this package speaks Cyclone 11 (the ``cyclonedds`` wheel). Each vendor process runs in
its own interpreter (it loads its own libddsc; a crash there must not take pytest down):

* the SDK as the controller (``UnitreeInterface.create_g1``) against ``unitree_emulator``: it reads LowState,
  its LowCmd (CRC computed by Unitree's code) is applied, and when it exits the emulator damps the joints;
* the SDK has no robot side, so the robot is played by the SDK's bundled libddsc 0.10.2 driven through ctypes
  (:data:`PEER_010`): a topic descriptor with the SDK's own type information (byte-identical to ours) and the
  message as an opaque byte array (a final struct of fixed-size members serializes to the same CDR bytes), so
  discovery, type matching and the wire are 0.10.2's; it publishes LowState to our bridge and records the
  bridge's LowCmd (ramp-in, tracking, damping once targets stop);
* a bad CRC sent over 0.10.2 is refused by both the emulator (command) and the bridge (state).

Each runs on ``lo`` and across a veth pair with the vendor side in its own network namespace (as a robot on
its own NIC: multicast discovery), skipped where namespaces cannot be made. DDS domain 0: the SDK's is fixed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robot_rl.hardware import unitree_idl as idl

SPEC = importlib.util.find_spec("unitree_interface")
SDK_DIR = Path(SPEC.submodule_search_locations[0]) if SPEC and SPEC.submodule_search_locations else None
LIBDDSC_010 = SDK_DIR / "libddsc.so" if SDK_DIR else None
pytestmark = [pytest.mark.robot_dds, pytest.mark.realtime("beside"),  # the SDK process waits on the robot
              pytest.mark.skipif(LIBDDSC_010 is None or not LIBDDSC_010.exists(),
                                reason="far-unitree-sdk is not installed (pip install far-unitree-sdk==0.1.8)")]
ROOT = Path(__file__).resolve().parents[1]
NS_ADDR, HOST_ADDR = "10.213.123.161", "10.213.123.162"  # a subnet of its own, not a real robot NIC's

SDK_CONTROLLER = r'''
import json, os, sys, time
import unitree_interface as ui
nic, hold_s = sys.argv[1], float(sys.argv[2])
robot = ui.UnitreeInterface.create_g1(nic, ui.MessageType.HG)
seen, t_end = set(), time.monotonic() + 30.0
while time.monotonic() < t_end and len(seen) < 50:  # the emulated robot's states arrive and change
    state = robot.read_low_state()
    if state.mode_machine:
        seen.add(tuple(state.motor.q[:12]))
    time.sleep(0.005)
q0 = list(robot.read_low_state().motor.q)
cmd = robot.create_zero_command()  # Unitree's default kp/kd; bend both knees to 0.6 rad
cmd.q_target = [0.6 if i in (3, 9) else 0.0 for i in range(len(cmd.q_target))]
t_end = time.monotonic() + hold_s
while time.monotonic() < t_end:
    robot.write_low_command(cmd)
    time.sleep(0.002)
state = robot.read_low_state()
print(json.dumps({"distinct": len(seen), "mode_machine": state.mode_machine, "q0": q0,
                  "q1": list(state.motor.q)}), flush=True)
os._exit(0)  # the SDK's threads: leave at once, as a crashed controller would
'''

PEER_010 = r'''
import ctypes as C, os, struct, sys, time
lib, nic, seconds, wd, pub, sub = C.CDLL(sys.argv[1]), sys.argv[2], float(sys.argv[3]), *sys.argv[4:7]
ADR, ARR, SUB1, XTYPES_METADATA, FIXED_SIZE = 1 << 24, 8 << 16, 1 << 8, 1 << 6, 1 << 4
class Meta(C.Structure):
    _fields_ = [("data", C.c_void_p), ("sz", C.c_uint32)]
class Desc(C.Structure):  # dds_topic_descriptor_t of Cyclone 0.10.x (dds_public_impl.h)
    _fields_ = [("size", C.c_uint32), ("align", C.c_uint32), ("flagset", C.c_uint32), ("nkeys", C.c_uint32),
                ("typename", C.c_char_p), ("keys", C.c_void_p), ("nops", C.c_uint32), ("ops", C.POINTER(C.c_uint32)),
                ("meta", C.c_char_p), ("type_information", Meta), ("type_mapping", Meta), ("restrict", C.c_uint32)]
keep = []
def read(name):
    return open(os.path.join(wd, name), "rb").read()
def topic(pp, name):
    size = len(read(name + ".cdr")) - 4
    ops = (C.c_uint32 * 4)(ADR | ARR | SUB1, 0, size, 0)  # octet data[size]: the same CDR bytes as the struct
    ti, tm = C.create_string_buffer(read(name + ".ti")), C.create_string_buffer(read(name + ".tm"))
    typename = "unitree_hg::msg::dds_::%s_" % ("LowCmd" if name == "lowcmd" else "LowState")
    info, mapping = Meta(C.cast(ti, C.c_void_p), len(ti) - 1), Meta(C.cast(tm, C.c_void_p), len(tm) - 1)
    d = Desc(size, 1, FIXED_SIZE | XTYPES_METADATA, 0, typename.encode(), None, 4, ops, b"", info, mapping, 0)
    keep.extend([ops, ti, tm, d])
    return lib.dds_create_topic(pp, C.byref(d), ("rt/" + name).encode(), None, None), size
lib.dds_create_domain(0, ('<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface name="%s" '
                          'priority="default" multicast="default"/></Interfaces></General></Domain></CycloneDDS>'
                          % nic).encode())  # what unitree_sdk2's ChannelFactory configures
pp = lib.dds_create_participant(0, None, None)
tp, _ = topic(pp, pub); ts, sub_size = topic(pp, sub)
w, r = lib.dds_create_writer(pp, tp, None, None), lib.dds_create_reader(pp, ts, None, None)
assert min(pp, tp, ts, w, r) > 0, (pp, tp, ts, w, r)
sample = C.create_string_buffer(read(pub + ".cdr")[4:]); got = C.create_string_buffer(sub_size)
ptrs = (C.c_void_p * 1)(C.cast(got, C.c_void_p)); info = C.create_string_buffer(256)
lib.dds_take.argtypes = [C.c_int32, C.POINTER(C.c_void_p), C.c_void_p, C.c_size_t, C.c_uint32]
out, n_in, n_out, t_end = open(os.path.join(wd, sub + ".bin"), "wb"), 0, 0, time.monotonic() + seconds
while time.monotonic() < t_end:
    n_out += lib.dds_write(w, sample) == 0
    while lib.dds_take(r, ptrs, info, 1, 1) > 0:
        if info.raw[12]:  # dds_sample_info_t.valid_data
            out.write(got.raw[:sub_size]); n_in += 1
    time.sleep(0.002)
out.close()
print("peer010: wrote %d %s, took %d %s" % (n_out, pub, n_in, sub), flush=True)
os._exit(0)
'''

BRIDGE_DRIVER = r'''
import json, sys, time
from robot_rl.control.targets import JointTarget
from robot_rl.hardware import unitree_idl as idl
from robot_rl.hardware.unitree_bridge import UnitreeBridge, UnitreeBridgeConfig
from robot_rl.hardware.unitree_dds import UnitreeDds
from robot_rl.robots import g1
nic, seconds, target_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
bridge = UnitreeBridge(UnitreeBridgeConfig(ramp_time_s=0.3, command_timeout_s=0.3))
dds = UnitreeDds(0, nic, idl.LOWCMD_TOPIC, idl.LOWSTATE_TOPIC)
modes, states, sent, first_state, t0 = [bridge.mode.value], 0, 0, None, time.monotonic()
while (now := time.monotonic()) < t0 + seconds:
    for image in dds.take():
        states += 1
        first_state = now if first_state is None else first_state
        bridge.on_state(image, now)
    if first_state is not None and now < first_state + target_s:
        bridge.submit(JointTarget(g1.STAND_Q), now)
    image = bridge.tick(now)
    if image is not None:
        dds.write(image); sent += 1
    if not modes or modes[-1] != bridge.mode.value:
        modes.append(bridge.mode.value)
    time.sleep(0.002)
print(json.dumps({"modes": modes, "states": states, "sent": sent}), flush=True)
'''


def _run(args: list[str], timeout: float, netns: str | None = None) -> subprocess.Popen[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(prefix + args, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{proc.args!r} did not finish in {timeout} s: {out[-3000:]}")
    return out


def _json(out: str) -> dict:
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, out[-3000:]
    return json.loads(lines[-1])


def _write_peer_files(wd: Path, lowstate: np.ndarray, lowcmd: np.ndarray) -> None:
    for name, image, codec, kind in (("lowstate", lowstate, idl.LOWSTATE_CDR, idl.LowState_),
                                     ("lowcmd", lowcmd, idl.LOWCMD_CDR, idl.LowCmd_)):
        (wd / f"{name}.cdr").write_bytes(codec.encode(image))
        info, mapping = _type_data(kind)
        (wd / f"{name}.ti").write_bytes(info)
        (wd / f"{name}.tm").write_bytes(mapping)


def _type_data(kind: Any) -> tuple[bytes, bytes]:
    """The serialized TypeInformation and TypeMapping cyclonedds announces for ``kind``."""
    kind.__idl__.fill_type_data()
    info, mapping = kind.__idl__._xt_bytedata
    return bytes(info), bytes(mapping)


def _state_image(crc_ok: bool = True) -> np.ndarray:
    from robot_rl.hardware.unitree_emulator import EmulatorConfig, G1Emulator
    image = G1Emulator(EmulatorConfig()).lowstate()
    if not crc_ok:
        image["crc"] ^= 1
    return image


@pytest.fixture(params=["lo", "veth"])
def link(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str | None]]:
    """(our interface, the vendor's interface, the vendor's network namespace or None)."""
    if request.param == "lo":
        yield "lo", "lo", None
        return
    tag = f"{os.getpid() % 100000}"
    ns, ours, theirs = f"rrlu{tag}", f"rrlua{tag}", f"rrlub{tag}"
    steps = [["ip", "netns", "add", ns], ["ip", "link", "add", ours, "type", "veth", "peer", "name", theirs],
             ["ip", "link", "set", theirs, "netns", ns], ["ip", "addr", "add", f"{HOST_ADDR}/24", "dev", ours],
             ["ip", "link", "set", ours, "up"],
             ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{NS_ADDR}/24", "dev", theirs],
             ["ip", "netns", "exec", ns, "ip", "link", "set", theirs, "up"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]
    try:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=20)
            if done.returncode != 0:
                pytest.skip(f"cannot make a veth pair in a network namespace here ({' '.join(step)}: "
                            f"{done.stderr.strip()}); needs root and CAP_NET_ADMIN")
        yield ours, theirs, ns
    except FileNotFoundError:
        pytest.skip("no `ip` command (iproute2) to make a network namespace")
    finally:
        subprocess.run(["ip", "link", "del", ours], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def test_our_type_information_is_byte_for_byte_the_sdks() -> None:
    """The TypeInformation and TypeMapping we announce are those compiled into Unitree's SDK (idlc 0.10.2)."""
    assert SDK_DIR is not None
    binary = next(SDK_DIR.glob("unitree_interface*.so")).read_bytes()
    for kind in (idl.LowCmd_, idl.LowState_):
        info, mapping = _type_data(kind)
        assert info in binary and mapping in binary, kind.__name__


@pytest.mark.slow
def test_sdk_controller_drives_the_emulator_then_it_damps(link: tuple[str, str, str | None],
                                                          tmp_path: Path) -> None:
    ours, theirs, ns = link
    emulator = _run([sys.executable, "-c", "import sys; from robot_rl.hardware.unitree_emulator import main; "
                     "sys.exit(main())", "--interface", ours, "--command-timeout", "0.3"], 120)
    try:
        sdk = _run([sys.executable, "-c", SDK_CONTROLLER, theirs, "1.5"], 90, ns)
        report = _json(_finish(sdk, 90))
        assert sdk.returncode == 0
        time.sleep(1.0)  # the SDK is gone: its last command goes stale
        # A LowCmd with a wrong CRC over Unitree's own DDS (0.10.2): the robot drops it.
        cmd = idl.lowcmd_image(0, 5, idl.MotorCommands(np.ones(idl.NUM_MOTORS, np.uint8),
                                                       *(np.full(idl.NUM_MOTORS, 5.0) for _ in range(5))))
        cmd["crc"] ^= 0xFFFF
        _write_peer_files(tmp_path, _state_image(), cmd)
        peer = _run([sys.executable, "-c", PEER_010, str(LIBDDSC_010), theirs, "3", str(tmp_path), "lowcmd",
                     "lowstate"], 60, ns)
        peer_out = _finish(peer, 60)
    finally:
        emulator.terminate()
        log = _finish(emulator, 30)
    assert report["distinct"] >= 50 and report["mode_machine"] == 5, report
    knees = [3, 9]
    before, after = np.array(report["q0"])[knees], np.array(report["q1"])[knees]
    assert np.all(before < 0.3) and np.all(np.abs(after - 0.6) < 0.1), (before, after)  # Unitree's command ran
    stats = log.split("stopped; ")[-1]
    applied, bad, timeouts = (int(stats.split(word)[0].split()[-1]) for word in
                              (" commands applied", " bad CRC", " command timeouts"))
    assert applied > 100, log[-2000:]  # every command Unitree's code made passed our CRC check
    assert "took" in peer_out and bad > 50, (peer_out, log[-2000:])  # the corrupted ones did not
    assert timeouts == 1, log[-2000:]  # commands stopped: damped, and bad CRCs did not revive the command


@pytest.mark.slow
@pytest.mark.parametrize("state_crc_ok", [True, False], ids=["good-state", "bad-crc-state"])
def test_bridge_commands_a_cyclone_010_robot(link: tuple[str, str, str | None], tmp_path: Path,
                                             state_crc_ok: bool) -> None:
    ours, theirs, ns = link
    if not state_crc_ok and ns is not None:
        pytest.skip("the CRC refusal does not depend on the link: checked on lo")
    _write_peer_files(tmp_path, _state_image(state_crc_ok), idl.lowcmd_image(0, 5, idl.MotorCommands.zeros()))
    peer = _run([sys.executable, "-c", PEER_010, str(LIBDDSC_010), theirs, "9", str(tmp_path), "lowstate",
                 "lowcmd"], 60, ns)
    bridge = _run([sys.executable, "-c", BRIDGE_DRIVER, ours, "6", "1.5"], 60)
    result = _json(_finish(bridge, 60))
    peer_out = _finish(peer, 60)
    assert bridge.returncode == 0 and peer.returncode == 0, peer_out
    if not state_crc_ok:  # every state refused: the bridge never takes over
        assert result["states"] > 100 and result["modes"] == ["waiting"] and result["sent"] == 0, result
        return
    assert result["modes"][:4] == ["waiting", "ramping", "active", "damping"], result
    raw = np.frombuffer((tmp_path / "lowcmd.bin").read_bytes(), np.uint8)
    size = len(idl.LOWCMD_CDR.encode(idl.lowcmd_image(0, 5, idl.MotorCommands.zeros()))) - 4
    images = [idl.LOWCMD_CDR.decode(idl.CDR_LE_HEADER + raw[i:i + size].tobytes())
              for i in range(0, len(raw) - size + 1, size)]
    assert len(images) > 500, peer_out  # ~500 Hz for several seconds over 0.10.2
    assert all(im is not None and idl.crc_ok(im) and int(im["mode_machine"]) == 5 for im in images)
    kp = np.array([im["motor_cmd"]["kp"][:29] for im in images])  # type: ignore[index]
    kd = np.array([im["motor_cmd"]["kd"][:29] for im in images])  # type: ignore[index]
    full = kp.max(0)
    assert np.all(full > 0) and np.any((kp[:, 0] > 0) & (kp[:, 0] < 0.5 * full[0]))  # ramped in
    assert np.all(kp[-1] == 0) and np.all(kd[-1] == 8.0)  # targets stopped: Unitree's damping command
