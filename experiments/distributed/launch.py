"""Data-parallel runs of a sandbox configuration: DDP, ZeRO-1, FSDP2 (ZeRO-2/3-like, CPU offload), measured per rank.

`run_distributed(params)` starts world_size processes with torch.multiprocessing (spawn): NCCL with one
process per GPU, or gloo on the CPU. Each rank measures itself phase by phase (experiments/distributed/rank.py)
and the parent gathers one JSON-able dict: "ranks" (one single-device-shaped result per rank) and a summary.
The top level also carries rank 0's figures under the single-device names (phases, peak_bytes, breakdown,
step_ms), so every metric and lesson check of the other lessons reads a distributed result too.

When the caller is a daemonic process (the classroom worker), multiprocessing may not start children there;
the same spawn then runs in a child interpreter (`python -m experiments.distributed.launch`, started and kept warm by
experiments/distributed/launcher.py), which streams progress.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import json
import multiprocessing
import os
import queue as _queue
import signal
import socket
import sys
import threading
import time

from ..core.config import ConfigError, DistributedConfig
from ..core.cpu_strategies import check_cpu
from ..measure.device import device_info
from .estimate import estimate_sharded
from .fit_check import check_ranks_fit
from .launcher import PARENT_ENV, STOP_GRACE_S, spawn_via_child

RANK_TIMEOUT_S = 120  # a rank that waits this long in a collective gives up (a peer died or ran out of memory)
FAILED_GRACE_S = 5.0  # after a rank failed or died, how long the others may still report before they are stopped


def exit_with_parent(parent: int | None = None, on_orphan=None) -> None:
    """A daemon thread: when this process's parent (`parent`, the pid that started it) dies, even by SIGKILL,
    `on_orphan` runs and the process exits, so no launcher or rank outlives the worker that started it and runs
    beside the next job. Given the pid, a parent that died while this process was still importing counts too."""
    parent = os.getppid() if parent is None else parent

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        if on_orphan is not None:
            with contextlib.suppress(Exception):
                on_orphan()
        os._exit(1)

    threading.Thread(target=watch, name="gml-parent-watch", daemon=True).start()


def _kill_own_group() -> None:
    """The launcher runs in a session of its own (the worker starts it so): its group is it and its ranks."""
    os.killpg(os.getpgrp(), signal.SIGKILL)


def device_type_for(dcfg: DistributedConfig) -> str:
    """cuda or cpu, after checking that this machine can run the configuration; ConfigError names the field."""
    import torch

    want = dcfg.config.device
    cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    if cuda:
        count = torch.cuda.device_count()
        if count == 0:
            raise ConfigError(
                "device",
                "got 'cuda' but torch.cuda.is_available() is False; allowed here: auto, cpu",
                "cuda_unavailable",
            )
        if dcfg.world_size > count:
            raise ConfigError(
                "world_size",
                f"got {dcfg.world_size}; this machine has {count} GPU(s): allowed "
                f"range is [1, {count}] (one process per GPU)",
                "range",
                value=dcfg.world_size,
                lo=1,
                hi=count,
            )
        return "cuda"
    check_cpu(dcfg.strategy)
    return "cpu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, plans: list[dict], device_type: str, port: int, out, parent: int | None = None) -> None:
    """Entry point of one rank (a spawned process): every plan in turn, on one process group."""
    exit_with_parent(parent)
    import torch
    import torch.distributed as dist

    from .rank import measure_rank
    from .update_check import check_update

    world = plans[0]["world_size"]
    if device_type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
        # The ranks share the machine's cores; without this each would start one thread per core.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=_dt.timedelta(seconds=RANK_TIMEOUT_S),
        **({"device_id": device} if backend == "nccl" else {}),
    )
    try:
        for i, params in enumerate(plans):
            dcfg = DistributedConfig.from_dict(params)

            def progress(done, total, label, i=i):
                if rank == 0:
                    out.put(("progress", rank, i, {"done": done, "total": total, "label": label}))

            result = measure_rank(dcfg, rank, device, progress)
            out.put(("result", rank, i, result))  # before the check: a failing check must not lose the measurement
            if result["oom"] is not None:
                break  # the other ranks may be waiting in a collective: the parent stops them
            if dcfg.check_update:
                out.put(("update", rank, i, check_update(dcfg, rank, device)))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which stops the other ranks
        out.put(("error", rank, None, f"{type(e).__name__}: {e}"))
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _spawn(
    plans: list[dict], device_type: str, progress=None, should_cancel=None, start_method: str = "spawn"
) -> list[dict]:
    """Starts the ranks with torch.multiprocessing (spawn, or fork where the caller knows it is safe) and collects
    what they send, per plan."""
    import torch.multiprocessing as mp

    world = plans[0]["world_size"]
    out = multiprocessing.get_context(start_method).Queue()
    ctx = mp.start_processes(
        _rank_main,
        args=(plans, device_type, _free_port(), out, os.getpid()),
        nprocs=world,
        join=False,
        start_method=start_method,
    )
    got = [{"results": {}, "update": None, "errors": {}, "cancelled": False} for _ in plans]
    failed_at = None
    died: dict[int, int] = {}  # rank -> its exit status, where it ended with one other than 0
    while True:
        try:
            kind, rank, i, payload = out.get(timeout=0.1)
            if kind == "progress" and progress:
                progress(payload["done"], payload["total"], payload["label"])
            elif kind == "result":
                got[i]["results"][rank] = payload
                if payload.get("oom") and failed_at is None:
                    failed_at = time.monotonic()
            elif kind == "update" and payload is not None:
                got[i]["update"] = payload
            elif kind == "error":
                _current(got, world)["errors"][rank] = payload
                failed_at = failed_at or time.monotonic()
            continue
        except _queue.Empty:
            pass
        # A rank that died (killed, or by the OOM killer) is seen from its exit, not when its peers' collective
        # times out two minutes later: they are stopped after a short grace, freeing the lane. Its exit is kept from
        # before that stop, so that the run names the rank that died, not a survivor's complaint about it.
        for r, p in enumerate(ctx.processes):
            if p.exitcode not in (None, 0):
                died.setdefault(r, p.exitcode)
        if all(not p.is_alive() for p in ctx.processes):
            break
        if failed_at is None and died:
            failed_at = time.monotonic()
        cancel = should_cancel is not None and should_cancel()
        # A rank that failed leaves the others waiting in a collective: stop them after a short grace.
        if cancel or (failed_at is not None and time.monotonic() - failed_at > FAILED_GRACE_S):
            for g in got:
                g["cancelled"] = g["cancelled"] or cancel
            _stop(ctx.processes)
            break
    for p in ctx.processes:
        p.join()
    current = _current(got, world)
    if died and not current["cancelled"]:
        current["died"] = sorted(died)
        for r, code in died.items():
            current["errors"].setdefault(r, _death(code))
    for g in got:
        if not g["cancelled"] and not g["errors"] and len(g["results"]) < world:
            codes = sorted({p.exitcode for p in ctx.processes})
            g["errors"][-1] = f"not every rank reported (exit status {codes})"
    return got


def _current(got: list[dict], world: int) -> dict:
    """The plan the ranks are on: the first without every rank's result (the last once all have reported)."""
    return next((g for g in got if len(g["results"]) < world), got[-1])


