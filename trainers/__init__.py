"""harness-gym's trainer on OpenRLHF (Ray + vLLM).

- :mod:`trainers.turns`: token-exact chat turns (what the policy saw is what is trained on);
- :mod:`trainers.rollout`: the agent executor OpenRLHF loads (``trainers/agent_func.py``);
- :mod:`trainers.engines`: vLLM-compatible engines for running the executor without vLLM;
- :mod:`trainers.dataset`: the prompt dataset from a training schedule;
- :mod:`trainers.recipes` + :mod:`trainers.launch`: YAML recipes and the ``ray job submit`` command;
- :mod:`trainers.harnessadapt`: the HarnessAdapt-RL loop (evolve the harness, then train an epoch);
- :mod:`trainers.metrics`: training metrics from the rollout log.
"""
