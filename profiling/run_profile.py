"""`invoke profile`: run the profile drivers under Nsight Compute, Nsight Systems or torch.profiler.

    python profiling/run_profile.py --tool ncu --N 4096 --kernel v5_final [--causal 1]
    python profiling/run_profile.py --tool ncu --kernel all          # every version (v2 aside) + SDPA, one report
    python profiling/run_profile.py --tool nsys --kernel all
    python profiling/run_profile.py --tool torch --kernel all        # timeline where nsys does not work
    python profiling/run_profile.py --tool ncu --kernel matmul       # tensor-pipe counter vs roofline, per input type
    python profiling/run_profile.py --tool ncu --kernel v7_hopper --mode bwd   # the Triton backward beside SDPA's
    python profiling/run_profile.py --tool ncu --kernel v7_hopper --peer fa4 --D 64 128 --causal both
        # flash-attn-4's sm90 kernels beside v7 (ranges 'fa4-fwd N=...'; --mode bwd: 'fa4-bwd'), one ncu run per
        # (D, mask), each with its own file (v7_hopper_fa4_N4096_causal_D128.csv, ...)

ncu runs with the full section set, source import, capture limited to the profiler range,
clocks left alone (--clock-control none) and an empty TRITON_CACHE_DIR (so source lines
point at this checkout). The report (.ncu-rep, kept out of git) is exported with
`ncu --import ... --csv --page raw`, and the numbers the article reads are written to
results/<gpu>/ncu/<tag>.csv beside the algorithm's predictions.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402
from fa2lab.paths import REPO  # noqa: E402
from fa2lab.provenance import file_stamp, git_commit  # noqa: E402
from fa2triton import versions  # noqa: E402

MATMUL_SIZE = 8192   # M = N = K of the Round 2 matmul peak table


def find_nsys() -> str | None:
    """nsys on the PATH, or the one bundled with Nsight Compute."""
    found = shutil.which("nsys")
    if found:
        return found
    bundled = sorted(glob.glob("/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys"))
    return bundled[-1] if bundled else None


def kernel_functions(raw_csv: str) -> dict[str, str]:
    """ID -> the kernel's own name, from a raw page exported without --print-nvtx-rename ('' for a malformed one)."""
    import csv

    rows = list(csv.reader(line for line in raw_csv.splitlines() if not line.startswith("==")))
    if not rows or "ID" not in rows[0] or "Kernel Name" not in rows[0]:
        return {}
    i, k = rows[0].index("ID"), rows[0].index("Kernel Name")
    return {r[i]: r[k][:200] for r in rows[2:] if len(r) > max(i, k)}


