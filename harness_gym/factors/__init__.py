"""The five factors of the harness space, one module each, and the compiler that merges their
levels into a configuration's harness spec (:func:`compile_config`).

Each factor module exposes ``fragment(level) -> dict``: its part of the harness spec at that level
(read from ``variants/<factor>.yaml``), and the runtime piece the engine uses for that part.
"""

from harness_gym.factors.compiler import FACTOR_MODULES, compile_config
from harness_gym.factors.levels import level_fragment, level_name

__all__ = ["FACTOR_MODULES", "compile_config", "level_fragment", "level_name"]
