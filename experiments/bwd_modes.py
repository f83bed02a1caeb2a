"""Experiment bwd-modes: the backward's dQ modes: GPU time (graph replay), host time, do_bench.

    python experiments/bwd_modes.py [--N N ...] [--D D ...] [--modes MODE ...] [--causal 0|1|2] [--rounds R]

Rows: results/<gpu>/experiments/bwd_modes.csv (`invoke experiment bwd-modes`). GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, inputs, masks, spread  # noqa: E402
from fa2triton.flash_backward_triton import DQ_MODES  # noqa: E402


def bwd_modes(args, save):
    """The backward's dQ modes on v7's forward at the harness's B and H, per head dimension, to place dq_mode="auto"'s
    choices: per mode, the GPU's time (CUDA-graph replay of the backward called directly: no host in it), the host's
    time per autograd backward (fa2lab.timers.host_us_per_call) and the harness's number (do_bench of autograd.grad on
    a kept graph), with SDPA's default and FLASH_ATTENTION backends in the same rounds. Each mode runs v7's dK/dV
    choice (BACKWARD_DKDV): on Hopper "atomic" is the warp-specialized Gluon kernel (three launches: Delta, the
    kernel, dQ's cast) and "fused" one launch."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fa2triton.reference import relative_error, saved_lse
    from fa2lab.timers import bench_graph_ms, bench_ms, host_us_per_call
    from fa2lab.switches import load
    from fa2triton import flash_backward_triton as bk

    FA = load("v7_hopper").FlashAttentionTriton
    B, H = shapes.BATCH, shapes.HEADS
    modes = tuple(args.modes)
    saved_mode = FA.BACKWARD_DQ_MODE
    try:
        for D, causal, N in ((D, causal, N) for D in args.Ds for causal in masks(args) for N in args.Ns):
            gluon_ws = bk.gluon_ws_takes(D, torch.bfloat16, FA.BACKWARD_DKDV)
            q, k, v = (t.requires_grad_() for t in inputs(N, D=D))
            dO = torch.randn_like(q)
            q4, k4, v4 = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
            O = FA.apply(q, k, v, causal)
            Od, L = O.detach(), saved_lse(O)
            O_s = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                O_f = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
            ref = torch.autograd.grad(O_s, (q4, k4, v4), dO.view(B, H, N, D), retain_graph=True)

            def autograd_of(mode):
                def call():
                    FA.BACKWARD_DQ_MODE = mode
                    return torch.autograd.grad(O, (q, k, v), dO, retain_graph=True)
                return call

            calls = {m: autograd_of(m) for m in modes} | {
                "sdpa": lambda: torch.autograd.grad(O_s, (q4, k4, v4), dO.view(B, H, N, D), retain_graph=True),
                "sdpa_flash": lambda: torch.autograd.grad(O_f, (q4, k4, v4), dO.view(B, H, N, D),
                                                          retain_graph=True)}
            direct = {m: (lambda m=m: bk.flash_attention_backward(q.detach(), k.detach(), v.detach(), Od, L, dO,
                                                                   causal, dq_mode=m, dkdv=FA.BACKWARD_DKDV))
                      for m in modes}
            errors = {m: max(relative_error(a.view(B, H, N, D), b) for a, b in zip(calls[m](), ref)) for m in modes}
            for m in modes:   # the direct call's first (checked, compiling) run, before any graph capture
                direct[m]()
            samples = {(w, m): [] for m in calls for w in ("do_bench", "host", "graph")
                       if w != "graph" or m in modes}
            for _ in range(args.rounds):   # interleaved, so a slow moment hits every mode alike
                for m, fn in calls.items():
                    samples[("do_bench", m)].append(bench_ms(fn) * 1e3)
                    samples[("host", m)].append(host_us_per_call(fn, calls=100))
                    if m in modes:
                        samples[("graph", m)].append(bench_graph_ms(direct[m]) * 1e3)
            flop = shapes.BWD_FLOP_FACTOR * shapes.flops(B, H, N, D, causal)
            rows = []
            for m in calls:
                row = {"who": m, "N": N, "D": D, "causal": int(causal), "rounds": args.rounds,
                       "auto_picks": bk.auto_dq_mode(B * H, N, N, D, causal, gluon_ws=gluon_ws) if m in modes
                       else "",
                       "max_rel_err_vs_sdpa": errors.get(m, float("nan"))}
                for w in ("do_bench", "host", "graph"):
                    row.update(zip((f"{w}_us", f"{w}_us_min", f"{w}_us_max"), spread(samples.get((w, m)))))
                row["do_bench_tflops"] = shapes.tflops(flop, row["do_bench_us"] / 1e3)
                rows.append(row)
            save("bwd_modes", rows)
            print(f"N={N} D={D} causal={int(causal)} (µs; auto -> {rows[0]['auto_picks']}): " + "; ".join(
                f"{r['who']} do_bench {r['do_bench_us']:.1f} host {r['host_us']:.1f}"
                + (f" graph {r['graph_us']:.1f}" if r["who"] in modes else "") for r in rows), flush=True)
    finally:
        FA.BACKWARD_DQ_MODE = saved_mode


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + bwd_modes.__doc__, Ns=list(shapes.SEQ_LENS), causal=2)
    ap.add_argument("--D", dest="Ds", type=int, nargs="+", default=[shapes.HEAD_DIM], choices=(64, 128),
                    help=f"head dimensions (default: {shapes.HEAD_DIM})")
    ap.add_argument("--modes", nargs="+", default=list(DQ_MODES), choices=DQ_MODES,
                    help=f"the dQ modes, each through autograd (default: {' '.join(DQ_MODES)})")
    return run("bwd-modes", bwd_modes, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
