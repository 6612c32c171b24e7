"""The laptop-scale replication of Harness Scaling's specialisation gap (issue 18).

Arm A is trained in the base harness only, arm B across the 18 training configurations with the
locality-aware schedule, at equal numbers of trajectories and of trained tokens; both are SFT of
SmolLM2-135M on reference-agent trajectories of the easy task family, then evaluated with the
project's bench on the base harness, the 18 training and the 18 held-out configurations.

- :mod:`.data`: trajectories, SFT rows with train masks, equal budgets, seed/template checks;
- :mod:`.sft`: tokenisation with a loss mask and a plain torch training loop;
- :mod:`.evaluate`: bench runs per model (with a prompt-prefix cache) and the gap's statistics;
- :mod:`.report`: results.json, report.md and the plots.

``python -m benchmarks.replication [--small]`` runs it all.
"""