def driver_command(names: list[str], args, extra: list[str]) -> list[str]:
    script = "compare_driver.py" if len(names) > 1 else "profile_driver.py"
    which = ["--kernels", ",".join(names)] if len(names) > 1 else ["--kernel", names[0]]
    cmd = [sys.executable, str(REPO / "profiling" / script), *which, "--N", str(args.N),
           "--causal", str(int(args.causal))]
    cmd += ["--D", str(args.D)] if getattr(args, "D", shapes.HEAD_DIM) != shapes.HEAD_DIM else []
    cmd += ["--mode", args.mode] if getattr(args, "mode", "fwd") != "fwd" else []
    cmd += ["--gluon", args.gluon] if getattr(args, "gluon", "") else []
    cmd += ["--peer", args.peer] if getattr(args, "peer", "") else []
    return cmd + (["--config", args.config] if args.config else []) + extra


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", choices=("ncu", "nsys", "torch"), default="ncu")
    ap.add_argument("--kernel", default="v5_final",
                    help="a version, a comma-separated list, 'all', or 'matmul' (the Round 2 matmul peak table, ncu)")
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--causal", nargs="?", const="1", default="0", choices=("0", "1", "both"),
                    help="causal attention (--causal alone: 1); both: one run per mask")
    ap.add_argument("--D", type=int, nargs="+", choices=shapes.HEAD_DIMS, default=[shapes.HEAD_DIM],
                    help=f"head dimension(s) (default {shapes.HEAD_DIM}, the harness's; another adds _D<D> to the "
                         "tag); several: one run per head dimension")
    ap.add_argument("--peer", default="", help="comma-separated peer backends (fa2lab.peers, e.g. fa4) profiled beside "
                    "the versions, each call in its own NVTX range ('fa4-fwd N=...', with --mode bwd 'fa4-bwd N=...'); "
                    "the tag gains _<peer>")
    ap.add_argument("--config", default="", help="Q,K,WARPS,STAGES for every version profiled")
    ap.add_argument("--mode", choices=("fwd", "bwd"), default="fwd",
                    help="bwd: the Triton backward's kernels in both dQ modes beside SDPA's backward (issue 7)")
    ap.add_argument("--gluon", default="", help="comma-separated labels of the Gluon forward's configurations to "
                    "profile beside the versions (experiment gluon's labels, e.g. ws3x64x128/4s/preg/pp/split/persist/ua)")
    ap.add_argument("--source", action="store_true",
                    help="ncu: also export the source page (every SASS instruction with its executions and sampled "
                         "warp stalls) to results/<gpu>/ncu/source/")
    ap.add_argument("--suffix", default="", help="appended to the output's tag (<tag>_<suffix>), so that a profile "
                    "of other --gluon labels at the same shape keeps the earlier file")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = ap.parse_args(argv)
    try:
        git_commit()   # a malformed FA2_GIT_COMMIT stops here, not after the profile (its rows stamp it)
    except ValueError as e:
        ap.error(str(e))
    if args.peer:
        from fa2lab.peers import chosen

        try:
            chosen(args.peer)
        except ValueError as e:
            ap.error(f"--peer: {e}")
    if args.kernel == "matmul":
        return profile_one(argparse.Namespace(**{**vars(args), "D": shapes.HEAD_DIM, "causal": False}))
    runs = [(D, causal) for D in dict.fromkeys(args.D) for causal in shapes.masks_from(args.causal)]
    worst = 0
    for D, causal in runs:
        if len(runs) > 1:
            print(f"=== D={D} {'causal' if causal else 'non-causal'} ({runs.index((D, causal)) + 1}/{len(runs)})",
                  flush=True)
        worst = max(worst, profile_one(argparse.Namespace(**{**vars(args), "D": D, "causal": causal})))
    return worst


