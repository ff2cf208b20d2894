"""Two "hosts" on one machine for the tests: network namespaces joined by a veth
pair, with addresses that exist only between them (10.77.0.1 ``nodea``,
10.77.0.2 ``nodeb``), each with its own host name (a UTS namespace), and an
sshd in ``nodeb`` that accepts a key made for the test.

What is real: Open MPI starts its daemon on ``nodeb`` over ssh, ranks on the
two hosts talk over the veth only (TCP), and the launcher kills a PS on
``nodeb`` with ``ssh nodeb kill -9``. What is shared (one kernel): the file
system (the checkout, the venv and the run directory are at the same paths,
like a cluster's shared file system), the process ids and the clock (so the
measured clock offset is ~0, within half the ssh round trip).

Everything is made under a temporary folder, plus ``/etc/netns/<ns>/hosts``
(which ``ip netns exec`` mounts over /etc/hosts); :meth:`TwoHosts.stop` removes
it all. An ``ssh`` wrapper first on PATH points ssh (Open MPI's and the
launcher's) at the test's key and known-hosts file.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sysdeps import ensure_packages

PACKAGES = ("openssh-server", "openssh-client", "iproute2", "util-linux")  # installed when missing (tests/sysdeps.py)
TOOLS = ("ip", "unshare", "ssh", "ssh-keygen")
_TAG = os.getpid() % 100000  # namespace and interface names of this process: test runs may overlap
NS = {"nodea": (f"psb{_TAG}a", "10.77.0.1", f"vpsb{_TAG}a"), "nodeb": (f"psb{_TAG}b", "10.77.0.2", f"vpsb{_TAG}b")}


class Unavailable(Exception):
    pass


def sh(argv: list[str], timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and out.returncode != 0:
        raise Unavailable(f"{' '.join(argv)}: {out.stderr.strip()[-300:]}")
    return out


class TwoHosts:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="psbench-netns-"))
        self.sshd: subprocess.Popen | None = None
        self.made_ns: list[str] = []
        self.bin = self.dir / "bin"

    def start(self) -> "TwoHosts":
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        ensure_packages(PACKAGES, lambda: all(shutil.which(t) for t in TOOLS) and Path("/usr/sbin/sshd").exists(),
                        Unavailable)
        (a_ns, a_ip, a_if), (b_ns, b_ip, b_if) = NS["nodea"], NS["nodeb"]
        for ns in (a_ns, b_ns):
            sh(["ip", "netns", "add", ns])
            self.made_ns.append(ns)
            hosts = Path("/etc/netns") / ns / "hosts"
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text(f"127.0.0.1 localhost\n{a_ip} nodea\n{b_ip} nodeb\n")
        sh(["ip", "link", "add", a_if, "type", "veth", "peer", "name", b_if])
        for ns, ip, ifname in (NS["nodea"], NS["nodeb"]):
            sh(["ip", "link", "set", ifname, "netns", ns])
            sh(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", ifname])
            sh(["ip", "-n", ns, "link", "set", ifname, "up"])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        self._ssh()
        return self

    def _ssh(self) -> None:
        d = self.dir
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id")])
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "hostkey")])
        (d / "authorized_keys").write_text((d / "id.pub").read_text())
        (d / "authorized_keys").chmod(0o600)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        (d / "sshd_config").write_text(f"""Port 22
ListenAddress {NS['nodeb'][1]}
HostKey {d / 'hostkey'}
AuthorizedKeysFile {d / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile {d / 'sshd.pid'}
AcceptEnv *
PermitUserEnvironment no
""")
        (d / "known_hosts").write_text(f"nodeb {(d / 'hostkey.pub').read_text().split(' ', 2)[0]} "
                                       f"{(d / 'hostkey.pub').read_text().split()[1]}\n")
        (d / "ssh_config").write_text(f"""Host *
  IdentityFile {d / 'id'}
  UserKnownHostsFile {d / 'known_hosts'}
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  SendEnv PRTE_* OMPI_* PMIX_*
""")
        self.bin.mkdir()
        wrapper = self.bin / "ssh"
        wrapper.write_text(f"#!/bin/sh\nexec /usr/bin/ssh -F {d / 'ssh_config'} \"$@\"\n")
        wrapper.chmod(0o755)
        log = open(d / "sshd.log", "wb")
        self.sshd = subprocess.Popen(
            ["ip", "netns", "exec", NS["nodeb"][0], "unshare", "--uts", "sh", "-c",
             'hostname nodeb && exec /usr/sbin/sshd -D -e -f "$1"', "sh", str(d / "sshd_config")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        end = time.monotonic() + 15
        while time.monotonic() < end:
            out = self.on("nodea", ["ssh", "nodeb", "hostname"], check=False)
            if out.returncode == 0 and out.stdout.strip() == "nodeb":
                return
            time.sleep(0.3)
        raise Unavailable(f"ssh nodea -> nodeb does not work: {out.stderr.strip()[-300:]} "
                          f"{(d / 'sshd.log').read_text()[-300:]}")

    def env(self) -> dict:
        return {**os.environ, "PATH": f"{self.bin}:{os.environ.get('PATH', '')}"}

    def argv_on(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run in ``host``'s namespaces (network; its own host name)."""
        return ["ip", "netns", "exec", NS[host][0], "unshare", "--uts", "sh", "-c",
                f'hostname {host} && exec "$@"', "sh", *argv]

    def on(self, host: str, argv: list[str], timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(self.argv_on(host, argv), capture_output=True, text=True, timeout=timeout,
                             env=self.env(), stdin=subprocess.DEVNULL)
        if check and out.returncode != 0:
            raise Unavailable(f"on {host}: {' '.join(argv)}: {out.stderr.strip()[-300:]}")
        return out

    def stop(self) -> None:
        if self.sshd is not None and self.sshd.poll() is None:
            os.killpg(self.sshd.pid, 15)
            try:
                self.sshd.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.sshd.pid, 9)
                self.sshd.wait(5)
        for ns in self.made_ns:
            sh(["ip", "netns", "delete", ns], check=False)  # takes the veth pair with it
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self.made_ns = []
        shutil.rmtree(self.dir, ignore_errors=True)
