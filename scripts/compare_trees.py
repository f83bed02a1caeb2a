"""Checkouts (or Triton versions) against each other on the GPU: a no-regression check for a refactor or a port.

Each round runs one fresh process per tree, the trees' order rotating from round to round, and every process times its
own tree's versions (that tree's own loader: fa2lab.switches.load, or fa2lab.versions.load in a tree from before the
runtime/lab split, so that the FA2_V7_* switches apply) and SDPA's default backend (cuDNN on Hopper) on the same inputs
by do_bench with its L2 flush, and its versions' forward also by CUDA-graph replay (cuDNN's too with --sdpa-graphs). A
tree may carry its own environment (--env): another Triton first on PYTHONPATH, or a switch (one checkout twice).
`--mode bwd` times the backward alone (autograd on a kept graph) by do_bench, and its kernels' own GPU time per call
(kernel_ms, torch.profiler: free of the host's speed, which sets do_bench's time at N <= 2048 and varies from process
to process; autograd's backward is not captured in a graph). One row per process, version and
shape goes to results/<gpu>/experiments/<--csv>, with provenance, the child's own torch, Triton and switches, the
launch its first call chose (path, config, and v7's choice: table, tuned or pinned), the tree's label and commit (this
checkout's, a tree's own .git's, or FA2_TREE_COMMIT_<LABEL> for a copy without one, checked before the first round).
`--summary` prints, per version and shape, the median over rounds of each round's ratio B / A (of ms, and of % of
cuDNN), with the min-max: within 1% is level (2% for launch_table.csv, report.no_regression.level_of).
`--mode host` times host steps instead (profiling/host_steps.py's time_steps in each tree, `--steps`, at the
harness's head dimension; default the backward's steps beside SDPA's): one row per process, version, shape and step
(µs per call) into host_trees.csv unless --csv says otherwise; its --summary gives, per tree, the median (min-max)
over processes of each step and of backward ÷ sdpa_backward, both timed in the same process.

    python scripts/compare_trees.py --tree before=/tmp/old --tree after=. --rounds 5
    python scripts/compare_trees.py --tree t36=. --tree t39=. --env t39:PYTHONPATH=/tmp/triton39 --kernel all
    python scripts/compare_trees.py --csv launch_table.csv --tree table=. --tree race=. \
        --env race:FA2_V7_LAUNCH_FROM=race --rounds 3          # v7's launch table against its race (issue 49)
    python scripts/compare_trees.py --summary
    python scripts/compare_trees.py --mode host --tree before=/tmp/old --tree after=. --N 1024,2048 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CSV_NAME = "compare_trees.csv"
HOST_CSV = "host_trees.csv"   # --mode host's rows
HOST_STEPS = "sdpa_backward,backward,backward_nop,bwd_split,bwd_inside"   # --mode host's default --steps
HOST_ECHO = ("sdpa_backward", "backward", "bwd_body")   # the steps a --mode host run prints as it goes


def _timed(fn, graphs: bool) -> tuple[float, float]:
    """(do_bench ms, graph-replay ms); the graph is NaN when not asked for or when capture fails."""
    try:
        from fa2lab import timers as timing
    except ImportError:   # a tree from before the runtime/lab split
        from fa2lab import timing

    ms = timing.bench_ms(fn)
    if not graphs:
        return ms, float("nan")
    try:
        return ms, timing.bench_graph_ms(fn)
    except Exception:  # noqa: BLE001 - a call that cannot be captured has no graph time
        return ms, float("nan")


def _kernel_ms(fn, calls: int = 20) -> float:
    """The GPU time of fn's kernels per call: the sum of their own durations over `calls` calls back to back
    (fa2lab.timers.kernel_durations), divided by the calls."""
    from fa2lab.timers import kernel_durations

    return sum(sum(d) for d in kernel_durations(fn, calls).values()) / calls


def loader():
    """The function a child loads its tree's versions with: the lab's (fa2lab.switches.load, which sets v7's class
    attributes from the FA2_V7_* switches), or fa2lab.versions.load in a tree from before the runtime/lab split."""
    try:
        from fa2lab.switches import load
    except ImportError:   # a tree from before the runtime/lab split
        from fa2lab.versions import load
    return load


def child_switches() -> str:
    """The FA2_V7_* switches this child runs with ("" in a tree whose lab cannot say)."""
    try:
        from fa2lab.switches import kernel_switches
    except ImportError:
        return ""
    return kernel_switches()


def child_ptxas() -> str:
    """The CUDA release of the ptxas this child's Triton compiles this GPU's kernels with ("" in a tree whose
    triton_compat cannot say): a tree may point Triton at another ptxas (TRITON_PTXAS_BLACKWELL_PATH)."""
    import torch
    try:
        from fa2triton.triton_compat import get_ptxas
    except ImportError:
        return ""
    major, minor = torch.cuda.get_device_capability()
    return get_ptxas(10 * major + minor).version


def host_child(tree: Path, kernels: list[str], shapes: list[tuple[int, int, bool]], steps: str,
               repeats: int) -> None:
    """--mode host in `tree`: its host_steps' time_steps for each version and (N, causal) (the harness's D), one JSON
    line per version, shape and step. SystemExit naming the tree's lack where its host_steps has no time_steps (a
    tree from before it)."""
    sys.path.insert(0, str(tree))
    import torch
    import triton

    from profiling import host_steps

    if not hasattr(host_steps, "time_steps"):
        sys.exit("this tree's profiling/host_steps.py has no time_steps: --mode host needs a tree that has it")
    load, wanted = loader(), steps.split(",")
    for name in kernels:
        module = load(name)
        for N, D, causal in shapes:
            fns = host_steps.step_functions(module, name, N, causal, wanted)
            for step, xs in host_steps.time_steps(fns, wanted, repeats).items():
                row = dict(version=name, mode="host", N=N, D=D, causal=int(causal), step=step,
                           us_median=statistics.median(xs), us_min=min(xs), us_max=max(xs), repeats=repeats,
                           switches=child_switches(), child_torch=torch.__version__, child_triton=triton.__version__)
                print("ROW " + json.dumps(row), flush=True)


def child(tree: Path, kernels: list[str], shapes: list[tuple[int, int, bool]], mode: str, sdpa_graphs: bool) -> None:
    """Time each version of `tree` and SDPA at each (N, D, causal); print one JSON line per version and shape."""
    sys.path.insert(0, str(tree))
    import torch
    import torch.nn.functional as F
    import triton

    from fa2lab.provenance import sm_clock_mhz

    load = loader()
    B, H = 4, 8
    for name in kernels:
        FA = load(name)
        for N, D, causal in shapes:
            g = torch.Generator(device="cuda").manual_seed(N + D + causal)
            q, k, v, dO = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(4))
            if mode == "bwd":
                q, k, v = (t.requires_grad_() for t in (q, k, v))
            q4, k4, v4, dO4 = (t.view(B, H, N, D) for t in (q, k, v, dO))
            O = FA.FlashAttentionTriton.apply(q, k, v, causal)
            O_sdpa = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
            err = (O.float() - O_sdpa.view(B * H, N, D).float()).abs().max().item()
            if mode == "bwd":
                def ours():
                    return torch.autograd.grad(O, (q, k, v), dO, retain_graph=True)

                def sdpa():
                    return torch.autograd.grad(O_sdpa, (q4, k4, v4), dO4, retain_graph=True)
            else:
                def ours():
                    return FA.FlashAttentionTriton.apply(q, k, v, causal)

                def sdpa():
                    return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
            last = getattr(FA, "last_path", None)
            row = dict(version=name, mode=mode, N=N, D=D, causal=int(causal), B=B, H=H, max_abs_err_vs_sdpa=err,
                       path=(last() if last else "") or "", config=(FA.last_config() if last else "") or "",
                       choice=getattr(FA, "LAST_CHOICE", None) or "", switches=child_switches(),
                       child_torch=torch.__version__, child_triton=triton.__version__, child_ptxas=child_ptxas())
            row["ms"], row["graph_ms"] = _timed(ours, mode == "fwd")   # autograd's backward is not captured
            row["sdpa_ms"], row["sdpa_graph_ms"] = _timed(sdpa, sdpa_graphs and mode == "fwd")
            if mode == "bwd":
                row["kernel_ms"], row["sdpa_kernel_ms"] = _kernel_ms(ours), _kernel_ms(sdpa)
            row["sm_clock_mhz"] = sm_clock_mhz()
            print("ROW " + json.dumps(row), flush=True)


def tree_commit(label: str, tree: Path, own: str) -> str:
    """The commit a tree's rows carry: FA2_TREE_COMMIT_<LABEL> (checked by fa2lab.provenance.commit_from_env), else
    `own` (this checkout's) where the tree is this checkout, else the tree's own git checkout's. ValueError where
    none of them says: a copy without .git (git archive, the lent GPU machine) must be named."""
    from fa2lab.provenance import checkout_commit, commit_from_env

    name = f"FA2_TREE_COMMIT_{label.upper()}"
    passed = commit_from_env(name)
    if passed:
        return passed
    if tree == REPO:
        return own
    found = checkout_commit(tree)
    if found:
        return found
    raise ValueError(f"tree {label!r} ({tree}) is not a git checkout: give its commit as {name}")


def drive(trees: list[tuple[str, Path, dict]], rounds: int, shapes: list[tuple[int, int, bool]], kernels: list[str],
          mode: str, csv_name: str, first: int = 1, sdpa_graphs: bool = False, host: tuple[str, int] | None = None
          ) -> int:
    """Run the rounds (tree order rotating each round), appending each process's rows as soon as it ends, so an
    interrupted run keeps every finished process (go on with --first-round). `host`: --mode host's (steps,
    repeats)."""
    sys.path.insert(0, str(REPO))
    from fa2triton.buckets import ENV_VAR, OFF
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir

    env = environment()
    try:
        commits = {label: tree_commit(label, tree, env["git_commit"]) for label, tree, _ in trees}
    except ValueError as e:
        raise SystemExit(f"compare_trees: {e}") from None
    out = gpu_dir() / "experiments" / csv_name
    base = dict(os.environ, **{ENV_VAR: OFF})   # no tuning pick on disk crosses processes, as in the protocol
    spec = ";".join(f"{n},{d},{int(c)}" for n, d, c in shapes)
    for r in range(first - 1, first - 1 + rounds):
        order = trees[r % len(trees):] + trees[:r % len(trees)]
        for label, tree, extra in order:
            commit = commits[label]
            print(f"[round {r + 1}] {label} ({tree})", flush=True)
            proc = subprocess.run([sys.executable, __file__, "--child", str(tree), "--shapes", spec,
                                   "--kernel", ",".join(kernels), "--mode", mode]
                                  + (["--sdpa-graphs"] if sdpa_graphs else [])
                                  + (["--steps", host[0], "--repeats", str(host[1])] if host else []),
                                  capture_output=True, text=True, cwd=tree, env=dict(base, **extra))
            rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]
            if proc.returncode != 0 or (not rows if host else len(rows) != len(shapes) * len(kernels)):
                print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
                return 1
            for row in rows:
                row.update(round=r + 1, tree=label, tree_commit=commit, date=now())
                if host:
                    if row["step"] in HOST_ECHO:
                        print(f"  {row['version']:<16} N={row['N']:>5} causal={row['causal']} {row['step']:<16} "
                              f"{row['us_median']:8.1f} us", flush=True)
                    continue
                row.update(pct_of_sdpa=100.0 * row["sdpa_ms"] / row["ms"],
                           graph_pct_of_sdpa=100.0 * row["sdpa_graph_ms"] / row["graph_ms"])
                print(f"  {row['version']:<16} {mode} N={row['N']:>5} D={row['D']:>3} causal={row['causal']} "
                      f"{row['ms'] * 1e3:8.2f} us {row['pct_of_sdpa']:6.1f}% of cuDNN  "
                      f"graph {row['graph_ms'] * 1e3:8.2f} us  {row['path']}", flush=True)
            # the child's own torch and Triton are the row's (a tree may run another Triton than this process)
            append_rows(out, [dict(env, **row, torch=row["child_torch"], triton=row["child_triton"]) for row in rows])
    return 0


def host_summary(path: Path) -> int:
    """--mode host's rows: per version, shape and step, each tree's median (min-max) over its processes, and the
    median (min-max) of each process's backward ÷ sdpa_backward (the two timed in one process)."""
    import csv

    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{path} holds no rows")
        return 1
    trees = list(dict.fromkeys(r["tree"] for r in rows))
    commits = {t: sorted({r["tree_commit"] for r in rows if r["tree"] == t}) for t in trees}
    per = {}   # (version, N, causal, step, tree) -> {process: us}
    for r in rows:
        per.setdefault((r["version"], int(r["N"]), r["causal"], r["step"], r["tree"]), {})[r["round"]] = \
            float(r["us_median"])
    shapes = sorted({k[:3] for k in per})
    steps = list(dict.fromkeys(r["step"] for r in rows))

    def cell(xs):
        return f"{statistics.median(xs):.3g} ({min(xs):.3g}–{max(xs):.3g}), n = {len(xs)}" if xs else "–"

    print(f"{path.name}: each tree's median (min–max) over its processes, µs per call; trees: "
          + "; ".join(f"{t} = {', '.join(commits[t])}" for t in trees))
    print("| version | N | causal | step | " + " | ".join(trees) + " |")
    print("|---" * (4 + len(trees)) + "|")
    for version, N, causal in shapes:
        for step in steps + ["backward ÷ sdpa_backward"]:
            cells = []
            for t in trees:
                if step in steps:
                    xs = list(per.get((version, N, causal, step, t), {}).values())
                else:
                    ours, sdpa = (per.get((version, N, causal, s, t), {}) for s in ("backward", "sdpa_backward"))
                    xs = [ours[p] / sdpa[p] for p in ours if p in sdpa]
                cells.append(cell(xs))
            print(f"| `{version}` | {N} | {'yes' if causal == '1' else 'no'} | {step} | " + " | ".join(cells) + " |")
    return 0


