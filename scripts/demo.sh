#!/usr/bin/env bash
# The default job on localhost (what `make demo` runs): the sweep
# benchmarks/sweeps/demo.toml - Fashion-MNIST CNN, PS + evaluator + 2 workers,
# every recovery mode with the PS SIGKILLed 15 s into a 45 s run, plus a no-kill
# reference - then its report, runs/sweeps/demo/report/report.md, and the plot next to it
# (the committed reference, reports/demo/, is left as it is: git status stays clean).
# Re-running resumes (finished runs are kept); DEMO_FRESH=1 starts over.
# Extra arguments go to `psbench sweep` (e.g. --duration 30s --out runs/sweeps/demo-short).
set -euo pipefail
cd "$(dirname "$0")/.."
PSBENCH=${PSBENCH:-.venv/bin/psbench}
if [ "${DEMO_FRESH:-0}" = 1 ]; then rm -rf runs/sweeps/demo; fi
exec "$PSBENCH" sweep benchmarks/sweeps/demo.toml --report-dir runs/sweeps/demo/report "$@"
