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
NS = {"nodea": (f"psb{_TAG}a", "10.77.0.1", f"vpsb{_TAG}a"), "nodeb": (f"psb{_TAG}b", "10.77.0.2", f"vpsb{_TAG}b"),
      "nodec": (f"psb{_TAG}c", "10.77.0.3", f"vpsb{_TAG}c")}
THREE = ("nodea", "nodeb", "nodec")
SWITCH = (f"psb{_TAG}s", f"brpsb{_TAG}")  # three hosts: the namespace of their bridge, and the bridge


class Unavailable(Exception):
    pass


def sh(argv: list[str], timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and out.returncode != 0:
        raise Unavailable(f"{' '.join(argv)}: {out.stderr.strip()[-300:]}")
    return out


class TwoHosts:
    """``nodea`` and ``nodeb`` joined by a veth pair; with ``hosts=THREE``, ``nodec`` too, the three joined
    by a bridge in a namespace of its own (a switch). Every host but ``nodea`` runs an sshd."""

    def __init__(self, hosts: tuple[str, ...] = ("nodea", "nodeb")) -> None:
        self.hosts = hosts
        self.dir = Path(tempfile.mkdtemp(prefix="psbench-netns-"))
        self.sshds: list[subprocess.Popen] = []
        self.made_ns: list[str] = []
        self.bin = self.dir / "bin"

    def start(self) -> "TwoHosts":
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        ensure_packages(PACKAGES, lambda: all(shutil.which(t) for t in TOOLS) and Path("/usr/sbin/sshd").exists(),
                        Unavailable)
        names = "".join(f"{NS[h][1]} {h}\n" for h in self.hosts)
        for host in self.hosts:
            ns = NS[host][0]
            sh(["ip", "netns", "add", ns])
            self.made_ns.append(ns)
            hosts = Path("/etc/netns") / ns / "hosts"
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text(f"127.0.0.1 localhost\n{names}")
        if len(self.hosts) == 2:
            sh(["ip", "link", "add", NS["nodea"][2], "type", "veth", "peer", "name", NS["nodeb"][2]])
        else:
            switch, bridge = SWITCH
            sh(["ip", "netns", "add", switch])
            self.made_ns.append(switch)
            sh(["ip", "-n", switch, "link", "add", bridge, "type", "bridge"])
            sh(["ip", "-n", switch, "link", "set", bridge, "up"])
            for host in self.hosts:
                ifname, port = NS[host][2], "s" + NS[host][2]
                sh(["ip", "link", "add", ifname, "type", "veth", "peer", "name", port])
                sh(["ip", "link", "set", port, "netns", switch])
                sh(["ip", "-n", switch, "link", "set", port, "master", bridge])
                sh(["ip", "-n", switch, "link", "set", port, "up"])
        for host in self.hosts:
            ns, ip, ifname = NS[host]
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
        remote = [h for h in self.hosts if h != "nodea"]
        key = (d / "hostkey.pub").read_text().split()
        (d / "known_hosts").write_text("".join(f"{h} {key[0]} {key[1]}\n" for h in remote))
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
        for host in remote:
            (d / f"sshd_config.{host}").write_text(f"""Port 22
ListenAddress {NS[host][1]}
HostKey {d / 'hostkey'}
AuthorizedKeysFile {d / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile {d / f'sshd.{host}.pid'}
AcceptEnv *
PermitUserEnvironment no
""")
            log = open(d / f"sshd.{host}.log", "wb")
            self.sshds.append(subprocess.Popen(
                ["ip", "netns", "exec", NS[host][0], "unshare", "--uts", "sh", "-c",
                 f'hostname {host} && exec /usr/sbin/sshd -D -e -f "$1"', "sh", str(d / f"sshd_config.{host}")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        for host in remote:
            end = time.monotonic() + 15
            while True:
                out = self.on("nodea", ["ssh", host, "hostname"], check=False)
                if out.returncode == 0 and out.stdout.strip() == host:
                    break
                if time.monotonic() > end:
                    raise Unavailable(f"ssh nodea -> {host} does not work: {out.stderr.strip()[-300:]} "
                                      f"{(d / f'sshd.{host}.log').read_text()[-300:]}")
                time.sleep(0.3)

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
        for sshd in self.sshds:
            if sshd.poll() is not None:
                continue
            os.killpg(sshd.pid, 15)
            try:
                sshd.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(sshd.pid, 9)
                sshd.wait(5)
        self.sshds = []
        for ns in self.made_ns:
            sh(["ip", "netns", "delete", ns], check=False)  # takes the veth pairs (and the bridge) with it
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self.made_ns = []
        shutil.rmtree(self.dir, ignore_errors=True)


def hosts_or_skip(hosts: tuple[str, ...] = ("nodea", "nodeb")):
    """A module fixture's body: the hosts started (the test skipped where namespaces cannot be made), then
    stopped."""
    import pytest

    made = TwoHosts(hosts)
    try:
        made.start()
    except (Unavailable, OSError, subprocess.TimeoutExpired) as exc:
        made.stop()
        pytest.skip(f"no network namespaces here: {exc}")
    yield made
    made.stop()
