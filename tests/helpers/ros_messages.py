"""Hypothesis strategies of hostile ROS messages (real rclpy message objects) for the ROS fuzz tests.

Every strategy mixes well-formed values (so the deep paths run) with the hostile ones a broken driver,
a bad policy or a buggy bridge can publish: NaN/inf, 1e308, missing or repeated names, lengths that do not
match, wrong frames, non-unit quaternions, images whose sizes, steps and encodings disagree, and
truncated or corrupt JPEG/PNG. Each drawn message is cheap to build (drills draw 10 000 per entry point).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nav_msgs.msg import Odometry
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Bool, Float64, Float64MultiArray

HOSTILE = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, 1e6, -1e6, 3.4e38])
FLOATS = st.one_of(st.floats(-2.0, 2.0), HOSTILE, st.floats(allow_nan=True, allow_infinity=True))
"""Mostly plausible values, often a hostile one."""
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)


def wire(msg: object) -> object:
    """The message as a subscriber receives it: serialized and deserialized (what DDS can carry)."""
    return deserialize_message(serialize_message(msg), type(msg))


@st.composite
def headers(draw: st.DrawFn, msg: object, plausible: bool = False, frames: Sequence[str] = ("", "base")) -> None:
    """Fill ``msg.header`` with a plausible or hostile stamp and frame."""
    frame = st.sampled_from(frames) if plausible else st.sampled_from([*frames, "world", "map"]) | TEXT
    msg.header.frame_id = draw(frame)  # type: ignore[attr-defined]
    msg.header.stamp.sec = draw(st.integers(-(2**31), 2**31 - 1))  # type: ignore[attr-defined]
    msg.header.stamp.nanosec = draw(st.integers(0, 2**32 - 1))  # type: ignore[attr-defined]


@st.composite
def joint_states(draw: st.DrawFn, names: Sequence[str], around: Sequence[float] | None = None) -> JointState:
    """A well-formed JointState of every joint (any order, near ``around``), or one with hostile names,
    lengths and values."""
    plausible = draw(st.booleans())
    pool = st.sampled_from([*names, "", "bogus"]) | TEXT
    if plausible or draw(st.booleans()):
        chosen = list(draw(st.permutations(list(names)))) + ([] if plausible else draw(st.lists(pool, max_size=3)))
    else:
        chosen = draw(st.lists(pool, max_size=len(names) + 3))
    msg = JointState(name=chosen)
    draw(headers(msg, plausible))
    n = len(chosen)
    base = dict(zip(names, around if around is not None else np.zeros(len(names))))
    for field in ("position", "velocity", "effort"):
        if plausible:
            small = st.floats(-0.05, 0.05)
            values = [base.get(name, 0.0) * (field == "position") + draw(small) for name in chosen]
        else:
            size = draw(st.sampled_from([n, n, n, 0, n + 1, max(n - 1, 0)]))
            values = draw(st.lists(FLOATS, min_size=size, max_size=size))
        setattr(msg, field, values)
    return msg


@st.composite
def poses(draw: st.DrawFn, center: Sequence[float] = (0.5, 0.0, 0.4)) -> PoseStamped:
    """A PoseStamped near ``center`` with a unit quaternion, or hostile values and frames."""
    msg = PoseStamped()
    plausible = draw(st.booleans())
    draw(headers(msg, plausible))
    p = [c + draw(st.floats(-0.1, 0.1)) if plausible or draw(st.booleans()) else draw(FLOATS) for c in center]
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = p
    if plausible or draw(st.booleans()):
        q = np.array([draw(st.floats(-1, 1)) for _ in range(4)]) + np.array([1e-3, 0, 0, 0])
        q = q / np.linalg.norm(q)
    else:
        q = np.array([draw(FLOATS) for _ in range(4)])
    o = msg.pose.orientation
    o.w, o.x, o.y, o.z = (float(v) for v in q)
    return msg


@st.composite
def twists(draw: st.DrawFn) -> TwistStamped:
    """A TwistStamped with any linear and angular values."""
    msg = TwistStamped()
    draw(headers(msg))
    lin, ang = msg.twist.linear, msg.twist.angular
    lin.x, lin.y, lin.z, ang.x, ang.y, ang.z = (draw(FLOATS) for _ in range(6))
    return msg


@st.composite
def odometries(draw: st.DrawFn, center: Sequence[float] = (0.0, 0.0, 0.8)) -> Odometry:
    """A nav_msgs/Odometry: a pose as :func:`poses` draws it and any twist."""
    msg = Odometry()
    pose, twist = draw(poses(center)), draw(twists())
    msg.header, msg.child_frame_id = pose.header, draw(st.sampled_from(["base_link", "", "x" * 300]))
    msg.pose.pose, msg.twist.twist = pose.pose, twist.twist
    return msg


@st.composite
def wrenches(draw: st.DrawFn) -> WrenchStamped:
    """A WrenchStamped with any force and torque."""
    msg = WrenchStamped()
    draw(headers(msg))
    f, t = msg.wrench.force, msg.wrench.torque
    f.x, f.y, f.z, t.x, t.y, t.z = (draw(FLOATS) for _ in range(6))
    return msg


@st.composite
def float_arrays(draw: st.DrawFn) -> Float64MultiArray:
    """A Float64MultiArray of 0-9 values (6 is the stiffness size) and an arbitrary data_offset."""
    size = draw(st.sampled_from([6, 6, 0, 1, 5, 7, 9]))
    msg = Float64MultiArray(data=draw(st.lists(FLOATS, min_size=size, max_size=size)))
    msg.layout.data_offset = draw(st.integers(0, 2**32 - 1))
    return msg


FLOAT64 = st.builds(Float64, data=FLOATS)

_CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "16UC1": 2, "yuv422": 2}


@st.composite
def images(draw: st.DrawFn) -> Image:
    """An Image whose encoding, size, step and data length agree, or disagree in one or more ways."""
    msg = Image()
    plausible = draw(st.booleans())
    draw(headers(msg, plausible))
    valid = st.sampled_from(["rgb8", "bgr8", "mono8"])
    msg.encoding = draw(valid if plausible else st.sampled_from([*_CHANNELS, "", "RGB8"]) | valid | TEXT)
    big = st.sampled_from([2**32 - 1, 2**31, 1 << 20, 65536])
    msg.height = draw(st.integers(1, 40) if plausible else st.integers(0, 40) | big)
    msg.width = draw(st.integers(1, 40) if plausible else st.integers(0, 40) | big)
    channels = _CHANNELS.get(msg.encoding, 3)
    msg.step = msg.width * channels if plausible or draw(st.booleans()) else draw(st.integers(0, 2**32 - 1))
    msg.step = min(msg.step, 2**32 - 1)
    msg.is_bigendian = draw(st.sampled_from([0, 1, 255]))
    size = msg.height * msg.step
    size = size if size <= 40 * 40 * 4 else draw(st.integers(0, 64))
    size = size if plausible else max(0, size + draw(st.sampled_from([0, 0, 0, -1, 1, -size])))
    msg.data = np.random.default_rng(draw(st.integers(0, 255))).bytes(size)
    return msg


def _png(width: int, height: int, idat: bytes) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _encoded() -> list[bytes]:
    rng = np.random.default_rng(0)
    colour = rng.integers(0, 255, (30, 20, 3), dtype=np.uint8)
    out = [cv2.imencode(ext, img)[1].tobytes() for ext, img in
           ((".jpg", colour), (".png", colour), (".jpg", colour[..., 0]), (".png", colour[:5, :7, 0]),
            (".png", np.dstack([colour, colour[..., :1]])), (".png", colour.astype(np.uint16) * 257),
            (".jpg", colour[:1, :1]))]
    bomb = zlib.compress(b"\0" * (64 * 1024), 9)
    out += [_png(100_000, 100_000, bomb), _png(40_000, 1, bomb), _png(0, 7, b"")]
    jpeg = out[0]
    sof = jpeg.index(b"\xff\xc0")
    out.append(jpeg[:sof + 5] + struct.pack(">HH", 60_000, 60_000) + jpeg[sof + 9:])  # JPEG claiming 3.6e9 px
    lying = bytearray(out[1])  # a PNG whose IDAT claims 1.9 GB (OpenCV allocated that, 2 s, for 106 bytes)
    idat = lying.index(b"IDAT") - 4
    lying[idat:idat + 4] = (0x70DE0031).to_bytes(4, "big")
    out.append(bytes(lying))
    return out


ENCODED = _encoded()


@st.composite
def compressed_images(draw: st.DrawFn) -> CompressedImage:
    """A CompressedImage: a valid JPEG/PNG (colour, mono, RGBA, 16-bit), truncated, corrupted, a
    decompression bomb, a header claiming billions of pixels, random bytes or nothing."""
    msg = CompressedImage()
    draw(headers(msg))
    msg.format = draw(st.sampled_from(["jpeg", "png", "rgb8; jpeg compressed bgr8", ""]) | TEXT)
    kind = draw(st.sampled_from(["valid", "truncated", "flipped", "prefixed", "random", "empty"]))
    data = draw(st.sampled_from(ENCODED))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if kind == "truncated":
        data = data[:draw(st.integers(0, len(data)))]
    elif kind == "flipped":
        arr = np.frombuffer(data, np.uint8).copy()
        idx = rng.integers(0, arr.size, draw(st.integers(1, 8)))
        arr[idx] = rng.integers(0, 256, idx.size)
        data = arr.tobytes()
    elif kind == "prefixed":
        data = rng.bytes(draw(st.integers(1, 16))) + data
    elif kind == "random":
        data = draw(st.sampled_from([b"\x89PNG\r\n\x1a\n", b"\xff\xd8", b"GIF89a", b"BM"])) + rng.bytes(
            draw(st.integers(0, 200)))
    elif kind == "empty":
        data = b""
    msg.data = data
    return msg


def hostile_batch(names: Sequence[str], home: Sequence[float], n: int) -> dict[str, tuple[type, list[Any]]]:
    """``n`` hostile messages per input topic of the real-arm graph (joint_states: only invalid ones, since a
    valid state from us would be the robot's measurement)."""
    from robot_rl.core.spaces import SpecError
    from robot_rl.ros.conversions import joint_state_from_msg

    def invalid(msg: JointState) -> bool:
        try:
            return not np.all(np.isfinite(joint_state_from_msg(msg, names)[2]))
        except SpecError:
            return True

    @settings(max_examples=n, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        for _, strategy, out in plan.values():
            out.append(data.draw(strategy))

    js = st.deferred(lambda: joint_states(names, home)).filter(invalid)
    plan: dict[str, tuple[type, st.SearchStrategy[Any], list[Any]]] = {
        "joint_states": (JointState, js, []), "target_pose": (PoseStamped, poses(), []),
        "teleop/target_pose": (PoseStamped, poses(), []), "current_pose": (PoseStamped, poses(), []),
        "target_joint": (JointState, joint_states(names, home), []),
        "target_joint_gains": (JointState, joint_states(names, home), []),
        "target_wrench": (WrenchStamped, wrenches(), []), "target_stiffness": (Float64MultiArray, float_arrays(), []),
        "target_body_rates": (TwistStamped, twists(), []), "effort_controller/commands": (Float64MultiArray,
                                                                                           float_arrays(), []),
        "intervention": (Bool, st.builds(Bool, data=st.booleans()), []),
        "policy/on_trial": (Bool, st.builds(Bool, data=st.booleans()), []),
    }
    draw()
    return {topic: (msg_type, out) for topic, (msg_type, _, out) in plan.items()}
