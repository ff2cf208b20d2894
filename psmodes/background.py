"""A call on a helper thread whose result, or exception, the calling thread collects.

Used where a rank must keep polling (for a death, a suspicion, the leader's announcement)
while something blocks: a collective without a timeout (``MPI_Comm_spawn``, in
:meth:`psmodes.context.Context.bounded`), or an evaluation that an announcement abandons
(:meth:`psmodes.evaluator.Evaluator._score_watched`).
"""
from __future__ import annotations

import threading

from .priority import unpin_thread


class Background:
    def __init__(self, fn, name: str) -> None:
        self._box: dict = {}
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self.thread.start()

    def _run(self, fn) -> None:
        unpin_thread()
        try:
            self._box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by result()
            self._box["error"] = exc

    def running(self, wait: float = 0.0) -> bool:
        """Whether the call is still running, after waiting up to ``wait`` s for it to end."""
        self.thread.join(wait)
        return self.thread.is_alive()

    def result(self):
        """The call's return value, or its exception raised here (call once it has ended)."""
        if "error" in self._box:
            raise self._box["error"]
        return self._box.get("result")
