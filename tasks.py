"""Tasks for the FlashAttention-2 rounds artifact. `invoke --list`; `invoke --help TASK`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import invoke.parser.context as _invoke_context
from invoke import Exit, task

# Invoke turns one-letter parameters into short flags (-N); the harness and the article say
# --N and --D, so those two names get long flags.
_to_flag = _invoke_context.to_flag
_invoke_context.to_flag = lambda name: "--" + name if name in ("N", "D") else _to_flag(name)

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from fa2triton import versions  # noqa: E402
from fa2triton.gpu import has_gpu  # noqa: E402

KERNEL_HELP = "a version (e.g. v5_final), a comma-separated list, or 'all'"


def _run(cmd: list[str], env: dict | None = None) -> int:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=REPO).returncode


NAMED_EXITS = (2, 130)   # a script that exits 2 or 130 has said why in its own line (fa2lab.cli, argparse)


def _script(cmd: list[str], env: dict | None = None, failed: str = "failed") -> None:
    """_run(cmd, env); a failure exits with `failed` as its line, or only with the script's code where the
    script has named the problem itself (NAMED_EXITS)."""
    code = _run(cmd, env)
    if code in NAMED_EXITS:
        raise Exit(code=code)
    if code != 0:
        raise Exit(failed, code=1)


def _need_gpu(what: str, instead: str) -> None:
    """The measuring tasks' check before they start: a GPU, and (their rows stamp it) a well-formed FA2_GIT_COMMIT
    where one is passed (fa2lab.provenance.commit_from_env)."""
    if not has_gpu():
        raise Exit(f"{what} needs a CUDA GPU, and none is visible here. Instead: {instead}", code=2)
    from fa2lab.provenance import commit_from_env

    try:
        commit_from_env("FA2_GIT_COMMIT")
    except ValueError as e:
        raise Exit(f"{what}: {e}", code=2) from None


def _versions(kernel: str, one: bool = False, also: tuple[str, ...] = ()) -> list:
    """The versions --kernel names (fa2triton.versions.resolve), checked before anything runs or needs a GPU: an
    unknown name exits 2 with one line naming the known versions. `one`: exactly one version; `also`: other
    names the task takes (returned as no version)."""
    if kernel in also:
        return []
    try:
        chosen = versions.resolve(kernel)
    except ValueError as e:
        raise Exit(f"--kernel: {e}", code=2) from None
    if not chosen or (one and len(chosen) != 1):
        raise Exit(f"--kernel takes {'one version' if one else 'versions'}, not {kernel!r}; known: "
                   f"{', '.join(versions.NAMES)}", code=2)
    return chosen


def _xdist_args(workers: int) -> list[str]:
    """pytest-xdist's `-n` when asked for and installed; an empty list otherwise."""
    if workers <= 1:
        return []
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        print(f"pytest-xdist is not installed: running the tests in one process, not {workers}")
        return []
    return ["-n", str(workers)]


@task(help={"kernel": KERNEL_HELP, "unit": "also run the repo's own unit tests (tests/)", "k": "pytest -k filter",
            "workers": "pytest-xdist processes per test run (needs pytest-xdist; 0 or 1: one process). "
                       "On a GPU most of the time is compiling and autotuning, which parallelises well"})
def test(c, kernel="all", unit=True, k="", workers=0):
    """Run every chosen version's tests, then the unit tests.

    The shared test file once per version (its folder on PYTHONPATH), then the unit tests (tests/).
    Writes nothing. GPU: optional; without one the kernels run on the CPU under Triton's interpreter
    (TRITON_INTERPRET=1), and the tests that need one are skipped.
    """
    chosen = _versions(kernel)
    from fa2lab.protocol import TEST_FILE, version_env

    extra = {} if has_gpu() else {"TRITON_INTERPRET": "1"}
    if extra:
        print("no CUDA GPU visible: running the kernels under Triton's CPU interpreter (TRITON_INTERPRET=1)")
    parallel = _xdist_args(int(workers))
    failed = []
    for v in chosen:
        print(f"\n=== {v.name}: {v.changed}")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel, str(TEST_FILE)]
        if k:
            cmd += ["-k", k]
        if _run(cmd, version_env(v, **extra)) != 0:
            failed.append(v.name)
    if unit:
        print("\n=== unit tests (tests/)")
        if _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel, "tests"],
                dict(os.environ, **extra)) != 0:
            failed.append("tests/")
    if failed:
        raise Exit(f"failed: {', '.join(failed)}", code=1)
    print("\nall test runs passed")


