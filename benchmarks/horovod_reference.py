"""Plain Horovod data-parallel training with no parameter server: the baseline
that ``psbench perf`` holds ``--mode none`` against.

    mpirun -n 2 python -m benchmarks.horovod_reference --benchmark fmnist-cnn --steps 600 --out ref.json

Written the way Horovod's own examples (``pytorch_mnist.py``) are: ``hvd.init``,
``hvd.DistributedOptimizer`` wrapping ``torch.optim.SGD`` (``AdamW`` for a workload trained with it),
``hvd.broadcast_parameters`` from rank 0, one thread per rank when ranks fill
the cores, the CUDA device of the local rank when there is one. The model,
batch size, learning rate, data shards and batch order are psbench's own
(:mod:`benchmarks.registry`), so the two measure the same training. Rank 0
writes samples/s (timed from after the initial broadcast to the last step, the
same span psbench's ``summary.json`` uses), its CPU time and peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

from psmodes.heap import keep_freed_memory


def _torch_optimizer(torch, model, cfg, workload):
    """torch's own optimizer with the rule and defaults the PS applies (psmodes/optim.py)."""
    from psmodes.optim import DEFAULT_MOMENTUM, default_lr

    lr = default_lr(cfg, workload)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)
    momentum = DEFAULT_MOMENTUM if cfg.optimizer == "momentum" else 0.0
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.horovod_reference")
    p.add_argument("--benchmark", default="fmnist-cnn")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps (each worker)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-params", type=int, default=1_000_000)
    p.add_argument("--data-dir")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--optimizer", help="sgd, momentum or adamw (default: the benchmark's)")
    p.add_argument("--out", required=True, help="JSON file rank 0 writes its figures to")
    a = p.parse_args(argv)
    keep_freed_memory()  # as every psbench rank does: the ratio measures the PS, not glibc's heap layout

    import torch
    import horovod.torch as hvd

    from benchmarks.registry import get, shard_batches
    from psmodes.config import RunConfig

    hvd.init()
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(1 if hvd.local_size() >= cores else max(1, cores // hvd.local_size()))
    use_cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    # as psbench's ranks (psmodes/context.py pick_device): more local ranks than GPUs share them in turn
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
        if hvd.nccl_built() and hvd.local_size() > torch.cuda.device_count():
            if hvd.local_rank() == 0:
                print(f"horovod_reference: {hvd.local_size()} ranks share {torch.cuda.device_count()} GPU(s) here and "
                      "NCCL takes one GPU per rank; run at most one worker per GPU, or --device cpu", file=sys.stderr)
            return 2

    workload = get(a.benchmark)
    cfg = RunConfig(benchmark=a.benchmark, steps=a.steps, seed=a.seed, model_params=a.model_params,
                    data_dir=a.data_dir, workers=hvd.size(), optimizer=a.optimizer)
    torch.manual_seed(a.seed)
    model = workload.build_model(cfg).to(device)
    model.train()
    x, y = workload.load_train(cfg)
    batches = shard_batches(len(y), hvd.rank(), hvd.size(), workload.batch_size, a.seed)
    cfg.validate()  # resolves the workload's optimizer
    optimizer = _torch_optimizer(torch, model, cfg, workload)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = workload.loss

    cpu0 = time.process_time()
    compute_s, step_s = [], []
    t0 = time.time()
    for _ in range(a.steps):
        t_a = time.perf_counter()
        idx = next(batches)
        inputs = workload.to_inputs(x[idx]).to(device, non_blocking=True)
        target = torch.from_numpy(y[idx]).to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()  # the allreduces start here, as each gradient is ready
        t_b = time.perf_counter()
        optimizer.step()  # waits for them, then applies
        compute_s.append(t_b - t_a)
        step_s.append(time.perf_counter() - t_b)
    loss_value = loss.item()
    t_end = time.time()
    cpu_s = time.process_time() - cpu0
    usage = hvd.allgather_object({"cpu_s": cpu_s, "wall_s": t_end - t0,
                                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    if hvd.rank() == 0:
        samples = a.steps * workload.batch_size * hvd.size()
        result = {"benchmark": a.benchmark, "workers": hvd.size(), "steps": a.steps,
                  "batch_size": workload.batch_size, "samples_per_s": samples / (t_end - t0),
                  "train_s": t_end - t0, "loss": loss_value, "device": str(device),
                  "threads": torch.get_num_threads(), "usage": usage,
                  "compute_s": float(np.median(compute_s)), "sync_step_s": float(np.median(step_s)),
                  # each iteration's time: the tail of slow steps, set beside psbench's leader's (psbench perf)
                  "iteration_s": [round(c + s, 6) for c, s in zip(compute_s, step_s)]}
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=2)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
