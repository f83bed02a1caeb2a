"""The article's profile driver: one kernel version next to SDPA, inside a captured region.

    python profiling/profile_driver.py --kernel v0_baseline --N 4096 --causal 0 [--iters 3] [--sdpa 1]
        [--config Q,K,WARPS,STAGES] [--warmup-s 1.0] [--fresh-cache 0|1] [--dry-run]

(`python profiling/profile_driver.py fa2triton/kernels/v0_baseline ...`, the article's form, works too.)

Loads the version with fa2triton.versions.load, compiles (and autotunes) it and SDPA outside
the captured region, keeps the GPU busy for about a second so its clocks ramp up, then
runs `--iters` rounds of [the version, SDPA] between cudaProfilerStart and
cudaProfilerStop, each call in an NVTX range named "<version> N=<N> causal=<0|1>" or
"sdpa N=<N> causal=<0|1>". Profile it with (see --dry-run for the exact lines):

    nsys profile --trace=cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop -o OUT python ...
    ncu --set full --import-source yes --profile-from-start off -o OUT python ... --iters 1 --sdpa 0

Needs a CUDA GPU, except with --dry-run, which prints the plan and exits without CUDA.
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
    ap.add_argument("version", nargs="?", help="a version name or its folder (fa2triton/kernels/v0_baseline)")
    ap.add_argument("--kernel", default="", help="a version name (same as the positional argument)")
    drivers.add_common_args(ap)
    args = ap.parse_args(argv)
    chosen = args.kernel or args.version
    if not chosen:
        ap.error("name a version: --kernel v0_baseline (or fa2triton/kernels/v0_baseline)")
    return drivers.run("profile_driver.py", [drivers.version_name(chosen)], args)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
