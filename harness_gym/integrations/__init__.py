"""Adapters to RL libraries, one module per library, each behind its own extra:

- :mod:`harness_gym.integrations.trl` — TRL ``GRPOTrainer(environment_factory=...)`` (``[trl]``);
- :mod:`harness_gym.integrations.verifiers` — verifiers v1 ``Taskset`` / ``Env`` (``[verifiers]``; plugin
  package ``harness_gym_verifiers``);
- :mod:`harness_gym.integrations.skyrl` — SkyRL-gym ``BaseTextEnv`` (``[skyrl]``);
- :mod:`harness_gym.integrations.gem` — GEM ``gem.Env`` (``[gem]``).

Which harness factors each library can carry, and how, is declared in
:mod:`harness_gym.integrations.base` (``SUPPORT``); a harness a library cannot carry faithfully is
refused with an error naming the factor and the reason.
"""
