"""The benchmark harness, identical for every version.

The version is whichever kernels/<version> folder is on PYTHONPATH:

    PYTHONPATH=kernels/v5_final python harness/bench_flashattention.py

For each harness shape (B = 4, H = 8, D = 64, bf16; N = 512..4096; non-causal then
causal) it times FlashAttentionTriton.apply and SDPA (default backend, and the
FLASH_ATTENTION backend) on the same inputs in this process with do_bench medians,
plus CUDA-graph replay times, do_bench without its cache flush (noflush_ms) and the
host time per call, prints the article's table and appends one CSV row per shape, with
provenance (and, for a version with several paths, the path and configuration the timed calls took), to
results/<gpu>/bench/<version>.csv.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fa2lab package, uninstalled

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flashattention_autograd_function_triton as kernel_module  # noqa: E402
from fa2lab import shapes, timing  # noqa: E402
from fa2lab.provenance import ClockSampler, environment, now  # noqa: E402
from fa2lab.results import append_rows, gpu_dir  # noqa: E402
from fa2lab.versions import of_module  # noqa: E402

FlashAttentionTriton = kernel_module.FlashAttentionTriton


def sdpa_flash(q4, k4, v4, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)


def measure(shape: shapes.Shape, graphs: bool) -> dict:
    B, H, N, D = shape.B, shape.H, shape.N, shape.D
    q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
    causal = shape.causal

    def ours():
        return FlashAttentionTriton.apply(q, k, v, causal)

    def sdpa():
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

    def flash():
        return sdpa_flash(q4, k4, v4, causal)

    ref = sdpa().view(B * H, N, D)
    err = (ours().float() - ref.float()).abs().max().item()

    row: dict = {}
    with ClockSampler() as clocks:
        row["ms"] = timing.bench_ms(ours)
        row["sdpa_ms"] = timing.bench_ms(sdpa)
        try:
            row["sdpa_flash_ms"] = timing.bench_ms(flash)
        except RuntimeError as e:  # the backend may not support this GPU or shape
            row["sdpa_flash_ms"] = float("nan")
            print(f"  SDPA FLASH_ATTENTION backend unavailable: {e}", file=sys.stderr)
    row.update(clocks.summary())
    if graphs:
        row["graph_ms"] = timing.bench_graph_ms(ours)
        row["sdpa_graph_ms"] = timing.bench_graph_ms(sdpa)
        row["noflush_ms"] = timing.bench_noflush_ms(ours)
        row["sdpa_noflush_ms"] = timing.bench_noflush_ms(sdpa)
        row["host_us"] = timing.host_us_per_call(ours)
        row["sdpa_host_us"] = timing.host_us_per_call(sdpa)
    row["max_abs_err_vs_sdpa"] = err
    # A version with several paths (v7: "tma", "v6", "gluon") says which one these timings took, and
    # with which configuration (its autotuner's pick may differ between processes).
    for column in ("path", "config"):
        row[column] = getattr(kernel_module, f"last_{column}", lambda: None)() or ""
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="*", default=list(shapes.SEQ_LENS), help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--run-id", default=os.environ.get("FA2_RUN_ID", ""), help="groups rows of one protocol run")
    ap.add_argument("--no-graphs", action="store_true", help="skip CUDA-graph and host-time columns")
    ap.add_argument("--no-save", action="store_true", help="print only; write no CSV")
    ap.add_argument("--out", type=Path, default=None, help="CSV path (default results/<gpu>/bench/<version>.csv)")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench_flashattention.py needs a CUDA GPU; without one, run the tests under the "
              "interpreter (invoke test) or read the committed results (invoke report).", file=sys.stderr)
        return 2

    version = of_module(kernel_module)
    masks = shapes.masks_from(args.causal)
    env = environment()
    rows = []
    print(f"{version.name} on {env['gpu']} (driver {env['driver']}, torch {env['torch']}, triton {env['triton']})")
    print(f"{'N':>6} {'causal':>6} {'ms':>8} {'TFLOP/s':>8} {'SDPA ms':>8} {'SDPA TF':>8} {'% SDPA':>7} "
          f"{'FA2 ms':>8} {'% FA2':>6}")
    for shape in shapes.harness_shapes(args.N, masks):
        m = measure(shape, graphs=not args.no_graphs)
        flop = shape.flops
        row = {
            "version": version.name, "run_id": args.run_id, "date": now(),
            "B": shape.B, "H": shape.H, "N": shape.N, "D": shape.D, "dtype": shapes.DTYPE_NAME,
            "causal": int(shape.causal), "flops": flop,
            **m,
            "tflops": shapes.tflops(flop, m["ms"]),
            "sdpa_tflops": shapes.tflops(flop, m["sdpa_ms"]),
            "pct_of_sdpa": 100.0 * m["sdpa_ms"] / m["ms"],
            "pct_of_sdpa_flash": 100.0 * m["sdpa_flash_ms"] / m["ms"],
            **env,
        }
        rows.append(row)
        print(f"{shape.N:>6} {'yes' if shape.causal else 'no':>6} {row['ms']:8.3f} {row['tflops']:8.1f} "
              f"{row['sdpa_ms']:8.3f} {row['sdpa_tflops']:8.1f} {row['pct_of_sdpa']:6.0f}% "
              f"{row['sdpa_flash_ms']:8.3f} {row['pct_of_sdpa_flash']:5.0f}%", flush=True)
    if not args.no_save:
        out = args.out or gpu_dir() / "bench" / f"{version.name}.csv"
        append_rows(out, rows)
        print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
