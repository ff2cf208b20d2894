"""The interface every recovery mode implements: its promise, as data, and its hooks.

The runtime (:mod:`psmodes.server`, the workers, :mod:`psmodes.context`) calls these
hooks at fixed moments and never asks which mode it runs; the launcher, chaos, the
tests and the reports read the promise. A hook's default does nothing, so a mode
only writes what it adds. Hooks take the object they act on (the PS, a worker) and
may keep their own state on it under a name of their own.

PS-side hooks, in the order a PS meets them:
  ``ps_setup`` (construction) -> ``ps_restore`` (a replacement that takes over) ->
  ``ps_start`` (before serving) -> ``ps_after_update`` (after every applied update)
  -> ``ps_after_respawn`` (after the survivors spawned the missing roles) ->
  ``ps_finish`` (the run is over).
Worker-side hooks (the sync leader and every async worker alike):
  ``on_ps_lost`` (the PS's death was detected), ``outage_step`` (a step computed
  while the PS is down) and ``handover`` / ``send_handover`` / ``handed_over``
  (what a fresh replacement PS is given with the worker's Hello), matched on the
  PS by ``receive_handover`` / ``apply_handovers``.
"""
from __future__ import annotations

from typing import ClassVar


class RecoveryMode:
    #: the name users pass to ``--mode``
    name: ClassVar[str] = ""
    #: one line for ``--help`` and the README's table
    summary: ClassVar[str] = ""
    #: whether the job goes on when the PS dies (``none``: the run ends)
    survives_ps_death: ClassVar[bool] = True
    #: what a PS that takes over starts from, in words (the reports say it)
    replacement_starts_from: ClassVar[str] = ""
    #: the workers keep computing while the PS is down (stateless), instead of waiting
    trains_through_outage: ClassVar[bool] = False
    #: a dead PS can be brought back by the launcher restarting the whole job from disk
    supports_job_restart: ClassVar[bool] = False
    #: the PS writes checkpoints (the reports show what they cost)
    writes_checkpoints: ClassVar[bool] = False
    #: the RunConfig fields that belong to this mode (the summary and sweep names show them)
    options: ClassVar[tuple[str, ...]] = ()

    # ---- the promise
    def lost_steps_bound(self, cfg) -> int | None:
        """The most versions the workers had seen that one recovery may lose (None: the run does not
        recover): the PS's versions of :meth:`ps_versions_lost` and, with ``--exchange pipelined``,
        the one the workers applied before the PS answered it. A bound of 0 stays 0 there: that
        gradient is re-sent with the Hello and the promoted PS applies it (tests/test_pipeline.py)."""
        return self._with_exchange(cfg, self.ps_versions_lost(cfg))

    @staticmethod
    def _with_exchange(cfg, versions: int | None) -> int | None:
        """A bound of PS versions as steps the workers saw: one more with the pipelined exchange, unless 0."""
        return versions + 1 if versions and cfg.exchange == "pipelined" else versions

    def lost_steps_bound_leader_lost(self, cfg) -> int | None:
        """The bound of a recovery in which the sync leader died too (psmodes/elastic.py): the same, but where
        the leader held part of the promise (hybrid)."""
        return self.lost_steps_bound(cfg)

    def ps_versions_lost(self, cfg) -> int | None:
        """The most answered PS versions one recovery may lose (None: the run does not recover)."""
        return 0

    def replicas(self, cfg) -> int:
        """Chain replicas this mode adds to the job's ranks."""
        return 0

    def validate(self, cfg) -> None:
        """ConfigError (one line) for options this mode cannot run with."""

    def describe(self, cfg) -> str:
        """The mode with its options, for names and reports (e.g. ``chain K=1 R=2``)."""
        return self.name

    # ---- the membership
    def on_shrink(self, cluster, dead: list) -> None:
        """After the survivors shrank the world: RunFailed when the state is gone for good."""

    # ---- PS side
    def ps_setup(self, server) -> None:
        """The PS was built (fresh, respawned or promoted)."""

    def ps_restore(self, server) -> None:
        """A fresh PS process takes over from a dead one (respawned, or a restarted job)."""

    def ps_start(self, server) -> None:
        """Before the PS serves its first message."""

    def ps_after_update(self, server) -> None:
        """After every update the PS applied (``server.opt.version`` is the new version)."""

    def ps_after_respawn(self, server):
        """A callable the PS runs after every respawn (inside the repair loop), or None."""
        return None

    def ps_durable_version(self, server) -> int:
        """The newest version a copy outside the PS holds, for the workers (-1: none known)."""
        return -1

    def ps_catch_up(self, server, hello, src: int) -> dict:
        """A Hello that carries ``hello.vectors`` updates for a PS that took over (not a fresh one):
        receive them and apply those it has not seen; what the PS's hello event records."""
        raise NotImplementedError(f"mode {self.name} sends no updates to catch up on")

    def ps_new_leader(self, server) -> dict:
        """Sync: the Hello of a leader that took over from a dead one (not this PS's first leader), before
        the PS answers it; what the PS's hello event records. What only the dead leader held is restored here."""
        return {}

    def ps_finish(self, server) -> None:
        """Training is over; before the final evaluation."""

    def ps_close(self, server) -> None:
        """The PS's last act, after the final evaluation."""

    # ---- worker side
    def on_ps_lost(self, worker) -> None:
        """The PS's death was detected by this worker (the sync leader, or an async worker)."""

    def outage_step(self, worker, compute_s: float) -> bool:
        """A step computed while the PS is down (only where ``trains_through_outage``); True
        when it changed the worker's weights."""
        return False

    def after_answer(self, worker, computed_on: int, answer, grad) -> None:
        """The sync leader's gradient ``grad``, computed on version ``computed_on``, was answered."""

    def handover(self, worker) -> tuple[int, list] | None:
        """What this worker's next Hello carries for the PS: (updates it stands for, payload vectors),
        or None for a Hello that reconciles versions only. A fresh replacement takes them with
        ``receive_handover``, a PS that took over (a promoted replica) with ``ps_catch_up``."""
        return None

    def send_handover(self, worker, vectors: list, suspect=None) -> float:
        """Send what :meth:`handover` returned, after the Hello; the seconds it took."""
        raise NotImplementedError(f"mode {self.name} has no hand-over")

    @staticmethod
    def send_to_ps(worker, arrays: list, what: str, suspect=None) -> float:
        """Post every array to the PS on the hand-over tag, wait for them all; the seconds it took.
        (Posted together: the PS receives them in order, while the worker waits for none alone.)
        ``suspect``: the reconnection's :class:`psmodes.suspicion.Suspicion`."""
        import time

        from .. import transport as tp

        c, ctx = worker.ctx.cluster, worker.ctx
        t0 = time.perf_counter()
        reqs = [c.world.Isend(a, c.ps, tp.TAG_HANDOVER) for a in arrays]
        tp.wait(reqs, ctx.peer_timeout, what, watch=ctx.death_watch(), suspect=suspect)
        return time.perf_counter() - t0

    def handed_over(self, worker, n_vectors: int, seconds: float) -> None:
        """The replacement answered the Hello that carried the hand-over."""
        raise NotImplementedError(f"mode {self.name} has no hand-over")

    # ---- PS side of a hand-over (a replacement whose ``awaiting_handover`` ps_restore set)
    def receive_handover(self, server, hello, src: int):
        """The payloads that follow a worker's Hello to a replacement awaiting the hand-over."""
        raise NotImplementedError(f"mode {self.name} has no hand-over")

    def apply_handovers(self, server, items: list) -> dict:
        """Take every worker's hand-over (sync: the leader's alone); what the PS's hello event records."""
        raise NotImplementedError(f"mode {self.name} has no hand-over")

    def chaos_draw(self, cfg, rng, specs: list[str]) -> None:
        """``psbench chaos``: draw this mode's options and aim the kill specs (default: all at the PS)."""
        cfg.kill_ps = list(specs)