@task(help={"kernel": KERNEL_HELP, "runs": "harness runs per version (fresh processes)",
            "pause": "seconds to pause before each run", "N": "comma-separated sequence lengths (default: harness)",
            "causal": "both, 0 or 1", "graphs": "also time CUDA-graph replay and host time per call",
            "mode": "fwd (the article's harness) or bwd (forward+backward and backward-only, issue 7)",
            "dq_mode": "with --mode bwd: default, auto, deterministic, separate, atomic or fused (how the Triton "
                       "backward computes dQ; fused: the whole backward in one launch; auto: fused for small problems, "
                       "else atomic where the ws kernel is preferred, else separate; deterministic: auto without atomic)",
            "varlen": "run the variable-length benchmark instead (harness/bench_varlen.py: first-call cost of 32 random N)",
            "varlen_args": "with --varlen: more arguments for harness/bench_varlen.py, e.g. '--cache-dir warm --compare-tuned'",
            "peers": "peer backends timed beside SDPA in the same process (fa2lab.peers, e.g. fa4 = flash-attn-4 sm90), "
                     "comma-separated; all (default: one that cannot run here gets NaN and its status) or none",
            "D": "head dimension (default 64, the harness's; 128 for the wide-head rows)"})
def bench(c, kernel="v5_final", runs=1, pause=0.0, N="", causal="both", graphs=True, mode="fwd", dq_mode="default",
          varlen=False, varlen_args="", peers="all", D=64):
    """Benchmark versions against SDPA with the unchanged harness.

    Runs the harness for one or more versions and prints medians of the per-run ratio to SDPA.
    With several versions or runs this is the article's protocol: fresh processes, versions
    interleaved across runs, a pause before each. The harness reports ms, TFLOP/s, % of SDPA (default and
    FLASH_ATTENTION backends), CUDA-graph replay, do_bench without its cache flush and host time per call.
    Writes results/<gpu>/bench/<version>.csv (--mode bwd: results/<gpu>/bench_bwd/<version>.csv), one row per
    shape and run. Needs a GPU.
    """
    chosen = _versions(kernel)
    _need_gpu("invoke bench", "`invoke test` runs every version on the CPU under the interpreter, and "
              "`invoke report` / `invoke figures` read the committed H200 results")
    if varlen:   # its own fresh processes, rows in results/<gpu>/varlen/ (python harness/bench_varlen.py --help)
        import shlex

        cmd = [sys.executable, "harness/bench_varlen.py", "--kernel", kernel, *shlex.split(varlen_args)]
        _script(cmd, failed="the variable-length benchmark failed")
        return
    from fa2lab.protocol import HARNESS_BWD, format_summary, read_bench_rows, run_protocol, summarise
    from fa2lab.results import gpu_dir

    if mode not in ("fwd", "bwd"):
        raise Exit(f"--mode must be fwd or bwd, not {mode!r}", code=2)
    from fa2lab import peers as peer_registry
    from fa2lab.shapes import HEAD_DIMS

    try:
        peer_registry.chosen(peers)
    except ValueError as e:
        raise Exit(f"--peers: {e}", code=2) from None
    if int(D) not in HEAD_DIMS:
        raise Exit(f"--D must be one of {', '.join(map(str, HEAD_DIMS))}, not {D}", code=2)
    args = ["--causal", causal] + (["--N", *N.split(",")] if N else []) + ["--peers", peers, "--D", str(D)]
    from fa2triton.flash_backward_triton import DQ_CHOICES

    if dq_mode not in ("default", *DQ_CHOICES):
        raise Exit(f"--dq-mode must be default or one of {', '.join(DQ_CHOICES)}, not {dq_mode!r}", code=2)
    if mode == "bwd":
        run_protocol(chosen, int(runs), float(pause), args + ["--dq-mode", dq_mode], HARNESS_BWD)
        print(f"rows in {gpu_dir() / 'bench_bwd'}")
        return
    pid = run_protocol(chosen, int(runs), float(pause), args + ([] if graphs else ["--no-graphs"]))
    rows = read_bench_rows(gpu_dir() / "bench")
    print(f"\nprotocol {pid}: medians over {runs} run(s); spread = min-max of the per-run % of SDPA")
    print(format_summary(summarise(rows, pid)))


