"""Experiment timing: small N: the harness for v5, v6, v7 (do_bench against CUDA-graph replay, host columns).

    python experiments/timing.py [--N N ...] [--causal 0|1|2] [--rounds R]

Rows: results/<gpu>/experiments/timing.csv (`invoke experiment timing`). GPU only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from experiments.common import parser, run, V6  # noqa: E402


def timing(args, save):
    """The harness at small N for v5, v6, v7 (and SDPA in the same runs), with graph and host columns."""
    from fa2lab.protocol import HARNESS, version_env
    from fa2lab.results import gpu_dir
    from fa2triton.versions import get

    out = gpu_dir() / "experiments" / "timing.csv"
    for name in ("v5_final", V6, "v7_hopper"):   # the issue names v5, v7 and SDPA; v6 is v7's fallback
        cmd = [sys.executable, str(HARNESS), "--N", *map(str, args.Ns), "--out", str(out)]
        subprocess.run(cmd, env=version_env(get(name), FA2_RUN_ID=f"experiment-timing/{name}"), check=True)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + timing.__doc__, Ns=[512, 1024], causal=2)
    return run("timing", timing, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
