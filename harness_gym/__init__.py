"""harness-gym: the agent harness as an experimental variable.

Importing the package registers all 243 configurations of the Harness Scaling space as Gymnasium
environments, ``Harness-S{s}T{t}O{o}C{c}W{w}``.
"""

# registers the chat observation spaces with Gymnasium's shared memory, for async vector environments
import harness_gym.vector_memory  # noqa: F401
from harness_gym.design import (
    TRAINING_SET,
    build_schedule,
    check_orthogonal_array,
    heldout_set,
    is_orthogonal_array,
    locality_aware_assignment,
    training_set,
)
from harness_gym.env import HarnessEnv, make_env
from harness_gym.errors import (
    AgentError,
    BenchError,
    HarnessGymError,
    HarnessSpecError,
    RolloutError,
    SandboxError,
    TaskError,
    ToolCallError,
)
from harness_gym.factors import compile_config
from harness_gym.harness import Harness
from harness_gym.registration import register_all
from harness_gym.space import BASE_CONFIG, FACTORS, HarnessConfig, all_configs, hamming, neighbours
from harness_gym.spec import SpecError, spec_hash, validate_spec
from harness_gym.tasks import Task, load_tasks
from harness_gym.vector import SubEnvironmentError, ThreadVectorEnv

__version__ = "0.1.0"

register_all()

__all__ = [
    "BASE_CONFIG",
    "FACTORS",
    "TRAINING_SET",
    "AgentError",
    "BenchError",
    "Harness",
    "HarnessConfig",
    "HarnessEnv",
    "HarnessGymError",
    "HarnessSpecError",
    "RolloutError",
    "SandboxError",
    "SpecError",
    "SubEnvironmentError",
    "Task",
    "TaskError",
    "ThreadVectorEnv",
    "ToolCallError",
    "all_configs",
    "build_schedule",
    "check_orthogonal_array",
    "compile_config",
    "hamming",
    "heldout_set",
    "is_orthogonal_array",
    "load_tasks",
    "locality_aware_assignment",
    "make_env",
    "neighbours",
    "register_all",
    "spec_hash",
    "training_set",
    "validate_spec",
]
