"""Experiment other-shapes: v7 against v6 and SDPA on shapes neither was tuned on (B, H, N, D = 128).

    python experiments/other_shapes.py [--N N ...] [--causal 0|1|2] [--rounds R]

Rows: results/<gpu>/experiments/other_shapes.csv (`invoke experiment other-shapes`). GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, V6, interleaved  # noqa: E402


# Shapes none of v6's or v7's configurations were picked on (the harness is B = 4, H = 8, D = 64,
# N = 512..4096): (B, H, N, D). A long sequence, many short ones, head dimension 128, a ragged length.
OTHER_SHAPES = ((1, 16, 8192, 64), (8, 16, 1024, 64), (2, 16, 2048, 128), (4, 8, 4096, 128), (16, 4, 777, 64))

def other_shapes(args, save):
    """v7 against v6 (and SDPA, same process) where neither was tuned: issue 6's 'not slower than v6'."""
    import torch
    import torch.nn.functional as F

    from fa2lab.switches import load

    v6, v7 = load(V6).FlashAttentionTriton, load("v7_hopper")
    rows = []
    for B, H, N, D in OTHER_SHAPES:
        for causal in (False, True) if args.causal == 2 else (bool(args.causal),):
            q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D).float()
            calls = {"v6_longest_first": lambda: v6.apply(q, k, v, causal),
                     "v7_hopper": lambda: v7.FlashAttentionTriton.apply(q, k, v, causal),
                     "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
            errs = {name: (calls[name]().float() - ref).abs().max().item() for name in ("v6_longest_first", "v7_hopper")}
            path, config = v7.last_path(), v7.last_config()
            timed = interleaved(calls, args.rounds)
            flop = shapes.flops(B, H, N, D, causal)
            for name, t in timed.items():
                rows.append({"who": name, "B": B, "H": H, "N": N, "D": D, "causal": int(causal), "ms": t[0],
                             "ms_min": t[1], "ms_max": t[2], "tflops": shapes.tflops(flop, t[0]),
                             "pct_of_sdpa": 100.0 * timed["sdpa"][0] / t[0],
                             "v7_over_v6": timed["v6_longest_first"][0] / timed["v7_hopper"][0],
                             "v7_path": path, "v7_config": config, "max_abs_err_vs_sdpa": errs.get(name, float("nan")),
                             "rounds": args.rounds})
            print(f"B={B} H={H} N={N} D={D} causal={int(causal)}: " + ", ".join(
                f"{n} {t[0]:.3f} ms" for n, t in timed.items())
                + f"; v7 {timed['v6_longest_first'][0] / timed['v7_hopper'][0]:.3f}x v6 (path {path})", flush=True)
    save("other_shapes", rows)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + other_shapes.__doc__, Ns=[0], causal=2)
    return run("other-shapes", other_shapes, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
