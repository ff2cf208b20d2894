"""The workloads psbench can train, by name.

A workload gives the launcher its default hyper-parameters and gives each rank
its model and data: the training shard of one worker (an endless, seeded
stream of batches) and the test set the evaluator scores. Add a workload by
adding a :class:`Workload` to ``WORKLOADS``, or bring your own from outside
psbench: ``--benchmark my_package.module:factory`` or ``--benchmark
path/to/file.py:factory``, where ``factory()`` returns a :class:`Workload`
(``benchmarks/examples/custom_workload.py`` is a complete one). It is loaded
and checked before mpirun starts; every rank loads it again by the same path.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from . import textlm, vision
from .workload import Workload  # noqa: F401 - re-exported: users' factories import it from here


class WorkloadError(ValueError):
    """A ``--benchmark`` that names no workload, or a factory that does not give one (one line)."""


def _fmnist_model(cfg):
    from .models import FashionCNN

    return FashionCNN()


def _fmnist_train(cfg):
    from . import fmnist

    return fmnist.load(cfg.data_dir, "train")


def _fmnist_test(cfg):
    from . import fmnist

    return fmnist.load(cfg.data_dir, "test")


def _fmnist_inputs(batch):
    from .fmnist import to_tensor_batch

    return to_tensor_batch(batch)


SYNTH_FEATURES, SYNTH_CLASSES = 64, 10


def _synthetic_set(cfg, n: int, salt: int):
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, no files."""
    teacher = np.random.default_rng(1234).standard_normal((SYNTH_FEATURES, SYNTH_CLASSES)).astype(np.float32)
    x = np.random.default_rng(1000 + salt).standard_normal((n, SYNTH_FEATURES)).astype(np.float32)
    return x, (x @ teacher).argmax(axis=1).astype(np.int64)


def _synthetic_model(cfg):
    from .models import SyntheticMLP

    return SyntheticMLP(cfg.model_params, SYNTH_FEATURES, SYNTH_CLASSES)


def _synthetic_inputs(batch):
    import torch

    return torch.from_numpy(np.ascontiguousarray(batch))


WORKLOADS: dict[str, Workload] = {  # the torchvision ones and gpt-tiny are added below, from their modules
    "fmnist-cnn": Workload(
        "fmnist-cnn", "the study's Fashion-MNIST CNN (813k parameters), plain SGD 0.01, batch 32",
        lr=0.01, batch_size=32, needs_data=True,
        build_model=_fmnist_model, load_train=_fmnist_train, load_test=_fmnist_test, to_inputs=_fmnist_inputs,
    ),
    "synthetic": Workload(
        "synthetic", "MLP of --model-params parameters on random, teacher-labelled data (no files needed)",
        lr=0.05, batch_size=32, needs_data=False,
        build_model=_synthetic_model,
        load_train=lambda cfg: _synthetic_set(cfg, 20000, 1),
        load_test=lambda cfg: _synthetic_set(cfg, 2000, 2),
        to_inputs=_synthetic_inputs,
    ),
}


WORKLOADS.update(vision.workloads())
WORKLOADS.update(textlm.workloads())


def missing_requirement(workload: Workload) -> str | None:
    """Why ``workload`` cannot run in this install (a module it needs is not there), or None."""
    for module in workload.requires:
        if importlib.util.find_spec(module) is None:
            return (f"benchmark {workload.name} needs {module}, which this install lacks; `make setup` installs "
                    f"it with its torch (unless PSBENCH_TORCH chose a torch without it)")
    return None


def get(name: str) -> Workload:
    """The built-in workload ``name``, or the one a ``module:factory`` / ``file.py:factory`` returns."""
    if name in WORKLOADS:
        return WORKLOADS[name]
    if ":" not in name:
        raise WorkloadError(f"unknown benchmark {name!r}; choose one of: {', '.join(WORKLOADS)}, "
                            "or MODULE:FACTORY / FILE.py:FACTORY for your own")
    return _from_factory(name)


def is_user_spec(name: str) -> bool:
    return name not in WORKLOADS and ":" in name


def absolute(name: str) -> str:
    """A ``file.py:factory`` spec with the file's absolute path (the ranks may start elsewhere)."""
    target, _, factory = name.rpartition(":")
    if is_user_spec(name) and _is_file(target):
        return f"{Path(target).resolve()}:{factory}"
    return name


def _is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target


@functools.cache
def _from_factory(spec: str) -> Workload:
    target, _, factory = spec.rpartition(":")
    if not target or not factory:
        raise WorkloadError(f"--benchmark {spec!r}: write MODULE:FACTORY or FILE.py:FACTORY")
    try:
        if _is_file(target):
            path = Path(target)
            if not path.is_file():
                raise WorkloadError(f"--benchmark {spec!r}: no file {path}")
            mod_spec = importlib.util.spec_from_file_location(f"psbench_user_{path.stem}", path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[mod_spec.name] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except WorkloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises: one line, not a traceback
        raise WorkloadError(f"--benchmark {spec!r}: importing {target} failed: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:160] if str(exc) else 'no detail'}") from None
    make = getattr(module, factory, None)
    if not callable(make):
        raise WorkloadError(f"--benchmark {spec!r}: {target} has no function {factory!r}")
    try:
        workload = make()
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"--benchmark {spec!r}: {factory}() raised {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:160] if str(exc) else 'no detail'}") from None
    if not isinstance(workload, Workload):
        raise WorkloadError(f"--benchmark {spec!r}: {factory}() returned a {type(workload).__name__}, not a "
                            "benchmarks.registry.Workload")
    return workload


def shard_batches(n: int, shard: int, shards: int, batch_size: int, seed: int) -> Iterator[np.ndarray]:
    """Endless index batches over this worker's shard, reshuffled each epoch, seeded.

    The data set is split into ``shards`` disjoint strided shards; the shuffle of
    epoch e depends only on (seed, shard, e), so a run is reproducible.
    """
    indices = np.arange(shard, n, shards)
    epoch = 0
    while True:
        order = np.random.default_rng([seed, shard, epoch]).permutation(indices)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield order[start:start + batch_size]
        epoch += 1
