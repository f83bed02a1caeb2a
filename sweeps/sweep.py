"""Sweep every tile / warp / stage configuration of one version's kernel body.

    python sweeps/sweep.py --kernel v4_exp2                    # all 625 x 8 shapes, resumable
    python sweeps/sweep.py --kernel v4_exp2 --causal 0 --limit-minutes 8
    python sweeps/sweep.py --kernel v7_hopper                  # an autotuned body, one pinned candidate at a time

Results are appended row by row to results/<gpu>/sweep/<version>.csv; rerunning the
same command continues where it stopped (--fresh starts a new file).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402
from fa2lab.forward_sweep import ALL_CONFIGS, part_path, run_sweep  # noqa: E402
from fa2triton.versions import get  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="v4_exp2", help="version whose kernel body is swept (v0_baseline, v4_exp2; "
                    "an autotuned one such as v7_hopper is pinned to each configuration in turn)")
    ap.add_argument("--N", type=int, nargs="*", default=list(shapes.SEQ_LENS), help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--limit-minutes", type=float, default=None, help="stop measuring after this long")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="compile workers")
    ap.add_argument("--max-configs", type=int, default=None, help="only the first K configurations (smoke test)")
    ap.add_argument("--fresh", action="store_true", help="move an existing CSV aside and start again")
    ap.add_argument("--graph-max-n", type=int, default=0,
                    help="also record CUDA-graph replay time (graph_ms) at N up to this (0: never)")
    ap.add_argument("--out", type=Path, default=None, help="CSV path (default results/<gpu>/sweep/<version>.csv)")
    ap.add_argument("--part", default=None,
                    help="write to results/<gpu>/sweep/parts/<version>.<PART>.csv instead, skipping what the "
                         "merged CSV already holds (for sweeps run side by side on several GPUs)")
    ap.add_argument("--merge", action="store_true",
                    help="only merge results/<gpu>/sweep/parts/<version>.*.csv into the version's CSV, then exit")
    args = ap.parse_args(argv)
    if args.merge:
        from fa2lab.results import gpu_dir
        from fa2lab.forward_sweep import merge_into

        print(merge_into(gpu_dir() / "sweep" / f"{get(args.kernel).name}.csv"))
        return 0

    import torch

    if not torch.cuda.is_available():
        print("the sweep needs a CUDA GPU; the committed results/*/sweep/*.csv can be plotted without one "
              "(invoke figures)", file=sys.stderr)
        return 2
    from fa2lab.results import gpu_dir

    version = get(args.kernel)
    merged = gpu_dir() / "sweep" / f"{version.name}.csv"
    out = part_path(merged, args.part) if args.part else (args.out or merged)
    if args.fresh and out.exists():
        aside = out.with_suffix(".csv.bak")
        out.rename(aside)
        print(f"moved the old sweep to {aside}")
    masks = shapes.masks_from(args.causal)
    configs = ALL_CONFIGS[: args.max_configs] if args.max_configs else ALL_CONFIGS
    print(f"sweeping {version.name}: {len(configs)} configurations x {len(args.N) * len(masks)} shapes -> {out}")
    try:
        counts = run_sweep(version.name, args.N, masks, out, workers=args.workers,
                           limit_minutes=args.limit_minutes, configs=configs, graph_max_n=args.graph_max_n,
                           also_done=(merged,) if out != merged else ())
    except KeyboardInterrupt:
        print(f"\ninterrupted: every measured row is already in {out}; rerun the same command to resume")
        return 130
    print("summary:", counts)
    if counts.get("interrupted_by_limit"):
        print("stopped at --limit-minutes; rerun the same command to continue")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
