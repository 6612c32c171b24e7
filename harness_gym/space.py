"""The harness space: five factors (S, T, O, C, W) with three levels each, 3^5 = 243 configurations.

A :class:`HarnessConfig` is a point of that space. It is immutable and hashable so it can be a
dictionary key, a set member and a Gymnasium registration key.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import NamedTuple

FACTORS: tuple[str, ...] = ("S", "T", "O", "C", "W")
LEVELS: int = 3
ENV_PREFIX = "Harness-"

_ID_PATTERN = re.compile(r"^(?:Harness-)?S([0-2])T([0-2])O([0-2])C([0-2])W([0-2])$")
_DIGITS_PATTERN = re.compile(r"^[0-2]{5}$")


class HarnessConfig(NamedTuple):
    """One configuration of the harness space: the level (0, 1 or 2) of each factor."""

    s: int
    t: int
    o: int
    c: int
    w: int

    @classmethod
    def parse(cls, text: str | HarnessConfig | Iterable[int]) -> HarnessConfig:
        """Parse ``S1T2O0C1W2``, ``Harness-S1T2O0C1W2``, the digits ``12012`` or a 5-sequence."""
        if isinstance(text, HarnessConfig):
            return text
        if not isinstance(text, str):
            levels = tuple(text)
            if len(levels) != len(FACTORS) or not all(isinstance(v, int) and 0 <= v < LEVELS for v in levels):
                raise ValueError(
                    f"a harness configuration needs {len(FACTORS)} levels in 0..{LEVELS - 1}, got {levels!r}"
                )
            return cls(*levels)
        stripped = text.strip()
        match = _ID_PATTERN.match(stripped)
        if match:
            return cls(*(int(g) for g in match.groups()))
        if _DIGITS_PATTERN.match(stripped):
            return cls(*(int(ch) for ch in stripped))
        raise ValueError(
            f"malformed harness configuration id {text!r}: expected the form "
            "'S<s>T<t>O<o>C<c>W<w>' with each level 0, 1 or 2, optionally prefixed by "
            "'Harness-' (e.g. 'Harness-S1T2O0C1W2'), or five digits such as '12012'"
        )

    @property
    def code(self) -> str:
        """The short id, e.g. ``S1T2O0C1W2``."""
        return "".join(f"{f}{v}" for f, v in zip(FACTORS, self, strict=True))

    @property
    def env_id(self) -> str:
        """The Gymnasium id, e.g. ``Harness-S1T2O0C1W2``."""
        return ENV_PREFIX + self.code

    @property
    def digits(self) -> str:
        """The levels as five digits in factor order, e.g. ``12012`` (the paper's notation)."""
        return "".join(str(v) for v in self)

    def level(self, factor: str) -> int:
        """The level of one factor, by letter (``"T"``)."""
        return self[FACTORS.index(factor.upper())]

    def replace_level(self, factor: str, level: int) -> HarnessConfig:
        """This configuration with one factor set to another level."""
        values = list(self)
        values[FACTORS.index(factor.upper())] = level
        return HarnessConfig.parse(values)

    def __str__(self) -> str:
        return self.code


BASE_CONFIG = HarnessConfig(0, 0, 0, 0, 0)


def all_configs() -> list[HarnessConfig]:
    """All 243 configurations in lexicographic order of their digits."""
    return [HarnessConfig(*levels) for levels in itertools.product(range(LEVELS), repeat=len(FACTORS))]


def hamming(a: HarnessConfig | str, b: HarnessConfig | str) -> int:
    """Number of factors in which two configurations differ."""
    ca, cb = HarnessConfig.parse(a), HarnessConfig.parse(b)
    return sum(x != y for x, y in zip(ca, cb, strict=True))


def neighbours(config: HarnessConfig | str, distance: int = 1) -> list[HarnessConfig]:
    """All configurations at exactly ``distance`` from ``config`` (10 at distance 1)."""
    center = HarnessConfig.parse(config)
    return [other for other in all_configs() if hamming(center, other) == distance]
