"""``--mode none``: no fault tolerance. A PS death ends the run (the report says so);
its no-kill runs are the reference for accuracy and throughput."""
from __future__ import annotations

from .base import RecoveryMode


class NoRecovery(RecoveryMode):
    name = "none"
    summary = "no fault tolerance: a PS death ends the run"
    survives_ps_death = False
    replacement_starts_from = "nothing: the run ends"

    def ps_versions_lost(self, cfg) -> int | None:
        return None
