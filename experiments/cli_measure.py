"""`fits --measure`: the estimate's largest batch at the learner's own levers, confirmed by real trials on this GPU
(experiments/measure/boundary.py), the card emulated where it is smaller than this GPU."""

from __future__ import annotations

import sys

from .core.errors import ConfigError


def check(args) -> None:
    """--measure's conditions, before any replay: a CUDA answer at the learner's levers, and a GPU here (whether the
    card fits on it, the trials say)."""
    if not args.measure:
        return
    other = next(
        (f for f, given in (("methods", args.methods), ("across", args.across)) if given),
        "device_type" if args.device_type != "cuda" else None,
    )
    if other is not None:
        raise ConfigError(
            "measure",
            "--measure confirms the largest batch of the CUDA answer at your levers; leave out --methods, --across "
            "and --device-type cpu",
            "one_of",
            fields=f"measure,{other}",
        )
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("measure", "--measure runs real trials and needs a GPU here", "needs_cuda")


def own_row(result: dict, cfg) -> dict | None:
    """The grid's row of the learner's own precision, optimizer implementation and checkpointing."""
    from .estimate.estimator import cuda_config

    impl = cuda_config(cfg).optimizer_impl
    return next(
        (
            r
            for r in result["grid"]
            if (r["precision"], r["optimizer_impl"], r["checkpoint"]) == (cfg.precision, impl, cfg.checkpoint)
        ),
        None,
    )


def own_answer(result: dict, cfg) -> dict:
    """The estimate's answers at levers the grid does not search (checkpointing in segments): the same search, for
    the learner's configuration as it is."""
    from .distributed.model_fits import largest_that_runs
    from .estimate.estimator import cuda_config

    own = cuda_config(cfg)
    card, over = result["capacity_bytes"], result["overhead_bytes"]
    default = largest_that_runs(own, card, over)["largest_batch"]
    expandable = largest_that_runs(own, card, over, expandable=True, hint=default)["largest_batch"]
    return {"largest_batch": default, "largest_batch_expandable": expandable}


def measure(result: dict, cfg, args) -> dict:
    """Real trials from the estimate's answers, default allocator first, then expandable segments where the estimate
    answers differently for them. Added to the result as "measured"."""
    from .estimate.estimator import cuda_config
    from .measure.boundary import measure_largest

    # No CUDA call here: a context this process held would count, in the first trial, as the trial's own.
    card_bytes = result["capacity_bytes"]
    row = own_row(result, cfg) or own_answer(result, cfg)
    config = cuda_config(cfg).to_dict()
    quiet = args.json

    def show(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    out, outside = {}, None
    for key, expandable in (("default", False), ("expandable", True)):
        start = row["largest_batch_expandable" if expandable else "largest_batch"]
        if expandable and start == row["largest_batch"]:
            continue
        show(f"measuring on this GPU, {'expandable segments' if expandable else 'default allocator'}:")
        m = measure_largest(config, card_bytes, start, expandable, args.max_batch, show, outside)
        outside = m["outside"]
        out[key] = {"estimate": start, **m}
        trial = next((t for t in m["trials"] if "device" in t), None)
        if trial is not None:
            out |= {"device": trial["device"], "emulated": card_bytes < trial["gpu_total_bytes"]}
    if "device" not in out:  # no trial got as far as the GPU (a card larger than it, a refused configuration)
        first = out["default"]["trials"][0]
        raise ConfigError(
            "measure", f"no trial ran: {first.get('error')}", "model_spec", detail=str(first.get("error"))
        )
    return out


def print_measured(m: dict) -> None:
    where = f"{m['device']}, the card emulated" if m["emulated"] else m["device"]
    for key, label in (("default", "default allocator"), ("expandable", "expandable segments")):
        if key not in m:
            continue
        r = m[key]
        ran = sorted(t["batch"] for t in r["trials"] if t.get("ran"))
        failed = sorted(t["batch"] for t in r["trials"] if t.get("ran") is False)
        if r["largest_batch"] is None:
            bad = next(t for t in r["trials"] if t.get("ran") is None)
            print(f"measured ({label}, {where}): a trial failed for another reason than memory: {bad.get('error')}")
            continue
        print(
            f"measured ({label}, {where}): largest batch {r['largest_batch']} (the estimate: {r['estimate']}); "
            f"ran at {_batches(ran)}; did not run at {_batches(failed)}"
        )


def _batches(batches: list[int]) -> str:
    return ", ".join(map(str, batches)) or "none tried"
