"""Names of configurations: what distinguishes one group of runs from another.

A *configuration* is a run's ``config.json`` without the seed and the paths
(``run_dir``, ``data_dir``). Among a set of configurations only the keys whose
values differ name them, in a fixed order (mode, PS kills, replica kills,
consistency, then alphabetical), e.g. ``chain-kills1-async``. A sweep's run
directories are ``<label>-s<seed>``, and the reports use the same labels.

Kill schedules are named by their number of kills (``kills0``, ``kills2``)
when that number tells them apart, else by the schedule (``kill-15s_30s``).
"""
from __future__ import annotations

import hashlib
import json
import re

from psmodes import modes
from psmodes.config import RunConfig

from ..faultkinds import OPTIONS

# hosts: where, not what; failure_schedule: drawn from the seed (the failures spec names the setting)
IGNORED = ("seed", "run_dir", "data_dir", "format_version", "hosts", "failure_schedule")
ORDER = ("mode", *(o.field for o in OPTIONS), "consistency")
KILL_KEYS = {o.field: o.label for o in OPTIONS}  # labels: kills2, or kill-15s_30s


MODE_OPTIONS = tuple(sorted({o for m in modes.REGISTRY.values() for o in m.options}))  # every mode's own options


def identity(config: dict) -> dict:
    """The configuration of a run: its config minus seed and paths, and minus the options of other
    recovery modes than its own (a checkpoint run's ``replay`` changes nothing, so a sweep that crosses
    mode with a stateless replay policy runs checkpoint once). A key missing from an older run's
    config had its default then (so old and new runs of one setting group together)."""
    full = {**RunConfig().to_dict(), **config}
    mode = modes.REGISTRY.get(full.get("mode"))
    foreign = set(MODE_OPTIONS) - set(mode.options if mode else ())
    return {k: v for k, v in full.items() if k not in IGNORED and not (mode and k in foreign)}


def setting(config: dict) -> str:
    """What configurations of different recovery modes share: the identity without the mode and
    every mode's own options (checkpoint, chain and stateless with their K, R and replay policy
    at the same outage are one setting, compared in the findings)."""
    return json.dumps({k: v for k, v in identity(config).items() if k != "mode" and k not in MODE_OPTIONS},
                      sort_keys=True, default=str)


def key_of(config: dict) -> str:
    """A hashable, stable key of a run's configuration."""
    return json.dumps(identity(config), sort_keys=True, default=str)


def kill_specs(value) -> list[str]:
    """``["15s,30s"]`` or ``["15s", "30s"]`` -> ``["15s", "30s"]``."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    return [p.strip() for item in items for p in str(item).split(",") if p.strip()]


def varying_keys(configs: list[dict]) -> list[str]:
    """Keys (of the identities) whose values differ among ``configs``, in label order."""
    ids = [identity(c) for c in configs]
    keys = sorted({k for d in ids for k in d})
    # a key that only some configurations have (an option of their mode) varies only if they differ in it
    varying = [k for k in keys if len({json.dumps(d[k], sort_keys=True, default=str) for d in ids if k in d}) > 1]
    rank = {k: i for i, k in enumerate(ORDER)}
    return sorted(varying, key=lambda k: (rank.get(k, len(ORDER)), k))


def labels(configs: list[dict], keys: list[str] | None = None) -> list[str]:
    """One label per configuration (equal configurations get equal labels, different ones
    different labels)."""
    keys = varying_keys(configs) if keys is None else keys
    keys = without_implied(configs, keys)
    by_count = {}
    for k in KILL_KEYS:
        if k in keys:
            seen: dict[int, set] = {}
            for c in configs:
                specs = kill_specs(c.get(k))
                seen.setdefault(len(specs), set()).add(tuple(specs))
            by_count[k] = all(len(v) == 1 for v in seen.values())
    out = []
    for c in configs:
        mine = identity(c)  # an option of another mode names nothing here
        parts = [_part(k, c.get(k), by_count.get(k, False)) for k in keys if k in mine]
        out.append(sanitize("-".join(p for p in parts if p)) or "all")
    # a formatting that merged two different configurations gets a short hash
    owners: dict[str, set] = {}
    for c, name in zip(configs, out):
        owners.setdefault(name, set()).add(key_of(c))
    return [name if len(owners[name]) == 1 else f"{name}-{hashlib.sha1(key_of(c).encode()).hexdigest()[:6]}"
            for c, name in zip(configs, out)]


def without_implied(configs: list[dict], keys: list[str]) -> list[str]:
    """``keys`` less those whose value the others already determine, the last first: in the
    workloads sweep each benchmark brings its own optimizer, and every label read
    ``checkpoint-benchmark-gpt-tiny-optimizer-adamw``. The label's main axes (:data:`ORDER`: the
    mode, the fault schedules, the consistency) always stay, even when they vary together, and so
    does a key that does not vary (a sweep names the options fixed on its command line)."""
    ids = [identity(c) for c in configs]
    varying = set(varying_keys(configs))

    def value(d: dict, k: str) -> str:
        return json.dumps(d.get(k), sort_keys=True, default=str)

    kept = list(keys)
    for k in reversed(keys):
        if k not in varying or k in ORDER:
            continue
        rest = [o for o in kept if o != k]
        seen: dict[tuple, str] = {}
        if all(seen.setdefault(tuple(value(d, o) for o in rest), value(d, k)) == value(d, k) for d in ids):
            kept = rest
    return kept


def _part(key: str, value, count_form: bool) -> str:
    if key in KILL_KEYS:
        specs = kill_specs(value)
        if count_form:
            return f"{KILL_KEYS[key]}{len(specs)}"
        # "~" (a hang's length) is no character for a folder name
        return f"{KILL_KEYS[key][:-1]}-" + ("none" if not specs else "_".join(specs).replace("~", "-for-"))
    if key == "mode":
        return str(value)
    if key == "consistency":
        return str(value).replace(":", "")
    name = re.sub(r"_s$", "", key).replace("_", "-")
    if isinstance(value, bool):
        return name if value else f"no-{name}"
    if value is None:
        return f"{name}-default"
    if isinstance(value, float):
        value = f"{value:g}"
    if isinstance(value, (list, tuple)):
        value = "_".join(str(v) for v in value) or "none"
    return f"{name}-{value}" if isinstance(value, str) and not value[:1].isdigit() else f"{name}{value}"


def sanitize(text: str) -> str:
    """A file-name-safe version of a label."""
    text = text.replace("%", "pct")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")