def errors_in_order(got: dict) -> list[str]:
    """The ranks that died first: a survivor's error (gloo's "connection closed by peer") follows from theirs."""
    died = set(got.get("died", ()))
    ordered = sorted(got["errors"].items(), key=lambda rm: (rm[0] not in died, rm[0]))
    return [f"rank {r}: {m}" if r >= 0 else m for r, m in ordered]


def _death(code: int) -> str:
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    return f"the process died ({how})"


def _stop(processes) -> None:
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()


def run_distributed(params: dict, progress=None, should_cancel=None) -> dict:
    return run_distributed_many([params], progress, should_cancel)[0]


def run_distributed_many(plans: list[dict], progress=None, should_cancel=None) -> list[dict]:
    """Several configurations of one world size, one after another on the same ranks (one process start)."""
    dcfgs = [DistributedConfig.from_dict(p) for p in plans]
    if len({d.world_size for d in dcfgs}) > 1:
        raise ConfigError(
            "world_size", "every configuration of one launch must have the same world_size", "same_world_size"
        )
    device_types = {device_type_for(d) for d in dcfgs}
    if len(device_types) > 1:
        raise ConfigError("device", "every configuration of one launch must run on the same device type", "same_device")
    device_type = device_types.pop()
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    estimates = [estimate_sharded(d, device_type=device_type) for d in dcfgs]
    for d, est in zip(dcfgs, estimates, strict=True):
        check_ranks_fit(d, est, device_type)
    spawn = spawn_via_child if multiprocessing.current_process().daemon else _spawn
    gots = spawn([d.to_dict() for d in dcfgs], device_type, progress, should_cancel)
    duration = round(time.perf_counter() - t0, 3)
    return [
        _assemble(d, device_type, got, est, started, duration)
        for d, got, est in zip(dcfgs, gots, estimates, strict=True)
    ]


