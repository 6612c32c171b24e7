"""Real, unmodified agent CLIs (Claude Code, Codex, Gemini CLI, ...) as harnesses of harness-gym (issue 26).

Each CLI is data (``clis/*.yaml``, see :mod:`.catalog`), installed once into a read-only,
content-addressed tree (:mod:`.install`), and run inside the task's bubblewrap sandbox
(:mod:`.runner`); the policy sits behind :class:`~harness_gym.external.proxy.ModelProxy`, a
host-side recording proxy that speaks each CLI's wire API and translates it to one canonical
request (:class:`~harness_gym.external.policies.PolicyRequest`), reached from the sandbox only
through a unix socket. The task's hidden grader scores the workspace like every other harness.
"""
