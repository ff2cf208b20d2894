"""A sweep's kept runs (``psbench sweep --keep``): the record of each finished run (what the report
reads: :data:`KEPT`) stored where it can be committed, so the sweep resumes on another machine and its
report re-renders from it.

Two stores, chosen by the path: a folder (``--keep DIR``: ``DIR/<label>-s<seed>/...``, readable as it
is) or one compressed archive (``--keep FILE.tar.xz``: the same tree, about 20 times smaller; the
outage study's 93 runs are 6.1 MB as files and 0.3 MB as an archive, and as files they were 456 of the
repository's 516 files under reports/). Each write is whole or not at all: the folder's copy and the
archive are written beside their destination and renamed over it.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# what the report reads of a finished run: a kept copy of these stands for the run
KEPT = ("config.json", "summary.json", "command.txt", "events/ps*.jsonl")
# and of the sweep: its name, target and claims, and the machine it ran on
SWEEP_FILES = ("sweep.json", "sweep.toml", "machine.json")
ARCHIVE_SUFFIXES = (".tar.xz",)


class KeptFolder:
    def __init__(self, path: Path) -> None:
        self.path = path

    def names(self) -> set[str]:
        """The runs kept whole (their summary is there)."""
        if not self.path.is_dir():
            return set()
        return {p.name for p in self.path.iterdir() if (p / "summary.json").exists()}

    def restore(self, name: str, dest: Path) -> None:
        shutil.copytree(self.path / name, dest)

    def add(self, final: Path) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp, dest = self.path / f".{final.name}.tmp", self.path / final.name
        shutil.rmtree(tmp, ignore_errors=True)
        for src in _record(final):
            (tmp / src.relative_to(final)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tmp / src.relative_to(final))
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)


    def add_sweep(self, out: Path) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        for name in SWEEP_FILES:
            if (out / name).exists():
                shutil.copy2(out / name, self.path / name)


class KeptArchive:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _members(self) -> dict[str, bytes]:
        if not self.path.exists():
            return {}
        with tarfile.open(self.path, "r:xz") as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}

    def names(self) -> set[str]:
        return {name.split("/")[0] for name in self._members() if name.endswith("/summary.json")
                and name.count("/") == 1}

    def restore(self, name: str, dest: Path) -> None:
        for member, data in self._members().items():
            run, _, rest = member.partition("/")
            if run != name or not rest or ".." in Path(rest).parts:
                continue
            (dest / rest).parent.mkdir(parents=True, exist_ok=True)
            (dest / rest).write_bytes(data)

    def add(self, final: Path) -> None:
        members = {k: v for k, v in self._members().items() if not k.startswith(f"{final.name}/")}
        members.update({f"{final.name}/{src.relative_to(final)}": src.read_bytes() for src in _record(final)})
        self._write(members)

    def add_sweep(self, out: Path) -> None:
        members = self._members()
        members.update({name: (out / name).read_bytes() for name in SWEEP_FILES if (out / name).exists()})
        self._write(members)

    def extract(self, dest: Path) -> None:
        """The whole record as a sweep directory (``psbench report FILE.tar.xz`` renders it)."""
        for member, data in self._members().items():
            if ".." in Path(member).parts or Path(member).is_absolute():
                continue
            (dest / member).parent.mkdir(parents=True, exist_ok=True)
            (dest / member).write_bytes(data)

    def _write(self, members: dict[str, bytes]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tarfile.open(tmp, "w:xz") as tar:
            for name in sorted(members):  # sorted, no times or owners: the same runs give the same bytes
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(members[name]), 0o644
                tar.addfile(info, io.BytesIO(members[name]))
        os.replace(tmp, self.path)


def kept_store(path: str | Path) -> KeptFolder | KeptArchive:
    path = Path(path)
    return KeptArchive(path) if path.name.endswith(ARCHIVE_SUFFIXES) else KeptFolder(path)


def _record(final: Path) -> list[Path]:
    return [src for pattern in KEPT for src in sorted(final.glob(pattern))]


def is_archive(path: str | Path) -> bool:
    """Whether ``path`` is a sweep's kept archive (``--keep FILE.tar.xz``)."""
    return Path(path).name.endswith(ARCHIVE_SUFFIXES) and Path(path).is_file()


@contextmanager
def runs_at(path: str | Path) -> Iterator[Path]:
    """A folder of runs to read: ``path`` itself, or a kept archive unpacked into a temporary folder for as
    long as the ``with`` lasts (``psbench report FILE.tar.xz``, ``psbench project --validate FILE.tar.xz``)."""
    if not is_archive(path):
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="psbench-kept-") as tmp:
        KeptArchive(Path(path)).extract(Path(tmp))
        yield Path(tmp)
