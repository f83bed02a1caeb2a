"""The non-square causal check for every version (issue 6): passed / failed / skipped-for-shared-memory.

    python harness/check_nonsquare.py --kernel all          # the full set (GPU; slow under the interpreter)
    python harness/check_nonsquare.py --kernel all --quick  # the CI subset

See fa2lab/nonsquare.py for the cases. With --save (GPU only) one row per case goes to
results/<gpu>/checks/nonsquare.csv with provenance, version by version; rerunning skips the versions
already saved at the same git commit, case by case, so a run cut by a time limit continues where it
stopped. --jobs N runs N processes on the one GPU, the versions split into shards of their cases.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported


def check_one(name: str, quick: bool, shard: tuple[int, int], skip: frozenset) -> tuple[str, dict, list[dict]]:
    """One shard of one version's check, in a worker process of --jobs."""
    from fa2lab.nonsquare import check_version

    interpret_without_gpu()
    return (name, *check_version(name, quick, shard=shard, skip=skip))


def interpret_without_gpu() -> bool:
    """Without a CUDA GPU, patch Triton's interpreter for the kernels (in the main process and in each
    worker of --jobs) and say so by returning True."""
    if torch.cuda.is_available():
        return False
    from fa2triton.interpret import patch_interpreter

    patch_interpreter()
    return True


def main(argv=None) -> int:
    from tqdm import tqdm

    from fa2lab.nonsquare import case_key, cases, check_version, explicit_configs
    from fa2triton.versions import resolve

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="all", help="a version, a comma-separated list, or 'all'")
    ap.add_argument("--quick", action="store_true", help="the small subset CI runs")
    ap.add_argument("--save", action="store_true",
                    help="append rows to results/<gpu>/checks/nonsquare.csv, as each version (or shard) finishes")
    ap.add_argument("--no-resume", dest="resume", action="store_false",
                    help="with --save: check again the cases already saved at this git commit")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes side by side on the one GPU (versions split into shards of cases); "
                         "the check is compile-bound")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")

    if interpret_without_gpu():
        print("no CUDA GPU: running under Triton's CPU interpreter")
    if args.save and not torch.cuda.is_available():
        print("--save needs a GPU: interpreter runs are checks, not results", file=sys.stderr)
        return 2
    chosen = resolve(args.kernel)
    done: dict[str, frozenset] = {v.name: frozenset() for v in chosen}   # case keys already saved, per version
    if args.save:
        from fa2lab.provenance import environment, git_commit, now
        from fa2lab.results import append_rows, gpu_dir

        out, env = gpu_dir() / "checks" / "nonsquare.csv", environment()
        if args.resume and out.exists():
            import csv

            with out.open(newline="") as f:
                saved = [r for r in csv.DictReader(f) if r.get("git_commit") == git_commit()
                         and r.get("quick", "0") == str(int(args.quick)) and r.get("version") in done]
            for name in done:
                done[name] = frozenset(case_key(r) for r in saved if r["version"] == name)
            resumed = {n: len(k) for n, k in done.items() if k}
            if resumed:
                print("resuming at this commit: " + ", ".join(f"{n} ({k} cases saved)" for n, k in resumed.items()))
    counts: dict[str, dict] = {}

    def record(name, got, rows):
        c = counts.setdefault(name, {"passed": 0, "failed": 0, "skipped_smem": 0})
        for k, n in got.items():
            c[k] += n
        if args.save:   # each job as it finishes, so an interrupted run keeps what it checked
            append_rows(out, [{"version": name, "quick": int(args.quick), **r, "date": now(), **env} for r in rows])
        for r in rows:
            if r["status"] == "failed":
                why = r.get("error") or "relative error {:.2e}".format(r["rel_err"])
                print(f"  FAILED {name} {r['config']} {r['n_q']}x{r['n_k']} D={r['D']} {r['dtype']} "
                      f"causal={r['causal']}: {why}")

    if args.jobs > 1:
        # Processes side by side on one GPU (spawned: CUDA does not survive a fork), each version split
        # into shards of its cases: the check is compile-bound (each new shape autotunes and compiles).
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        shards = max(1, args.jobs // len(chosen))
        jobs = [(v.name, i, shards) for v in chosen for i in range(shards)]
        with ProcessPoolExecutor(min(args.jobs, len(jobs)), mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = [ex.submit(check_one, name, args.quick, (i, k), done[name]) for name, i, k in jobs]
            with tqdm(total=len(futures), desc=f"{len(chosen)} versions x {shards} shards", unit="shard",
                      file=sys.stdout) as bar:
                for fut in as_completed(futures):
                    record(*fut.result())
                    bar.update(1)
    else:
        for v in chosen:
            total = len(cases(args.quick)) * (1 + len(explicit_configs(v.round >= 4, args.quick))) - len(done[v.name])
            with tqdm(total=total, desc=v.name, unit="case", file=sys.stdout, mininterval=2) as bar:
                got, rows = check_version(v.name, args.quick, progress=lambda r: bar.update(1), skip=done[v.name])
            record(v.name, got, rows)
    summary = list(counts.items())
    print(f"\n{'version':<18}{'passed':>8}{'failed':>8}{'skipped (smem)':>16}")
    for name, c in summary:
        print(f"{name:<18}{c['passed']:>8}{c['failed']:>8}{c['skipped_smem']:>16}")
    if args.save:
        print(f"rows in {out}")
    return 1 if any(c["failed"] for _, c in summary) else 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
