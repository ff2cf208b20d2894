"""Which rank plays which role: a pure function of the run's shape.

Canonical order of ranks: ``[ps, replica 1..R, evaluator?, worker 0..W-1, spare 0..S-1]``.
Rank 0 is the PS (the chain's head in ``chain`` mode), ranks 1..R the chain's
replicas in chain order, then the optional evaluator, then the workers; the
first worker is the *leader*, the only one that talks to the PS in the sync
data path. The spares (``--spares``) wait, warm, for a role to take. After a
failure the survivors keep this order (the next replica becomes rank 0) and a
replacement (a spare, or a spawned process) is slotted back into it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    kind: str      # "ps", "replica", "evaluator", "worker", "spare"
    index: int = 0  # replica position (1..R), worker index (0..W-1) or spare index (0..S-1)

    @property
    def label(self) -> str:
        return self.kind if self.kind in ("ps", "evaluator") else f"{self.kind}{self.index}"

    def in_generation(self, generation: int) -> str:
        """The name of this role's replacement of ``generation`` (``ps-gen1``): its event stream
        and its spawned pid file (psmodes.pidfiles)."""
        return f"{self.label}-gen{generation}"

    @property
    def spec(self) -> str:
        """``kind:index``, how a spawned replacement is told roles on its command line."""
        return f"{self.kind}:{self.index}"

    @classmethod
    def parse(cls, spec: str) -> "Role":
        kind, index = spec.split(":")
        return cls(kind, int(index))


def layout(workers: int, replicas: int = 0, evaluator: bool = True, spares: int = 0) -> list[Role]:
    """The role of each rank, by rank."""
    if workers < 1:
        raise ValueError("at least one worker is needed")
    roles = [Role("ps")]
    roles += [Role("replica", i) for i in range(1, replicas + 1)]
    if evaluator:
        roles.append(Role("evaluator"))
    roles += [Role("worker", i) for i in range(workers)]
    roles += [Role("spare", i) for i in range(spares)]
    return roles


def sort_key(role: Role) -> int:
    """Position of a role in the canonical order."""
    return {"ps": 0, "replica": 0, "evaluator": 10_000, "worker": 20_000, "spare": 30_000}[role.kind] + role.index


def describe(roles: list[Role]) -> str:
    return ", ".join(f"rank {r}: {role.label}" for r, role in enumerate(roles))
