"""Experiment peer-goal: v7's forward against the FA3-class peer (flash-attn-4 sm90) and cuDNN, in one process.

    python experiments/peer_goal.py [--N N ...] [--D D ...] [--causal 0|1|2] [--rounds R]

At every shape the three run on the same inputs, interleaved round by round (v7, the peer, SDPA's default
backend, in an order that rotates each round), each timed by do_bench with its L2 flush and by CUDA-graph replay
(at N <= 1024 the peer's host path sets its do_bench time: graph replay compares kernels there). One row per
round and shape, so that the report takes the median of per-round ratios and their spread. A peer that is not
installed or fails at a shape leaves its columns NaN with the reason in fa4_status.

Rows: results/<gpu>/experiments/peer_goal.csv (`invoke experiment peer-goal`). GPU only.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from experiments.common import parser, run  # noqa: E402
from fa2lab import shapes  # noqa: E402


def peer_goal(args, save):
    """Rounds of v7, the peer and cuDNN at each (N, D, mask), one row per round and shape."""
    import torch
    import torch.nn.functional as F

    from fa2lab import peers as P
    from fa2lab.timers import bench_graph_ms, bench_ms
    from fa2lab.switches import load

    v7 = load("v7_hopper")
    peer = P.REGISTRY["fa4"]
    B, H = shapes.BATCH, shapes.HEADS
    for D in args.Ds:
        for causal in (False, True) if args.causal == 2 else (bool(args.causal),):
            for N in args.Ns:
                g = torch.Generator(device="cuda").manual_seed(N * 7 + D + causal)
                q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(3))
                q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
                ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D)
                calls = {"v7": lambda: v7.FlashAttentionTriton.apply(q, k, v, causal),
                         "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
                err = (calls["v7"]().float() - ref.float()).abs().max().item()
                fwd = P.ForwardRun(peer, q, k, v, B, H, causal, ref)
                if fwd.call is not None:
                    calls["fa4"] = fwd.call
                path, config = v7.last_path() or "", v7.last_config() or ""
                names = list(calls)
                for r in range(args.rounds):
                    order = names[r % len(names):] + names[:r % len(names)]
                    row = dict(round=r + 1, B=B, H=H, N=N, D=D, causal=int(causal), dtype=shapes.DTYPE_NAME,
                               flops=shapes.flops(B, H, N, D, causal), path=path, config=config,
                               max_abs_err_vs_sdpa=err, fa4_status=fwd.status,
                               fa4_max_abs_err_vs_sdpa=fwd.values["max_abs_err_vs_sdpa"],
                               peer_versions=P.versions_column([peer]))
                    for name in order:
                        prefix = "" if name == "v7" else f"{name}_"
                        row[f"{prefix}ms"] = bench_ms(calls[name])
                        row[f"{prefix}graph_ms"] = bench_graph_ms(calls[name])
                    for name in ("sdpa", "fa4"):
                        row[f"pct_of_{name}"] = P.ratio_pct(row.get(f"{name}_ms", float("nan")), row["ms"])
                        row[f"graph_pct_of_{name}"] = P.ratio_pct(row.get(f"{name}_graph_ms", float("nan")),
                                                                  row["graph_ms"])
                    print(f"N={N:>5} D={D:>3} {'causal' if causal else 'non-causal':>10} round {r + 1}: "
                          f"v7 {row['ms'] * 1e3:7.1f} us, {row['pct_of_sdpa']:6.1f}% of cuDNN, "
                          f"{row['pct_of_fa4']:6.1f}% of fa4 (graph {row['graph_pct_of_fa4']:6.1f}%)  {fwd.status}",
                          flush=True)
                    save("peer_goal", [row])


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + peer_goal.__doc__, Ns=[512, 1024, 2048, 4096], causal=2)
    ap.add_argument("--D", dest="Ds", type=int, nargs="*", default=[64, 128], help="head dimensions (64 128)")
    return run("peer-goal", peer_goal, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
