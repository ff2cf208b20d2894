"""Debian packages the system tests need, installed when missing (root on Debian/Ubuntu):
the Slurm tests' slurm-wlm and munge, the two-host tests' openssh-server, iproute2 and
ssh, so that ``make test`` on a fresh machine runs them instead of skipping them."""
from __future__ import annotations

import os
import shutil
import subprocess


def ensure_packages(packages: tuple[str, ...], present, unavailable: type[Exception], timeout: float = 600.0) -> None:
    """``apt-get install packages`` unless ``present()``; raises ``unavailable`` (one line) when
    they cannot be installed here."""
    if present():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise unavailable(f"{' '.join(packages)} not installed and this is not root on Debian/Ubuntu")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    out = subprocess.run(["apt-get", "install", "-y", "-qq", *packages], capture_output=True, text=True,
                         timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if out.returncode != 0 or not present():
        raise unavailable(f"apt-get install {' '.join(packages)} failed: {out.stderr.strip()[-300:]}")
