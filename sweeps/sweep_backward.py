"""Sweep the Triton backward's tile, warp and stage space at the harness shapes (issue 7).

    python sweeps/sweep_backward.py                          # 54 configurations x 8 shapes, resumable
    python sweeps/sweep_backward.py --causal 1 --part c      # one mask, into a part CSV (side by side on 2 GPUs)
    python sweeps/sweep_backward.py --merge                  # fold the parts into the CSV
    python sweeps/sweep_backward.py --dq-mode atomic         # the same space with dQ accumulated by atomics
    python sweeps/sweep_backward.py --pick                   # the best geometric mean becomes this GPU's default

Rows go to results/<gpu>/sweep_bwd/flash_backward_triton.csv (see fa2lab/backward_sweep.py for
the space, the checks and the timing). --pick writes the configuration with the best geometric
mean of (shape's best / its time) over the 8 shapes, or (--criterion total, the default) the least
total time over them, among those correct at all of them, into
fa2triton/backward_configs.json under this GPU's architecture, which the backward then uses
for 16-bit inputs with D <= 64 (the sweep's dtype and head dimension).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402
from fa2triton.flash_backward_triton import DQ_MODES  # noqa: E402

NAME = "flash_backward_triton"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="*", default=list(shapes.SEQ_LENS), help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--dq-mode", choices=DQ_MODES, default="separate",
                    help="dQ in its own kernel (separate) or accumulated with atomics in the dK/dV kernel")
    ap.add_argument("--limit-minutes", type=float, default=None, help="stop measuring after this long (rerun to resume)")
    ap.add_argument("--max-configs", type=int, default=None, help="only the first K configurations (smoke test)")
    ap.add_argument("--configs", nargs="*", default=None, metavar="DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES",
                    help="sweep these configurations instead of the mirrored space (e.g. dQ tiles chosen apart from "
                         "dK/dV's); resumable like the space, and --pick ranks them with the rest")
    ap.add_argument("--stages", type=int, nargs="*", default=None,
                    help="num_stages values to sweep (default: fa2lab.backward_sweep.STAGES); rows of other stage "
                         "counts already in the CSV stay, and --pick ranks them all")
    ap.add_argument("--part", default=None, help="write to sweep_bwd/parts/<name>.<PART>.csv (side by side)")
    ap.add_argument("--merge", action="store_true", help="only fold the part CSVs into the CSV, then exit")
    ap.add_argument("--pick", action="store_true",
                    help="write the best configuration (geometric mean over the shapes) as this GPU's default, then exit")
    ap.add_argument("--partial", action="store_true", help="with --pick: accept a sweep that lacks rows")
    ap.add_argument("--criterion", choices=("total", "geomean"), default="total",
                    help="with --pick: least total time over the shapes (default: the long shapes decide, which "
                         "host noise at N = 512 cannot sway), or best geometric mean of each shape's best / its time")
    ap.add_argument("--min-n", type=int, default=2048,
                    help="with --pick: score only shapes with N >= this (default 2048: below it the sweep's do_bench "
                         "of a direct call measures the host); the pick must still be correct at every shape")
    args = ap.parse_args(argv)
    if args.pick:
        return pick(args)

    from fa2lab.results import RESULTS, gpu_dir
    from fa2lab.forward_sweep import merge_into, part_path
    from fa2lab.backward_sweep import KEY_FIELDS, STAGES, backward_configs, run_backward_sweep
    from fa2triton.backward_config import BackwardConfig

    if args.merge:   # no GPU needed: every GPU folder whose parts are waiting
        folders = sorted(p.parent.parent for p in RESULTS.glob(f"*/sweep_bwd/parts/{NAME}.*.csv"))
        for folder in dict.fromkeys(folders):
            print(merge_into(folder / f"{NAME}.csv", KEY_FIELDS))
        if not folders:
            print(f"no part CSVs under {RESULTS}/<gpu>/sweep_bwd/parts/: nothing to merge")
        return 0
    try:   # before the GPU check, so a bad option is named on any machine
        configs = ([BackwardConfig.parse(c) for c in args.configs] if args.configs else
                   backward_configs(tuple(args.stages) if args.stages else STAGES))
        for cfg in configs:
            cfg.validate()
    except ValueError as e:
        print(f"{'--configs' if args.configs else '--stages'}: {e}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("the backward sweep needs a CUDA GPU; the committed results/*/sweep_bwd/*.csv can be read without one",
              file=sys.stderr)
        return 2
    merged = gpu_dir() / "sweep_bwd" / f"{NAME}.csv"
    out = part_path(merged, args.part) if args.part else merged
    configs = configs[: args.max_configs] if args.max_configs else configs
    masks = shapes.masks_from(args.causal)
    print(f"sweeping the backward ({args.dq_mode} dQ): {len(configs)} configurations x {len(args.N) * len(masks)} "
          f"shapes -> {out}")
    try:
        counts = run_backward_sweep(args.N, masks, out, limit_minutes=args.limit_minutes, dq_mode=args.dq_mode,
                                    configs=configs, also_done=(merged,) if out != merged else ())
    except KeyboardInterrupt:
        print(f"\ninterrupted: every measured row is already in {out}; rerun the same command to resume")
        return 130
    print("summary:", counts)
    return 0


def pick(args) -> int:
    """--pick: read the merged sweep (no GPU needed), write the pick beside the backward module."""
    import json

    import pandas as pd

    from fa2lab.provenance import git_commit, now
    from fa2lab.results import RESULTS, append_rows
    from fa2lab.backward_sweep import CONFIG_FIELDS, backward_configs, pick_single
    from fa2lab.paths import REPO
    from fa2triton import backward_config as bwd

    csvs = sorted(RESULTS.glob(f"*/sweep_bwd/{NAME}.csv"))
    if not csvs:
        print(f"no backward sweep under {RESULTS}/<gpu>/sweep_bwd/: run the sweep first", file=sys.stderr)
        return 2
    status, picked_at = 0, now()
    for csv_path in csvs:
        df = pd.read_csv(csv_path)
        last = df.iloc[-1]
        arch = str(last.get("arch", "sm_90")).rstrip("a")
        try:
            cfg, score, per_shape = pick_single(df, args.dq_mode, None if args.partial else len(backward_configs()),
                                                args.criterion, args.min_n)
        except ValueError as e:
            print(f"{csv_path}: {e} (--partial picks anyway)", file=sys.stderr)
            status = 1
            continue
        table = json.loads(bwd.PICKS_FILE.read_text()) if bwd.PICKS_FILE.exists() else {"arches": {}}
        table["module"] = NAME
        table["arches"][arch] = {
            "config": list(cfg), "fields": list(CONFIG_FIELDS), "dq_mode": args.dq_mode,
            "applies_to": "16-bit inputs with D <= 64 (the sweep's bf16, D = 64)",
            "criterion": args.criterion, "scored_min_n": args.min_n, "geomean_of_best": round(score, 4),
            "total_ms": round(sum(ms for ms, _ in per_shape.values()), 4), "shapes": len(per_shape),
            "gpu": str(last.get("gpu", "")),
            "source": str(csv_path.relative_to(REPO)) if csv_path.is_relative_to(REPO) else str(csv_path),
            "sweep_commit": str(last.get("git_commit", "")), "partial": bool(args.partial)}
        bwd.PICKS_FILE.write_text(json.dumps(table, indent=2) + "\n")
        picks_csv = csv_path.with_name(f"{NAME}.picks.csv")
        append_rows(picks_csv, [{"arch": arch, "config": ",".join(map(str, cfg)), "dq_mode": args.dq_mode,
                                 "criterion": args.criterion, "scored_min_n": args.min_n,
                                 "geomean_of_best": score, "N": n, "causal": c, "ms": ms, "best_ms": best,
                                 "source_csv": str(csv_path.name), "sweep_commit": str(last.get("git_commit", "")),
                                 "gpu": str(last.get("gpu", "")), "date": picked_at, "git_commit": git_commit()}
                                for (n, c), (ms, best) in sorted(per_shape.items())])
        print(f"{csv_path}: {arch} picks {bwd.BackwardConfig(*cfg)} (geometric mean {score:.3f} of each shape's "
              f"best) -> {bwd.PICKS_FILE}, {picks_csv}")
        for (n, c), (ms, best) in sorted(per_shape.items()):
            print(f"  N={n} causal={c}: {ms:.4f} ms, best {best:.4f} ms ({best / ms:.3f})")
    return status


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
