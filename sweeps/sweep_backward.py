"""Sweep the Triton backward's tile, warp and stage space at the harness shapes (issue 7).

    python sweeps/sweep_backward.py                          # 54 configurations x 8 shapes, resumable
    python sweeps/sweep_backward.py --causal 1 --part c      # one mask, into a part CSV (side by side on 2 GPUs)
    python sweeps/sweep_backward.py --merge                  # fold the parts into the CSV
    python sweeps/sweep_backward.py --dq-mode atomic         # the same space with dQ accumulated by atomics

Rows go to results/<gpu>/sweep_bwd/flash_backward_triton.csv (see fa2lab/sweep_backward.py for
the space, the checks and the timing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402

NAME = "flash_backward_triton"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="*", default=list(shapes.SEQ_LENS), help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--dq-mode", choices=["separate", "atomic"], default="separate",
                    help="dQ in its own kernel (separate) or accumulated with atomics in the dK/dV kernel")
    ap.add_argument("--limit-minutes", type=float, default=None, help="stop measuring after this long (rerun to resume)")
    ap.add_argument("--max-configs", type=int, default=None, help="only the first K configurations (smoke test)")
    ap.add_argument("--part", default=None, help="write to sweep_bwd/parts/<name>.<PART>.csv (side by side)")
    ap.add_argument("--merge", action="store_true", help="only fold the part CSVs into the CSV, then exit")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("the backward sweep needs a CUDA GPU; the committed results/*/sweep_bwd/*.csv can be read without one",
              file=sys.stderr)
        return 2
    from fa2lab.results import gpu_dir
    from fa2lab.sweep import merge_into, part_path
    from fa2lab.sweep_backward import KEY_FIELDS, backward_configs, run_backward_sweep
    from fa2lab.versions import load_shared

    merged = gpu_dir() / "sweep_bwd" / f"{NAME}.csv"
    if args.merge:
        print(merge_into(merged, KEY_FIELDS))
        return 0
    out = part_path(merged, args.part) if args.part else merged
    configs = backward_configs(load_shared(NAME))
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


if __name__ == "__main__":
    sys.exit(main())
