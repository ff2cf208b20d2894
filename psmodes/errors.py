"""The two ways a run ends on purpose, importable from anywhere in psmodes without a cycle.

- :class:`ConfigError`: bad user input, found before any process starts; its message is
  one line that says what to fix, and the CLI exits with status 2.
- :class:`RunFailed`: the run cannot go on (the PS died in mode ``none``, no copy of the
  state survives, ...); the rank records the reason and exits non-zero on its own.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input; the message is one line that says what to fix."""


class RunFailed(Exception):
    """The run cannot go on (e.g. the PS died in mode none); the message says why."""


def positive_int(value, flag: str) -> None:
    """ConfigError unless ``value`` is a whole number >= 1 (``flag`` names the option)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")
