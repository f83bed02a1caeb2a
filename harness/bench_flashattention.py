"""The benchmark harness, identical for every version.

The version is whichever fa2triton/kernels/<version> folder is on PYTHONPATH:

    PYTHONPATH=fa2triton/kernels/v5_final python harness/bench_flashattention.py

For each harness shape (B = 4, H = 8, D = 64, bf16; N = 512..4096; non-causal then
causal) it times FlashAttentionTriton.apply and SDPA (default backend, and the
FLASH_ATTENTION backend) on the same inputs in this process with do_bench medians,
plus CUDA-graph replay times, do_bench without its cache flush (noflush_ms) and the
host time per call, prints the article's table and appends one CSV row per shape, with
provenance (and, for a version with several paths, the path and configuration the timed calls took), to
results/<gpu>/bench/<version>.csv.

Peers (fa2lab.peers, --peers; default: every registered one) are timed the same way in the same
process: for flash-attn-4, fa4_ms, fa4_graph_ms, fa4_noflush_ms, fa4_host_us, fa4_tflops,
pct_of_fa4 (100 * fa4_ms / ms), graph_pct_of_fa4, fa4_max_abs_err_vs_sdpa, fa4_status ("ok",
"not installed", or why it failed at that shape) and peer_versions. --D 128 runs the same shapes
at head dimension 128.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fa2lab package, uninstalled

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fa2lab import peers as peer_registry  # noqa: E402
from fa2lab import shapes  # noqa: E402
from fa2lab import timers as timing  # noqa: E402
from fa2lab.provenance import ClockSampler, environment, now  # noqa: E402
from fa2lab.results import append_rows, gpu_dir  # noqa: E402
from fa2triton.versions import of_module  # noqa: E402


@functools.cache
def kernel_module():
    """The version on PYTHONPATH (imported on first use, so that --help works without one), with this process's
    FA2_V7_* switches set on it (fa2lab.switches.apply)."""
    import flashattention_autograd_function_triton

    from fa2lab.switches import apply

    return apply(flashattention_autograd_function_triton)


def sdpa_flash(q4, k4, v4, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)


def measure(shape: shapes.Shape, graphs: bool, peers=(), device: str = "cuda", timer=timing) -> dict:
    """One shape's measured columns: ours, SDPA's and each peer's (fa2lab.peers.ForwardRun: a peer that
    fails gives its reason in <peer>_status and NaN times). `device` and `timer` (fa2lab.timers's
    functions) are for the tests, which run this on the CPU with stand-in timings."""
    B, H, N, D = shape.B, shape.H, shape.N, shape.D
    q, k, v = (torch.randn(B * H, N, D, device=device, dtype=torch.bfloat16) for _ in range(3))
    q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
    causal = shape.causal

    module = kernel_module()
    FlashAttentionTriton = module.FlashAttentionTriton

    def ours():
        return FlashAttentionTriton.apply(q, k, v, causal)

    def sdpa():
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

    def flash():
        return sdpa_flash(q4, k4, v4, causal)

    ref = sdpa().view(B * H, N, D)
    err = (ours().float() - ref.float()).abs().max().item()
    # Each peer gets its inputs in its own layout once here, and one checked call, outside the timed region.
    runs = [peer_registry.ForwardRun(p, q, k, v, B, H, causal, ref) for p in peers]

    row: dict = {}
    with ClockSampler() as clocks:
        row["ms"] = timer.bench_ms(ours)
        row["sdpa_ms"] = timer.bench_ms(sdpa)
        try:
            row["sdpa_flash_ms"] = timer.bench_ms(flash)
        except RuntimeError as e:  # the backend may not support this GPU or shape
            row["sdpa_flash_ms"] = float("nan")
            print(f"  SDPA FLASH_ATTENTION backend unavailable: {e}", file=sys.stderr)
        for r in runs:
            r.time("ms", timer.bench_ms, r.call)
    row.update(clocks.summary())
    if graphs:
        row["graph_ms"] = timer.bench_graph_ms(ours)
        row["sdpa_graph_ms"] = timer.bench_graph_ms(sdpa)
        row["noflush_ms"] = timer.bench_noflush_ms(ours)
        row["sdpa_noflush_ms"] = timer.bench_noflush_ms(sdpa)
        row["host_us"] = timer.host_us_per_call(ours)
        row["sdpa_host_us"] = timer.host_us_per_call(sdpa)
        for r in runs:   # graph replay: at small N it compares kernels, not host paths
            r.time("graph_ms", timer.bench_graph_ms, r.call)
            r.time("noflush_ms", timer.bench_noflush_ms, r.call)
            r.time("host_us", timer.host_us_per_call, r.call)
    row["max_abs_err_vs_sdpa"] = err
    for r in runs:
        row.update(r.row())
    # A version with several paths (v7: "tma", "v6", "gluon") says which one these timings took, and
    # with which configuration (its autotuner's pick may differ between processes).
    for column in ("path", "config"):
        row[column] = getattr(module, f"last_{column}", lambda: None)() or ""
    return row


def make_row(version: str, run_id: str, shape: shapes.Shape, m: dict, env: dict, peers=()) -> dict:
    """One CSV row: the shape, the measured columns m, the derived ones (ours and each peer's), provenance."""
    flop = shape.flops
    return {
        "version": version, "run_id": run_id, "date": now(),
        "B": shape.B, "H": shape.H, "N": shape.N, "D": shape.D, "dtype": shapes.DTYPE_NAME,
        "causal": int(shape.causal), "flops": flop,
        **m,
        "tflops": shapes.tflops(flop, m["ms"]),
        "sdpa_tflops": shapes.tflops(flop, m["sdpa_ms"]),
        "pct_of_sdpa": 100.0 * m["sdpa_ms"] / m["ms"],
        "pct_of_sdpa_flash": 100.0 * m["sdpa_flash_ms"] / m["ms"],
        **peer_registry.forward_ratios(m, list(peers), flop),
        **({"peer_versions": peer_registry.versions_column(list(peers))} if peers else {}),
        **env,
    }


def table_header(peers=()) -> str:
    return (f"{'N':>6} {'causal':>6} {'ms':>8} {'TFLOP/s':>8} {'SDPA ms':>8} {'SDPA TF':>8} {'% SDPA':>7} "
            f"{'FA2 ms':>8} {'% FA2':>6}" + "".join(f" {p.name + ' ms':>8} {'% ' + p.name:>7}" for p in peers))


def table_line(row: dict, peers=()) -> str:
    line = (f"{row['N']:>6} {'yes' if row['causal'] else 'no':>6} {row['ms']:8.3f} {row['tflops']:8.1f} "
            f"{row['sdpa_ms']:8.3f} {row['sdpa_tflops']:8.1f} {row['pct_of_sdpa']:6.0f}% "
            f"{row['sdpa_flash_ms']:8.3f} {row['pct_of_sdpa_flash']:5.0f}%")
    for p in peers:
        line += f" {row[p.name + '_ms']:8.3f} {row['pct_of_' + p.name]:6.0f}%"
    notes = [f"{p.name}: {row[p.name + '_status']}" for p in peers if row[p.name + "_status"] != peer_registry.OK]
    return line + (f"   ({'; '.join(notes)})" if notes else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="*", default=list(shapes.SEQ_LENS), help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--D", type=int, choices=shapes.HEAD_DIMS, default=shapes.HEAD_DIM,
                    help=f"head dimension (default {shapes.HEAD_DIM}, the harness's)")
    ap.add_argument("--peers", default="all",
                    help=f"peer backends timed beside (fa2lab.peers: {', '.join(peer_registry.REGISTRY)}), "
                         "comma-separated; all (default: those that cannot run here get NaN and their status) "
                         "or none")
    ap.add_argument("--run-id", default=os.environ.get("FA2_RUN_ID", ""), help="groups rows of one protocol run")
    ap.add_argument("--no-graphs", action="store_true", help="skip CUDA-graph and host-time columns")
    ap.add_argument("--no-save", action="store_true", help="print only; write no CSV")
    ap.add_argument("--out", type=Path, default=None, help="CSV path (default results/<gpu>/bench/<version>.csv)")
    args = ap.parse_args(argv)
    try:
        peers = peer_registry.chosen(args.peers)
    except ValueError as e:
        ap.error(f"--peers: {e}")

    if not torch.cuda.is_available():
        print("bench_flashattention.py needs a CUDA GPU; without one, run the tests under the "
              "interpreter (invoke test) or read the committed results (invoke report).", file=sys.stderr)
        return 2

    version = of_module(kernel_module())
    masks = shapes.masks_from(args.causal)
    shape_list = [dataclasses.replace(s, D=args.D) for s in shapes.harness_shapes(args.N, masks)]
    env = environment()
    rows = []
    print(f"{version.name} on {env['gpu']} (driver {env['driver']}, torch {env['torch']}, triton {env['triton']})")
    for p in peers:
        print(f"peer {p.name} ({p.label}): {p.status()}" + (f", {p.versions()}" if p.versions() else ""))
    peer_registry.warm_up(peers, shape_list)   # flash-attn-4 compiles here, before anything is timed
    print(table_header(peers))
    for shape in shape_list:
        m = measure(shape, graphs=not args.no_graphs, peers=peers)
        row = make_row(version.name, args.run_id, shape, m, env, peers)
        rows.append(row)
        print(table_line(row, peers), flush=True)
    if not args.no_save:
        out = args.out or gpu_dir() / "bench" / f"{version.name}.csv"
        append_rows(out, rows)
        print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
