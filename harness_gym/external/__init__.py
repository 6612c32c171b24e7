"""Real, unmodified agent CLIs (Claude Code, Codex, Gemini CLI, ...) as harnesses of harness-gym.

Each CLI is data (``clis/*.yaml``, see :mod:`.catalog`), installed once into a read-only,
content-addressed tree (:mod:`.install`), run inside the task's bubblewrap sandbox against a
recording model proxy reached only through a unix socket (:mod:`.runner`), and graded by the
task's hidden grader like every other harness.
"""
