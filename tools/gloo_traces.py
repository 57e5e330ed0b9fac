"""Real CPU traces of a real ``torch.distributed`` job: the fixture under
``tests/fixtures/traces/gloo/``.

Two processes (``torch.multiprocessing.spawn``) train a small model with DistributedDataParallel
over the gloo backend for a few steps under ``torch.profiler.profile`` with a schedule, and each
writes its trace with ``tensorboard_trace_handler(dir, worker_name=f"worker_{rank}")``, gzipped,
as itwinai does. Needs torch (its own venv, ``make .venv-torch/.installed-stamp``):

    .venv-torch/bin/python tools/gloo_traces.py tests/fixtures/traces/gloo
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

WORLD_SIZE = 2
STEPS = 5  # profiler steps: wait 1, warmup 1, active 3
BATCH = 64
WIDTH = 256


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker(rank: int, out: str, port: int) -> None:
    """One rank: DDP over gloo, a profiled loop of ``STEPS`` steps."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(STEPS, BATCH, WIDTH, generator=torch.Generator().manual_seed(rank))
    handler = tensorboard_trace_handler(out, worker_name=f"worker_{rank}", use_gzip=True)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=STEPS - 2, repeat=1),
        on_trace_ready=handler,
    ) as prof:
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = model(data[step]).pow(2).mean()
            loss.backward()
            optimizer.step()
            prof.step()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder the traces are written to")
    args = parser.parse_args(argv)
    import torch.multiprocessing as mp

    args.out.mkdir(parents=True, exist_ok=True)
    mp.spawn(worker, args=(str(args.out), _free_port()), nprocs=WORLD_SIZE, join=True)
    for path in sorted(args.out.glob("worker_*.pt.trace.json*")):
        print(f"{path} {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
