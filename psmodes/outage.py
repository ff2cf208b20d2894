"""One PS outage as a worker sees it: from the exchange that found the PS dead to
the first update a PS applied after it. The leader (sync) or each worker (async)
keeps one while the PS is down and logs it as the ``recovered`` event, whose
fields :mod:`launch.analysis.summary` reads into ``summary.json``'s recoveries."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outage:
    t_start: float        # the exchange that hung until the death was detected began here
    t_detect: float       # the death was detected
    version: int          # the weights the workers held when the PS died
    idle_s: float = 0.0   # worker time blocked since t_start (see Worker._add_idle)
    lost_steps: int = 0   # PS versions the workers had seen that the new PS does not hold
    buffered: int = 0     # stateless: updates handed over to the replacement
    dropped: int = 0      # stateless: updates the buffer could not keep

    def recovered(self, mode: str, version_after: int) -> dict:
        """The fields of the ``recovered`` event."""
        return {"mode": mode, "t_outage_start": self.t_start, "t_detect": self.t_detect, "idle_s": self.idle_s,
                "lost_steps": self.lost_steps, "buffered_updates": self.buffered, "dropped_updates": self.dropped,
                "version_before": self.version, "version_after": version_after}
