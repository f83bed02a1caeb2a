"""Experiment bwd-gluon-ws: round 3 of the Hopper backward's log (docs/worklogs/backward_hopper.md), the
warp-specialized Gluon backward (gluon_backward_ws, dQ by TMA reduce-add) against v7's backward as it ships and
cuDNN's, the whole backward of each on the same inputs.

    python experiments/bwd_gluon_ws.py [--N N ...] [--causal 0|1|2] [--D 64 128] [--rounds R]

Rows: results/<gpu>/experiments/bwd_gluon_ws.csv (`invoke experiment bwd-gluon-ws`). Hopper GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import backward_case, parser, run, masks, spread  # noqa: E402


def bwd_gluon_ws(args, save):
    """Per shape (B, H of the harness; N, D, mask), on v7's forward (O and its saved L): the whole backward as v7
    runs it (dq_mode and dkdv "auto") and as the Gluon kernel runs it (dq_mode "atomic", dkdv "gluon": preprocess,
    zeroed fp32 dQ, the kernel, dQ's cast), each checked against float64 (the first call and the recorded repeat that
    is timed); then, in interleaved rounds, each by CUDA-graph replay (the kernels alone) and by do_bench (with the
    host's launches), and cuDNN's by do_bench (autograd's call is not captured). Ratios are each round's own: v7's
    graph time over each one's, cuDNN's do_bench time over each one's, and the shipped Gluon kernel's graph time over
    each one's."""
    from fa2triton.reference import backward_from_lse, relative_error
    from fa2lab.timers import bench_graph_ms, bench_ms
    from fa2triton import flash_backward_triton as bk
    from fa2triton.gluon import gluon_backward_ws as ws

    B, H = shapes.BATCH, shapes.HEADS
    for D in args.D:
        for causal in masks(args):
            for N in args.Ns:
                Qd, Kd, Vd, dO, O, L, cudnn = backward_case(N, D, causal)
                ref = backward_from_lse(*(t.double() for t in (Qd, Kd, Vd, O, L, dO)), causal)

                launches, err = {}, {}
                # (the Gluon kernel's rows keep the label they had when its ring's slots were an option)
                # and the comparisons, each a set of gluon_backward_ws attributes held while it is built: the synced
                # slot release and dS wait at every D (UNSYNCED_HEAD_DIMS emptied)
                forms = [("v7", "auto", "auto", {}), (f"gluon-ws/s{ws.SLOTS}", "atomic", "gluon", {}),
                         (f"gluon-ws/s{ws.SLOTS}/synced", "atomic", "gluon", {"UNSYNCED_HEAD_DIMS": ()})]
                if D in ws.ROW_SPLIT_HEAD_DIMS:   # /cs: 64-query tiles, dQ split by columns (before round 12)
                    forms.append((f"gluon-ws/s{ws.SLOTS}/cs", "atomic", "gluon", {"ROW_SPLIT_HEAD_DIMS": ()}))
                for who, dq_mode, dkdv, held in forms:
                    saved = {name: getattr(ws, name) for name in held}
                    for name, value in held.items():
                        setattr(ws, name, value)
                    try:
                        *grads, launch = bk._checked_backward(Qd, Kd, Vd, O, L, dO, causal, None, dq_mode, False,
                                                              dkdv=dkdv)
                    finally:
                        for name, value in saved.items():
                            setattr(ws, name, value)
                    launches[who] = (lambda la=launch: la(Qd, Kd, Vd, O, L, dO))
                    # the checked call's gradients and the timed repeat's (a repeat skips every check)
                    err[who] = max(relative_error(g, r) for out in (grads, launches[who]()) for g, r in zip(out, ref))
                launches["cudnn"] = cudnn
                graph = {w: [] for w in launches}
                dob = {w: [] for w in launches}
                for _ in range(args.rounds):
                    for w, fn in launches.items():   # (autograd's cuDNN call is not captured: do_bench only)
                        graph[w].append(float("nan") if w == "cudnn" else bench_graph_ms(fn) * 1e3)
                        dob[w].append(bench_ms(fn) * 1e3)
                flop = shapes.BWD_FLOP_FACTOR * shapes.flops(B, H, N, D, causal)
                rows = []
                for w in launches:
                    g_med, g_lo, g_hi = spread(graph[w])
                    d_med, d_lo, d_hi = spread(dob[w])
                    gr = spread([a / b for a, b in zip(graph["v7"], graph[w])])
                    sr = spread([a / b for a, b in zip(graph[f"gluon-ws/s{ws.SLOTS}"], graph[w])])
                    dr = spread([a / b for a, b in zip(dob["cudnn"], dob[w])])
                    rows.append({"who": w, "N": N, "D": D, "causal": int(causal), "rounds": args.rounds,
                                 "max_rel_err_vs_fp64": err.get(w, float("nan")),
                                 "graph_us": g_med, "graph_us_min": g_lo, "graph_us_max": g_hi,
                                 "graph_tflops": shapes.tflops(flop, g_med / 1e3),
                                 "dobench_us": d_med, "dobench_us_min": d_lo, "dobench_us_max": d_hi,
                                 "v7_over_graph": gr[0], "v7_over_graph_min": gr[1],
                                 "v7_over_graph_max": gr[2], "gluon_over_graph": sr[0], "gluon_over_graph_min": sr[1],
                                 "gluon_over_graph_max": sr[2], "cudnn_over_dobench": dr[0],
                                 "cudnn_over_dobench_min": dr[1], "cudnn_over_dobench_max": dr[2]})
                save("bwd_gluon_ws", rows)
                line = ", ".join(f"{r['who']} {r['graph_us']:.1f}/{r['dobench_us']:.1f} µs "
                                 f"({100 * r['v7_over_graph']:.1f}% / {100 * r['cudnn_over_dobench']:.1f}%)"
                                 for r in rows)
                print(f"N={N} D={D} causal={int(causal)} graph/do_bench µs (% of v7 by graph / of cuDNN by do_bench): "
                      f"{line}; errors "
                      + ", ".join(f"{w} {e:.1e}" for w, e in err.items()), flush=True)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + bwd_gluon_ws.__doc__, Ns=[1024, 2048, 4096], causal=2)
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=(64, 128), help="head dimensions")
    return run("bwd-gluon-ws", bwd_gluon_ws, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
