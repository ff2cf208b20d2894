"""``--mode checkpoint``: the PS saves its state every K updates; a replacement resumes
from the newest checkpoint.

The PS writes ``checkpoints/ckpt-g<generation>-<version>.pt`` every ``--checkpoint-every`` K updates
on a background thread (:class:`psmodes.checkpoint.BackgroundWriter`: the PS loop pays
for the copy only). A replacement PS (respawned, or the first PS of a restarted job)
loads the newest checkpoint that loads and the workers continue from it; the work
since is lost and counted. At most 2K versions are lost (the checkpoint of version v
may still be being written when the PS dies at v+K-1), K with ``--checkpoint-sync``
(the write is waited for on the critical path). Each PS claims a checkpoint generation of its own
(:func:`psmodes.checkpoint.claim`); one whose generation was replaced while it lived has its next
write refused and ends at its next update, recorded (``stale_writer``) as a failure nobody injected.

The runtime modules (torch through :mod:`psmodes.checkpoint`) are imported inside the
hooks: the launcher imports this module for the promise alone.
"""
from __future__ import annotations

from pathlib import Path

from .base import RecoveryMode


class CheckpointRecovery(RecoveryMode):
    name = "checkpoint"
    summary = "the PS checkpoints every K updates; a respawned PS resumes from the newest checkpoint"
    replacement_starts_from = "the newest checkpoint on disk"
    supports_job_restart = True
    writes_checkpoints = True
    options = ("checkpoint_every", "checkpoint_sync")

    def ps_versions_lost(self, cfg) -> int:
        return cfg.checkpoint_every * (1 if cfg.checkpoint_sync else 2)

    def describe(self, cfg) -> str:
        return f"checkpoint K={cfg.checkpoint_every}{' sync' if cfg.checkpoint_sync else ''}"

    def chaos_draw(self, cfg, rng, specs: list[str]) -> None:
        cfg.kill_ps = list(specs)
        cfg.checkpoint_every = rng.choice([10, 20, 50])
        cfg.checkpoint_sync = rng.random() < 0.3

    # ---- PS side
    def ps_setup(self, server) -> None:
        from .. import checkpoint as ckpt
        from .. import killpoints
        from ..events import Ev

        log = server.ctx.log

        def written(version: int, path: Path, seconds: float) -> None:
            log.emit(Ev.CHECKPOINT, version=version, path=path.name, write_s=seconds,
                     bytes=path.stat().st_size if path.exists() else 0)

        def failed(version: int, exc: Exception) -> None:
            if isinstance(exc, ckpt.StaleWriter):  # replaced while alive: the next update ends this PS
                import os

                from mpi4py import MPI

                server.replaced_by = exc
                log.emit(Ev.STALE_WRITER, version=version, generation=exc.mine, current=exc.current, role="ps",
                         pid=os.getpid(), host=MPI.Get_processor_name())
                return
            # training goes on; the newest checkpoint that was written stays the one to resume from
            log.emit(Ev.CHECKPOINT_FAILED, version=version, error=f"{type(exc).__name__}: {exc}")

        def hook(version: int) -> None:
            if version > 0:  # not the initial checkpoint, written before training starts
                killpoints.reached("checkpoint_write", server.ctx, version=version)

        server.ckpt_dir = Path(server.ctx.cfg.run_dir) / "checkpoints"
        server.replaced_by = None  # a StaleWriter: a newer PS claimed the folder (psmodes/checkpoint.py)
        server.ckpt_generation = ckpt.claim(server.ckpt_dir)
        server.writer = ckpt.BackgroundWriter(server.ckpt_dir, written, on_failed=failed,
                                              hook=hook if killpoints.armed("checkpoint_write") else None)

    def ps_restore(self, server) -> None:
        from .. import checkpoint as ckpt
        from ..errors import RunFailed
        from ..events import Ev
        from ..flatparams import digest

        cfg, log, opt = server.ctx.cfg, server.ctx.log, server.opt
        for name in ckpt.remove_leftovers(server.ckpt_dir):
            log.emit(Ev.CHECKPOINT_SKIPPED, reason=f"{name}: the temporary file of a writer killed mid-write, removed")
        state, skipped = ckpt.newest(server.ckpt_dir, server.numel, server.opt)
        for reason in skipped:
            log.emit(Ev.CHECKPOINT_SKIPPED, reason=reason)
        if state is None and not skipped:
            # the PS died before its first checkpoint (version 0) was durable: version 0 is the
            # seed's initial model, which build_flat made again; lose the steps, not the run
            state = ckpt.state_of(opt, cfg.seed, version=0)
            log.emit(Ev.CHECKPOINT_NONE, reason=f"no checkpoint in {server.ckpt_dir}: starting from the "
                                                "initial weights (version 0)")
        if state is None:
            raise RunFailed(f"no loadable checkpoint in {server.ckpt_dir}")
        opt.weights.copy_(state["weights"])
        opt.load_state(state["optimizer_state"], state["version"])
        server.ctx.divergence.note("restore", opt.version, from_version=state["version"])
        log.emit(Ev.RESUME, from_version=state["version"], from_generation=state.get("generation"),
                 generation=server.ckpt_generation, digest=digest(opt.weights), state_digest=digest(opt.state),
                 attempt=server.restart["attempt"] if server.restart else None)

    def ps_start(self, server) -> None:
        if not server.started:  # the initial checkpoint (version 0): a PS killed before its first has one
            self._submit(server, wait=False)

    def ps_after_update(self, server) -> None:
        cfg = server.ctx.cfg
        if server.replaced_by is not None:
            from ..errors import RunFailed

            raise RunFailed(f"stale writer: {server.replaced_by}")
        if server.opt.version % cfg.checkpoint_every == 0:
            self._submit(server, wait=cfg.checkpoint_sync, log=True)

    def ps_close(self, server) -> None:
        server.writer.close()

    def _submit(self, server, wait: bool, log: bool = False) -> None:
        import time

        from .. import checkpoint as ckpt
        from ..errors import RunFailed
        from ..events import Ev

        opt, cfg = server.opt, server.ctx.cfg
        t0 = time.perf_counter()
        state = ckpt.state_of(opt, cfg.seed, generation=server.ckpt_generation)
        copy_s = time.perf_counter() - t0
        try:
            waited = server.writer.submit(state, server.ctx.peer_timeout)
        except ckpt.CheckpointStalled as exc:
            raise RunFailed(str(exc)) from None
        if wait:
            server.writer.wait_idle(server.ctx.peer_timeout)
        if log:
            server.ctx.log.emit(Ev.CHECKPOINT_START, version=opt.version, copy_s=copy_s, waited_s=waited)
