#!/usr/bin/env bash
# One call on the lent GPU machine (see /work/.library/device/README.md). It installs the carried
# wheels (invoke), runs PHASES one after another, and packs results/ (and the kernels' configs.json,
# which pick-v0 / pick-v4 rewrite) into $OUT/results.tgz before the call's time runs out.
#
#   FA2_GIT_COMMIT=<sha> bash scripts/device_batch.sh PHASE [PHASE ...]
#
# A PHASE is one or more LANES separated by '/'; a LANE is STEPS separated by ','. The lanes of a
# phase run side by side, lane i on GPU i (CUDA_VISIBLE_DEVICES), when the machine has that many
# GPUs, and one after another when it has fewer. Example for a two-GPU machine:
#   bash scripts/device_batch.sh "sweep-v0-nc/sweep-v0-c" "merge-v0,pick-v0"
#
# Every step is bounded by the call's deadline (DEADLINE_S seconds after the start, default 560):
# a step that would start with less than MIN_STEP_S left is skipped and logged, a running one is
# interrupted (SIGINT, then SIGKILL) so that the packing still happens. Sweeps write each row as
# it is measured and resume, so a cut costs nothing but time. Steps:
#   tests             the test file natively for every version, then tests/ (xdist, TEST_WORKERS)
#   unit-tests        tests/ only (and the report's host-steps test verbosely)
#   tests-v7          the test file for v7 natively (its Gluon path on, as by default), then tests/test_hostpath.py
#                     and test_v7.py's Gluon tests (the lean launches and the Gluon path, natively)
#   tests-bwd         the test file's gradient tests for v6 and v7 (autograd through the Triton backward)
#                     and tests/test_backward.py, natively
#   bench             invoke bench --kernel ${BENCH_KERNELS:-all} --runs ${RUNS:-3} (interleaved protocol)
#   bench-bwd         invoke bench --mode bwd --kernel ${BWD_KERNELS:-v6_longest_first,v7_hopper}
#   bench-bwd-atomic  the same with dQ accumulated by atomics in the dK/dV kernel (issue 7's comparison)
#   bench-bwd-fused   the same with the whole backward in one launch (dq_mode="fused", for small N)
#   sweep-v0 | sweep-v4 | sweep-v7   the whole sweep of that body on one GPU (v7: pinned autotuner)
#   sweep-v0-nc | sweep-v0-c     its non-causal / causal half, into a part CSV (side by side on two GPUs)
#   sweep-v4-nc | sweep-v4-c | sweep-v7-nc | sweep-v7-c
#   merge-v0 | merge-v4 | merge-v7   fold the part CSVs into results/<gpu>/sweep/<version>.csv
#   sweep-bwd | sweep-bwd-nc | sweep-bwd-c | merge-bwd   the Triton backward's sweep (issue 7), likewise
#                     (BWD_SWEEP_ARGS: extra options, e.g. "--stages 4 5")
#   sweep-bwd-atomic  the same space with dQ accumulated by atomics (rows beside the separate ones)
#   pick-bwd          its least total time over N >= 2048 -> fa2triton/backward_configs.json (the backward's default)
#   pick-v0 | pick-v4 | pick-v7      write the sm_XX entries of the versions that sweep feeds
#   profile           ncu, every version (v2 aside) and SDPA, N = 4096, both masks
#   profile-v7-nc     ncu of v7 (its default non-causal path) beside SDPA at N = ${PROFILE_NS:-1024 2048 4096}, non-causal
#                     (PROFILE_SOURCE=1: also the per-instruction source page, run_profile.py --source; PROFILE_D: another head dimension)
#   profile-matmul    ncu over the matmul peak table's variants (tensor-pipe counter vs roofline)
#   profile-peer      ncu of v7 beside flash-attn-4's sm90 forward and cuDNN, N = 4096, D = ${PROFILE_D:-128 64}, both masks
#                     (fa4 on PYTHONPATH: ../shared/peers/README.md; PROFILE_SOURCE=1: the source page too)
#   profile-bwd-peer  the same for the backward (the Triton backward's kernels, flash-attn-4's and cuDNN's)
#   varlen-compare    bench_varlen with --compare-tuned (VARLEN_COMPARE lengths, default 8) after a cold run (VARLEN_CACHE)
#   profile-bwd       ncu over the Triton backward's kernels (both dQ modes) and SDPA's backward, N = 4096, both masks
#   nsys | torch-trace           a timeline of every version at N = 4096 (nsys needs .debs carried)
#   host-steps        each step of the lean host path timed alone (profiling/host_steps.py ${HOST_STEPS_ARGS}, issue 8)
#   api-host          issue 47: v7's attention() and flash_attn_func() timed beside apply on views of its inputs
#                     (host_steps.py --steps sdpa,apply,attention,flash_attn_func; API_HOST_NS, API_HOST_REPEATS)
#   bwd-host          issue 48: v7's autograd backward beside SDPA's and its repeat path piece by piece (host_steps.py
#                     bwd_* steps; BWD_HOST_NS, default 512 1024 2048; BWD_HOST_REPEATS, default 7)
#   host-trees        issue 48: the backward's host steps of this checkout against HOST_TREES_BEFORE (an older
#                     checkout's folder, carried) in alternating fresh processes (compare_trees.py --mode host;
#                     HOST_TREES_NS, default 512,1024,2048; HOST_TREES_ROUNDS, default 3; HOST_TREES_COMMIT: its commit)
#   table-vs-race     issue 49: v7's launch table against its race, one checkout in alternating fresh processes
#                     (compare_trees.py --csv launch_table.csv; TABLE_RACE_ROUNDS, default 3; TABLE_RACE_FIRST: the
#                     first round's number, to go on after a cut, as each finished process's rows are kept)
#   compile-cost | autotune-bias the Round 3 experiments
#   pcast | launch-order | timing | other-shapes | bwd-modes | coldstart | dobench | tl-pick | peer-goal | bwd-gluon-dkdv | bwd-gluon-ws
#                     experiments/run.py NAME (experiments/__init__.py; tl-pick: 6 fresh processes, causal N = 4096)
#   items             experiment items (ITEMS_ONLY: configuration labels, default the persistent 128-row candidate;
#                     ITEMS_ROUNDS, default 3; SMOKE=1: each label through scripts/smoke_labels.sh first)
#   gluon-v7          experiment gluon over v7's Gluon candidates (GLUON_ONLY: other labels; GLUON_NS; GLUON_CAUSAL 0/1/2;
#                     GLUON_D: head dimension, 64 or 128; SMOKE=1: the labels that fail or hang scripts/gluon_smoke.py
#                     within SMOKE_S seconds are left out, scripts/smoke_labels.sh)
#   ceilings          the matmul peak table and the copy bandwidth
#   nonsquare         the full non-square causal check (${NONSQUARE_KERNELS:-all}, NONSQUARE_JOBS versions at once)
#
# CPUs: when a phase has two lanes or more and the machine has at least 8 CPUs, lane 0 runs on the
# first QUIET_CPUS (default 4) and the other lanes on the rest (taskset), so host-sensitive timing
# (host-steps, bench at small N, timing) belongs in lane 0, away from compiling lanes.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
START=$(date +%s)
DEADLINE=$((START + ${DEADLINE_S:-560}))
MIN_STEP_S=${MIN_STEP_S:-45}
# Every row stamps FA2_GIT_COMMIT: refuse a short or mistyped one before any step runs (fa2lab.provenance's check)
python3 -c 'import sys
from fa2lab.provenance import commit_from_env
try:
    commit_from_env("FA2_GIT_COMMIT")
