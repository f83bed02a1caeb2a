"""The non-square causal check for every version (issue 6): passed / failed / skipped-for-shared-memory.

    python harness/check_nonsquare.py --kernel all          # the full set (GPU; slow under the interpreter)
    python harness/check_nonsquare.py --kernel all --quick  # the CI subset

See fa2lab/nonsquare.py for the cases. With --save (GPU only) one row per case goes to
results/<gpu>/checks/nonsquare.csv with provenance, version by version; rerunning skips the versions
already saved at the same git commit, so a run cut by a time limit continues where it stopped.
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


def check_one(name: str, quick: bool) -> tuple[str, dict, list[dict]]:
    """One version's check, in a worker process of --jobs."""
    from fa2lab.nonsquare import check_version

    if not torch.cuda.is_available():
        from fa2lab.interpret import patch_interpreter

        patch_interpreter()

    return (name, *check_version(name, quick))


def main(argv=None) -> int:
    from tqdm import tqdm

    from fa2lab.nonsquare import cases, check_version, explicit_configs
    from fa2lab.versions import resolve

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="all", help="a version, a comma-separated list, or 'all'")
    ap.add_argument("--quick", action="store_true", help="the small subset CI runs")
    ap.add_argument("--save", action="store_true",
                    help="append rows to results/<gpu>/checks/nonsquare.csv, each version as it finishes")
    ap.add_argument("--no-resume", dest="resume", action="store_false",
                    help="with --save: check again the versions already saved at this git commit")
    ap.add_argument("--jobs", type=int, default=1,
                    help="versions checked side by side, one process each (on one GPU; the check is compile-bound)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")

    if not torch.cuda.is_available():
        from fa2lab.interpret import patch_interpreter

        patch_interpreter()
        print("no CUDA GPU: running under Triton's CPU interpreter")
    if args.save and not torch.cuda.is_available():
        print("--save needs a GPU: interpreter runs are checks, not results", file=sys.stderr)
        return 2
    chosen = resolve(args.kernel)
    if args.save:
        from fa2lab.provenance import environment, git_commit, now
        from fa2lab.results import append_rows, gpu_dir

        out, env = gpu_dir() / "checks" / "nonsquare.csv", environment()
        if args.resume and out.exists():
            import csv

            with out.open(newline="") as f:
                done = {r["version"] for r in csv.DictReader(f) if r.get("git_commit") == git_commit()
                        and r.get("quick", "0") == str(int(args.quick))}
            if done:
                print(f"resuming: {', '.join(sorted(done))} already checked at this commit ({out})")
            chosen = [v for v in chosen if v.name not in done]
    summary = []

    def record(name, counts, rows):
        summary.append((name, counts))
        if args.save:   # each version as it finishes, so an interrupted run keeps what it checked
            append_rows(out, [{"version": name, "quick": int(args.quick), **r, "date": now(), **env} for r in rows])
        for r in rows:
            if r["status"] == "failed":
                why = r.get("error") or "relative error {:.2e}".format(r["rel_err"])
                print(f"  FAILED {name} {r['config']} {r['n_q']}x{r['n_k']} D={r['D']} {r['dtype']} "
                      f"causal={r['causal']}: {why}")

    if args.jobs > 1 and len(chosen) > 1:
        # One process per version (spawned: CUDA does not survive a fork): the check is compile-bound,
        # so versions side by side on one GPU take about as long as the slowest one alone.
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(min(args.jobs, len(chosen)), mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = {ex.submit(check_one, v.name, args.quick): v.name for v in chosen}
            with tqdm(total=len(futures), desc="versions", unit="version", file=sys.stdout) as bar:
                for fut in as_completed(futures):
                    record(*fut.result())
                    bar.update(1)
    else:
        for v in chosen:
            total = len(cases(args.quick)) * (1 + len(explicit_configs(v.round >= 4, args.quick)))
            with tqdm(total=total, desc=v.name, unit="case", file=sys.stdout, mininterval=2) as bar:
                counts, rows = check_version(v.name, args.quick, progress=lambda r: bar.update(1))
            record(v.name, counts, rows)
    print(f"\n{'version':<18}{'passed':>8}{'failed':>8}{'skipped (smem)':>16}")
    for name, c in summary:
        print(f"{name:<18}{c['passed']:>8}{c['failed']:>8}{c['skipped_smem']:>16}")
    if args.save:
        print(f"rows in {out}")
    return 1 if any(c["failed"] for _, c in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
