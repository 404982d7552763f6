"""Keep ROS 2 runs apart: a private ROS_DOMAIN_ID per run and logs in a temporary folder.

Two test runs (or a test run and a developer's graph) on one machine must never hear each other's
topics. :func:`claim_domain_id` takes an exclusive file lock on one of the valid domain ids and keeps it
for the life of the process, so concurrent claimers always get different ids.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

# Fast DDS maps domain ids to UDP ports; 0..101 are safe on Linux with the default port base.
_VALID_IDS = range(1, 102)
_held: list[IO[str]] = []


def claim_domain_id(lock_dir: str | Path | None = None) -> int:
    """Lock and return a ROS_DOMAIN_ID no other live process on this machine has claimed.

    Raises:
        RuntimeError: when all ids are taken.
    """
    folder = Path(lock_dir or Path(tempfile.gettempdir()) / "robot_rl_ros_domains")
    folder.mkdir(parents=True, exist_ok=True)
    start = os.getpid() % len(_VALID_IDS)
    for k in range(len(_VALID_IDS)):
        domain = _VALID_IDS[(start + k) % len(_VALID_IDS)]
        handle = open(folder / f"{domain}.lock", "w")  # noqa: SIM115 - held open until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        handle.write(str(os.getpid()))
        handle.flush()
        _held.append(handle)
        return domain
    raise RuntimeError(f"all ROS domain ids {_VALID_IDS.start}..{_VALID_IDS.stop - 1} are in use")


def isolated_ros_env(log_dir: str | Path | None = None) -> dict[str, str]:
    """Environment variables for a private ROS graph on this machine.

    Claims a domain id, keeps discovery on localhost and sends ROS logs to ``log_dir`` (a new temporary
    folder by default). The result is meant for ``os.environ.update`` or a subprocess ``env``.
    """
    log = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="robot_rl_roslog_"))
    log.mkdir(parents=True, exist_ok=True)
    return {
        "ROS_DOMAIN_ID": str(claim_domain_id()),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_LOG_DIR": str(log),
        "RMW_IMPLEMENTATION": os.environ.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp"),
    }
