"""Many runs and what they are for: ``psbench sweep`` (a resumable grid of runs
and its report), ``psbench chaos`` (randomised kills, invariants checked per
trial), ``psbench perf`` (what each mode costs, side by side) and ``psbench
slurm`` (batch scripts for a run or a sweep). Built on :mod:`launch.driver`
(which starts each run) and :mod:`launch.analysis` (which reports on them)."""
