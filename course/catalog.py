"""The course: which pages it has, in which order and navigation group, and under which ids and in which folder the
runs that back its lessons are recorded. Neither torch nor Streamlit, so the router (app/main.py), the home page's
map, the lesson readers (course/content.py), the recording scripts (benchmarks/record_*.py) and the tests all read
the course from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    id: str  # also the page's file (app/views/<id>.py), its URL path and its lesson folder (lessons/<id>/)
    icon: str
    group: str  # its navigation group (GROUPS)
    data_parallel: bool = False  # its runs span several processes (recorded by benchmarks/record_distributed.py)
    own_model: bool = (
        False  # its numbers come from replays and the GPU check of models of one's own (course/own_model.py)
    )


GROUPS = ("start", "lessons", "exercises")
PAGES = (
    Page("home", ":material/home:", "start"),
    Page("monitoring", ":material/monitoring:", "lessons"),
    Page("analysis", ":material/query_stats:", "lessons"),
    Page("optimization", ":material/speed:", "lessons"),
    Page("leaks", ":material/water_drop:", "lessons"),
    Page("compare", ":material/compare_arrows:", "lessons"),
    Page("multigpu", ":material/device_hub:", "lessons", data_parallel=True),
    Page("yourmodel", ":material/model_training:", "lessons", own_model=True),
    Page("finetune", ":material/tune:", "lessons", own_model=True),
    Page("exercise1", ":material/edit_note:", "exercises"),
    Page("exercise2", ":material/edit_note:", "exercises"),
    Page("exercise3", ":material/edit_note:", "exercises"),
)
PAGE_IDS = tuple(p.id for p in PAGES)
HOME = PAGES[0].id
# The pages whose runs are single-device training runs, recorded on one GPU into recorded/<RECORDED_FOLDER>
# (benchmarks/record_results.py); a data-parallel page's recordings are named in its meta.json ("recordings").
LESSON_IDS = tuple(p.id for p in PAGES if not p.data_parallel and not p.own_model)
# The lesson that defines every leak scenario once (lessons/<id>/meta.json "leak_scenarios"); others name them.
LEAK_LESSON = "leaks"


def group(name: str) -> tuple[str, ...]:
    """The ids of one navigation group's pages, in course order."""
    return tuple(p.id for p in PAGES if p.group == name)


def page(page_id: str) -> Page:
    return next(p for p in PAGES if p.id == page_id)


# ---------------------------------------------------------------------------------------------- recordings

RECORDED_FOLDER = "h200"  # recorded/<folder>: the single-GPU recordings the lessons quote
# Timed steps of a recording, by job kind, as the shipped recordings were made (course/content.py: device_params).
RECORDED_TIMING_STEPS = {"run": 20, "profile": 20, "distributed": 10}
RECORDED_LEAK_STEPS = 10  # steps of a recorded leak scenario


def preset_id(lesson: str) -> str:
    return f"{lesson}-preset"


def profile_id(lesson: str) -> str:
    return f"{lesson}-profile"


def try_id(lesson: str, prompt: str) -> str:
    """The run after a prompt's "try this" change."""
    return f"{lesson}-try-{prompt}"


def run_id(lesson: str, name: str) -> str:
    """A named run of a lesson: one of its strategies, or an extra run its prose quotes."""
    return f"{lesson}-{name}"


def technique_id(lesson: str, technique: str, which: str) -> str:
    """`which`: "config" (the technique) or "baseline" (the configuration without it)."""
    return f"{lesson}-{technique}-{which}"


def rounds_id(lesson: str) -> str:
    """The lesson's strategies timed in interleaved rounds."""
    return f"{lesson}-rounds"


def rounds_set_id(lesson: str, set_id: str) -> str:
    return f"{lesson}-rounds-{set_id}"


def leak_id(scenario: str) -> str:
    return f"{LEAK_LESSON}-leak-{scenario}"


def fragmentation_id(lesson: str, pattern: str) -> str:
    return f"{lesson}-frag-{pattern}"


def data_parallel_id(lesson: str, recording: str, strategy: str) -> str:
    """`recording`: the folder of recorded/ this device's data-parallel runs are in (the lesson's "recordings")."""
    return f"{lesson}-{recording}-{strategy}"


# The recorded run whose allocator timeline and segments a learner without a GPU is shown, and whose raw snapshot
# ships with the app (gzip, beside its JSON).
TIMELINE_RECORDING = preset_id("analysis")
