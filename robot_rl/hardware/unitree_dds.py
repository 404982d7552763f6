"""One Cyclone DDS participant on a Unitree robot's network: ``rt/lowcmd`` and ``rt/lowstate`` as memory images.

What unitree_sdk2's ``ChannelFactoryInitialize(domain, nic)`` + ``ChannelPublisher``/``ChannelSubscriber`` do
(a Cyclone domain bound to one interface, topics with default QoS), without the SDK. The domain's
config (:func:`~robot_rl.hardware.unitree_idl.cyclonedds_config`) discovers as the robot's Cyclone DDS 0.10.x
does, and the types announce the type information Unitree's idlc generates, so the robot and unitree_sdk2 match
our endpoints although this is a newer Cyclone. Samples go in and out
as C memory images (numpy structured scalars, :mod:`robot_rl.hardware.unitree_idl`), the form the CRC is
defined on; the wire conversion is :class:`~robot_rl.hardware.unitree_idl.CdrCodec`'s byte gather, checked
against cyclonedds' own serializer at start-up, with the IdlStruct path as the fallback.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from cyclonedds.core import InstanceState, SampleState, ViewState
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from robot_rl.hardware import unitree_idl as idl

try:  # the raw-bytes entry points of cyclonedds' C layer (what DataWriter.write / DataReader.take call)
    from cyclonedds._clayer import ddspy_take, ddspy_write
except ImportError:  # pragma: no cover - another cyclonedds build: the IdlStruct path still works
    ddspy_take = ddspy_write = None

_TOPICS: dict[str, tuple[Any, np.dtype, idl.CdrCodec]] = {
    idl.LOWCMD_TOPIC: (idl.LowCmd_, idl.LOWCMD_C, idl.LOWCMD_CDR),
    idl.LOWSTATE_TOPIC: (idl.LowState_, idl.LOWSTATE_C, idl.LOWSTATE_CDR),
}
_domains: dict[int, Domain] = {}
_domains_lock = threading.Lock()
_ANY = SampleState.Any | ViewState.Any | InstanceState.Any


def _to_msg(topic: str, image: np.ndarray) -> Any:
    return idl.lowcmd_from_image(image) if topic == idl.LOWCMD_TOPIC else idl.lowstate_from_image(image)


def _to_image(topic: str, msg: Any) -> np.ndarray:
    return idl.lowcmd_to_image(msg) if topic == idl.LOWCMD_TOPIC else idl.lowstate_to_image(msg)


def _fast_path_ok(topic: str) -> bool:
    """The byte-gather codec reproduces cyclonedds' serializer on a message with every field non-zero."""
    rng = np.random.default_rng(7)
    _, dtype, codec = _TOPICS[topic]
    raw = rng.integers(1, 255, dtype.itemsize, dtype=np.uint8)
    image = raw.view(dtype).reshape(()).copy()
    for path in _float_fields(dtype):  # random bytes can be NaN: finite floats compare exactly
        path[0](image)[...] = rng.normal(size=path[1])
    msg = _to_msg(topic, image)
    image = _to_image(topic, msg)  # padding bytes zeroed, as the C struct's would be after a memset
    return ddspy_write is not None and codec.self_check(msg, image)


def _float_fields(dtype: np.dtype, getter: Any = None) -> list[tuple[Any, tuple[int, ...]]]:
    out = []
    for name in dtype.names or ():
        sub = dtype.fields[name][0]  # type: ignore[index]

        def get(img: np.ndarray, name: str = name, parent: Any = getter) -> np.ndarray:
            return (img if parent is None else parent(img))[name]
        base, shape = sub.subdtype if sub.subdtype else (sub, ())
        if base.names:
            for inner, inner_shape in _float_fields(base, get):
                out.append((inner, (*shape, *inner_shape)))
        elif base.kind == "f":
            out.append((get, shape))
    return out


class UnitreeDds:
    """A participant on ``domain_id`` bound to ``interface``, writing ``publish`` and reading ``subscribe``.

    A controller (the bridge) publishes ``rt/lowcmd`` and subscribes ``rt/lowstate``; the robot (emulator)
    the reverse. Readers keep only the newest sample (QoS history depth 1, Cyclone's default), as a control
    loop wants.
    """

    def __init__(self, domain_id: int, interface: str | None, publish: str | None, subscribe: str) -> None:
        if not 0 <= domain_id <= 232:
            raise ValueError(f"DDS domain id must be in [0, 232], got {domain_id}")
        with _domains_lock:  # one Domain (config) per id and process; later participants share it
            if domain_id not in _domains:
                _domains[domain_id] = Domain(domain_id, idl.cyclonedds_config(interface))
        self.participant = DomainParticipant(domain_id)
        self.publish, self.subscribe = publish, subscribe
        self.writer = (DataWriter(self.participant, Topic(self.participant, publish, _TOPICS[publish][0]))
                       if publish else None)  # None: a listener only (tests, tools)
        self.reader = DataReader(self.participant, Topic(self.participant, subscribe, _TOPICS[subscribe][0]))
        self.fast = _fast_path_ok(subscribe) and (publish is None or _fast_path_ok(publish))

    def write(self, image: np.ndarray) -> None:
        """Publish one memory image (its crc field as it is)."""
        if self.writer is None or self.publish is None:
            raise RuntimeError("this participant only listens")
        if self.fast:
            ret = ddspy_write(self.writer._ref, _TOPICS[self.publish][2].encode(image))
            if ret < 0:
                raise RuntimeError(f"DDS write on {self.publish} failed ({ret})")
        else:
            self.writer.write(_to_msg(self.publish, image))

    def take(self, n: int = 8) -> list[np.ndarray]:
        """Every sample received since the last call (at most ``n``), as memory images, oldest first."""
        if not self.fast:
            return [_to_image(self.subscribe, m) for m in self.reader.take(N=n) if hasattr(m, "crc")]
        ret = ddspy_take(self.reader._ref, _ANY, n)
        if isinstance(ret, int):
            raise RuntimeError(f"DDS take on {self.subscribe} failed ({ret})")
        codec = _TOPICS[self.subscribe][2]
        out = []
        for data, info in ret:
            if not info.valid_data:
                continue
            image = codec.decode(data)
            out.append(image if image is not None else _to_image(self.subscribe, _TOPICS[self.subscribe][0]
                                                                 .deserialize(data)))
        return out

    def matched(self) -> int:
        """How many remote readers of our topic are matched (0: nobody listens yet)."""
        return 0 if self.writer is None else len(self.writer.get_matched_subscriptions())

    def close(self) -> None:
        """Delete the participant (its endpoints go with it)."""
        self.participant = None  # type: ignore[assignment]
        self.writer = self.reader = None  # type: ignore[assignment]
