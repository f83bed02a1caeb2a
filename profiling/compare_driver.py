"""Several kernel versions next to SDPA in one process, so one timeline or one Nsight Compute
report holds them side by side (the article's compare_driver.py).

    python profiling/compare_driver.py --kernels v0_baseline,v1_tiles,v5_final --N 4096 --causal 0
        [--iters 3] [--sdpa 1] [--config Q,K,WARPS,STAGES] [--warmup-s 1.0] [--fresh-cache 0|1] [--dry-run]

Same inputs for every version; each iteration runs every version, then SDPA, each in an NVTX
range "<version> N=<N> causal=<0|1>" / "sdpa N=<N> causal=<0|1>", between cudaProfilerStart
and cudaProfilerStop, after a warm-up that compiles and autotunes everything. --config, if
given, is pinned for every version listed. Needs a CUDA GPU, except with --dry-run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling import drivers  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="all", help="comma-separated versions, or 'all'")
    drivers.add_common_args(ap)
    args = ap.parse_args(argv)
    from fa2triton.versions import resolve

    names = [v.name for v in resolve(args.kernels)]
    return drivers.run("compare_driver.py", names, args)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
