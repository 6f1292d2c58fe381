"""What NCCL leaves in the caching allocator: memory_allocated after each first collective on 2 GPUs, and the
blocks that no tensor of ours owns (they appear as "Not a tensor" in every rank's peak).

    python benchmarks/nccl_residue.py
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    base = torch.cuda.memory_allocated(dev)
    log = []

    def mark(what):
        torch.cuda.synchronize(dev)
        log.append((what, torch.cuda.memory_allocated(dev) - base, torch.cuda.memory_reserved(dev)))

    x = torch.ones(1024, device=dev)
    mark("tensor 4 KiB")
    dist.all_reduce(x)
    mark("first all_reduce")
    dist.all_reduce(x)
    mark("second all_reduce")
    out = torch.empty(2048, device=dev)
    dist.all_gather_into_tensor(out, x)
    mark("all_gather_into_tensor")
    y = torch.empty(512, device=dev)
    dist.reduce_scatter_tensor(y, x)
    mark("reduce_scatter_tensor")
    dist.broadcast(x, 0)
    mark("broadcast")
    dist.barrier()
    mark("barrier")
    del x, out, y
    mark("our tensors freed")
    if rank == 0:
        for what, alloc, res in log:
            print(f"{what:24s} allocated {alloc:10d} B  reserved {res:10d} B", flush=True)
        snap = torch.cuda.memory._snapshot()
        for seg in snap["segments"]:
            if seg["device"] != rank:
                continue
            for b in seg["blocks"]:
                if b["state"] == "active_allocated":
                    print("live block", b["size"], "B in a", seg["segment_type"], "segment", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(_rank, args=(2, 29577), nprocs=2)
