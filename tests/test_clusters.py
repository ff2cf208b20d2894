"""Clusters without a cluster: hostfiles, --hosts, Slurm environment parsing, role
placement, the mpirun/horovodrun/sbatch lines, the remote kill commands, and bad
input (one line, exit 2). Nothing here starts an MPI job."""
from __future__ import annotations

import json
import shlex

import pytest

from conftest import psbench
from launch.driver import hosts as H
from launch.remote.routes import kill_command, kill_route
from psmodes.config import ConfigError
from psmodes.roles import layout
from test_cli_errors import assert_one_line_error

SYN = ["--benchmark", "synthetic", "--steps", "10"]


def test_hostfile_syntax(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# two nodes\nnode1 slots=4   # first\n\nnode2 slots=4 max_slots=8\nnode3\nnode1 slots=2\n")
    assert H.parse_hostfile(f) == [H.Host("node1", 6), H.Host("node2", 4), H.Host("node3", 1)]


@pytest.mark.parametrize("text, needle", [
    ("# only comments\n\n", "has no slots"),
    ("node1 slots=0\n", "has no slots"),
    ("node1 slots=four\n", "line 1"),
    ("node1 cpus=4\n", "line 1"),
])
def test_bad_hostfiles(tmp_path, text, needle):
    f = tmp_path / "hosts"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        H.parse_hostfile(f)


def test_hosts_option_and_slurm_environment():
    assert H.parse_hosts("a:2,b,a:1") == [H.Host("a", 3), H.Host("b", 1)]
    with pytest.raises(ConfigError, match="host:slots"):
        H.parse_hosts("a:x")
    assert H.expand_nodelist("node[01-03,07],gpu1,r[1-2]-ib") == [
        "node01", "node02", "node03", "node07", "gpu1", "r1-ib", "r2-ib"]
    assert H.expand_counts("2(x3),1") == [2, 2, 2, 1]
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "4(x2)"}
    assert H.resolve_hosts(None, None, env) == ([H.Host("n1", 4), H.Host("n2", 4)], "slurm")
    assert H.resolve_hosts(None, "x:2", env)[1] == "hosts"  # an explicit list wins over the allocation
    assert H.resolve_hosts(None, None, {})[1] == "local"


def test_placement_keeps_ps_and_replicas_apart():
    roles = layout(workers=4, replicas=2, evaluator=True)
    p = H.place(roles, [H.Host("h1", 4), H.Host("h2", 2), H.Host("h3", 2)])
    where = dict(p.ranks)
    assert where["ps"] == "h1"
    assert where["replica1"] != "h1" and where["replica2"] != "h1"
    assert where["replica1"] != where["replica2"]  # three hosts: every copy of the state on its own host
    assert len(p.ranks) == 8 and not p.notes
    counts = {h: sum(1 for _, x in p.ranks if x == h) for h in ("h1", "h2", "h3")}
    assert counts == {"h1": 4, "h2": 2, "h3": 2}  # no host holds more ranks than slots
    q = H.place(roles, [H.Host("h1", 4), H.Host("h2", 4), H.Host("h3", 2)], ps_host="h2")
    assert dict(q.ranks)["ps"] == "h2" and "h2" not in (dict(q.ranks)["replica1"], dict(q.ranks)["replica2"])
    assert "rank  role" in q.table() and "replica2" in q.table()


def test_placement_on_one_host_says_the_chain_shares_it():
    p = H.place(layout(2, 1, True), [H.Host("solo", 8)])
    assert {h for _, h in p.ranks} == {"solo"}
    assert any("one host only" in n for n in p.notes)


def test_placement_slots_and_oversubscription():
    roles = layout(4, 0, True)  # 6 ranks
    with pytest.raises(ConfigError, match="6 ranks need 6 slots but the hosts have 4.*--oversubscribe"):
        H.place(roles, [H.Host("a", 2), H.Host("b", 2)])
    p = H.place(roles, [H.Host("a", 2), H.Host("b", 2)], oversubscribe=True)
    assert len(p.ranks) == 6 and {h for _, h in p.ranks} == {"a", "b"}
    with pytest.raises(ConfigError, match="--ps-host c is not one of the hosts"):
        H.place(roles, [H.Host("a", 8)], ps_host="c")
    note = H.place(roles, [H.Host("a", 6)], replacement_slots=1).notes
    assert any("respawn may fail" in n for n in note)


