"""Experiment launch-order: v6's launch orders with the same configurations pinned.

    python experiments/launch_order.py [--N N ...] [--causal 0|1|2] [--rounds R] [--configs C]

Rows: results/<gpu>/experiments/launch_order.csv (`invoke experiment launch-order`). GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2triton.budget import Config  # noqa: E402
from experiments.common import parser, run, V6, inputs, interleaved, masks  # noqa: E402


def launch_order(args, save):
    """v6's three launch orders, each configuration pinned so only the order changes."""
    import triton

    from fa2triton.interpret import autotuner_of, only_config
    from fa2lab.switches import load

    module = load(V6)
    FA, tuner = module.FlashAttentionTriton, autotuner_of(module)
    rows = []
    for causal in masks(args):
        for N in args.Ns:
            q, k, v = inputs(N)
            for cfg in tuner.configs[: args.configs]:
                one = triton.Config(dict(cfg.kwargs), num_warps=cfg.num_warps, num_stages=cfg.num_stages)

                def order(o):
                    def call():
                        FA.LAUNCH_ORDER = o
                        return FA.apply(q, k, v, causal)
                    return call
                with only_config(tuner, one):
                    FA.launches.entries.clear()   # a cached launch would keep the previous configuration
                    timed = interleaved({o: order(o) for o in module.LAUNCH_ORDERS}, args.rounds)
                FA.launches.entries.clear()
                FA.LAUNCH_ORDER = "longest_first"
                key = Config.of_triton(cfg).key
                base = timed["forward"][0]
                for o, t in timed.items():
                    rows.append({"order": o, "config": key, "N": N, "causal": int(causal), "ms": t[0], "ms_min": t[1],
                                 "ms_max": t[2], "speedup_vs_forward": base / t[0], "rounds": args.rounds})
                print(f"N={N} causal={int(causal)} {key}: " + ", ".join(
                    f"{o} {t[0]:.3f} ms ({base / t[0]:.3f}x)" for o, t in timed.items()), flush=True)
    save("launch_order", rows)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + launch_order.__doc__, Ns=[2048, 4096], causal=1)
    ap.add_argument("--configs", type=int, default=3, help="how many of v6's candidates")
    return run("launch-order", launch_order, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
