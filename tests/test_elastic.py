"""Elastic workers' decision (psmodes/elastic.py): which worker deaths a run survives, a pure function of the
configuration and the roles the shrink agreed on. The real runs are in tests/test_failures.py."""
from __future__ import annotations

import pytest

from psmodes.config import RunConfig
from psmodes.elastic import survivable, why_the_run_ends
from psmodes.roles import Role

ELASTIC = dict(benchmark="synthetic", steps=10, mode="checkpoint", workers=3, allreduce="mpi", exchange="blocking")


def cfg(**over) -> RunConfig:
    return RunConfig(**{**ELASTIC, **over}).validate()


def test_a_worker_other_than_the_leader_is_survived_down_to_min_workers():
    assert survivable(cfg())
    assert why_the_run_ends(cfg(), [Role("worker", 2)], workers_left=2) is None
    assert why_the_run_ends(cfg(), [], workers_left=3) is None
    assert "fewer than --min-workers 3" in why_the_run_ends(cfg(min_workers=3), [Role("worker", 2)], workers_left=2)
    assert not survivable(cfg(min_workers=3))
    # the leader too: the next worker leads and says Hello to the PS (hybrid too: its PS syncs with the tail
    # first), and while the PS is down it takes over the repair, except in stateless (the buffered updates)
    assert why_the_run_ends(cfg(), [Role("worker", 0)], workers_left=2) is None
    assert why_the_run_ends(cfg(mode="hybrid"), [Role("worker", 0)], workers_left=2) is None
    assert why_the_run_ends(cfg(), [Role("worker", 0)], workers_left=2, ps_up=False) is None
    assert "the PS was down" in why_the_run_ends(cfg(mode="stateless"), [Role("worker", 0)], workers_left=2, ps_up=False)


@pytest.mark.parametrize("over, reason", [
    (dict(allreduce="horovod"), "--allreduce mpi"),
    (dict(mode="none"), "mode none: any death ends the job"),
])
def test_what_is_not_elastic_yet_ends_the_run_and_says_why(over, reason):
    why = why_the_run_ends(cfg(**over), [Role("worker", 1)], workers_left=2)
    assert why.startswith("worker1 died;") and reason in why, why
    assert not survivable(cfg(**over))


@pytest.mark.parametrize("consistency", ["async", "bounded:2"])
def test_async_workers_are_elastic_over_any_allreduce_and_exchange(consistency):
    # every async worker talks to the PS on its own: no allreduce or exchange to rebuild
    assert survivable(cfg(consistency=consistency, allreduce="horovod", exchange="auto"))
    # the leader too: the next worker leads (psmodes/cluster.py Cluster.leader)
    assert why_the_run_ends(cfg(consistency=consistency), [Role("worker", 0)], workers_left=2) is None


def test_elastic_batch_keeps_the_global_batch_or_scales_the_learning_rate():
    from psmodes.elastic import batch_and_lr

    assert batch_and_lr(cfg(), 32, 3) == (32, 1.0)  # the whole group
    assert batch_and_lr(cfg(), 32, 2) == (32, 2 / 3)  # local (the default): the linear scaling rule
    assert batch_and_lr(cfg(elastic_batch="global"), 32, 2) == (48, 1.0)  # 96 samples a step, as with three
    assert batch_and_lr(cfg(consistency="async", exchange="auto"), 32, 1) == (32, 1.0)  # one worker's batch an update


def test_the_state_a_worker_keeps_commits_an_answer_and_restores_a_new_leader_from_the_last_header():
    from psmodes.messages import Control
    from psmodes.worker_state import WorkerState

    st = WorkerState(version=41, pending=True, held=42, in_flight=object())
    st.commit(42, t0_ms=7)  # the PS answered
    assert (st.version, st.t0_ms, st.pending, st.in_flight) == (42, 7, False, None) and st.held == 42
    st.pending, st.in_flight = True, object()  # the dead leader's gradient on its way
    st.restore(Control(version=40, t0_ms=5), ps_up=True, restart_delay_s=10.0)
    assert (st.version, st.t0_ms, st.pending, st.in_flight, st.held, st.repair_due) == (40, 5, False, None, None, None)
    st.restore(Control(version=40), ps_up=False, restart_delay_s=10.0)  # the PS down too: its repair is ours
    assert st.repair_due is not None and not st.ps_up
    st.begin_outage(100.0)
    first = st.outage
    st.begin_outage(200.0, version=3)  # a failure within the outage prolongs it
    assert st.outage is first and (first.t_start, first.version) == (100.0, 40)
    st.end_outage()
    assert (st.outage, st.buffer, st.local_opt) == (None, None, None)


def test_a_replacement_waits_the_restart_delay_and_a_spawn_the_settle_after_the_last_repair():
    """psmodes.context.refill_action, on the roles and the clocks alone."""
    from psmodes.context import refill_action

    ps, ev, w0, w1, w2 = Role("ps", 0), Role("evaluator", 0), *(Role("worker", i) for i in range(3))
    spare, spare1 = Role("spare", 0), Role("spare", 1)
    world, bare = [ps, ev, w0, w1, spare], [ps, ev, w0, w1]
    settling = dict(now=100.0, refill_after=102.0, replace_after=100.0)  # a repair just now, --restart-delay 0
    # worker2 lost, a spare left: in place now, no new world to wait for
    assert refill_action(world, [w2], **settling) is True
    # within the restart delay: nothing, spare or not
    assert refill_action(world, [w2], now=100.0, refill_after=0.0, replace_after=110.0) is False
    # a spawn (no spare; or --refill-spares, the spare's successor) waits the settle
    assert refill_action(bare, [w2], **settling) is False
    assert refill_action(world, [w2, spare1], **settling) is False
    assert refill_action(bare, [w2], now=102.0, refill_after=102.0, replace_after=100.0) is True
    assert refill_action(world, [w2, spare1], now=102.0, refill_after=102.0, replace_after=100.0) is True
