"""Experiment dobench: do_bench's spread at small N over fresh processes, v7 and SDPA in alternating order.

    python experiments/dobench.py [--N N ...] [--causal 0|1|2] [--rounds R] [--procs P]

Rows: results/<gpu>/experiments/dobench.csv (`invoke experiment dobench`). GPU only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, fresh_processes, inputs, masks  # noqa: E402


def dobench(args, save):
    """Where the harness's spread at N = 512 comes from (issue 6: v7 non-causal 58-99% of cuDNN by do_bench over five
    fresh processes in a 5-run harness protocol, results/nvidia-h200/bench/v7_hopper.csv, while its graph replay stayed
    at 8.7 us against cuDNN's 9.8 in all five). In each of --procs fresh processes (this script again, --worker): the
    GPU time of do_bench's flush (256 MB zeroed, events around it), each call's host time (back to back,
    fa2lab.timers.host_us_per_call), and --rounds do_bench rounds of v7 and SDPA, the one timed first alternating, with
    each round's median, 10th and 90th percentile. A process-wide cause (host, clocks, memory placement) moves both
    calls' rounds in that process; the order shows in `position`. Every second process times its rounds as the harness
    does, inside its NVML clock sampler (a thread polling clocks, power and temperature every 20 ms: column `sampler`),
    the others without it."""
    if not args.worker:
        fresh_processes(__file__, args, lambda i: ["--sampler"] if i % 2 else [])
        return
    import contextlib
    import os

    import torch.nn.functional as F
    import triton.testing

    from fa2lab.provenance import ClockSampler
    from fa2lab.timers import event_times, flush_buffer, host_us_per_call
    from fa2lab.switches import load

    v7 = load("v7_hopper")
    FA = v7.FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    cache = flush_buffer()
    flush_us = 1e3 * statistics.median(event_times(cache.zero_, 20))   # do_bench's flush alone, GPU time
    for causal in masks(args):
        for N in args.Ns:
            q, k, v = inputs(N)
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            calls = {"v7": lambda: FA.apply(q, k, v, causal),
                     "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
            calls["v7"]()
            path = f"{v7.last_path()}:{v7.last_config()}"
            rows = []
            for r in range(args.rounds):
                order = list(calls) if r % 2 == 0 else list(calls)[::-1]
                for position, name in enumerate(order):
                    with ClockSampler() if args.sampler else contextlib.nullcontext():
                        times = sorted(triton.testing.do_bench(calls[name], return_mode="all"))
                    rows.append({"variant": name, "N": N, "causal": int(causal), "pid": os.getpid(), "round": r,
                                 "sampler": int(args.sampler), "position": position, "ms": statistics.median(times),
                                 "ms_p10": times[len(times) // 10], "ms_p90": times[(9 * len(times)) // 10],
                                 "calls": len(times), "path": path if name == "v7" else ""})
            host = {name: host_us_per_call(fn) for name, fn in calls.items()}
            for row in rows:
                row.update(host_us=host[row["variant"]], flush_us=flush_us)
            save("dobench", rows)
            where = f"pid {os.getpid()}{' (sampler)' if args.sampler else ''} N={N} causal={int(causal)}"
            print(f"{where} flush {flush_us:.1f} us; "
                  + "; ".join(f"{n} host {host[n]:.1f} us, do_bench " + " ".join(
                      f"{1e3 * row['ms']:.1f}{'*' if row['position'] == 0 else ''}" for row in rows
                      if row["variant"] == n) + " us" for n in calls) + " (* timed first in its round)", flush=True)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + dobench.__doc__, Ns=[512], causal=0)
    ap.add_argument("--procs", type=int, default=6, help="fresh processes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)   # one of its processes
    ap.add_argument("--sampler", action="store_true", help=argparse.SUPPRESS)  # rounds inside ClockSampler
    return run("dobench", dobench, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
