"""Hosts and role placement: which machine runs the PS, the replicas, the
evaluator and the workers.

Hosts come from one of (first match wins):

- ``--hostfile FILE``: Open MPI syntax, one host a line, ``name [slots=N]
  [max_slots=M]``, ``#`` comments; a bare name has one slot;
- ``--hosts h1:4,h2:4`` (a bare name has one slot);
- a Slurm allocation (``SLURM_JOB_NODELIST`` + ``SLURM_TASKS_PER_NODE``), when
  ``psbench run`` runs inside one;
- nothing: this machine only (the laptop case; oversubscribed by default).

Placement (:func:`place`) is a pure function of the roles and the hosts:

- the PS goes to ``--ps-host`` or the first host;
- the chain replicas go to hosts *other than the PS's*, one per host in turn,
  so that losing one host never takes out the whole chain (with one host
  there is no choice, and the table says so);
- the workers and then the evaluator fill the free slots, host by host;
- the spares (``--spares``) go to hosts other than the PS's where one has a
  free slot, in turn, so that a spare outlives the loss of the PS's host;
- more ranks than slots is an error unless oversubscription is allowed, in
  which case the extra ranks go to the least loaded hosts.

``mpirun`` gets the hosts with their slots (``--hostfile run_dir/hostfile``,
which also bounds where replacements may be spawned) and the placement as a
sequential map (``--map-by seq:file=run_dir/rankmap``: line i is rank i's
host). The table is printed at start and written to ``placement.json``.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from psmodes.atomic import write_text_atomic
from psmodes.config import ConfigError, read_user_file
from psmodes.roles import layout

from ..faultkinds import plan_of
from ..remote.routes import in_slurm



@dataclass(frozen=True)
class Host:
    name: str
    slots: int

    def spec(self) -> str:
        return f"{self.name}:{self.slots}"


_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _check_name(name: str, where: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(f"{where}: {name!r} is not a host name")
    return name


def parse_hostfile(path: str | Path) -> list[Host]:
    """Hosts of an Open MPI hostfile; ConfigError (one line) when it is missing, malformed or has no slots."""
    path = Path(path)
    text = read_user_file(path, "hostfile", f"hostfile {path} does not exist")
    hosts: list[Host] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"hostfile {path} line {number}"
        name, *fields = line.split()
        slots = 1
        for item in fields:
            key, _, value = item.partition("=")
            if key in ("slots", "max_slots", "max-slots") and value.isdigit():
                if key == "slots":
                    slots = int(value)
            else:
                raise ConfigError(f"{where}: cannot read {item!r}; write `host slots=N`")
        hosts.append(Host(_check_name(name, where), slots))
    return _merged(hosts, f"hostfile {path}")


def parse_hosts(spec: str) -> list[Host]:
    """``h1:4,h2:4`` (a bare name: one slot)."""
    hosts = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, slots = part.partition(":")
        if sep and not slots.isdigit():
            raise ConfigError(f"--hosts {spec!r}: write host:slots, e.g. node1:4,node2:4")
        hosts.append(Host(_check_name(name, f"--hosts {spec!r}"), int(slots) if sep else 1))
    return _merged(hosts, f"--hosts {spec!r}")


def _merged(hosts: list[Host], where: str) -> list[Host]:
    """A host named twice adds up its slots; no host or no slot at all is an error."""
    slots: dict[str, int] = {}
    for h in hosts:
        slots[h.name] = slots.get(h.name, 0) + h.slots
    if not slots or sum(slots.values()) == 0:
        raise ConfigError(f"{where} has no slots (no host with slots >= 1)")
    return [Host(name, n) for name, n in slots.items() if n > 0]


# ---------------------------------------------------------------- Slurm

def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed node list (``node[01-03,07],gpu1``) -> names."""
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", nodelist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not m:
            names.append(item)
            continue
        prefix, ranges, rest = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not hi:
                names += [f"{prefix}{lo}{n}" for n in expand_nodelist(rest)] if rest else [f"{prefix}{lo}"]
                continue
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                base = f"{prefix}{i:0{width}d}"
                names += [f"{base}{n}" for n in expand_nodelist(rest)] if rest else [base]
    return names