@task(help={"kernel": "version whose kernel body is swept (v0_baseline for Round 1, v4_exp2 for Round 5, v7_hopper for its own re-sweep)",
            "N": "comma-separated sequence lengths (default: all four)", "causal": "both, 0 or 1",
            "limit_minutes": "stop measuring after this many minutes (rerun to resume)",
            "workers": "compile worker processes", "fresh": "start a new CSV instead of resuming",
            "max_configs": "only the first K configurations (smoke test)",
            "graph_max_n": "also record CUDA-graph replay time at N up to this (pick-configs then ranks by it)"})
def sweep(c, kernel="v4_exp2", N="", causal="both", limit_minutes=0.0, workers=0, fresh=False, max_configs=0,
          graph_max_n=0):
    """Sweep 625 tile/warp/stage configurations; resumable.

    Every configuration at the harness shapes, appending as it goes.
    v0_baseline for Round 1, v4_exp2 for Round 5; v7_hopper re-sweeps an autotuned body pinned to one
    configuration at a time. Writes results/<gpu>/sweep/<version>.csv (a status per row: ok, wrong,
    out_of_smem, skipped_registers, compile_error). Needs a GPU."""
    _versions(kernel, one=True)
    _need_gpu("invoke sweep", "the committed results/<gpu>/sweep/*.csv feed `invoke pick-configs` and `invoke figures`")
    cmd = [sys.executable, "sweeps/sweep.py", "--kernel", kernel, "--causal", causal]
    cmd += ["--N", *N.split(",")] if N else []
    cmd += ["--limit-minutes", str(limit_minutes)] if float(limit_minutes) else []
    cmd += ["--workers", str(workers)] if int(workers) else []
    cmd += ["--max-configs", str(max_configs)] if int(max_configs) else []
    cmd += ["--fresh"] if fresh else []
    cmd += ["--graph-max-n", str(graph_max_n)] if int(graph_max_n) else []
    _script(cmd, failed="sweep failed")


@task(help={"N": "comma-separated sequence lengths (default: all four)", "causal": "both, 0 or 1",
            "dq_mode": "separate (dQ in its own kernel) or atomic (fp32 atomics in the dK/dV kernel)",
            "limit_minutes": "stop measuring after this many minutes (rerun to resume)",
            "stages": "comma-separated num_stages values to sweep (default 1,2,3)",
            "configs": "space-separated configurations 'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES' to sweep instead "
                       "of the mirrored space",
            "pick": "no sweep: write the sweep's best configuration (least total time over the shapes from "
                    "N = 2048 up, correct at every shape) as this GPU's backward default in "
                    "fa2triton/backward_configs.json (no GPU needed)"})
def sweep_backward(c, N="", causal="both", dq_mode="separate", limit_minutes=0.0, stages="", configs="", pick=False):
    """Sweep the Triton backward's tiles, warps and stages.

    At the harness shapes, each checked against SDPA's gradients; resumable. Writes one row per measurement to
    results/<gpu>/sweep_bwd/flash_backward_triton.csv; needs a GPU. --pick (no GPU) turns a finished sweep into that
    GPU's backward default in fa2triton/backward_configs.json."""
    if pick:
        _script([sys.executable, "sweeps/sweep_backward.py", "--pick", "--dq-mode", dq_mode],
                failed="no backward configuration picked")
        return
    _need_gpu("invoke sweep-backward", "the committed results/<gpu>/sweep_bwd/*.csv can be read without one")
    cmd = [sys.executable, "sweeps/sweep_backward.py", "--causal", causal, "--dq-mode", dq_mode]
    cmd += ["--N", *N.split(",")] if N else []
    cmd += ["--limit-minutes", str(limit_minutes)] if float(limit_minutes) else []
    cmd += ["--stages", *stages.split(",")] if stages else []
    cmd += ["--configs", *configs.split()] if configs else []
    _script(cmd, failed="backward sweep failed")


@task(help={"kernel": "the swept version (v0_baseline: writes v1-v4 tables; v4_exp2: writes v5's)",
            "gpu": "results folder to read (default: this GPU's, or the only one present)",
            "dry_run": "print what would be written, write nothing"})