def test_spares_go_to_hosts_other_than_the_ps():
    roles = layout(2, 1, True, spares=2)  # ps, replica1, evaluator, worker0, worker1, spare0, spare1
    p = H.place(roles, [H.Host("a", 3), H.Host("b", 2), H.Host("c", 2)])
    where = dict(p.ranks)
    assert where["ps"] == "a" and where["spare0"] != "a" and where["spare1"] != "a", p.ranks
    assert [r for r, _ in p.ranks][-2:] == ["spare0", "spare1"]
    crowded = H.place(roles, [H.Host("a", 5), H.Host("b", 2)])  # b is full with replica1 and a worker
    assert dict(crowded.ranks)["spare1"] == "a" and any("spare" in n and "shares a host" in n for n in crowded.notes)


def test_spares_take_missing_roles_but_not_each_others():
    """A refill (--refill-spares) asks for the spare roles used up: a spare left takes the PS that died
    in the same repair, never another spare's role, and the spare roles are left to the spawn."""
    from psmodes.cluster import fill_from_spares
    from psmodes.roles import Role

    roles = [Role("evaluator"), Role("worker", 0), Role("worker", 1), Role("spare", 1)]  # spare0 was used, the PS died
    new, taken, spawn = fill_from_spares(roles, [Role("ps"), Role("spare", 0)])
    assert taken == [Role("ps")] and new[3] == Role("ps") and spawn == [Role("spare", 0)]
    assert fill_from_spares(roles, [Role("spare", 0)]) == (roles, [], [Role("spare", 0)])


