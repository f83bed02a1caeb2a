"""Experiment pcast: where P is rounded: time at N = 4096 and error against float64 (v6's P_CAST).

    python experiments/pcast.py [--N N ...] [--causal 0|1|2] [--rounds R] [--seeds S]

Rows: results/<gpu>/experiments/pcast.csv (`invoke experiment pcast`). GPU only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, V6, inputs, interleaved  # noqa: E402


def pcast(args, save):
    """The article's P-cast table: three places for the rounding of P, time and mean absolute error."""
    import torch

    from fa2triton.reference import attention
    from fa2lab.switches import load

    FA = load(V6).FlashAttentionTriton
    causal = bool(args.causal)
    q, k, v = inputs(args.N)

    def variant(p):
        def call():
            FA.P_CAST = p
            return FA.apply(q, k, v, causal)
        return call

    names = {0: "sum fp32 P, cast, multiply", 1: "cast first, sum the bf16 P", 2: "no cast: fp32 P, V upcast, TF32"}
    timed = interleaved({p: variant(p) for p in names}, args.rounds)
    errors = {p: [] for p in names}
    floor = []
    for seed in range(args.seeds):
        qs, ks, vs = inputs(args.N, seed + 1)
        exact = torch.cat([attention(qs[i:i + 1], ks[i:i + 1], vs[i:i + 1], causal)[0] for i in range(qs.shape[0])])
        floor.append((exact.to(torch.bfloat16).double() - exact).abs().mean().item())
        for p in names:
            FA.P_CAST = p
            errors[p].append((FA.apply(qs, ks, vs, causal).double() - exact).abs().mean().item())
    FA.P_CAST = 0
    flop = shapes.flops(shapes.BATCH, shapes.HEADS, args.N, shapes.HEAD_DIM, causal)
    rows = [{"variant": names[p], "p_cast": p, "N": args.N, "causal": int(causal), "ms": t[0], "ms_min": t[1],
             "ms_max": t[2], "tflops": shapes.tflops(flop, t[0]), "mae_vs_float64": statistics.mean(errors[p]),
             "bf16_rounding_floor": statistics.mean(floor), "seeds": args.seeds, "rounds": args.rounds}
            for p, t in timed.items()]
    for r in rows:
        print(f"{r['variant']:<34} {r['ms']:.3f} ms  {r['tflops']:.1f} TFLOP/s  MAE {r['mae_vs_float64']:.3e}")
    print(f"floor (exact output rounded to bf16): {rows[0]['bf16_rounding_floor']:.3e}")
    save("pcast", rows)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + pcast.__doc__, Ns=[4096], causal=0)
    ap.add_argument("--seeds", type=int, default=3, help="inputs for the error")
    return run("pcast", pcast, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
