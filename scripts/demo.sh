#!/usr/bin/env bash
# The default job on localhost: Fashion-MNIST CNN, PS + evaluator + 2 workers,
# one run per recovery mode with the PS SIGKILLed after 20 s, plus a no-kill
# reference. Prints where the reports are.
set -euo pipefail
cd "$(dirname "$0")/.."
PSBENCH=${PSBENCH:-.venv/bin/psbench}
OUT=${OUT:-runs/demo-$(date +%Y%m%d-%H%M%S)}
DURATION=${DURATION:-45s}
mkdir -p "$OUT"
"$PSBENCH" run --benchmark fmnist-cnn --mode none --workers 2 --duration "$DURATION" --out "$OUT/none" || true
for mode in checkpoint chain stateless; do
  "$PSBENCH" run --benchmark fmnist-cnn --mode "$mode" --workers 2 --duration "$DURATION" \
     --kill-ps 15s --restart-delay 5s --out "$OUT/$mode" || true
done
echo
echo "reports:"
for d in "$OUT"/*/; do echo "  $d"report.md; done
