"""Experiment items: what a round of work items costs v7's persistent Gluon kernel: equal work, 1-8 rounds per SM.

    python experiments/items.py [--N N ...] [--causal 0|1|2] [--rounds R] [--reps R] [--only LABEL ...]

Rows: results/<gpu>/experiments/items.csv (`invoke experiment items`). GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, inputs, kernel_ms, spin_cycles, spread  # noqa: E402


# items: (heads, N) with the harness's work (heads * N^2 = 32 * 2048^2) in 128-row items: 1, 2, 4 and 8 rounds of items
# per SM on 132 SMs, each round 64 key tiles of 128 in all
ITEM_SHAPES = ((2, 8192), (8, 4096), (32, 2048), (128, 1024))

# v7's Gluon candidate at N = 1024 and 2048 (fa2triton.gluon.gluon_configs.V7_CANDIDATES' first: the consumers take
# turns at their exponentials, /et1, and run one inlined copy of their code, /sc2)
ITEM_CONFIG = "ws2x64x128/3s/preg/persist/ua/et1/sc2"

def items(args, save):
    """What a work item costs beside its key tiles (issue 6: v7 level with cuDNN at N = 1024 and 2048 non-causal).
    The shapes of ITEM_SHAPES hold the same work, spread over 1, 2, 4 or 8 rounds of 128-row items per SM (at 132 SMs)
    of 64, 32, 16 or 8 key tiles: the kernel's time against the rounds, for v7's persistent Gluon kernel (ITEM_CONFIG,
    pinned, or the 128-row configurations --only names) and SDPA, is a line whose slope is what each round of items
    costs beyond its products and softmax. Kernel durations from torch.profiler after a spin, after do_bench's flush
    (whose inputs, twice as many rows per round added, come cold: the slope then holds what a round's cold inputs cost)
    and in graph replay (experiments.common.kernel_ms), the medians of --rounds rounds of --reps calls."""
    import math

    import numpy as np
    import torch
    import torch.nn.functional as F

    from fa2triton.gpu import facts
    from fa2lab.timers import flush_buffer
    from fa2triton.gluon import gluon_forward_hopper as G

    configs = G.configs_named(args.only or [ITEM_CONFIG])
    cache = flush_buffer()
    sms = facts(torch.cuda.current_device()).sm_count
    spin = spin_cycles()
    D = shapes.HEAD_DIM
    fits = {}
    for heads, N in ITEM_SHAPES:
        q, k, v = inputs(N, D=D, heads=heads)
        q4, k4, v4 = (t.view(1, heads, N, D) for t in (q, k, v))
        calls = {}
        for cfg in configs:
            launch = G.forward(q, k, v, False, cfg)[2]
            calls[cfg.label] = lambda launch=launch: launch(q, k, v)
        calls["sdpa"] = lambda: F.scaled_dot_product_attention(q4, k4, v4)
        key_tiles = math.ceil(N / 128)   # per item, as each item has 128 rows
        tiles = heads * key_tiles
        rounds = math.ceil(tiles / sms)
        rows = []
        for name, fn in calls.items():
            per = {p: [] for p in ("spin", "flush", "graph")}
            for _ in range(args.rounds):
                for p, ms in kernel_ms(fn, {"spin": lambda: torch.cuda._sleep(spin), "flush": cache.zero_},
                                        args.reps).items():
                    per[p].append(ms)
            for p, ts in per.items():
                med, lo, hi = spread(ts)
                rows.append({"variant": name, "heads": heads, "N": N, "D": D, "causal": 0, "items": tiles,
                             "rounds_per_sm": rounds, "key_tiles_per_item": key_tiles,
                             "protocol": p, "ms": med, "ms_min": lo, "ms_max": hi, "rounds": args.rounds,
                             "reps": args.reps, "timer": "kernel"})
                fits.setdefault((name, p), []).append((rounds, med * 1e3))
        print(f"heads={heads} N={N} ({tiles} items, {rounds} per SM): " + ", ".join(
            f"{r['variant']} {r['protocol']} {r['ms'] * 1e3:.1f} us" for r in rows), flush=True)
        save("items", rows)
    for (name, p), pts in fits.items():   # least squares: us = a + b * rounds
        b, a = np.polyfit(*zip(*pts), 1)
        print(f"{name} ({p}): {b:.2f} us per round of items, {a:.1f} us at none")


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + items.__doc__, Ns=[0], causal=0)
    ap.add_argument("--reps", type=int, default=50, help="calls per protocol and round")
    ap.add_argument("--only", nargs="*", default=None, help="configuration labels to run (default: ITEM_CONFIG)")
    return run("items", items, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
