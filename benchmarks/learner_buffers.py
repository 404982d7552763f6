"""Learner building blocks, measured side by side in one run.

1. Replay-buffer checkpoint after one new episode: append-only chunk save vs rewriting the whole
   buffer (what LeRobot's checkpoint does), for a buffer of pick-lift state transitions plus one
   64x64 camera.
2. One SAC/RLPD critic update: the 10-critic ensemble as one batched matmul vs 10 separate MLPs.
3. Transition streaming actor -> learner: safetensors bytes over the authenticated socket vs the same
   transitions pickled through a multiprocessing.Queue (what most actor/learner code does).

Run: .venv/bin/python benchmarks/learner_buffers.py [--rows 20000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robot_rl.core.transition import Transition
from robot_rl.fleet.transport import SocketTransitionClient, SocketTransitionServer
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.sac import CriticEnsemble


def transition(i: int, image: bool = True) -> Transition:
    obs = {"state": np.full(32, i, np.float32)}
    if image:
        obs["cam"] = np.full((64, 64, 3), i % 256, np.uint8)
    return Transition(obs, obs, np.zeros(7, np.float32), 0.0, False, False, i // 100, i % 100)


def bench_save(rows: int, folder: Path) -> None:
    buf = ReplayBuffer(rows + 1000)
    for start in range(0, rows, 1000):
        buf.extend([transition(i) for i in range(start, start + 1000)])
    buf.save(folder / "inc")
    episode = [transition(rows + i) for i in range(100)]
    buf.extend(episode)
    t = time.perf_counter()
    buf.save(folder / "inc")
    inc = time.perf_counter() - t
    full = ReplayBuffer(buf.capacity)  # a fresh object has saved nothing: save() writes every row
    full.columns, full.total_added = buf.columns, buf.total_added
    t = time.perf_counter()
    full.save(folder / "full")
    whole = time.perf_counter() - t
    mb = sum(p.stat().st_size for p in (folder / "full").glob("*")) / 1e6
    print(f"[save] {rows + 100} rows ({mb:.0f} MB): append one episode {inc * 1e3:.1f} ms, "
          f"rewrite all {whole * 1e3:.0f} ms -> {whole / inc:.0f}x less checkpoint time")


class LoopEnsemble(nn.Module):
    def __init__(self, n: int, obs_dim: int, act_dim: int, hidden: int) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nn.Sequential(nn.Linear(obs_dim + act_dim, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                                nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                                nn.Linear(hidden, 1)) for _ in range(n))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, act], -1)
        return torch.stack([net(x).squeeze(-1) for net in self.nets])


def bench_ensemble(reps: int = 30) -> None:
    obs, act = torch.randn(256, 40), torch.randn(256, 7)
    for name, model in (("batched", CriticEnsemble(10, 40, 7, 256)), ("loop", LoopEnsemble(10, 40, 7, 256))):
        opt = torch.optim.Adam(model.parameters())
        for i in range(reps + 3):
            if i == 3:
                t = time.perf_counter()
            loss = model(obs, act).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        ms = (time.perf_counter() - t) / reps * 1e3
        print(f"[critic] 10 critics x 256 hidden, batch 256, {name}: {ms:.1f} ms per update")


def socket_actor(address: str, key: bytes, n: int) -> None:
    client = SocketTransitionClient(address, key)
    batch = [transition(i) for i in range(10)]
    for _ in range(n // 10):
        client.send(batch)
    client.close()


def queue_actor(q: mp.Queue, n: int) -> None:  # type: ignore[type-arg]
    batch = [transition(i) for i in range(10)]
    for _ in range(n // 10):
        q.put(batch)
    q.put(None)


def bench_transport(n: int, folder: Path) -> None:
    ctx = mp.get_context("spawn")
    server = SocketTransitionServer(str(folder / "s.sock"))
    proc = ctx.Process(target=socket_actor, args=(server.address, server.authkey, n))
    proc.start()
    total, t0 = 0, 0.0
    while total < n:
        batch = server.receive(timeout=0.5)
        if batch and total == 0:
            t0 = time.perf_counter()  # time from the first arrival (process start excluded)
        total += len(batch)
    sock = (n - 10) / (time.perf_counter() - t0)
    proc.join()
    server.close()
    q: mp.Queue = ctx.Queue(maxsize=64)  # type: ignore[type-arg]
    proc = ctx.Process(target=queue_actor, args=(q, n))
    proc.start()
    first = q.get()
    t, got = time.perf_counter(), 0
    while (item := q.get()) is not None:
        got += len(item)
    pick = got / (time.perf_counter() - t)
    proc.join()
    print(f"[stream] transitions/s with a 64x64 camera, batches of 10: socket+safetensors {sock:.0f}, "
          f"Queue+pickle {pick:.0f} (ratio {sock / pick:.2f}); first batch {len(first)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp())
    try:
        bench_save(args.rows, folder)
        bench_ensemble()
        bench_transport(5000, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
