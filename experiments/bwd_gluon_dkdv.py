"""Experiment bwd-gluon-dkdv: round 1 of the Hopper backward's log (docs/worklogs/backward_hopper.md), the Gluon
dK/dV kernel against the Triton backward's dK/dV kernel on the same inputs, and cuDNN's whole backward beside them.

    python experiments/bwd_gluon_dkdv.py [--N N ...] [--causal 0|1|2] [--D 64 128] [--rounds R]

Rows: results/<gpu>/experiments/bwd_gluon_dkdv.csv (`invoke experiment bwd-gluon-dkdv`). Hopper GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import backward_case, parser, run, masks, spread  # noqa: E402

DKDV_FLOP_FACTOR = 2   # dK/dV's four products: twice the forward's FLOPs (of the whole backward's BWD_FLOP_FACTOR)


def bwd_gluon_dkdv(args, save):
    """Per shape (B, H of the harness; N, D, mask), on v7's forward (O and its saved L): dK and dV from the Gluon kernel
    and from the Triton backward's _bwd_dkdv_kernel (its default configuration; the same Delta and L for both), each
    checked against float64; then, in interleaved rounds, each dK/dV kernel alone by CUDA-graph replay, and cuDNN's
    whole backward (do_bench of autograd.grad on a kept graph) for scale. gluon_over_triton is each round's own ratio
    of the two graph times."""
    import torch

    from fa2triton.lean_path import run_compiled
    from fa2triton.reference import backward_from_lse, relative_error
    from fa2lab.timers import bench_graph_ms, bench_ms
    from fa2triton import flash_backward_triton as bk
    from fa2triton.backward_config import default_config
    from fa2triton.gluon import gluon_backward_hopper as gb

    B, H = shapes.BATCH, shapes.HEADS
    for D in args.D:
        for causal in masks(args):
            for N in args.Ns:
                Qd, Kd, Vd, dO, O, L, cudnn = backward_case(N, D, causal)
                scale = D ** -0.5
                Delta = (dO.float() * O.float()).sum(-1)

                _, dK_t, dV_t, launch = bk._checked_backward(Qd, Kd, Vd, O, L, dO, causal, None, "separate", False)
                dK_g, dV_g = gb.dkdv(Qd, Kd, Vd, dO, L, Delta, causal, scale)
                ref = backward_from_lse(*(t.double() for t in (Qd, Kd, Vd, O, L, dO)), causal)
                err = {"gluon": max(relative_error(dK_g, ref[1]), relative_error(dV_g, ref[2])),
                       "triton": max(relative_error(dK_t, ref[1]), relative_error(dV_t, ref[2]))}

                dK_b, dV_b, dQ_b = torch.empty_like(Kd), torch.empty_like(Vd), torch.empty_like(Qd)
                triton_args = (Qd, Kd, Vd, dO, L, Delta, dK_b, dV_b, dQ_b, *launch.tails[1])
                calls = {"triton": lambda: run_compiled(launch.dkdv, launch.grids[1], triton_args, Qd.device.index),
                         "gluon": lambda: gb.dkdv(Qd, Kd, Vd, dO, L, Delta, causal, scale)}
                graph = {w: [] for w in calls}
                ratio, sdpa = [], []
                for _ in range(args.rounds):
                    for w, fn in calls.items():
                        graph[w].append(bench_graph_ms(fn) * 1e3)
                    sdpa.append(bench_ms(cudnn) * 1e3)
                    ratio.append(graph["gluon"][-1] / graph["triton"][-1])
                flop = DKDV_FLOP_FACTOR * shapes.flops(B, H, N, D, causal)
                rows = []
                for w in calls:
                    med, lo, hi = spread(graph[w])
                    rows.append({"who": w, "N": N, "D": D, "causal": int(causal), "rounds": args.rounds,
                                 "max_rel_err_vs_fp64": err[w], "graph_us": med, "graph_us_min": lo,
                                 "graph_us_max": hi, "graph_tflops": shapes.tflops(flop, med / 1e3),
                                 "config": (str(default_config(D, Qd.dtype)) if w == "triton"
                                            else f"gluon {gb.BLOCK_N}x{gb.BLOCK_M}/1wg")})
                r_med, r_lo, r_hi = spread(ratio)
                s_med, s_lo, s_hi = spread(sdpa)
                for row in rows:
                    row.update(gluon_over_triton=r_med, gluon_over_triton_min=r_lo, gluon_over_triton_max=r_hi,
                               cudnn_bwd_us=s_med, cudnn_bwd_us_min=s_lo, cudnn_bwd_us_max=s_hi)
                save("bwd_gluon_dkdv", rows)
                print(f"N={N} D={D} causal={int(causal)}: dK/dV graph µs triton {rows[0]['graph_us']:.1f}, gluon "
                      f"{rows[1]['graph_us']:.1f} (gluon/triton {r_med:.3f}, {r_lo:.3f}-{r_hi:.3f}); errors "
                      f"{err['triton']:.1e} / {err['gluon']:.1e}; cuDNN whole backward {s_med:.1f} µs", flush=True)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + bwd_gluon_dkdv.__doc__, Ns=[1024, 2048, 4096], causal=2)
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=(64, 128), help="head dimensions")
    return run("bwd-gluon-dkdv", bwd_gluon_dkdv, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
