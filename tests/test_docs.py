"""The documentation says what the code does: docs/options.md is the generated option reference, every
relative link of the README and docs/ resolves, and every psbench command they show uses flags that
exist."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def test_the_option_reference_is_the_generated_one():
    from launch.driver.options import options_markdown

    page = (ROOT / "docs" / "options.md").read_text()
    assert page == options_markdown(), "docs/options.md is stale: psbench options --markdown > docs/options.md"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for m in LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+://|^mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
                bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not bad, "\n".join(bad)


def _flags_of(parser) -> dict[str, set[str]]:
    import argparse

    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = {o for a in sub._actions for o in a.option_strings}
    return out


def _shell_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced block that is shell (no language, sh, bash, console)."""
    blocks, current, shell = [], None, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current, shell = [], line.strip()[3:].strip() in ("", "sh", "bash", "console")
            else:
                if shell:
                    blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_every_documented_command_uses_flags_that_exist():
    from launch.cli import build_parser

    flags = _flags_of(build_parser())
    # psbench slurm takes psbench run's or sweep's options besides its own (parsed in launch/experiments/slurm.py)
    import argparse

    from launch.experiments.slurm import add_slurm_options

    own = argparse.ArgumentParser()
    add_slurm_options(own)
    flags["slurm"] = flags["run"] | flags["sweep"] | {o for a in own._actions for o in a.option_strings}
    bad, seen = [], 0
    for page in PAGES:
        for block in _shell_blocks(page.read_text()):
            for line in block:
                m = re.search(r"(?:^|\s|/)psbench\s+([a-z]+)(.*)$", line.split("#", 1)[0])
                if not m or m.group(1) not in flags:
                    continue
                seen += 1
                try:
                    words = shlex.split(m.group(2))
                except ValueError:
                    words = m.group(2).split()
                for word in words:
                    flag = word.split("=", 1)[0]
                    if flag.startswith("--") and flag not in flags[m.group(1)]:
                        bad.append(f"{page.relative_to(ROOT)}: psbench {m.group(1)} {flag}")
    assert seen > 10, "the documented commands were not found"
    assert not bad, "\n".join(bad)
