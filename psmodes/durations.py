"""Durations as users write them: ``90``, ``90s``, ``1.5m``, ``250ms``, ``1h``.

Its own module so that every module that reads a duration (the config's options, the failure
processes it resolves) imports it without a cycle through :mod:`psmodes.config`.
"""
from __future__ import annotations

import re

from .errors import ConfigError

_DURATION = re.compile(r"^\s*(-?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s|m|min|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """'90', '90s', '1.5m', '250ms', '1h' -> seconds (> 0)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise ConfigError(f"{what} {text!r} is not a duration; write e.g. 60s, 1.5m, 250ms or 1h")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    if not value > 0:
        raise ConfigError(f"{what} must be positive, got {text!r}")
    return value
