#!/usr/bin/env bash
# One call on the lent GPU machine (see /work/.library/device/README.md): install the carried
# wheels (invoke), run the named steps in order, each resumable and bounded in time, and pack
# results/ into $OUT/results.tgz so one file brings every new row back. Steps:
#   tests            the test file natively for every version, and tests/
#   bench            invoke bench --kernel all --runs ${RUNS:-3} (interleaved protocol)
#   sweep-v0         the Round 1 sweep of v0_baseline's body (resumable; ${LIMIT:-8} minutes a chunk)
#   sweep-v4         the same for v4_exp2
#   profile          ncu, every version and SDPA, both masks
#   tuning           compile-cost, then autotune-bias
#   experiments      pcast, launch-order, timing
#   ceilings         the matmul peak table and the copy bandwidth
#   nonsquare        the full non-square causal check
# Usage (in the device's command): FA2_GIT_COMMIT=<sha> bash scripts/device_batch.sh tests bench
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/batch.log"
step() { echo "=== $* ($(date -u +%H:%M:%S))" | tee -a "$LOG"; "$@" 2>&1 | tail -n 400 >> "$LOG"; }
for s in "$@"; do
  case "$s" in
    tests) step python3 -m invoke test ;;
    bench) step python3 -m invoke bench --kernel all --runs "${RUNS:-3}" --pause "${PAUSE:-0}" --no-graphs ;;
    sweep-v0) step python3 sweeps/sweep.py --kernel v0_baseline --limit-minutes "${LIMIT:-8}" --graph-max-n "${GRAPH_MAX_N:-0}" ;;
    sweep-v4) step python3 sweeps/sweep.py --kernel v4_exp2 --limit-minutes "${LIMIT:-8}" ;;
    profile) step python3 profiling/run_profile.py --tool ncu --kernel all
             step python3 profiling/run_profile.py --tool ncu --kernel all --causal ;;
    tuning) step python3 sweeps/compile_cost.py; step python3 sweeps/autotune_bias.py --pause "${PAUSE:-20}" ;;
    experiments) for e in pcast launch-order timing; do step python3 experiments/run.py "$e"; done ;;
    ceilings) step python3 profiling/matmul_peak.py ;;
    nonsquare) step python3 harness/check_nonsquare.py --kernel all --save ;;
    *) echo "unknown step $s" | tee -a "$LOG" ;;
  esac
done
tar czf "$OUT/results.tgz" --exclude='*.ncu-rep' --exclude='*.nsys-rep' results
ls -la "$OUT"; tail -n 60 "$LOG"
