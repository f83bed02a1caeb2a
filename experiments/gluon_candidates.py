"""Experiment gluon: the Gluon forward's configurations, checked against float64, timed beside v7 and SDPA.

    python experiments/gluon_candidates.py [--N N ...] [--causal 0|1|2] [--rounds R] [--D 64|128] [--only LABEL ...]

Rows: results/<gpu>/experiments/gluon.csv and gluon_check.csv (`invoke experiment gluon`). GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, forced, inputs, interleaved, masks  # noqa: E402


# Ragged and non-square shapes every Gluon configuration must get right before it is timed:
# (heads, N_q, N_k, D); the last key tile is partial, queries outnumber keys and the reverse.
GLUON_CHECK_SHAPES = ((3, 1000, 1000, 64), (2, 333, 777, 64), (2, 777, 333, 64), (2, 130, 130, 64),
                      (2, 1000, 1000, 128), (2, 64, 200, 128),
                      (32, 1000, 1000, 64))   # more tiles than SMs: split_tail's whole tiles and split tail in one launch

def v7_gluon_runs(q, k, v, causal: bool = False) -> bool:
    """Whether v7's Gluon path can be forced on these inputs, printing why not when it cannot."""
    from fa2lab.switches import load

    why = load("v7_hopper").gluon_applies(q, k, v, causal, 0, "gluon")
    if why is not None:
        print(f"v7's Gluon path not timed: {why}")
    return why is None

def gluon(args, save):
    """The Gluon forward (fa2triton/gluon/gluon_forward_hopper.py), each configuration of its
    EXPERIMENT_CONFIGS: errors of O and L against float64 on ragged shapes (GLUON_CHECK_SHAPES) and at
    the harness shape, then do_bench and graph-replay times interleaved with v7's tl path (FORCE_PATH =
    "tma"), v7's own Gluon path (non-causal: FORCE_PATH = "gluon") and SDPA, and in rounds of their own the launch
    race's timing (queued_ms: the host queued ahead, the clock settled). The warp-specialized configurations are timed through
    their lean repeat (gluon_forward_hopper.GluonLaunch; rows with lean = 1), so that do_bench is the
    GPU's time rather than Gluon's normal launch path (60-300 us of host time per call); rows without the
    column came before it, through that normal path."""
    import torch
    import torch.nn.functional as F

    from fa2triton.gpu import facts
    from fa2triton.reference import attention, relative_error
    from fa2lab.timers import bench_graph_ms
    from fa2triton.queued_timing import queued_ms
    from fa2lab.switches import load
    from fa2triton.gluon import gluon_forward_hopper as G

    FA = load("v7_hopper").FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, args.D
    configs = G.configs_named(args.only) if args.only else list(G.EXPERIMENT_CONFIGS)
    unfit = [c.label for c in configs if not c.fits(D, facts().smem_per_block)]
    if unfit:
        print(f"not timed at D = {D} (shared memory): {', '.join(unfit)}")
        configs = [c for c in configs if c.label not in unfit]

    def errors(cfg, q, k, v, causal):
        O, L, _ = G.forward(q, k, v, causal, cfg)
        ref_o, ref_l = attention(q, k, v, causal)
        return relative_error(O, ref_o), float((L.double() - ref_l).abs().max())

    broken = {}
    for cfg in configs:
        worst_o = worst_l = 0.0
        checked = 0    # shapes run: a D whose shared memory this configuration cannot fit is skipped
        try:
            for causal in (False, True):
                for bh, nq, nk, d in GLUON_CHECK_SHAPES:
                    if not cfg.fits(d, facts().smem_per_block):
                        continue
                    g = torch.Generator(device="cuda").manual_seed(nq + nk + d)
                    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
                               for n in (nq, nk, nk))
                    eo, el = errors(cfg, q, k, v, causal)
                    worst_o, worst_l = max(worst_o, eo), max(worst_l, el)
                    checked += 1
            ok = worst_o < 2e-2 and worst_l < 1e-2
            if not ok:
                broken[cfg.label] = f"error O {worst_o:.3g}, L {worst_l:.3g}"
        except Exception as e:  # noqa: BLE001 - a configuration that fails is recorded, not fatal
            broken[cfg.label] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            ok = False
        save("gluon_check", [{"config": cfg.label, "shapes": checked, "ok": int(ok),
                              "worst_rel_err_o": worst_o, "worst_abs_err_l": worst_l,
                              "failure": broken.get(cfg.label, "")}])
        print(f"check {cfg.label}: {'ok' if ok else broken[cfg.label]} (O {worst_o:.2e}, L {worst_l:.2e})", flush=True)
    configs = [c for c in configs if c.label not in broken]

    for causal in masks(args):
        for N in args.Ns:
            q, k, v = inputs(N, D=D)
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D)
            calls = {"v7_tl": lambda: forced(FA, "tma", lambda: FA.apply(q, k, v, causal)),
                     "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
            if v7_gluon_runs(q, k, v, causal):
                calls["v7_gluon"] = lambda: forced(FA, "gluon", lambda: FA.apply(q, k, v, causal))
            lean = {}
            for cfg in configs:
                repeat = G.forward(q, k, v, causal, cfg)[2]   # the warp-specialized form's lean repeat
                lean[cfg.label] = int(repeat is not None)
                calls[cfg.label] = ((lambda r: lambda: r(q, k, v)[0])(repeat) if repeat is not None else
                                    (lambda c: lambda: G.forward(q, k, v, causal, c)[0])(cfg))
            errs = {name: relative_error(fn() if name != "sdpa" else fn().view(B * H, N, D), ref)
                    for name, fn in calls.items()}
            timed = interleaved(calls, args.rounds)
            graph = {name: bench_graph_ms(fn) for name, fn in calls.items()}
            queued = interleaved(calls, args.rounds, queued_ms)   # the launch race's timing, rounds of its own
            flop, sdpa = shapes.flops(B, H, N, D, causal), timed["sdpa"][0]
            save("gluon", [{"variant": n, "N": N, "D": D, "causal": int(causal), "ms": t[0], "ms_min": t[1], "ms_max": t[2],
                            "graph_ms": graph[n], "queued_ms": queued[n][0], "queued_min": queued[n][1],
                            "queued_max": queued[n][2], "tflops": shapes.tflops(flop, t[0]),
                            "pct_of_sdpa": 100.0 * sdpa / t[0],
                            "graph_pct_of_sdpa": 100.0 * graph["sdpa"] / graph[n],
                            "rel_err_vs_sdpa": errs[n], "rounds": args.rounds, "lean": lean.get(n, 1)}
                           for n, t in timed.items()])
            print(f"N={N} D={D} causal={int(causal)}: " + ", ".join(
                f"{n} {t[0]:.3f} ms ({100.0 * sdpa / t[0]:.1f}%; graph {100.0 * graph['sdpa'] / graph[n]:.1f}%; "
                f"queued {queued[n][0]:.3f} ms)"
                for n, t in timed.items()), flush=True)


def main(argv=None) -> int:
    from fa2triton.gluon.gluon_forward_hopper import HEAD_DIMS

    ap = parser(__doc__ + "\n" + gluon.__doc__, Ns=[1024, 2048, 4096], causal=2)
    ap.add_argument("--D", type=int, choices=HEAD_DIMS, default=shapes.HEAD_DIM,
                    help="head dimension (default the harness's; configurations whose shared memory does not "
                         "fit it are listed and skipped)")
    ap.add_argument("--only", nargs="*", default=None, help="configuration labels to run (default: all)")
    return run("gluon", gluon, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
