"""Tasks: the task model, graders and suites (built-in, ClawGym, PinchBench, SWE-bench style)."""

from harness_gym.tasks import clawgym, easy, generator, ladder, pinchbench, swebench  # noqa: F401  (register their loaders)
from harness_gym.tasks.base import (
    GradeResult,
    Suite,
    Task,
    TaskError,
    load_tasks,
    parse_grader_output,
    register_loader,
    validate_suite,
)
from harness_gym.tasks.builtin import load_task_dir

__all__ = [
    "GradeResult",
    "Suite",
    "Task",
    "TaskError",
    "load_task_dir",
    "load_tasks",
    "parse_grader_output",
    "register_loader",
    "validate_suite",
]
