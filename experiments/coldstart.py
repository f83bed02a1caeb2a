"""Experiment coldstart: what do_bench's flush costs v7 and SDPA: cold inputs or cold kernel code.

    python experiments/coldstart.py [--N N ...] [--causal 0|1|2] [--rounds R] [--reps R]

Rows: results/<gpu>/experiments/coldstart.csv (`invoke experiment coldstart`). GPU only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, forced, inputs, kernel_ms, masks, spin_cycles, spread  # noqa: E402


COLDSTART_PROTOCOLS = {
    "spin": "a spin kernel only (nothing evicted): the warm time, host queued ahead",
    "flush": "do_bench's 256 MB flush: inputs and kernel code cold in L2",
    "flush_data": "the flush, then the inputs read (Q, K, V summed): the data warm, the code cold",
    "flush_code": "the flush, then the same call on other inputs of the same shape: the code warm, the data cold",
}

def coldstart(args, save):
    """Why a kernel loses more than another to do_bench's flush (issue 6: v7 non-causal at N = 1024 and
    2048 is ahead of cuDNN by graph replay and behind it by do_bench). Each call is timed alone between
    two events after one of COLDSTART_PROTOCOLS; the calls and protocols interleaved round by round,
    per round the median of --reps calls, and the rounds' median with their min and max (rows with
    timer = "events"). Then the kernels' own GPU durations from torch.profiler, after the spin, after
    the flush and under graph replay (timer = "kernel"): what is left of a gap once launch latency and
    the events are taken out."""
    import torch
    import torch.nn.functional as F

    from fa2lab.timers import flush_buffer, prepared_times
    from fa2lab.switches import load

    v7 = load("v7_hopper")
    FA = v7.FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    cache = flush_buffer()
    for causal in masks(args):
        for N in args.Ns:
            q, k, v = inputs(N)
            q2, k2, v2 = inputs(N, seed=1)
            as4 = (lambda *ts: [t.view(B, H, N, D) for t in ts])

            def calls_on(q, k, v):
                q4, k4, v4 = as4(q, k, v)
                return {"v7": lambda: FA.apply(q, k, v, causal),
                        "v7_tl": lambda: forced(FA, "tma", lambda: FA.apply(q, k, v, causal)),
                        "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}

            calls, others = calls_on(q, k, v), calls_on(q2, k2, v2)
            spin = spin_cycles()

            def prepare(name, protocol):
                def run():
                    if protocol == "spin":
                        torch.cuda._sleep(spin)
                        return
                    cache.zero_()
                    if protocol == "flush_data":
                        for t in (q, k, v):
                            t.sum(dtype=torch.float32)
                    elif protocol == "flush_code":
                        others[name]()
                return run

            times = {(n, p): [] for n in calls for p in COLDSTART_PROTOCOLS}
            for _ in range(args.rounds):
                for (n, p), ts in times.items():
                    ts.append(statistics.median(prepared_times(calls[n], prepare(n, p), args.reps)))
            paths = {}
            for n in ("v7", "v7_tl"):   # the path and configuration each v7 call ran
                calls[n]()
                paths[n] = f"{v7.last_path()}:{v7.last_config()}"
            rows = []
            for (n, p), ts in times.items():
                med, lo, hi = spread(ts)
                rows.append({"variant": n, "N": N, "causal": int(causal), "protocol": p, "ms": med, "ms_min": lo,
                             "ms_max": hi, "rounds": args.rounds, "reps": args.reps, "path": paths.get(n, ""),
                             "timer": "events"})
            save("coldstart", rows)
            kernel_rows = []
            for n in calls:   # the kernels' own GPU durations (no events, no launch latency), and under graph replay
                for p, ms in kernel_ms(calls[n], {p: prepare(n, p) for p in ("spin", "flush")}, args.reps).items():
                    kernel_rows.append({"variant": n, "N": N, "causal": int(causal), "protocol": p, "ms": ms,
                                        "rounds": 1, "reps": args.reps, "path": paths.get(n, ""), "timer": "kernel"})
            if kernel_rows:
                save("coldstart", kernel_rows)
            for n in calls:
                ms = {(r["timer"], r["protocol"]): r["ms"] * 1e3 for r in rows + kernel_rows if r["variant"] == n}
                print(f"N={N} causal={int(causal)} {n:6s} " + ", ".join(
                    f"{p} {ms['events', p]:.1f} us (+{ms['events', p] - ms['events', 'spin']:.1f})"
                    for p in COLDSTART_PROTOCOLS) + "; kernels alone: " + ", ".join(
                    f"{p} {v:.1f} us" for (timer, p), v in ms.items() if timer == "kernel"), flush=True)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + coldstart.__doc__, Ns=list(shapes.SEQ_LENS), causal=0)
    ap.add_argument("--reps", type=int, default=50, help="calls per protocol and round")
    return run("coldstart", coldstart, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