def pick_configs(c, kernel="v4_exp2", gpu="", dry_run=False):
    """Write configs.json entries from a sweep's winners.

    The tuned versions' entries from a sweep CSV (winner, per-shape, 1% short list).
    The single winner (v1, v3, v4), the per-shape winners (v2) and the greedy short list that keeps
    every shape within 1% of its best (v5, v6), for the sweep's GPU architecture. Writes the versions'
    configs.json and results/<gpu>/sweep/<version>.picks.csv (what it chose, from which CSV). No GPU needed."""
    _versions(kernel, one=True)
    cmd = [sys.executable, "sweeps/pick_configs.py", "--kernel", kernel] + (["--gpu", gpu] if gpu else [])
    cmd += ["--dry-run"] if dry_run else []
    _script(cmd, failed="pick-configs failed")


@task(help={"kernel": "the version whose launches are raced (v7_hopper: the only one with a run-time race)",
            "D": "comma-separated head dimensions (default 64,128)", "causal": "both, 0 or 1",
            "N": "comma-separated sequence lengths, powers of two (default 512 to 8192)",
            "bh": "comma-separated batch x heads, powers of two (default 32)",
            "max_seconds": "start no grid point after this many seconds (rerun to resume)",
            "dry_run": "list the grid and what the table holds for each GPU; no GPU needed",
            "fresh": "start this GPU and Triton's section of the table again instead of resuming"})
def pick_launch(c, kernel="v7_hopper", D="", causal="both", N="", bh="", max_seconds=240.0, dry_run=False,
                fresh=False):
    """Write v7's launch table by racing its launches on this GPU.

    Races once per grid point (D, mask, N, batch x heads), as v7 raced at every new input signature, and writes each
    winner to fa2triton/kernels/v7_hopper/launch_table.json, in the section of this GPU and Triton, with provenance,
    entry by entry; a rerun at the same commit on the same GPU and Triton resumes. v7 then looks its launch up there
    instead of racing (fa2triton/launch_table.py; docs/configs.md). Needs a Hopper GPU, except --dry-run."""
    _versions(kernel, one=True)
    if not dry_run:
        _need_gpu("invoke pick-launch", "--dry-run lists the grid; v7 races at run time where its table has no entry")
    cmd = [sys.executable, "sweeps/pick_launch.py", "--kernel", kernel, "--causal", causal,
           "--max-seconds", str(max_seconds)]
    for flag, values in (("--D", D), ("--N", N), ("--bh", bh)):
        cmd += [flag, *values.split(",")] if values else []
    cmd += ["--dry-run"] if dry_run else []
    cmd += ["--fresh"] if fresh else []
    _script(cmd, failed="pick-launch failed")


@task(help={"configs": "semicolon-separated Q,K,WARPS,STAGES (default: the article's budget-table rows)",
            "kernel": "version whose kernel is compiled", "D": "head dimension", "dtype": "bf16, fp16 or fp32"})
def budget(c, configs="", kernel="v1_tiles", D=64, dtype="bf16"):
    """Print the shared-memory budget table on this GPU.

    Formula, Hopper-aware prediction and compiled bytes; also programs per SM by shared memory and by registers,
    registers and spills. Prints only (the committed table is results/<gpu>/budget/<kernel>.csv). Needs a GPU."""
    _versions(kernel, one=True)
    _need_gpu("invoke budget", "fa2triton.budget.formula_shared_bytes gives the formula side on any machine")
    cmd = [sys.executable, "sweeps/budget_table.py", "--kernel", kernel, "--D", str(D), "--dtype", dtype]
    cmd += ["--configs", configs] if configs else []
    _script(cmd, failed="budget failed")


@task
def list_versions(c):
    """Print the version registry, in the article's round order.

    fa2triton/versions.py: each round's label, the version it made (Round 2 profiles and makes none), and what changed.
    Writes nothing; no GPU needed."""
    made = {}
    for v in versions.VERSIONS:
        made.setdefault(v.round_label, []).append(v)
    print(f"{'round':<10} {'version':<17}what changed")
    for label, title in versions.ROUNDS:
        for v in made.get(label) or [None]:
            what = f"{v.name:<17}{'autotuned  ' if v.autotuned else ''}{v.changed}" if v else f"{'-':<17}({title})"
            print(f"{label:<10} {what}")


@task(help={"kernel": KERNEL_HELP, "quick": "only the small subset CI runs",
            "save": "append one row per case to results/<gpu>/checks/nonsquare.csv (GPU only)",
            "jobs": "processes side by side on the one GPU (the check is compile-bound)"})