def summary_path(results: Path, csv_name: str, gpu: str | None, error) -> Path:
    """results/<gpu>/experiments/<csv_name>: the folder named, else the one GPU folder that holds the file."""
    if gpu is not None:
        return results / gpu / "experiments" / csv_name
    held = sorted(p.parent.parent.name for p in results.glob(f"*/experiments/{csv_name}"))
    if len(held) != 1:
        error(f"{csv_name} is under {len(held)} GPU folders of {results} ({', '.join(held) or 'none'}): "
              "name one with --gpu")
    return results / held[0] / "experiments" / csv_name


def summary(path: Path, a: str, b: str) -> int:
    """Print report.no_regression's table (the report's page prints the same)."""
    sys.path.insert(0, str(REPO))
    from report import no_regression as compare_trees

    df = compare_trees.load(path)
    a, b = compare_trees.labels(df, a, b)
    print(f"{b} / {a}, medians of per-round ratios (min-max) over the complete rounds of {path.name}")
    print(compare_trees.table(compare_trees.ratios(df, a, b), b, compare_trees.level_of(path.name)))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH", help="a checkout (two or more)")
    ap.add_argument("--env", action="append", default=[], metavar="LABEL:KEY=VALUE",
                    help="an environment variable for one tree's processes (repeatable)")
    ap.add_argument("--kernel", default="v7_hopper", help="versions each process times: a list or 'all'")
    ap.add_argument("--mode", choices=("fwd", "bwd", "host"), default="fwd",
                    help="the forward, the backward alone, or host steps (profiling/host_steps.py)")
    ap.add_argument("--csv", help=f"the file under results/<gpu>/experiments/ (default {CSV_NAME}; {HOST_CSV} for "
                                  "--mode host)")
    ap.add_argument("--steps", default=HOST_STEPS, help="--mode host: host_steps' steps (comma-separated)")
    ap.add_argument("--repeats", type=int, default=5, help="--mode host: timings of 200 calls per step")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--first-round", type=int, default=1, help="number of the first round (to go on in a later call)")
    ap.add_argument("--N", default="512,1024,2048,4096")
    ap.add_argument("--D", default="64,128")
    ap.add_argument("--causal", choices=("both", "0", "1"), default="both")
    ap.add_argument("--sdpa-graphs", action="store_true",
                    help="also time cuDNN's forward by graph replay (the verdicts need only do_bench's)")
    ap.add_argument("--summary", action="store_true", help="print the ratios from the committed rows")
    ap.add_argument("--gpu", help="with --summary: the GPU folder under results/ (default: the one holding --csv)")
    ap.add_argument("--labels", default="before,after",
                    help="with --summary: A,B (B / A is reported; race,table for launch_table.csv)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--shapes", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    host = args.mode == "host"
    csv_name = args.csv or (HOST_CSV if host else CSV_NAME)
    if args.child:
        shapes = [(int(n), int(d), c == "1") for n, d, c in (s.split(",") for s in args.shapes.split(";"))]
        if host:
            host_child(Path(args.child), args.kernel.split(","), shapes, args.steps, args.repeats)
        else:
            child(Path(args.child), args.kernel.split(","), shapes, args.mode, args.sdpa_graphs)
        return 0
    sys.path.insert(0, str(REPO))
    if args.summary:
        from fa2lab.results import RESULTS

        path = summary_path(RESULTS, csv_name, args.gpu, ap.error)
        if host:
            return host_summary(path)
        a, b = args.labels.split(",")
        return summary(path, a, b)
    from fa2triton import versions

    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve(), {}) for t in args.tree]
    if len(trees) < 2 or any(not label or not path.is_dir() for label, path, _ in trees):
        ap.error("give two or more --tree LABEL=PATH, each an existing folder")
    for e in args.env:
        label, _, kv = e.partition(":")
        key, _, value = kv.partition("=")
        match = [t for t in trees if t[0] == label]
        if not match or not key:
            ap.error(f"--env {e!r}: want LABEL:KEY=VALUE with LABEL one of the trees")
        match[0][2][key] = value
    try:
        kernels = [v.name for v in versions.resolve(args.kernel)]
    except ValueError as e:
        ap.error(str(e))
    masks = {"both": (False, True), "0": (False,), "1": (True,)}[args.causal]
    if host:
        from fa2lab.shapes import HEAD_DIM
        from profiling.host_steps import STEPS

        unknown = [s for s in args.steps.split(",") if s not in STEPS]
        if unknown:
            ap.error(f"--steps: unknown {', '.join(unknown)}; host_steps' steps are {', '.join(STEPS)}")

        if args.D.split(",") not in ([str(HEAD_DIM)], ap.get_default("D").split(",")):
            ap.error(f"--mode host times the harness's head dimension only (D = {HEAD_DIM}), not --D {args.D}")
        dims = [HEAD_DIM]
    else:
        dims = [int(d) for d in args.D.split(",")]
    shapes = [(int(n), d, c) for d in dims for c in masks for n in args.N.split(",")]
    return drive(trees, args.rounds, shapes, kernels, args.mode, csv_name, args.first_round, args.sdpa_graphs,
                 (args.steps, args.repeats) if host else None)


if __name__ == "__main__":
    if str(REPO) not in sys.path:   # run as a script without the package installed; appended, so a tree comes first
        sys.path.append(str(REPO))
    from fa2lab import cli

    cli.run(main)