def profile_one(args) -> int:
    """One profile at one head dimension and mask (args.D an int, args.causal a bool)."""
    matmul = args.kernel == "matmul"
    if matmul:
        if args.tool != "ncu":
            print("--kernel matmul (the matmul peak table) runs under --tool ncu only", file=sys.stderr)
            return 2
        names, tag = [], f"matmul_S{MATMUL_SIZE}"
    else:
        names = [v.name for v in versions.resolve(args.kernel)]
        if args.kernel == "all":   # v2 runs v1's kernel with v1's configurations (the article leaves it out too)
            names = [n for n in names if n != "v2_autotune"]
        tag = (names[0] if len(names) == 1 else "all") + ("_bwd" if args.mode == "bwd" else "") \
            + ("_gluon" if args.gluon else "") + "".join(f"_{p}" for p in args.peer.split(",") if p) \
            + f"_N{args.N}_{'causal' if args.causal else 'noncausal'}" \
            + (f"_D{args.D}" if args.D != shapes.HEAD_DIM else "") + (f"_{args.suffix}" if args.suffix else "")
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("profiling needs a CUDA GPU; the committed results/<gpu>/ncu/*.csv can be read without one",
                  file=sys.stderr)
            return 2
    from fa2lab.results import RESULTS, gpu_dir

    # The matmul table's counters go beside its timings (ceilings/), not among the attention kernels' profiles.
    # The backward's kernels go to ncu_bwd/ (a range there holds several kernels; ncu/ holds one per version).
    folder = "ceilings" if matmul else "ncu_bwd" if args.mode == "bwd" and args.tool == "ncu" else args.tool
    out = (gpu_dir() if not args.dry_run else RESULTS / "GPU") / folder
    out.mkdir(parents=True, exist_ok=True) if not args.dry_run else None
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    if args.tool == "ncu":
        rep = out / f"{tag}.ncu-rep"
        cmd = ["ncu", "--set", "full", "--import-source", "yes", "--profile-from-start", "off",
               "--clock-control", "none", "--nvtx", "-f", "-o", str(rep.with_suffix(""))]
        if matmul:
            cmd += [sys.executable, str(REPO / "profiling" / "matmul_peak.py"), "--size", str(MATMUL_SIZE),
                    "--iters", "1", "--no-save"]
        else:
            cmd += driver_command(names, args, ["--iters", "1", "--sdpa", "1", "--fresh-cache", "1", "--warmup-s", "1"])
        # Base units (no auto-scaling between runs), and each kernel named by its NVTX range
        # ("v4_exp2 N=4096 causal=0", "sdpa N=4096 causal=0"): the drivers wrap every call in one.
        export = ["ncu", "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base",
                  "--print-nvtx-rename", "kernel"]
        # The same page with each kernel's own name (the range renames it): a range may hold several kernels
        # (SDPA's, a peer's), and the rows' `function` column tells them apart.
        functions = export[:-2]
        # --source: every kernel's per-instruction counters (executions, sampled stalls), SASS view
        source = export[:3] + ["--csv", "--page", "source", "--print-source", "sass", "--print-nvtx-rename", "kernel"]
        print("+", " ".join(cmd), "\n+", " ".join(export), "> RAW.csv", "\n+", " ".join(functions), "> FUNCTIONS.csv",
              *(["\n+", " ".join(source), "> SOURCE.csv"] if args.source else []))
        if args.dry_run:
            return 0
        if subprocess.run(cmd, env=env).returncode != 0:
            return 1
        raw = subprocess.run(export, capture_output=True, text=True)
        if raw.returncode != 0:
            print(raw.stderr, file=sys.stderr)
            return 1
        from fa2lab.provenance import environment, now
        from fa2lab.results import append_rows
        from profiling.ncu_export import summarise_raw

        run_id = now()
        raw_path = out / "raw" / f"{tag}_{file_stamp(run_id)}.csv"
        raw_path.parent.mkdir(parents=True, exist_ok=True)
        raw_path.write_text(raw.stdout)
        rows = summarise_raw(raw_path, N=args.N, causal=args.causal, config=args.config, D=args.D,
                             predicted_flops=2 * MATMUL_SIZE**3 if matmul else None)
        named = subprocess.run(functions, capture_output=True, text=True)
        by_id = kernel_functions(named.stdout) if named.returncode == 0 else {}
        rows = [{**r, "function": by_id.get(str(r.get("ncu_id", "")), ""), "run_id": run_id,
                 "raw_export": str(raw_path.relative_to(REPO)), "date": run_id, **environment()} for r in rows]
        dest = append_rows(out / f"{tag}.csv", rows)
        print(f"wrote {len(rows)} kernel rows to {dest} (raw export: {raw_path})")
        if args.source:
            src = subprocess.run(source, capture_output=True, text=True)
            if src.returncode != 0:
                print(f"the source page could not be exported: {src.stderr.strip()}", file=sys.stderr)
                return 1
            src_path = out / "source" / f"{tag}_{file_stamp(run_id)}.csv"
            src_path.parent.mkdir(parents=True, exist_ok=True)
            src_path.write_text(src.stdout)
            print(f"source page: {src_path}")
        return 0

    if args.tool == "nsys":
        nsys = find_nsys()
        # The nsys bundled with Nsight Compute needs libdw.so.1 and libelf.so.1: unpack Debian's libdw1 and
        # libelf1 into a private folder (never into /) and name it in FA2_NSYS_LIBDIR.
        libdir = os.environ.get("FA2_NSYS_LIBDIR")
        if libdir:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
        base = out / tag
        cmd = [nsys or "nsys", "profile", "--trace=cuda,nvtx", "--capture-range=cudaProfilerApi",
               "--capture-range-end=stop", "--force-overwrite=true", "-o", str(base)]
        cmd += driver_command(names, args, ["--iters", "2"])
        stats = [nsys or "nsys", "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv",
                 "--output", str(base), f"{base}.nsys-rep"]
        print("+", " ".join(cmd), "\n+", " ".join(stats))
        if args.dry_run:
            return 0
        if nsys is None:
            print("Nsight Systems (nsys) is not on the PATH nor bundled with Nsight Compute here; "
                  "use --tool torch for a timeline from torch.profiler", file=sys.stderr)
            return 2
        if subprocess.run(cmd, env=env).returncode != 0 or subprocess.run(stats, env=env).returncode != 0:
            print("nsys could not record or report here (its bundled copy needs libdw.so.1 and libelf.so.1 on "
                  "LD_LIBRARY_PATH); use --tool torch for a timeline from torch.profiler", file=sys.stderr)
            return 1
        return 0

    trace = out / f"{tag}.trace.json"
    cmd = driver_command(names, args, ["--iters", "2", "--torch-trace", str(trace)])
    print("+", " ".join(cmd))
    if args.dry_run:
        return 0
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