def _assemble(dcfg: DistributedConfig, device_type: str, got: dict, est: dict, started, duration: float) -> dict:
    ranks = [got["results"][r] for r in sorted(got["results"])]
    first = ranks[0] if ranks else {}
    result = {
        "kind": "distributed",
        "config": dcfg.rank_config.to_dict(),
        "distributed": dcfg.to_dict(),
        "strategy": dcfg.strategy,
        "world_size": dcfg.world_size,
        "batch_mode": dcfg.batch_mode,
        "per_rank_batch": dcfg.per_rank_batch,
        "global_batch": dcfg.global_batch,
        "backend": "nccl" if device_type == "cuda" else "gloo",
        "device": device_info(device_type),
        "ranks": ranks,
        "update_check": got["update"],
        "errors": errors_in_order(got),
        "cancelled": got["cancelled"],
        "estimate": est,
        "started_at": started.isoformat(timespec="seconds"),
    }
    # Rank 0 under the single-device names: the other lessons' metrics and checks read it unchanged.
    for k in (
        "phases",
        "baseline_bytes",
        "peak_bytes",
        "peak_phase",
        "setup_peak_bytes",
        "breakdown",
        "breakdown_steady",
        "step_ms",
        "oom",
        "losses",
        "driver",
    ):
        result[k] = first.get(k)
    peaks = [r["peak_bytes"] - (r.get("baseline_bytes") or 0) for r in ranks if r.get("peak_bytes") is not None]
    result["summary"] = {
        "max_net_peak_bytes": max(peaks) if peaks else None,
        "min_net_peak_bytes": min(peaks) if peaks else None,
        "oom_ranks": [r["rank"] for r in ranks if r.get("oom")],
        "step_ms_median": max((r["step_ms"]["median"] for r in ranks if r.get("step_ms")), default=None),
        "estimate_peak_bytes": est["peak_bytes"],
        "update_ok": None if got["update"] is None else got["update"]["ok"],
    }
    result["duration_s"] = duration
    return result


def _child_main() -> None:
    """`python -m experiments.distributed.launch <device_type>` with the parameters as JSON on stdin (see above)."""
    from ..jobs.process_names import name_process

    name_process("gml-launcher")
    parent = os.environ.get(PARENT_ENV, "")
    exit_with_parent(
        int(parent) if parent.isdigit() else None, _kill_own_group
    )  # the worker died (or was killed at max_job_seconds): so do the ranks
    device_type = sys.argv[1]
    # CPU ranks fork from here, where torch and the ranks' code are imported and no kernel has run (no thread pool
    # to inherit), instead of importing torch again, both at once on the same cores. CUDA does not survive a fork.
    # Imported before the plans are read: a launcher kept warm (keep_warm) waits here with its imports done.
    import torch.multiprocessing  # noqa: F401

    if device_type == "cpu":
        from . import rank, update_check  # noqa: F401 - imported once, before the fork

        # The ranks' gc.collect() (and the forks' copies of pages) need not go over what every rank shares.
        gc.collect()
        gc.freeze()
    text = sys.stdin.read()
    if not text.strip():  # a launcher kept warm whose worker stopped (the server shut down): nothing to run
        return
    plans = json.loads(text)

    def say(message: dict) -> None:
        try:
            print(json.dumps(message, default=str), flush=True)
        except (BrokenPipeError, OSError):
            # The worker is gone and nobody reads this pipe: stop quietly, ranks and all (no traceback).
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            _kill_own_group()

    method = "fork" if device_type == "cpu" else "spawn"
    got = _spawn(plans, device_type, lambda done, total, label: say({"progress": [done, total, label]}), None, method)
    say({"got": got})


if __name__ == "__main__":
    _child_main()
