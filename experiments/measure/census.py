"""A tensor census: live tensor storages grouped by shape, dtype and device, taken at the end of two iterations
and diffed, so the group that grows stands out; and, where it can be found, who holds them.

Better than the syllabus's `gc.get_objects()` loop: the memory tracker sees every storage an operator
created, also those Python never sees (tensors autograd saved for backward, gradients nobody has read), and
it counts a storage's real bytes (a kept `mse_loss` loss is 0-dim but holds a full-size buffer). A group's
shape is the shape of the tensor the storage was created for.
"""

from __future__ import annotations

import itertools

import torch

MAX_GROUPS = 20  # the largest groups kept beside every group that changed
MAX_GRAPH_NODES = 20_000


class Census:
    """A listener of the memory tracker (experiments/measure/tracker.py): each live storage's shape, dtype and device
    and a serial number (a new storage may reuse a freed one's address, so addresses cannot tell old from new)."""

    def __init__(self):
        self.meta: dict[int, tuple] = {}
        self._serial = itertools.count()

    def allocated(self, tracker, key: int, rec, t: torch.Tensor, requested: int) -> None:
        self.meta[key] = (tuple(t.shape), str(t.dtype).removeprefix("torch."), t.device.type, next(self._serial))

    def freed(self, tracker, key: int, rec) -> None:
        self.meta.pop(key, None)

    def take(self, tracker, roots: dict[str, object] | None = None) -> dict:
        """One census of what `tracker` counts now: {(shape, dtype, device): {"count", "bytes", "serials",
        "holders"}}."""
        held = holders(roots or {})
        groups: dict[tuple, dict] = {}
        for key, rec in tracker.live.items():
            meta = self.meta.get(key)
            if meta is None:
                continue
            shape, dtype, device, serial = meta
            g = groups.setdefault((shape, dtype, device), {"count": 0, "bytes": 0, "serials": {}, "holders": []})
            g["count"] += 1
            g["bytes"] += rec.nbytes
            g["serials"][serial] = held.get(key, [])
        return groups


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _saved_tensors(node) -> list[torch.Tensor]:
    """What an autograd node saved for backward (its `_saved_*` attributes); nothing once backward freed them."""
    out = []
    for attr in dir(node):
        if not attr.startswith("_saved_"):
            continue
        try:
            value = getattr(node, attr)
        except RuntimeError:  # freed by backward
            continue
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, torch.Tensor):
                out.append(v)
    return out


def _graph(t: torch.Tensor, visited: set) -> list[torch.Tensor]:
    stack = [t.grad_fn] if t.grad_fn is not None else []
    found = []
    while stack and len(visited) < MAX_GRAPH_NODES:
        node = stack.pop()
        if node is None or id(node) in visited:
            continue
        visited.add(id(node))
        found.extend(_saved_tensors(node))
        stack.extend(fn for fn, _ in getattr(node, "next_functions", ()))
    return found


def holders(roots: dict[str, object]) -> dict[int, list[dict]]:
    """Storage key -> who holds it: {"kind": parameter | gradient | optimizer_state | module_attr | list |
    variable | graph, "name": where}. `roots` names the objects to search (a model, an optimizer, lists)."""
    held: dict[int, list[dict]] = {}

    def add(t, kind: str, name: str) -> None:
        entry = {"kind": kind, "name": name}
        bucket = held.setdefault(_key(t), [])
        if entry not in bucket:
            bucket.append(entry)

    def tensors_in(value):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from tensors_in(v)
        elif isinstance(value, dict):
            for v in value.values():
                yield from tensors_in(v)

    visited: set = set()

    def held_with_graph(value, kind: str, name: str) -> None:
        for t in tensors_in(value):
            add(t, kind, name)
            for saved in _graph(t, visited):
                add(saved, "graph", name)

    for name, root in roots.items():
        if isinstance(root, torch.nn.Module):
            for pname, p in root.named_parameters():
                add(p, "parameter", f"{name}.{pname}")
                if p.grad is not None:
                    add(p.grad, "gradient", f"{name}.{pname}.grad")
            for mname, module in root.named_modules():
                for attr, value in vars(module).items():
                    if attr.startswith("_") or attr == "training":
                        continue
                    where = ".".join(x for x in (name, mname, attr) if x)
                    held_with_graph(value, "module_attr", where)
        elif isinstance(root, torch.optim.Optimizer):
            for state in root.state.values():
                for t in tensors_in(state):
                    add(t, "optimizer_state", name)
        elif isinstance(root, (list, tuple, dict)):
            held_with_graph(root, "list", name)
        elif isinstance(root, torch.Tensor):
            held_with_graph(root, "variable", name)
    return held


def diff(before: dict, after: dict, steps: tuple[int, int] | None = None) -> dict:
    """Two censuses -> rows of every group, the ones that changed first (largest growth first).

    A row's holders are those of the storages new since `before` when the group grew, else of all of them."""
    rows = []
    for gkey in set(before) | set(after):
        b, a = before.get(gkey), after.get(gkey)
        shape, dtype, device = gkey
        count_b, bytes_b = (b["count"], b["bytes"]) if b else (0, 0)
        count_a, bytes_a = (a["count"], a["bytes"]) if a else (0, 0)
        new = [s for s in (a or {}).get("serials", {}) if s not in (b or {}).get("serials", {})]
        # Gradients re-created every step are new storages too; only a group that grew names its new ones.
        source = new if new and bytes_a > bytes_b else list((a or {}).get("serials", {}))
        found: list[dict] = []
        for s in source:
            for h in a["serials"][s]:
                if h not in found:
                    found.append(h)
        rows.append(
            {
                "shape": list(shape),
                "dtype": dtype,
                "device": device,
                "count_before": count_b,
                "count_after": count_a,
                "bytes_before": bytes_b,
                "bytes_after": bytes_a,
                "count_delta": count_a - count_b,
                "bytes_delta": bytes_a - bytes_b,
                "new": len(new),
                "holders": found[:6],
            }
        )
    changed = sorted(
        (r for r in rows if r["bytes_delta"] or r["count_delta"]), key=lambda r: (-r["bytes_delta"], -r["bytes_after"])
    )
    rest = sorted((r for r in rows if r not in changed), key=lambda r: -r["bytes_after"])[:MAX_GROUPS]
    return {
        "steps": list(steps) if steps else None,
        "groups": changed + rest,
        "growth_bytes": sum(r["bytes_delta"] for r in rows),
        "total_bytes_after": sum(r["bytes_after"] for r in rows),
    }
