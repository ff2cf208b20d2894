"""Prices runs from the instance price table (``benchmarks/prices.toml``).

The rule (stated in every report): a run holds one vCPU per rank (PS,
replicas, evaluator, workers) for its training seconds, priced at the
instance's $/hour divided by its vCPUs. A rank that trained on a GPU is
priced at the instance's $/hour divided by its GPUs instead; GPU runs use the
table's ``default_gpu`` instance, CPU runs its ``default_cpu`` one, unless
``--instance`` names one for all. The cost to reach the target (of the runs' metric) is
the same price over the time to the target.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from psmodes.config import ConfigError

DEFAULT_PRICES = Path(__file__).resolve().parents[2] / "benchmarks" / "prices.toml"


@dataclass(frozen=True)
class Instance:
    name: str
    provider: str
    vcpus: int
    gpus: int
    gpu: str
    usd_per_hour: float
    source: str

    @property
    def usd_per_vcpu_s(self) -> float:
        return self.usd_per_hour / self.vcpus / 3600.0

    @property
    def usd_per_gpu_s(self) -> float | None:
        return self.usd_per_hour / self.gpus / 3600.0 if self.gpus else None


class Pricing:
    def __init__(self, path: str | Path | None = None, instance: str | None = None) -> None:
        self.path = Path(path) if path else DEFAULT_PRICES
        try:
            doc = tomllib.loads(self.path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"price table {self.path} not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read price table {self.path}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"price table {self.path}: not valid TOML: {exc}") from None
        table = doc.get("instance")
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"price table {self.path}: no [instance.NAME] tables")
        self.instances = {name: self._instance(name, v) for name, v in table.items()}
        self.note = str(doc.get("note", ""))
        for key in ("default_cpu", "default_gpu"):
            if doc.get(key) not in self.instances:
                raise ConfigError(f"price table {self.path}: {key} = {doc.get(key)!r} is not one of its instances")
        self.default_cpu = self.instances[doc["default_cpu"]]
        self.default_gpu = self.instances[doc["default_gpu"]]
        if instance is not None and instance not in self.instances:
            raise ConfigError(f"--instance {instance!r} is not in {self.path}; choose one of: "
                              f"{', '.join(self.instances)}")
        self.forced = self.instances[instance] if instance else None
        self.used: dict[str, Instance] = {}

    def _instance(self, name: str, v) -> Instance:
        where = f"price table {self.path}: instance {name!r}"
        if not isinstance(v, dict):
            raise ConfigError(f"{where} must be a table")
        try:
            inst = Instance(name, str(v.get("provider", "")), int(v["vcpus"]), int(v.get("gpus", 0)),
                            str(v.get("gpu", "")), float(v["usd_per_hour"]), str(v.get("source", "")))
        except KeyError as exc:
            raise ConfigError(f"{where} lacks {exc.args[0]}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if inst.vcpus < 1 or inst.gpus < 0 or not inst.usd_per_hour > 0:
            raise ConfigError(f"{where}: needs vcpus >= 1, gpus >= 0 and usd_per_hour > 0")
        return inst

    def instance_for(self, device: str) -> Instance:
        if self.forced:
            return self.forced
        return self.default_gpu if device.startswith("cuda") else self.default_cpu

    def price(self, run) -> None:
        """Adds ``cost_usd``, ``cost_to_target_usd`` and ``usd_per_m_kept_samples`` (the run's price over
        the samples whose updates are in its final model, in millions: goodput x training time) to a
        run record's metrics."""
        if not run.rank_s:
            return
        inst = self.instance_for(run.device)
        self.used[inst.name] = inst
        gpu_rate = inst.usd_per_gpu_s if run.device.startswith("cuda") else None
        usd_per_s = 0.0
        train_s = (run.summary or {}).get("train_s") or 0.0
        for role, rank_s in run.rank_s.items():
            ranks = rank_s / train_s if train_s else 0.0
            rate = gpu_rate if (gpu_rate and role == "worker") else inst.usd_per_vcpu_s
            usd_per_s += ranks * rate
        run.metrics["cost_usd"] = usd_per_s * train_s if train_s else None
        tt = run.metrics.get("time_to_target_s")
        run.metrics["cost_to_target_usd"] = usd_per_s * tt if tt is not None else None
        # the price of the work that survived: failures' lost and unproductive time make it dearer
        kept = (run.metrics.get("goodput") or 0.0) * train_s
        run.metrics["usd_per_m_kept_samples"] = usd_per_s * train_s / (kept / 1e6) if kept > 0 else None
