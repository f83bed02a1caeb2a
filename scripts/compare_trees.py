"""Two checkouts' v7 against each other on the GPU: a no-regression check for a refactor.

Each round runs one fresh process per tree, the trees alternating (A B, B A, A B, ...), and every process times
its own tree's v7 (fa2lab.versions.load("v7_hopper") from that tree, with that tree's fa2lab) and SDPA's default
backend (cuDNN on Hopper) on the same inputs, by do_bench with its L2 flush and by CUDA-graph replay. One row per
process and shape goes to results/<gpu>/experiments/compare_trees.csv, with provenance and the tree's label and
commit. `--summary` prints, per shape, the median over rounds of each round's ratio B / A (of ms, and of % of
cuDNN), with the min-max: within 1% is level.

    python scripts/compare_trees.py --tree before=/tmp/old --tree after=. --rounds 5
    python scripts/compare_trees.py --summary
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CSV_NAME = "compare_trees.csv"


def child(tree: Path, shapes: list[tuple[int, int, bool]]) -> None:
    """Time v7 of `tree` and SDPA at each (N, D, causal); print one JSON line per shape."""
    sys.path.insert(0, str(tree))
    import torch
    import torch.nn.functional as F

    from fa2lab import timing, versions

    FA = versions.load("v7_hopper")
    B, H = 4, 8
    for N, D, causal in shapes:
        g = torch.Generator(device="cuda").manual_seed(N + D + causal)
        q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))

        def ours():
            return FA.FlashAttentionTriton.apply(q, k, v, causal)

        def sdpa():
            return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

        err = (ours().float() - sdpa().view(B * H, N, D).float()).abs().max().item()
        row = dict(N=N, D=D, causal=int(causal), B=B, H=H, max_abs_err_vs_sdpa=err,
                   path=FA.last_path() or "", config=FA.last_config() or "")
        row["ms"], row["sdpa_ms"] = timing.bench_ms(ours), timing.bench_ms(sdpa)
        row["graph_ms"], row["sdpa_graph_ms"] = timing.bench_graph_ms(ours), timing.bench_graph_ms(sdpa)
        print("ROW " + json.dumps(row), flush=True)


def drive(trees: list[tuple[str, Path]], rounds: int, shapes: list[tuple[int, int, bool]], first: int = 1) -> int:
    sys.path.insert(0, str(REPO))
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir

    env = environment()
    out = gpu_dir() / "experiments" / CSV_NAME
    spec = ";".join(f"{n},{d},{int(c)}" for n, d, c in shapes)
    for r in range(first - 1, first - 1 + rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for label, tree in order:
            commit = os.environ.get(f"FA2_TREE_COMMIT_{label.upper()}", "")
            print(f"[round {r + 1}] {label} ({tree})", flush=True)
            proc = subprocess.run([sys.executable, __file__, "--child", str(tree), "--shapes", spec],
                                  capture_output=True, text=True, cwd=tree)
            rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]
            if proc.returncode != 0 or len(rows) != len(shapes):
                print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
                return 1
            for row in rows:
                row.update(round=r + 1, tree=label, tree_commit=commit, date=now(),
                           pct_of_sdpa=100.0 * row["sdpa_ms"] / row["ms"],
                           graph_pct_of_sdpa=100.0 * row["sdpa_graph_ms"] / row["graph_ms"])
                print(f"  N={row['N']:>5} D={row['D']:>3} causal={row['causal']} {row['ms'] * 1e3:8.2f} us "
                      f"{row['pct_of_sdpa']:6.1f}% of cuDNN  graph {row['graph_pct_of_sdpa']:6.1f}%  {row['path']}",
                      flush=True)
            append_rows(out, [dict(row, **env) for row in rows])
    return 0


def summary(path: Path, a: str, b: str) -> int:
    """Print figures.report.compare_trees's table (the report's page prints the same)."""
    sys.path.insert(0, str(REPO))
    from figures.report import compare_trees

    df = compare_trees.load(path)
    a, b = compare_trees.labels(df, a, b)
    print(f"{b} / {a}, medians of per-round ratios (min-max) over the complete rounds of {path.name}")
    print(compare_trees.table(compare_trees.ratios(df, a, b), b))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH", help="a checkout (two of them)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--first-round", type=int, default=1, help="number of the first round (to go on in a later call)")
    ap.add_argument("--N", default="512,1024,2048,4096")
    ap.add_argument("--D", default="64,128")
    ap.add_argument("--summary", action="store_true", help="print the ratios from the committed rows")
    ap.add_argument("--labels", default="before,after", help="with --summary: A,B (B / A is reported)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--shapes", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        shapes = [(int(n), int(d), c == "1") for n, d, c in (s.split(",") for s in args.shapes.split(";"))]
        child(Path(args.child), shapes)
        return 0
    if args.summary:
        sys.path.insert(0, str(REPO))
        from fa2lab.results import RESULTS

        a, b = args.labels.split(",")
        return summary(RESULTS / "nvidia-h200" / "experiments" / CSV_NAME, a, b)
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in args.tree]
    if len(trees) != 2:
        ap.error("give two --tree LABEL=PATH")
    shapes = [(int(n), int(d), c) for d in args.D.split(",") for c in (False, True) for n in args.N.split(",")]
    return drive(trees, args.rounds, shapes, args.first_round)


if __name__ == "__main__":
    sys.exit(main())
