"""``outside``: a SIGKILL of the PS that psbench's injector does not send and no event of the run
announces (``psbench chaos`` and ``psbench perf`` send it from their own thread,
launch/experiments/chaos.py ``OutsideKiller``): the run must find the death itself and record it as a
failure nobody injected (``unplanned``). It has no option of ``psbench run``: a kill the run was told
about would not be one from outside."""
from __future__ import annotations

from .base import FaultKind


class Outside(FaultKind):
    def chaos_apply(self, drawn_as, cfg, spec, rng, pause_s):
        return float(spec.rstrip("s"))


KIND = Outside(name="outside", summary="a SIGKILL of the PS from outside psbench (recorded as unplanned)",
               chaos=("outside",), perf_repairs=("spawn",), perf_name="kill from outside")
