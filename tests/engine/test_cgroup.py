"""The memory limit that applies to the process: its own control group's or an ancestor's, on cgroup v1 and v2, the
visible root standing in for a group a namespace hides (experiments/core/cgroup.py)."""

from experiments.core.cgroup import applying_limit, own_paths

GIB = 2**30


def _group(folder, limit, usage, v1=False):
    folder.mkdir(parents=True, exist_ok=True)
    names = ("memory.limit_in_bytes", "memory.usage_in_bytes") if v1 else ("memory.max", "memory.current")
    (folder / names[0]).write_text(f"{limit}\n")
    (folder / names[1]).write_text(f"{usage}\n")


def _proc(tmp_path, text):
    proc = tmp_path / "self_cgroup"
    proc.write_text(text)
    return str(proc)


def test_a_v2_slice_below_the_root_limits_the_process(tmp_path):
    """A systemd service in a slice: the root has no memory.max, the service's group has 4 GiB."""
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    _group(root / "system.slice", "max", 9 * GIB)
    _group(root / "system.slice" / "gml.service", 4 * GIB, 1 * GIB)
    proc = _proc(tmp_path, "0::/system.slice/gml.service\n")
    limit = applying_limit(str(root), proc)
    assert (limit.available_bytes, limit.limit_bytes, limit.group) == (3 * GIB, 4 * GIB, "/system.slice/gml.service")


def test_the_ancestor_with_least_left_decides(tmp_path):
    """A Slurm job of 16 GiB inside a user's 20 GiB of which 18 GiB are used by other jobs: 2 GiB left, the user's."""
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory\n")
    _group(root / "user", 20 * GIB, 18 * GIB)
    _group(root / "user" / "job_7", 16 * GIB, 1 * GIB)
    limit = applying_limit(str(root), _proc(tmp_path, "0::/user/job_7\n"))
    assert (limit.available_bytes, limit.group) == (2 * GIB, "/user")


def test_v1_memory_controller_and_a_hidden_path(tmp_path):
    """cgroup v1: the memory controller's own line; a path a container's namespace does not show is skipped and the
    visible root's files are the group's (as Docker shows it)."""
    root = tmp_path / "cg"
    _group(root / "memory" / "batch" / "lab", 8 * GIB, 2 * GIB, v1=True)
    _group(root / "memory", 9223372036854771712, 30 * GIB, v1=True)  # v1's "no limit"
    text = "12:pids:/batch/lab\n4:memory:/batch/lab\n0::/\n"
    limit = applying_limit(str(root), _proc(tmp_path, text))
    assert (limit.available_bytes, limit.group) == (6 * GIB, "/batch/lab")
    assert own_paths(_proc(tmp_path, text)) == {"v1": "/batch/lab", "v2": "/"}
    hidden = "4:memory:/host/only/path\n"
    _group(root / "memory", 5 * GIB, 1 * GIB, v1=True)
    assert applying_limit(str(root), _proc(tmp_path, hidden)).available_bytes == 4 * GIB


def test_no_limit_anywhere_is_none(tmp_path):
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory\n")
    _group(root / "a", "max", GIB)
    assert applying_limit(str(root), _proc(tmp_path, "0::/a\n")) is None
    assert applying_limit(str(tmp_path / "absent"), str(tmp_path / "absent_proc")) is None


def test_a_cpu_report_gets_free_memory_read_now_and_a_gpu_report_stays(tmp_path, monkeypatch):
    from experiments.core import cgroup

    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory\n")
    _group(root / "lab", 2 * GIB, GIB)
    monkeypatch.setattr(cgroup, "ROOT", str(root))
    monkeypatch.setattr(cgroup, "PROC", _proc(tmp_path, "0::/lab\n"))
    stale = {"type": "cpu", "free_bytes": 50 * GIB, "memory_limit": {"group": "/old", "limit_bytes": 1}}
    fresh = cgroup.with_host_memory(stale)
    assert fresh["free_bytes"] == GIB and fresh["memory_limit"] == {"group": "/lab", "limit_bytes": 2 * GIB}
    _group(root / "lab", "max", GIB)  # the limit lifted: the machine's own free memory, and no group named
    assert "memory_limit" not in cgroup.with_host_memory(stale)
    gpu = {"type": "cuda", "free_bytes": 7}
    assert cgroup.with_host_memory(gpu) is gpu
