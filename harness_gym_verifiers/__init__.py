"""The verifiers plugin package: verifiers finds a taskset by a top-level module name
(``--env.taskset.id harness-gym-verifiers``) exporting its ``Taskset`` and ``Env`` via ``__all__`` (the player harness is
``harness_gym_verifiers_player``).
The code lives in :mod:`harness_gym.integrations.verifiers`."""

from harness_gym.integrations.verifiers import HarnessTaskset, HarnessVerifiersEnv

__all__ = ["HarnessTaskset", "HarnessVerifiersEnv"]
