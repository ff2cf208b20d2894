"""Bad input: one line on stderr, exit status 2, no traceback, nothing started."""
from __future__ import annotations

import gzip
import shutil
import struct

import pytest

from conftest import psbench

SYN = ["--benchmark", "synthetic", "--steps", "10"]


def assert_one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("psbench: error:")
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("args, needle", [
    (["--benchmark", "nope", "--steps", "10"], "unknown benchmark 'nope'"),
    (SYN[:2] + ["--mode", "raid5", "--steps", "10"], "unknown mode 'raid5'"),
    (SYN + ["--workers", "0"], "--workers must be a positive integer"),
    (SYN + ["--workers", "two"], "invalid int value"),
    (["--benchmark", "synthetic", "--duration=-5s"], "must be positive"),
    (["--benchmark", "synthetic", "--duration", "-5s"], "expected one argument"),
    (["--benchmark", "synthetic", "--duration", "soon"], "is not a duration"),
    (["--benchmark", "synthetic", "--duration", "0"], "must be positive"),
    (["--benchmark", "synthetic"], "--steps N or --duration"),
    (SYN + ["--kill-ps", "later"], "is not a duration"),
    (SYN + ["--kill-ps", "step:x"], "step:N"),
    (SYN + ["--replay", "magic"], "unknown replay policy"),
    (SYN + ["--optimizer", "lamb"], "unknown optimizer 'lamb'"),
    (SYN + ["--optimizer", "adamw", "--betas", "0.9"], "--betas takes two numbers"),
    (SYN + ["--optimizer", "adamw", "--momentum", "0.9"], "--momentum is SGD's"),
    (SYN + ["--kill-replica", "5s"], "needs --mode chain"),
    (SYN + ["--slow-ps", "5s"], "write AT~DUR"),
    (SYN + ["--hang-ps", "5s~soon"], "is not a duration"),
    (SYN + ["--kill-ps", "5s~2s"], "a kill has no length"),
    (SYN + ["--hang-replica", "5s"], "needs --mode chain"),
    (SYN + ["--slow-factor", "0.5"], "--slow-factor must be at least 1"),
    (SYN + ["--suspect-after", "soon"], "is not a duration"),
    (SYN + ["--restart-delay=-1s"], "must be positive"),
    (SYN + ["--bogus-flag"], "unrecognized arguments"),
    (SYN + ["--consistency", "bounded:0"], "S must be >= 1"),
    (SYN + ["--consistency", "bounded:x"], "unknown consistency 'bounded:x'"),
    (SYN + ["--consistency", "eventual"], "unknown consistency 'eventual'"),
    (SYN + ["--slow-worker", "2:3"], "there is no worker 2"),
    (SYN + ["--slow-worker", "1"], "write W:FACTOR"),
    (SYN + ["--slow-worker", "1:0.5"], "FACTOR must be >= 1"),
    (SYN + ["--lr-staleness"], "needs --consistency async"),
    (SYN + ["--spares", "1"], "--mode none does not repair the job"),
    (SYN + ["--mode", "checkpoint", "--spares", "-1"], "--spares"),
    (SYN + ["--mode", "checkpoint", "--refill-spares"], "give --spares N"),
    (SYN + ["--min-workers", "3"], "--min-workers 3 is more than --workers 2"),
    (SYN + ["--mode", "checkpoint", "--spares", "1", "--refill-spares", "--consistency", "async"],
     "--refill-spares needs --consistency sync"),
])
def test_bad_options(args, needle):
    assert_one_line_error(psbench("run", *args), needle)


@pytest.mark.parametrize("args, needle", [
    (SYN + ["--workers", "0"], "--workers must be a positive integer"),
    (SYN + ["--kill-ps", "later"], "is not a duration"),
    (SYN + ["--kill-ps", "point:aply"], "did you mean point:apply?"),
    (SYN + ["--mode", "chain", "--kill-replica", "soon"], "is not a duration"),
    (SYN + ["--kill-worker", "step:x"], "step:N"),
])
def test_bad_options_start_nothing(tmp_path, args, needle):
    """Every option is checked before the run directory is made and mpirun is started
    (the launcher writes config.json and the events folder first thing)."""
    out = tmp_path / "never"
    assert_one_line_error(psbench("run", *args, "--out", str(out)), needle)
    assert not out.exists()