def test_kill_routes_are_argument_lists():
    assert kill_route("localhost") == "local"
    assert kill_route("node9", env={}) == "ssh"
    assert kill_route("node9", env={"SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "node9"}) == "srun"
    ssh = kill_command("ssh", "node9", 1234)
    assert ssh[0] == "ssh" and "node9" in ssh and "BatchMode=yes" in ssh
    assert shlex.split(ssh[-1]) == ["sh", "-c", 'date +%s.%N && exec kill -9 "$1"', "sh", "1234"]
    srun = kill_command("srun", "node9", 1234, env={"SLURM_JOB_ID": "3"})
    assert srun[:2] == ["srun", "--overlap"] and "--jobid=3" in srun and "--nodelist=node9" in srun
    assert srun[-5:] == ["sh", "-c", 'date +%s.%N && exec kill -9 "$1"', "sh", "1234"]


def test_dry_run_with_hosts_places_ranks(tmp_path):
    proc = psbench("run", *SYN, "--mode", "chain", "--hosts", "localhost:3,127.0.0.1:3", "--out",
                   str(tmp_path / "d"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout.strip())
    assert "--hostfile" in cmd and cmd[cmd.index("--map-by") + 1].startswith("seq:file=")
    assert "--oversubscribe" not in cmd and "--with-ft" in cmd
    assert "replica1" in proc.stderr and "127.0.0.1" in proc.stderr  # the placement table


def test_dry_run_horovodrun_and_no_ulfm(tmp_path):
    proc = psbench("run", *SYN, "--launcher", "horovodrun", "--out", str(tmp_path / "h"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout.strip())
    assert cmd[0].endswith("horovodrun") and cmd[cmd.index("-np") + 1] == "4"
    assert cmd[cmd.index("-H") + 1] == "localhost:4"
    assert "--binding-args=--bind-to none --map-by :OVERSUBSCRIBE" in cmd
    # ULFM for the job and for every job its ranks spawn (launch/driver/mpirun.py ulfm_args)
    assert "--mpi-args=--with-ft ulfm --prtemca state_base_recoverable 1" in cmd
    plain = psbench("run", *SYN, "--mode", "checkpoint", "--recovery", "job-restart", "--no-ulfm",
                    "--out", str(tmp_path / "n"), "--dry-run")
    assert plain.returncode == 0, plain.stderr
    assert "--with-ft" not in plain.stdout


@pytest.mark.parametrize("args, needle", [
    (SYN + ["--hostfile", "/nonexistent/hosts"], "does not exist"),
    (SYN + ["--hosts", "a:2,b:2", "--workers", "4"], "6 ranks need 6 slots but the hosts have 4"),
    (SYN + ["--hosts", "a:8", "--ps-host", "b"], "--ps-host b is not one of the hosts"),
    (SYN + ["--ps-host", "b"], "--ps-host needs hosts"),
    (SYN + ["--hosts", "a:2", "--hostfile", "x"], "not both"),
    (SYN + ["--launcher", "srun"], "unknown launcher 'srun'"),
    (SYN + ["--recovery", "magic"], "unknown recovery 'magic'"),
    (SYN + ["--recovery", "job-restart", "--mode", "chain"], "needs --mode checkpoint"),
    (SYN + ["--mode", "checkpoint", "--no-ulfm"], "use --recovery job-restart"),
    (SYN + ["--kill-via", "telnet"], "unknown --kill-via"),
    (SYN + ["--max-restarts=-1"], "--max-restarts must be"),
])
def test_bad_cluster_options(args, needle):
    assert_one_line_error(psbench("run", *args), needle)


def test_hostfile_without_slots_is_one_line(tmp_path):
    f = tmp_path / "empty"
    f.write_text("# nothing\n")
    assert_one_line_error(psbench("run", *SYN, "--hostfile", str(f)), "has no slots")


def test_without_ulfm_in_the_library_repair_modes_refuse(tmp_path):
    proc = psbench("run", *SYN, "--mode", "stateless", env={"PSBENCH_ULFM": "0"})
    assert_one_line_error(proc, "has no ULFM", "use --recovery job-restart")
    ok = psbench("run", *SYN, "--mode", "checkpoint", "--recovery", "job-restart", "--out", str(tmp_path / "r"),
                 "--dry-run", env={"PSBENCH_ULFM": "0"})
    assert ok.returncode == 0 and "--with-ft" not in ok.stdout, ok.stderr


@pytest.mark.parametrize("args, needle", [
    (["--nodes", "0"], "--nodes must be a positive integer"),
    (["--time", "1h"], "--time '1h': write HH:MM:SS"),
    (["--time", "00:61:00"], "write HH:MM:SS"),
    (["--tasks-per-node", "2"], "the run has 4 ranks but --nodes 1 --tasks-per-node 2 gives 2 task slots"),
    (["--array"], "--array needs a sweep file"),
])
def test_bad_slurm_options(tmp_path, args, needle):
    proc = psbench("slurm", *SYN, "--script", str(tmp_path / "job.sbatch"), *args)
    assert_one_line_error(proc, needle)
    assert not (tmp_path / "job.sbatch").exists()


def test_slurm_script_for_a_run(tmp_path):
    script = tmp_path / "job.sbatch"
    proc = psbench("slurm", "--benchmark", "synthetic", "--mode", "checkpoint", "--duration", "20s",
                   "--kill-ps", "5s", "--nodes", "1", "--time", "00:05:00", "--partition", "debug",
                   "--account", "proj", "--gpus-per-node", "2", "--script", str(script))
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    for line in ("#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=5", "#SBATCH --time=00:05:00",
                 "#SBATCH --partition=debug", "#SBATCH --account=proj", "#SBATCH --gpus-per-node=2"):
        assert line in text, text
    assert "1 free slot(s) for spawned replacements" in text  # 4 ranks + 1 for the replacement PS
    run_line = text.strip().splitlines()[-1]
    assert " run --benchmark synthetic --mode checkpoint" in run_line and '--out "$OUT"' in run_line
    assert f"submit it with: sbatch {script}" in proc.stdout
    # two spares cover both kills: the allocation holds them and needs no slot for a spawn
    proc = psbench("slurm", "--benchmark", "synthetic", "--mode", "checkpoint", "--duration", "20s", "--spares", "2",
                   "--kill-ps", "5s,10s", "--nodes", "1", "--time", "00:05:00", "--script", str(script))
    assert proc.returncode == 0 and "#SBATCH --ntasks-per-node=6" in script.read_text(), proc.stderr


def test_slurm_job_array_for_a_sweep(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('name = "arr"\nseeds = [0]\n[base]\nbenchmark = "synthetic"\nsteps = 20\n'
                     '[grid]\nmode = ["none", "checkpoint", "stateless"]\n')
    script = tmp_path / "arr.sbatch"
    proc = psbench("slurm", str(sweep), "--out", str(tmp_path / "out"), "--array", "--time", "00:10:00",
                   "--script", str(script))
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    assert "#SBATCH --array=0-2" in text and '--task "$SLURM_ARRAY_TASK_ID"' in text
    report = (tmp_path / "arr-report.sbatch").read_text()
    assert f" report {tmp_path / 'out'} --out " in report
    assert "--dependency=afterany:$(sbatch --parsable" in proc.stdout
    dry = psbench("sweep", str(sweep), "--out", str(tmp_path / "out"), "--dry-run")
    assert dry.returncode == 0 and len(dry.stdout.strip().splitlines()) == 4  # header + 3 runs


def test_sweep_task_out_of_range(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[base]\nbenchmark = "synthetic"\nsteps = 20\n')
    assert_one_line_error(psbench("sweep", str(sweep), "--out", str(tmp_path / "o"), "--task", "3"),
                          "--task 3: the sweep has runs 0..0")


def test_summary_of_a_job_restart(tmp_path):
    """summary.json of a job-restart run, from hand-written event streams: the launcher's
    job exit is the detection (no ULFM), downtime runs to the first step of the new job."""
    from launch.analysis.summary import summarize
    from psmodes.config import RunConfig

    cfg = RunConfig(benchmark="synthetic", mode="checkpoint", recovery="job-restart", ulfm=False, duration_s=20,
                    run_dir=str(tmp_path))
    cfg.save(tmp_path / "config.json")
    ev = tmp_path / "events"
    ev.mkdir()
    t0 = 1000.0

    def write(name, records):
        (ev / f"{name}.jsonl").write_text("".join(json.dumps({"who": name, **r}) + "\n" for r in records))

    write("ps", [{"t": t0, "ev": "train_start", "t0_ms": t0 * 1000},
                 {"t": t0 + 9, "ev": "resume", "from_version": 100, "attempt": 1}])
    write("worker0", [{"t": t0 + 1, "ev": "step", "version": 120, "applied": True, "samples": 64},
                      {"t": t0 + 2, "ev": "failed", "reason": "PS died"},
                      {"t": t0 + 10, "ev": "step", "version": 101, "applied": True, "samples": 64},
                      {"t": t0 + 20, "ev": "done", "completed": True, "version": 300}])
    write("evaluator", [{"t": t0 + 20, "ev": "eval", "final": True, "accuracy": 0.9, "ps_step": 300,
                         "t_snapshot": t0 + 20}])
    write("launcher", [{"t": t0 + 1.5, "ev": "kill", "t_kill": t0 + 1.5, "pid": 1, "host": "h", "role": "ps",
                        "at": "1s"},
                       {"t": t0 + 2.5, "ev": "job_exit", "t_exit": t0 + 2.5, "attempt": 0, "returncode": 1},
                       {"t": t0 + 5, "ev": "restart", "attempt": 1, "t_restart": t0 + 5}])
    s = summarize(tmp_path)
    assert s["completed"], s["exit_reason"]  # the first job's failure was the planned restart
    assert s["detections"] == [{"fault": 0, "kind": "kill", "latency_s": 1.0, "rank": None, "who": "launcher", "via": "job exit"}]
    (rec,) = s["recoveries"]
    assert rec["recovery_s"] == rec["idle_s"] == 8.5 and rec["lost_steps"] == 20 and rec["restart_s"] == 2.5
    assert s["restarts"] == [{"attempt": 1, "t_s": 5.0}]
