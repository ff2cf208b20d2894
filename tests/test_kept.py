"""A sweep's kept runs in one compressed archive (launch/experiments/kept.py, --keep FILE.tar.xz): written
whole, read back as it was, and the committed outage study re-renders from its archive."""
from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

from conftest import psbench

ROOT = Path(__file__).resolve().parents[1]


def _run(folder: Path, name: str, value: float) -> Path:
    run = folder / name
    (run / "events").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"seed": 0}))
    (run / "summary.json").write_text(json.dumps({"final_metric": value}))
    (run / "command.txt").write_text("mpirun ...\n")
    (run / "events" / "ps.jsonl").write_text("{}\n")
    (run / "events" / "worker0.jsonl").write_text("{}\n")  # not what a report reads: not kept
    return run


def test_an_archive_keeps_each_run_whole_and_gives_it_back(tmp_path):
    from launch.experiments.kept import KeptArchive, kept_store

    store = kept_store(tmp_path / "kept.tar.xz")
    assert isinstance(store, KeptArchive) and store.names() == set()
    store.add(_run(tmp_path / "runs", "a-s0", 0.5))
    store.add(_run(tmp_path / "runs", "b-s0", 0.6))
    first = (tmp_path / "kept.tar.xz").read_bytes()
    store.add(tmp_path / "runs" / "a-s0")  # again: replaced, not doubled, and the same bytes
    assert (tmp_path / "kept.tar.xz").read_bytes() == first
    assert store.names() == {"a-s0", "b-s0"} and not list(tmp_path.glob(".*.tmp"))
    store.restore("b-s0", tmp_path / "back")
    assert json.loads((tmp_path / "back" / "summary.json").read_text()) == {"final_metric": 0.6}
    assert (tmp_path / "back" / "events" / "ps.jsonl").exists()
    assert not (tmp_path / "back" / "events" / "worker0.jsonl").exists()
    with tarfile.open(tmp_path / "kept.tar.xz") as tar:
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())


def test_the_committed_outage_report_re_renders_from_its_archive(tmp_path):
    proc = psbench("report", "reports/outage/finished.tar.xz", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr

    def figures(text: str) -> str:
        return re.sub(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d \w+", "Generated", text)

    committed = (ROOT / "reports" / "outage" / "report.md").read_text()
    assert figures((tmp_path / "report.md").read_text()) == figures(committed), \
        "re-render it: psbench report reports/outage/finished.tar.xz --out reports/outage"
