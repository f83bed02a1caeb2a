"""Write the tuned versions' sm_XX configuration entries from a sweep CSV.

    python sweeps/pick_configs.py --kernel v0_baseline   # Round 1: v1 (and v3, v4) single, v2 per-shape
    python sweeps/pick_configs.py --kernel v4_exp2       # Round 5: v5's greedy 1% short list

The entries name the CSV they came from; a summary of what was picked goes to
results/<gpu>/sweep/<version>.picks.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import pick, shapes  # noqa: E402
from fa2lab.pick import write_entry  # noqa: E402
from fa2lab.provenance import git_commit, now  # noqa: E402
from fa2lab.forward_sweep import ALL_CONFIGS  # noqa: E402
from fa2lab.results import RESULTS, append_rows, read_csv  # noqa: E402
from fa2lab.paths import REPO  # noqa: E402
from fa2triton.versions import get  # noqa: E402

# Which tables each sweep feeds, and in which role.
TARGETS = {
    "v0_baseline": [("v1_tiles", "single"), ("v3_causal_skip", "single"), ("v4_exp2", "single"),
                    ("v2_autotune", "per_shape")],
    "v4_exp2": [("v5_final", "shortlist"), ("v6_longest_first", "shortlist")],
    "v7_hopper": [("v7_hopper", "shortlist")],   # its own body re-swept (issue 6); PIPELINE_QK by its rule
}


def find_csv(version: str, gpu: str | None) -> Path:
    if gpu:
        return RESULTS / gpu / "sweep" / f"{version}.csv"
    found = sorted(p for p in RESULTS.glob(f"*/sweep/{version}.csv") if "reference" not in p.parts)
    if len(found) != 1:
        raise SystemExit(f"found {len(found)} sweep CSVs for {version} under {RESULTS}; name one with --gpu")
    return found[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", required=True, choices=sorted(TARGETS))
    ap.add_argument("--gpu", default=None, help="results/<gpu> folder name")
    ap.add_argument("--within", type=float, default=0.01, help="short list: every shape within this of its best")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--partial", action="store_true",
                    help="pick even if the sweep does not yet hold every configuration at every harness shape")
    args = ap.parse_args(argv)

    path = find_csv(args.kernel, args.gpu)
    df = read_csv(path, required=("status", "ms", "tflops", "N", "causal", "q_tile", "k_tile", "num_warps",
                                  "num_stages", "gpu", "arch"))
    missing = pick.missing_rows(df)
    if missing and not args.partial:
        raise SystemExit(f"{path} lacks {missing} of the {len(ALL_CONFIGS) * len(shapes.harness_shapes())} "
                         "configuration x shape rows: rerun the sweep to resume it (or pass --partial)")
    ok = df[df["status"] == "ok"]
    gpu, arch = str(ok["gpu"].iloc[0]), str(ok["arch"].iloc[0])
    shapes_seen = sorted({(int(n), int(c)) for n, c in zip(ok["N"], ok["causal"])})
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    source = f"{rel} ({len(shapes_seen)} shapes; sweep commit {ok['git_commit'].iloc[0]})"

    single, geo = pick.single_winner(df)
    winners = pick.per_shape_winners(df)
    shortlist, worst = pick.greedy_shortlist(df, args.within)
    picked = {"single": [single], "per_shape": pick.dedupe([c for _, c, _ in winners]), "shortlist": shortlist}

    print(f"{path}: {len(df)} rows, {len(ok)} ok, {arch} ({gpu})")
    print(f"single winner: {single} (geometric mean {geo:.3f} of its best over {len(shapes_seen)} shapes)")
    for (N, causal), cfg, tf in winners:
        print(f"  best at N={N} {'causal' if causal else 'non-causal'}: {cfg} ({tf:.1f} TFLOP/s)")
    print(f"short list ({len(shortlist)}): {', '.join(map(str, shortlist))}; worst shape at {worst:.3f} of its best")

    summary = [{"sweep": args.kernel, "role": role, "rank": i, "config": c.key, "arch": arch, "gpu": gpu,
                "source_csv": str(rel), "date": now(), "git_commit": git_commit()}
               for role, cfgs in picked.items() for i, c in enumerate(cfgs)]
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    for target, role in TARGETS[args.kernel]:
        table = get(target).folder / "configs.json"
        write_entry(table, arch, picked[role], gpu=gpu, source=source, provisional=False,
                    note=f"{role} picked by sweeps/pick_configs.py from the {args.kernel} sweep")
        print(f"wrote {arch} entry of {table.relative_to(REPO)} ({role}: {len(picked[role])} configs)")
    append_rows(path.with_name(f"{args.kernel}.picks.csv"), summary)
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
