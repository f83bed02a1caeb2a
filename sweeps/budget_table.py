"""The shared-memory budget table (Round 1) for a list of configurations on this GPU.

For each configuration: the formula's bytes, what the compiler allocated
(compiled.metadata.shared), programs per SM by shared memory and by registers,
registers and spills, and why the formula and the compiler differ where they do.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2triton import budget  # noqa: E402
from fa2triton.budget import Config  # noqa: E402

# The configurations of the article's budget table.
ARTICLE_ROWS = "16,16,4,3;64,32,4,3;64,32,4,5;128,64,8,4;128,128,8,3;128,128,8,4;256,64,16,5;64,256,4,2"
DTYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2), "fp32": ("float32", 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="v1_tiles")
    ap.add_argument("--configs", default=ARTICLE_ROWS, help="semicolon-separated Q,K,WARPS,STAGES")
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--save", action="store_true", help="append the rows to results/<gpu>/budget/<kernel>.csv")
    args = ap.parse_args(argv)

    from fa2triton.gpu import facts
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir
    from fa2lab.forward_sweep import compile_one, occupancy_columns

    f = facts()
    dtype, elem = DTYPES[args.dtype]
    print(f"{f.name} ({f.arch}): {f.smem_per_block} B shared per block, {f.smem_per_sm} B per SM, "
          f"{f.regs_per_sm} registers per SM; {args.dtype}, D = {args.D}")
    print(f"{'config':<22}{'formula':>9}{'predicted':>10}{'compiled':>10}{'prog/SM smem':>13}{'regs':>6}{'spills':>7}"
          f"{'prog/SM regs':>13}  difference")
    rows = []
    for text in args.configs.split(";"):
        cfg = Config.parse(text)
        info = compile_one(args.kernel, cfg, bool(args.causal), 4096, args.D, dtype)
        cols = occupancy_columns(cfg, info, args.D, elem)
        why = budget.explain(cfg, info.shared, args.D, elem, f.arch) if info.shared is not None else info.status
        if info.status != "ok":
            why = f"{info.status}: {why}"
        cols["shared_predicted"] = budget.predicted_shared_bytes(cfg, args.D, elem, f.arch)
        print(f"{str(cfg):<22}{cols['shared_formula']:>9}{cols['shared_predicted']:>10}{str(info.shared or '-'):>10}"
              f"{str(cols.get('progs_per_sm_smem', '-')):>13}{str(info.n_regs or '-'):>6}"
              f"{str(info.n_spills if info.n_spills is not None else '-'):>7}"
              f"{str(cols.get('progs_per_sm_regs', '-')):>13}  {why}")
        rows.append({"kernel": args.kernel, "config": cfg.key, "dtype": args.dtype, "D": args.D,
                     "causal": args.causal, "status": info.status, **cols, "explain": why, "date": now(),
                     **environment()})
    if args.save:
        out = append_rows(gpu_dir() / "budget" / f"{args.kernel}.csv", rows)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