except ValueError as e:
    sys.exit(str(e))' || exit 2
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ls .debs/*.deb >/dev/null 2>&1; then   # libdw1 and libelf1 for the bundled nsys, never unpacked into /
  mkdir -p /tmp/fa2debs && for d in .debs/*.deb; do dpkg -x "$d" /tmp/fa2debs; done
  export FA2_NSYS_LIBDIR=/tmp/fa2debs/usr/lib/x86_64-linux-gnu
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/batch.log"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); [ "${NGPU:-0}" -ge 1 ] || NGPU=1
left() { echo $((DEADLINE - $(date +%s) - 15)); }

body() { case "$1" in *v0*) echo v0_baseline ;; *v4*) echo v4_exp2 ;; *v7*) echo v7_hopper ;; esac; }   # sweep steps' body

on_labels() {   # command $1 on the configuration labels $2 (none: $1 as it is); with SMOKE=1 on those of them that pass
  # scripts/smoke_labels.sh (at head dimension $3 if given), and nothing run if none does
  local run=$1 labels=$2
  if [ -z "$labels" ]; then echo "$run"
  elif [ "${SMOKE:-0}" = 1 ]; then
    echo "L=\$(${3:+SMOKE_D=$3 }bash scripts/smoke_labels.sh $labels); [ -n \"\$L\" ] && $run --only \$L"
  else echo "$run --only $labels"; fi
}

cmd_of() {   # the command line of one step, given the seconds it may use
  local s=$1 secs=$2 mins
  mins=$(python3 -c "print(round(max(0.5, ($secs - 40) / 60), 2))")
  case "$s" in
    tests) echo "python3 -m invoke test --workers ${TEST_WORKERS:-12}" ;;
    unit-tests) echo "python3 -m pytest -q -p no:cacheprovider -n ${TEST_WORKERS:-12} tests/; python3 -m pytest -q -p no:cacheprovider -vv tests/test_report.py -k host_steps_per_version" ;;
    tests-v7) echo "python3 -m invoke test --kernel v7_hopper --no-unit --workers ${TEST_WORKERS:-12} && python3 -m pytest -q -p no:cacheprovider tests/test_hostpath.py && python3 -m pytest -q -p no:cacheprovider tests/test_v7.py -k 'gluon or config'" ;;
    tests-bwd) echo "python3 -m invoke test --kernel v6_longest_first,v7_hopper --no-unit -k gradients --workers ${TEST_WORKERS:-12} && python3 -m pytest -q -p no:cacheprovider -n ${TEST_WORKERS:-12} tests/test_backward.py" ;;
    bench) echo "python3 -m invoke bench --kernel ${BENCH_KERNELS:-all} --runs ${RUNS:-3} --pause ${PAUSE:-0}" ;;
    bench-bwd) echo "python3 -m invoke bench --mode bwd --kernel ${BWD_KERNELS:-v6_longest_first,v7_hopper} --runs ${RUNS_BWD:-1}" ;;
    bench-bwd-atomic) echo "python3 -m invoke bench --mode bwd --dq-mode atomic --kernel ${BWD_KERNELS:-v6_longest_first} --runs ${RUNS_BWD:-1}" ;;
    bench-bwd-fused) echo "python3 -m invoke bench --mode bwd --dq-mode fused --kernel ${BWD_KERNELS:-v7_hopper} --runs ${RUNS_BWD:-1}" ;;
    sweep-v0|sweep-v4|sweep-v7) echo "python3 sweeps/sweep.py --kernel $(body "$s") --limit-minutes $mins" ;;
    sweep-v0-nc|sweep-v4-nc|sweep-v7-nc) echo "python3 sweeps/sweep.py --kernel $(body "$s") --causal 0 --part nc --limit-minutes $mins" ;;
    sweep-v0-c|sweep-v4-c|sweep-v7-c) echo "python3 sweeps/sweep.py --kernel $(body "$s") --causal 1 --part c --limit-minutes $mins" ;;
    merge-v0|merge-v4|merge-v7) echo "python3 sweeps/sweep.py --kernel $(body "$s") --merge" ;;
    sweep-bwd-nc) echo "python3 sweeps/sweep_backward.py --causal 0 --part nc --limit-minutes $mins ${BWD_SWEEP_ARGS:-}" ;;
    sweep-bwd-c) echo "python3 sweeps/sweep_backward.py --causal 1 --part c --limit-minutes $mins ${BWD_SWEEP_ARGS:-}" ;;
    sweep-bwd) echo "python3 sweeps/sweep_backward.py --limit-minutes $mins ${BWD_SWEEP_ARGS:-}" ;;
    sweep-bwd-atomic) echo "python3 sweeps/sweep_backward.py --dq-mode atomic --limit-minutes $mins" ;;
    merge-bwd) echo "python3 sweeps/sweep_backward.py --merge" ;;
    pick-bwd) echo "python3 sweeps/sweep_backward.py --pick" ;;
    pick-v0|pick-v4|pick-v7) echo "python3 sweeps/pick_configs.py --kernel $(body "$s")" ;;
    profile) echo "python3 profiling/run_profile.py --tool ncu --kernel all && python3 profiling/run_profile.py --tool ncu --kernel all --causal" ;;
    profile-v7-nc) echo "for n in ${PROFILE_NS:-1024 2048 4096}; do python3 profiling/run_profile.py --tool ncu --kernel v7_hopper --N \$n ${PROFILE_SOURCE:+--source} ${PROFILE_D:+--D $PROFILE_D} || exit 1; done" ;;
    profile-matmul) echo "python3 profiling/run_profile.py --tool ncu --kernel matmul" ;;
    profile-peer) echo "python3 profiling/run_profile.py --tool ncu --kernel v7_hopper --peer fa4 --N 4096 --D ${PROFILE_D:-128 64} --causal ${PROFILE_MASKS:-both} ${PROFILE_SOURCE:+--source}" ;;
    profile-bwd-peer) echo "python3 profiling/run_profile.py --tool ncu --kernel v7_hopper --peer fa4 --mode bwd --N 4096 --D ${PROFILE_D:-128 64} --causal ${PROFILE_MASKS:-both}" ;;
    varlen-compare) echo "python3 harness/bench_varlen.py --kernel ${VARLEN_KERNELS:-v7_hopper} --cache-dir ${VARLEN_CACHE:-cold} --compare-tuned --compare-count ${VARLEN_COMPARE:-8} --no-bar" ;;
    profile-bwd) echo "python3 profiling/run_profile.py --tool ncu --kernel v7_hopper --mode bwd && python3 profiling/run_profile.py --tool ncu --kernel v7_hopper --mode bwd --causal" ;;
    nsys) echo "python3 profiling/run_profile.py --tool nsys --kernel all" ;;
    torch-trace) echo "python3 profiling/run_profile.py --tool torch --kernel all" ;;
    host-steps) echo "python3 profiling/host_steps.py ${HOST_STEPS_ARGS:---N 512 4096}" ;;
    bwd-host) echo "python3 profiling/host_steps.py --kernel v7_hopper --N ${BWD_HOST_NS:-512 1024 2048} --steps sdpa_backward,backward,backward_nop,bwd_split,bwd_inside,bwd_key,bwd_buffers,bwd_zero_fill,bwd_delta,bwd_main,bwd_cast,bwd_repeat --repeats ${BWD_HOST_REPEATS:-7}" ;;
    host-trees) [ -d "${HOST_TREES_BEFORE:-}" ] || { echo "host-trees: HOST_TREES_BEFORE must name the older checkout's folder" >&2; return 1; }
      echo "FA2_TREE_COMMIT_BEFORE=${HOST_TREES_COMMIT:-} python3 scripts/compare_trees.py --mode host --tree before=$HOST_TREES_BEFORE --tree after=. --N ${HOST_TREES_NS:-512,1024,2048} --rounds ${HOST_TREES_ROUNDS:-3}" ;;
    api-host) echo "python3 profiling/host_steps.py --kernel v7_hopper --N ${API_HOST_NS:-512 1024 2048 4096} --steps sdpa,apply,attention,flash_attn_func --repeats ${API_HOST_REPEATS:-7}" ;;
    table-vs-race) echo "python3 scripts/compare_trees.py --csv launch_table.csv --tree table=. --tree race=. --env race:FA2_V7_LAUNCH_FROM=race --rounds ${TABLE_RACE_ROUNDS:-3} --first-round ${TABLE_RACE_FIRST:-1}" ;;
    compile-cost) echo "python3 sweeps/measure_compile_cost.py" ;;
    autotune-bias) echo "python3 sweeps/autotune_bias.py --pause ${PAUSE_BIAS:-20}" ;;
    pcast|launch-order|timing|other-shapes|bwd-modes|coldstart|dobench|tl-pick|peer-goal|bwd-gluon-dkdv|bwd-gluon-ws) echo "python3 experiments/run.py $s" ;;
    items) on_labels "python3 experiments/run.py items --rounds ${ITEMS_ROUNDS:-3} --reps 30" "${ITEMS_ONLY:-}" ;;
    gluon-v7) on_labels "python3 experiments/run.py gluon --N ${GLUON_NS:-512 1024 2048 4096} --causal ${GLUON_CAUSAL:-0} --D ${GLUON_D:-64}" \
                        "${GLUON_ONLY:-ws2x64x128/3s/preg/persist/ua/et1/sc2 ws2x64x128/3s/preg/pp/ua/sc2 ws3x64x128/4s/preg/pp/split/persist/ua}" \
                        "${GLUON_D:-64}" ;;
    ceilings) echo "python3 profiling/matmul_peak.py" ;;
    nonsquare) echo "python3 harness/check_nonsquare.py --kernel ${NONSQUARE_KERNELS:-all} --save --jobs ${NONSQUARE_JOBS:-6}" ;;
    *) return 1 ;;
  esac
}

NCPU=$(nproc 2>/dev/null || echo 1)
QUIET_CPUS=${QUIET_CPUS:-4}
pin_of() {   # lane index, number of lanes in the phase -> a taskset prefix, or nothing
  [ "$2" -ge 2 ] && [ "$NCPU" -ge 8 ] && command -v taskset >/dev/null || return 0
  if [ "$1" -eq 0 ]; then echo "taskset -c 0-$((QUIET_CPUS - 1))"; else echo "taskset -c $QUIET_CPUS-$((NCPU - 1))"; fi
}

run_lane() {   # lane index, steps (comma-separated), lanes in the phase
  local lane=$1 steps=$2 s secs cmd pin
  pin=$(pin_of "$lane" "${3:-1}")
  local gpu=$((lane % NGPU)) llog="$OUT/lane$1.log"
  for s in ${steps//,/ }; do
    secs=$(left)
    if ! cmd=$(cmd_of "$s" "$secs"); then
      echo "[gpu $gpu] step $s not run: unknown, or a setting it needs is missing" | tee -a "$LOG"; continue
    fi
    if [ "$secs" -lt "$MIN_STEP_S" ]; then
      echo "[gpu $gpu] $s skipped: ${secs}s left before the deadline" | tee -a "$LOG"; continue
    fi
    echo "=== [gpu $gpu] $s ($(date -u +%H:%M:%S), ${secs}s left${pin:+, $pin}): $cmd" | tee -a "$LOG" "$llog"
    CUDA_VISIBLE_DEVICES=$gpu $pin timeout --signal=INT --kill-after=10 "$secs" bash -c "$cmd" >> "$llog" 2>&1
    local rc=$?
    echo "=== [gpu $gpu] $s exit $rc$([ $rc -eq 124 ] && echo ' (cut at the deadline)') ($(date -u +%H:%M:%S))" \
      | tee -a "$LOG" "$llog"
  done
}

echo "$NGPU GPU(s); deadline in ${DEADLINE_S:-560}s; phases: $*" | tee -a "$LOG"
for phase in "$@"; do
  IFS='/' read -r -a lanes <<< "$phase"
  if [ "$NGPU" -ge "${#lanes[@]}" ]; then
    for i in "${!lanes[@]}"; do run_lane "$i" "${lanes[$i]}" "${#lanes[@]}" & done
    wait
  else
    for i in "${!lanes[@]}"; do run_lane 0 "${lanes[$i]}"; done
  fi
done
tar czf "$OUT/results.tgz" --exclude='*.ncu-rep' --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='*.sqlite' \
  results fa2triton/kernels/*/configs.json fa2triton/backward_configs.json
for f in "$OUT"/lane*.log; do echo "--- tail of $f"; tail -n 25 "$f"; done
cat "$LOG"