def test_data_dir_without_files(tmp_path):
    proc = psbench("run", "--benchmark", "fmnist-cnn", "--steps", "10", "--data-dir", str(tmp_path))
    assert_one_line_error(proc, "Fashion-MNIST not found", "apt-get install dataset-fashion-mnist")


def _copy_data(fmnist_available, tmp_path):
    from benchmarks import fmnist

    if not fmnist_available:
        pytest.skip("Fashion-MNIST not installed")
    src = fmnist.find_data_dir()
    for name, _, _ in fmnist.FILES.values():
        shutil.copy(src / name, tmp_path / name)
    return tmp_path


def test_truncated_data_file(fmnist_available, tmp_path):
    data = _copy_data(fmnist_available, tmp_path)
    path = data / "train-images-idx3-ubyte.gz"
    raw = gzip.open(path).read()
    with gzip.open(path, "wb") as fh:
        fh.write(raw[: len(raw) // 2])
    proc = psbench("run", "--benchmark", "fmnist-cnn", "--steps", "10", "--data-dir", str(data))
    assert_one_line_error(proc, "truncated")


def test_wrong_magic_number(fmnist_available, tmp_path):
    data = _copy_data(fmnist_available, tmp_path)
    path = data / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.open(path).read())
    raw[:4] = struct.pack(">i", 2051)
    with gzip.open(path, "wb") as fh:
        fh.write(bytes(raw))
    proc = psbench("run", "--benchmark", "fmnist-cnn", "--steps", "10", "--data-dir", str(data))
    assert_one_line_error(proc, "wrong magic number 2051")


def test_not_gzip(fmnist_available, tmp_path):
    data = _copy_data(fmnist_available, tmp_path)
    (data / "train-labels-idx1-ubyte.gz").write_bytes(b"hello, not a gzip file")
    proc = psbench("run", "--benchmark", "fmnist-cnn", "--steps", "10", "--data-dir", str(data))
    assert_one_line_error(proc, "not a readable gzip file")


def test_out_dir_already_used(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    proc = psbench("run", *SYN, "--out", str(tmp_path))
    assert_one_line_error(proc, "already holds a run")


def test_dry_run_prints_mpirun_line(tmp_path):
    proc = psbench("run", *SYN, "--workers", "3", "--out", str(tmp_path / "d"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert "--with-ft ulfm" in line and "-np 5" in line and "psmodes.main" in line
    assert not (tmp_path / "d" / "events").exists()  # nothing started


def test_doctor_reports_missing_data(tmp_path):
    proc = psbench("doctor", "--data-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "ULFM (fault tolerance)" in proc.stdout
    assert "Fashion-MNIST not found" in proc.stderr
    # what each runtime survives (launch/driver/runtime.py): PyPI's PRRTE 3.0.x ends the job at a lost daemon
    assert "runtime pypi" in proc.stdout and "PRRTE 3.0" in proc.stdout and "a lost daemon ends the job" in proc.stdout
    assert "runtime prrte5" in proc.stdout


def test_runtime_prrte5_without_the_runtime_is_one_line(tmp_path):
    proc = psbench("run", "--runtime", "prrte5", "--benchmark", "synthetic", "--out", str(tmp_path / "never"),
                   env={"PSBENCH_RUNTIME_DIR": str(tmp_path / "none")})
    assert_one_line_error(proc, "make setup-runtime")


@pytest.mark.parametrize("body, factory, needle", [
    ("def workload():\n    return 42\n", "workload", "returned a int, not a benchmarks.registry.Workload"),
    ("import no_such_package\n", "workload", "ModuleNotFoundError: No module named 'no_such_package'"),
    ("def other():\n    pass\n", "workload", "has no function 'workload'"),
    ("def workload():\n    raise RuntimeError('no GPU here')\n", "workload", "workload() raised RuntimeError: no GPU here"),
])
def test_a_broken_user_workload_is_one_line_before_mpirun(tmp_path, body, factory, needle):
    (tmp_path / "mine.py").write_text(body)
    out = tmp_path / "never"
    proc = psbench("run", "--benchmark", f"{tmp_path / 'mine.py'}:{factory}", "--steps", "10", "--out", str(out))
    assert_one_line_error(proc, needle)
    assert not out.exists()