def expand_counts(spec: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` (``2(x3),1``) -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ConfigError(f"cannot read SLURM_TASKS_PER_NODE={spec!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def slurm_hosts(env: dict | None = None) -> list[Host]:
    """The allocation's nodes and task slots, inside a Slurm job."""
    env = os.environ if env is None else env
    names = expand_nodelist(env["SLURM_JOB_NODELIST"])
    counts = expand_counts(env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_JOB_CPUS_PER_NODE") or "1")
    if len(counts) != len(names):
        counts = (counts + [counts[-1]] * len(names))[: len(names)]
    return _merged([Host(n, c) for n, c in zip(names, counts)], "the Slurm allocation")


# ---------------------------------------------------------------- resolving and placing

def resolve_hosts(hostfile: str | None, hosts: str | None, env: dict | None = None) -> tuple[list[Host], str]:
    """The run's hosts and where they came from ("hostfile", "hosts", "slurm", "local")."""
    if hostfile and hosts:
        raise ConfigError("give --hostfile or --hosts, not both")
    if hostfile:
        return parse_hostfile(hostfile), "hostfile"
    if hosts:
        return parse_hosts(hosts), "hosts"
    if in_slurm(env):
        return slurm_hosts(env), "slurm"
    return [], "local"


def from_specs(specs: list[str]) -> list[Host]:
    """The config's ``hosts`` ("name:slots") back to Host objects."""
    return [Host(s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])) for s in specs]


@dataclass
class Placement:
    ranks: list[tuple[str, str]]   # (role label, host), by rank
    hosts: list[Host]
    notes: list[str]

    @property
    def multi_host(self) -> bool:
        return len({h for _, h in self.ranks}) > 1

    def host_of(self, label: str) -> str | None:
        return next((h for role, h in self.ranks if role == label), None)

    def table(self) -> str:
        lines = ["rank  role        host"]
        lines += [f"{r:>4}  {role:<10}  {host}" for r, (role, host) in enumerate(self.ranks)]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"ranks": [{"rank": r, "role": role, "host": host} for r, (role, host) in enumerate(self.ranks)],
                "hosts": [h.spec() for h in self.hosts], "notes": self.notes}

    def write(self, run_dir: Path) -> None:
        """placement.json (the record), hostfile (slots, for mpirun and spawns), rankmap (rank i -> host)."""
        write_text_atomic(run_dir / "placement.json", json.dumps(self.to_dict(), indent=2) + "\n")
        if self.hosts:
            write_text_atomic(run_dir / "hostfile", "".join(f"{h.name} slots={h.slots}\n" for h in self.hosts))
            write_text_atomic(run_dir / "rankmap", "".join(f"{host}\n" for _, host in self.ranks))


def place(roles: list, hosts: list[Host], ps_host: str | None = None, oversubscribe: bool = False,
          replacement_slots: int = 0) -> Placement:
    """Role of each rank -> host; see the module docstring. ``roles`` are psmodes.roles.Role."""
    labels = [r.label for r in roles]
    if not hosts:
        if ps_host:
            raise ConfigError("--ps-host needs hosts: give --hostfile or --hosts")
        return Placement([(label, "localhost") for label in labels], [], [])
    names = [h.name for h in hosts]
    if ps_host and ps_host not in names:
        raise ConfigError(f"--ps-host {ps_host} is not one of the hosts ({', '.join(names)})")
    total = sum(h.slots for h in hosts)
    if len(roles) > total and not oversubscribe:
        raise ConfigError(f"{len(roles)} ranks need {len(roles)} slots but the hosts have {total}; "
                          "add slots or hosts, or allow it with --oversubscribe")
    load = {n: 0 for n in names}
    slots = {h.name: h.slots for h in hosts}
    free = lambda n: slots[n] - load[n]  # noqa: E731
    chosen: dict[int, str] = {}
    notes: list[str] = []

    def put(i: int, host: str) -> None:
        chosen[i] = host
        load[host] += 1

    ps = ps_host or names[0]
    put(0, ps)
    others = [n for n in names if n != ps]
    replicas = [i for i, r in enumerate(roles) if r.kind == "replica"]
    for k, i in enumerate(replicas):
        pool = [n for n in others if free(n) > 0] or (others if oversubscribe else [])
        if not pool:
            pool = [n for n in names if free(n) > 0] or names
            if others:
                notes.append(f"{roles[i].label} shares a host with the PS: no other host has a free slot")
        put(i, pool[k % len(pool)])
    if replicas and not others:
        notes.append("one host only: the PS and its replicas share it, so a host failure takes out the chain")
    rest = [i for i, r in enumerate(roles) if r.kind == "worker"] + [i for i, r in enumerate(roles)
                                                                      if r.kind == "evaluator"]
    for i in rest:
        open_hosts = [n for n in names if free(n) > 0]
        put(i, open_hosts[0] if open_hosts else min(names, key=lambda n: load[n] / slots[n]))
    spares = [i for i, r in enumerate(roles) if r.kind == "spare"]
    for k, i in enumerate(spares):
        away = [n for n in others if free(n) > 0]
        pool = away or [n for n in names if free(n) > 0]
        if others and not away:
            notes.append(f"{roles[i].label} shares a host with the PS: no other host has a free slot")
        put(i, pool[k % len(pool)] if pool else min(names, key=lambda n: load[n] / slots[n]))
    left = total - len(roles)
    if replacement_slots and left < replacement_slots and not oversubscribe:
        notes.append(f"{left} free slot(s) for {replacement_slots} spawned replacement(s): a respawn may fail "
                     "with 'All nodes which are allocated for this job are already filled'")
    return Placement([(labels[i], chosen[i]) for i in range(len(roles))], list(hosts), notes)


def replacement_slots(cfg) -> int:
    """Slots a run may need for spawned replacements: one per scheduled kill that no spare covers,
    when the job repairs itself (a dead rank's slot is not given back; a whole-job restart needs none)."""
    if cfg.dies_with_ps:
        return 0
    if cfg.refill_spares:  # a spare that took a role is spawned again: every kill costs a slot
        return plan_of(cfg).replacements()
    return max(0, plan_of(cfg).replacements() - cfg.spares)


def placement_of(cfg) -> Placement:
    """The placement of a RunConfig's ranks (its spares too) on its hosts."""
    return place(layout(cfg.workers, cfg.n_replicas, cfg.evaluator, cfg.spares), from_specs(cfg.hosts), cfg.ps_host,
                 cfg.oversubscribe, replacement_slots(cfg))