def check_nonsquare(c, kernel="all", quick=False, save=False, jobs=1):
    """Run the article's non-square causal check per version.

    Each case passed, failed or skipped (shared memory).
    Queries longer and shorter than keys, ragged lengths, D 16 to 128, bf16 and fp32, through apply
    and explicit tile configurations. Without a GPU it runs under the interpreter (slow: use --quick).
    With --jobs N, N processes share the GPU, each version split into shards of its cases. Writes
    results/<gpu>/checks/nonsquare.csv with --save (GPU only, resumed case by case), else nothing.
    GPU: optional.
    """
    _versions(kernel)
    cmd = [sys.executable, "harness/check_nonsquare.py", "--kernel", kernel, "--jobs", str(jobs)]
    cmd += (["--quick"] if quick else []) + (["--save"] if save else [])
    _script(cmd, failed="non-square check failed")


@task(help={"kernel": "version to compile", "config": "Q_TILE,K_TILE,WARPS,STAGES (default: the version's own)",
            "causal": "compile the causal kernel", "D": "head dimension", "dtype": "bf16, fp16 or fp32",
            "arch": "target architecture for an offline compile, e.g. sm_90 (default: this GPU, else sm_90)"})
def inspect(c, kernel="v1_tiles", config="", causal=False, D=64, dtype="bf16", arch=""):
    """Compile one configuration (nothing runs) and summarise it.

    What the compiler made, without launching it.
    Writes registers, spills, shared bytes, TTGIR, PTX, SASS and a one-screen summary (MMA layout,
    loop contents, key instruction counts) under results/<gpu>/inspect/ (offline: results/offline-<arch>/inspect/).
    No GPU needed: without one it compiles offline for sm_90 (or --arch); nothing is run."""
    _versions(kernel, one=True)
    cmd = [sys.executable, "profiling/inspect_kernel.py", "--kernel", kernel, "--D", str(D), "--dtype", dtype,
           "--causal", str(int(causal))]
    cmd += (["--config", config] if config else []) + (["--arch", arch] if arch else [])
    _script(cmd, {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, failed="inspect failed")


@task(help={"tool": "ncu (counters), nsys (timeline) or torch (timeline via torch.profiler)",
            "kernel": KERNEL_HELP + " ('all' leaves out v2, whose kernel and configurations are v1's), or matmul "
                      "(the Round 2 matmul peak table, as `invoke ceilings --ncu`)",
            "N": "sequence length", "causal": "causal attention", "config": "Q,K,WARPS,STAGES for every version",
            "mode": "fwd, or bwd: the Triton backward's kernels (both dQ modes) beside SDPA's backward (v6 on)",
            "gluon": "comma-separated Gluon forward configurations to profile beside them (experiment gluon's labels)",
            "source": "ncu: also export every SASS instruction's executions and sampled stalls "
                      "(results/<gpu>/ncu/source/)",
            "dry_run": "print the commands only",
            "D": "head dimension (default 64, the harness's; another adds _D<D> to the results' file name); "
                 "comma-separated: one run per head dimension (64,128)",
            "masks": "both, 0 or 1 (instead of --causal): both gives one run per mask",
            "peer": "comma-separated peer backends (fa2lab.peers, e.g. fa4 = flash-attn-4 sm90) profiled beside the "
                    "versions, each in its own NVTX range (fa4-fwd; with --mode bwd fa4-bwd); the file name gains _<peer>"})
def profile(c, tool="ncu", kernel="v5_final", N=4096, causal=False, config="", mode="fwd", gluon="", source=False,
            dry_run=False, D="64", masks="", peer=""):
    """Profile versions beside SDPA: ncu, nsys or torch.profiler.

    At the harness shape, under Nsight Compute, nsys or torch.profiler.
    ncu runs the full section set with clocks left alone and a fresh Triton cache, and its numbers
    are exported to results/<gpu>/ncu/*.csv (--source: results/<gpu>/ncu/source/; --mode bwd:
    results/<gpu>/ncu_bwd/); nsys and torch give a timeline (results/<gpu>/nsys/, results/<gpu>/torch/).
    Needs a GPU (--dry-run does not)."""
    _versions(kernel, also=("matmul",))
    if not dry_run:
        _need_gpu("invoke profile", "`invoke profile --dry-run` prints the commands; `invoke inspect` works offline")
    cmd = [sys.executable, "profiling/run_profile.py", "--tool", tool, "--kernel", kernel, "--N", str(N),
           "--D", *str(D).split(",")]
    cmd += (["--causal", masks] if masks else ["--causal"] if causal else []) + (["--config", config] if config else [])
    cmd += ["--peer", peer] if peer else []
    cmd += (["--mode", mode] if mode != "fwd" else []) + (["--gluon", gluon] if gluon else [])
    cmd += (["--source"] if source else []) + (["--dry-run"] if dry_run else [])
    _script(cmd, failed="profile failed")


@task(help={"gpu": "results folder to draw (default: every GPU under results/)"})
def figures(c, gpu=""):
    """Draw every figure from results/ alone; no GPU needed.

    Into figures/out/<gpu>/; nothing is measured, and the same rows give the same bytes."""
    cmd = [sys.executable, "figures/make_all.py"] + (["--gpu", gpu] if gpu else [])
    _script(cmd, failed="no figure could be drawn")


@task(help={"counts": "numbers of configurations to autotune over", "sweep": "sweep CSV to rank them from"})
def compile_cost(c, counts="1,2,4,8,16", sweep=""):
    """Round 3: time what autotuning costs in compilation.

    First-call, new-N and first-causal time of @triton.autotune over K configurations.
    Fresh processes, empty then warm TRITON_CACHE_DIR, with and without cache_results=True;
    rows to results/<gpu>/tuning/compile_cost.csv. Needs a GPU."""
    _need_gpu("invoke compile-cost", "results/<gpu>/tuning/compile_cost.csv holds the committed measurements")
    cmd = [sys.executable, "sweeps/measure_compile_cost.py", "--counts", counts] + (["--sweep", sweep] if sweep else [])
    _script(cmd, failed="compile-cost failed")


@task(help={"processes": "fresh processes per setting", "pause": "idle seconds before each tuning",
            "N": "sequence length", "causal": "causal attention"})
def autotune_bias(c, processes=10, pause=20.0, N=512, causal=False):
    """Round 3: check the autotuner's pick after an idle GPU.

    Which candidate it picks, with and without a warm-up and with longer timing, against careful timings; rows to
    results/<gpu>/tuning/autotune_bias.csv. Needs a GPU."""
    _need_gpu("invoke autotune-bias", "results/<gpu>/tuning/autotune_bias.csv holds the committed measurements")
    cmd = [sys.executable, "sweeps/autotune_bias.py", "--processes", str(processes), "--pause", str(pause),
           "--N", str(N), "--causal", str(int(causal))]
    _script(cmd, failed="autotune-bias failed")


@task(help={"readme": "also rewrite README.md's generated block, between its <!-- report:... --> markers "
                      "(default; --no-readme skips it)"})
def report(c, readme=True):
    """Write REPORT.md, docs/report/ and README's tables.

    REPORT.md, its pages docs/report/*.md and README.md's generated block, from results/ alone: a
    one-screen summary, the article's rounds beside its Ada numbers, v7 against cuDNN, the backward, the claims
    ledger, and one page per experiment (python -m report)."""
    _script([sys.executable, "-m", "report", *(["--readme", "README.md"] if readme else [])], failed="report failed")


import experiments  # noqa: E402  (the experiments' registry: experiments/__init__.py)


@task(help={"name": "the experiment (listed above)",
            "N": "comma-separated sequence lengths",
            "rounds": "interleaved timing rounds",
            "causal": "0, 1 or 2 (both); default: the experiment's own",
            "only": "gluon, items: comma-separated configuration labels (gluon's default: every one of "
                    "EXPERIMENT_CONFIGS; items': the persistent 128-row candidate)",
            "D": "gluon: head dimension, 64 (default, the harness's) or 128"})
def experiment(c, name, N="", rounds=5, causal="", only="", D=""):
    """Run one experiment beyond the harness, by name.

    One question each; docs/experiments.md has every answer with its numbers.
    One module each, experiments/<module>.py (python experiments/<module>.py --help for its options), registered
    in experiments/__init__.py; retired ones (measured negatives whose code is gone; docs/experiments.md names the
    last commit with it) are listed and refused. Rows go to results/<gpu>/experiments/<name>.csv. Needs a GPU.
    The experiments:"""
    if name in ("-h", "--help"):   # the positional name took the flag: show what `invoke --help experiment` shows
        raise Exit(code=subprocess.run([sys.executable, "-m", "invoke", "--help", "experiment"]).returncode)
    try:
        module = experiments.module_of(name)
    except ValueError as e:
        raise Exit(str(e), code=2)
    _need_gpu(f"invoke experiment {name}", "results/<gpu>/experiments/ holds the committed runs")
    cmd = [sys.executable, module.__file__, "--rounds", str(rounds)]
    cmd += ["--N", *N.split(",")] if N else []
    cmd += ["--causal", str(causal)] if str(causal) != "" else []
    cmd += ["--only", *only.split(",")] if only else []
    cmd += ["--D", str(D)] if str(D) != "" else []
    _script(cmd, failed=f"experiment {name} failed")


experiment.__doc__ += "\n" + experiments.describe().replace("\n  ", "\n    ").replace("  ", "    ", 1)


@task(help={"kernel": "versions with the lean host path (comma-separated)", "N": "comma-separated sequence lengths",
            "repeats": "timings of 200 calls per step",
            "steps": "the steps to time, comma-separated (default every one; issue 47: sdpa,apply,attention,"
                     "flash_attn_func)"})
def host_steps(c, kernel="v5_final,v6_longest_first,v7_hopper", N="512", repeats=5, steps=""):
    """Time each step of a forward call's host path alone.

    Where the host time goes (issues 8, 47): SDPA, apply, fa2triton's attention() and flash_attn_func() on views of
    apply's inputs, an empty autograd.Function, the cached launch, its signature lookup, the allocations, v7's
    descriptors and Triton's launcher, each timed alone; rows to results/<gpu>/hostpath/steps.csv. Needs a GPU."""
    _versions(kernel)
    _need_gpu("invoke host-steps", "results/<gpu>/hostpath/steps.csv holds the committed measurements")
    _script([sys.executable, "profiling/host_steps.py", "--kernel", kernel, "--N", *N.split(","),
             "--repeats", str(repeats), *(["--steps", steps] if steps else [])], failed="host-steps failed")


@task(help={"path": "tl (v7's tl forward), gluon (its Gluon forward) or bwd-ws (the warp-specialized backward)",
            "N": "sequence length", "D": "head dimension (64 or 128)", "causal": "causal mask (1 or 0)",
            "label": "a forward candidate (default: tl 64,64,4,3/p0, gluon its first)", "calls": "repeats per round",
            "rounds": "rounds",
            "no_pool": "O from torch's CPU allocator instead of a pool that reuses a freed buffer, as CUDA's does"})
def host_emulate(c, path="tl", N=512, D=64, causal=1, label="", calls=5000, rounds=3, no_pool=False):
    """Repeat v7's recorded launches on a stub driver, no GPU.

    profiling/host_emulation.py: a stub libcuda (every driver call succeeds at once), the kernel compiled for sm_90,
    its recorded launch repeated on CPU tensors. Prints whether it launches directly, the descriptor encodes per
    repeat and the Python's µs per repeat. Needs a C compiler; CPU numbers, nothing written to results/."""
    cmd = [sys.executable, "profiling/host_emulation.py", "--path", path, "--N", str(N), "--D", str(D),
           "--causal", str(causal), *(["--label", label] if label else []), "--calls", str(calls),
           "--rounds", str(rounds), *(["--no-pool"] if no_pool else [])]
    _script(cmd, failed="host-emulate failed")


@task(help={"ncu": "run it under Nsight Compute instead (one call per variant in NVTX ranges), exporting the "
                   "tensor-pipe counters and the roofline numbers to results/<gpu>/ceilings/matmul_S8192.csv"})
def ceilings(c, ncu=False):
    """Round 2: measure the matmul peak table and two ceilings.

    The matmul peak table (bf16, fp16, tf32 with fp32 accumulation; fp16 with fp16; int8)
    and the two ceilings (copy bandwidth, torch bf16 matmul); rows to results/<gpu>/ceilings/
    (--ncu: the tensor-pipe counters, results/<gpu>/ceilings/matmul_S8192.csv). Needs a GPU."""
    _need_gpu("invoke ceilings", "results/<gpu>/ceilings/matmul_peak.csv holds the committed measurements")
    cmd = [sys.executable, "profiling/matmul_peak.py"]
    if ncu:   # the same as `invoke profile --tool ncu --kernel matmul`
        cmd = [sys.executable, "profiling/run_profile.py", "--tool", "ncu", "--kernel", "matmul"]
    _script(cmd, failed="ceilings failed")
