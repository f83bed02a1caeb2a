"""The backward benchmark (issue 7), for a version whose backward runs the Triton kernels
of fa2triton/flash_backward_triton.py. The version is whichever fa2triton/kernels/<version>
folder is on PYTHONPATH:

    PYTHONPATH=fa2triton/kernels/v6_... python harness/bench_flashattention_backward.py

For each harness shape (B = 4, H = 8, D = 64, bf16; N = 512..4096; non-causal then
causal) it times, with do_bench medians in this process on the same inputs,
  - forward + backward: FlashAttentionTriton.apply, then torch.autograd.grad for Q, K, V;
  - backward only: torch.autograd.grad on a graph kept from one forward (retain_graph);
and the same two for SDPA (default backend, and the FLASH_ATTENTION backend). FLOPs: the
backward counts 2.5x the forward's (fa2lab.shapes.flops: five matrix products of the size
of the forward's two), forward + backward 3.5x. It checks the gradients against SDPA's,
prints a table, and appends one CSV row per shape, with provenance, to
results/<gpu>/bench_bwd/<version>.csv.

A version that still uses the PyTorch recompute (fa2triton.reference.autograd_backward, v0-v5)
can be measured too, as the baseline: the backward_impl column says which backward ran.
If the version's FlashAttentionTriton has the class attributes BACKWARD_DQ_MODE and
BACKWARD_CONFIG, --dq-mode and --config override them (the atomic vs separate dQ
comparison, and one point of a backward sweep).

Peers (fa2lab.peers, --peers; default: every registered one) are timed the same two ways in
the same process, through autograd on their own function: for flash-attn-4 (its sm90
backward), fa4_fwd_bwd_ms, fa4_bwd_ms, fa4_bwd_host_us, fa4_bwd_tflops, fa4_fwd_bwd_tflops,
bwd_pct_of_fa4 and fwd_bwd_pct_of_fa4 (100 * the peer's ms / ours), fa4_rel_err_d{q,k,v}_vs_sdpa,
fa4_status ("ok", "not installed", or why it failed at that shape) and peer_versions.
--D 128 runs the same shapes at head dimension 128.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fa2lab package, uninstalled

from fa2lab import shapes  # noqa: E402
from fa2lab.shapes import BWD_FLOP_FACTOR, FWD_BWD_FLOP_FACTOR  # noqa: E402
from fa2triton.flash_backward_triton import DQ_CHOICES  # noqa: E402


def backward_impl(cls) -> str:
    """Where FlashAttentionTriton.backward comes from: 'module.function'."""
    fn = getattr(cls.backward, "__func__", cls.backward)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def measure(FlashAttentionTriton, shape: shapes.Shape, host: bool = True, peers=(), device: str = "cuda",
            timer=None) -> dict:
    """One shape's measured columns: ours, SDPA's and each peer's (fa2lab.peers.BackwardRun: a peer that
    fails gives its reason in <peer>_status and NaN times). `device` and `timer` (default fa2lab.timers)
    are for the tests, which run this on the CPU with stand-in timings."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fa2lab import peers as peer_registry
    from fa2lab import timers as timing
    from fa2lab.provenance import ClockSampler
    from fa2triton.reference import relative_error

    timing = timer or timing
    B, H, N, D, causal = shape.B, shape.H, shape.N, shape.D, shape.causal
    q, k, v = (torch.randn(B * H, N, D, device=device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    # SDPA gets its own leaves, (B, H, N, D) views of the same values.
    q4, k4, v4 = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
    dO = torch.randn(B * H, N, D, device=device, dtype=torch.bfloat16)
    dO4 = dO.view(B, H, N, D)

    def ours_fwd_bwd():
        return torch.autograd.grad(FlashAttentionTriton.apply(q, k, v, causal), (q, k, v), dO)

    def sdpa_fwd_bwd():
        return torch.autograd.grad(F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal), (q4, k4, v4), dO4)

    def flash_fwd_bwd():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.autograd.grad(F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal),
                                       (q4, k4, v4), dO4)

    # Backward only: one forward each, its graph kept for repeated backward calls.
    O_ours = FlashAttentionTriton.apply(q, k, v, causal)
    O_sdpa = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

    def ours_bwd():
        return torch.autograd.grad(O_ours, (q, k, v), dO, retain_graph=True)

    def sdpa_bwd():
        return torch.autograd.grad(O_sdpa, (q4, k4, v4), dO4, retain_graph=True)

    # Correctness against SDPA's gradients (default backend), relative Frobenius error.
    ours_g, sdpa_g = ours_bwd(), sdpa_bwd()
    errs = {f"rel_err_d{n}_vs_sdpa": relative_error(a.view(B, H, N, D), b) for n, a, b in zip("qkv", ours_g, sdpa_g)}
    # Each peer gets its own leaves in its own layout once here, one checked forward and backward, outside the timing.
    runs = [peer_registry.BackwardRun(p, q, k, v, dO, B, H, causal, sdpa_g) for p in peers]

    row: dict = {}
    with ClockSampler() as clocks:
        row["fwd_bwd_ms"] = timing.bench_ms(ours_fwd_bwd)
        row["bwd_ms"] = timing.bench_ms(ours_bwd)
        row["sdpa_fwd_bwd_ms"] = timing.bench_ms(sdpa_fwd_bwd)
        row["sdpa_bwd_ms"] = timing.bench_ms(sdpa_bwd)
        flash_only = None
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                O_flash = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

            def flash_bwd():
                return torch.autograd.grad(O_flash, (q4, k4, v4), dO4, retain_graph=True)

            row["sdpa_flash_fwd_bwd_ms"] = timing.bench_ms(flash_fwd_bwd)
            row["sdpa_flash_bwd_ms"] = timing.bench_ms(flash_bwd)
            flash_only = flash_bwd
        except RuntimeError as e:  # the backend may not support this GPU or shape
            row["sdpa_flash_fwd_bwd_ms"] = row["sdpa_flash_bwd_ms"] = float("nan")
            print(f"  SDPA FLASH_ATTENTION backend unavailable: {e}", file=sys.stderr)
        for r in runs:
            r.time("fwd_bwd_ms", timing.bench_ms, r.fwd_bwd)
            r.time("bwd_ms", timing.bench_ms, r.bwd)
    row.update(clocks.summary())
    row.update(errs)
    if host:
        row.update(host_columns({"": ours_bwd, "sdpa_": sdpa_bwd, "sdpa_flash_": flash_only}, timing))
        for r in runs:
            r.time("bwd_host_us", timing.host_us_per_call, r.bwd)
    for r in runs:
        row.update(r.row())
    return row


def host_columns(fns: dict, timing=None) -> dict:
    """Issue 8's host split for the backward: per prefix ('' for ours, 'sdpa_', 'sdpa_flash_'), the
    host's time per backward call with the GPU queue never drained (bwd_host_us). Where it exceeds
    the GPU's time, do_bench's bwd_ms measures the host. (CUDA-graph replay of forward + backward
    through autograd was tried and not kept: with torch 2.11 the capture was
    invalidated, 'AccumulateGrad node's stream does not match', for ours and SDPA alike, and the
    failed capture left the CUDA generator unusable in the process.)"""
    if timing is None:
        from fa2lab import timers as timing

    return {f"{prefix}bwd_host_us": timing.host_us_per_call(bwd) if bwd is not None else float("nan")
            for prefix, bwd in fns.items()}


def make_row(version: str, run_id: str, shape: shapes.Shape, m: dict, env: dict, meta: dict, peers=()) -> dict:
    """One CSV row: the run's backward (meta: backward_impl, dq_mode, dq_mode_ran, bwd_config), the shape, the
    measured columns m, the derived ones (ours and each peer's) and provenance."""
    from fa2lab import peers as peer_registry
    from fa2lab.provenance import now

    fwd_flop = shape.flops
    bwd_flop, fb_flop = BWD_FLOP_FACTOR * fwd_flop, FWD_BWD_FLOP_FACTOR * fwd_flop
    return {
        "version": version, "run_id": run_id, "date": now(), **meta,
        "B": shape.B, "H": shape.H, "N": shape.N, "D": shape.D, "dtype": shapes.DTYPE_NAME,
        "causal": int(shape.causal), "fwd_flops": fwd_flop, "bwd_flops": bwd_flop, "fwd_bwd_flops": fb_flop,
        **m,
        "bwd_tflops": shapes.tflops(bwd_flop, m["bwd_ms"]),
        "fwd_bwd_tflops": shapes.tflops(fb_flop, m["fwd_bwd_ms"]),
        "sdpa_bwd_tflops": shapes.tflops(bwd_flop, m["sdpa_bwd_ms"]),
        "sdpa_fwd_bwd_tflops": shapes.tflops(fb_flop, m["sdpa_fwd_bwd_ms"]),
        "bwd_pct_of_sdpa": 100.0 * m["sdpa_bwd_ms"] / m["bwd_ms"],
        "bwd_pct_of_sdpa_flash": 100.0 * m["sdpa_flash_bwd_ms"] / m["bwd_ms"],
        "fwd_bwd_pct_of_sdpa": 100.0 * m["sdpa_fwd_bwd_ms"] / m["fwd_bwd_ms"],
        "fwd_bwd_pct_of_sdpa_flash": 100.0 * m["sdpa_flash_fwd_bwd_ms"] / m["fwd_bwd_ms"],
        **peer_registry.backward_ratios(m, list(peers), bwd_flop, fb_flop),
        **({"peer_versions": peer_registry.versions_column(list(peers))} if peers else {}),
        **env,
    }


def table_header(peers=()) -> str:
    return (f"{'N':>6} {'causal':>6} {'bwd ms':>8} {'bwd TF':>7} {'SDPA':>8} {'% SDPA':>7} {'FA2':>8} {'% FA2':>6} "
            f"{'f+b ms':>8} {'f+b TF':>7} {'SDPA':>8} {'% SDPA':>7} {'FA2':>8} {'% FA2':>6} {'max err':>8} "
            f"{'host us':>8} {'SDPA':>6} {'FA2':>6}"
            + "".join(f" {p.name + ' bwd':>8} {'% ' + p.name:>7} {p.name + ' f+b':>8} {'% ' + p.name:>7}"
                      for p in peers))


def table_line(row: dict, peers=()) -> str:
    from fa2lab.peers import OK

    err = max(row["rel_err_dq_vs_sdpa"], row["rel_err_dk_vs_sdpa"], row["rel_err_dv_vs_sdpa"])
    line = (f"{row['N']:>6} {'yes' if row['causal'] else 'no':>6} "
            f"{row['bwd_ms']:8.3f} {row['bwd_tflops']:7.1f} {row['sdpa_bwd_ms']:8.3f} {row['bwd_pct_of_sdpa']:6.0f}% "
            f"{row['sdpa_flash_bwd_ms']:8.3f} {row['bwd_pct_of_sdpa_flash']:5.0f}% "
            f"{row['fwd_bwd_ms']:8.3f} {row['fwd_bwd_tflops']:7.1f} {row['sdpa_fwd_bwd_ms']:8.3f} "
            f"{row['fwd_bwd_pct_of_sdpa']:6.0f}% {row['sdpa_flash_fwd_bwd_ms']:8.3f} "
            f"{row['fwd_bwd_pct_of_sdpa_flash']:5.0f}% {err:8.1e} "
            f"{row.get('bwd_host_us', float('nan')):8.1f} {row.get('sdpa_bwd_host_us', float('nan')):6.1f} "
            f"{row.get('sdpa_flash_bwd_host_us', float('nan')):6.1f}")
    for p in peers:
        n = p.name
        line += (f" {row[n + '_bwd_ms']:8.3f} {row['bwd_pct_of_' + n]:6.0f}%"
                 f" {row[n + '_fwd_bwd_ms']:8.3f} {row['fwd_bwd_pct_of_' + n]:6.0f}%")
    notes = [f"{p.name}: {row[p.name + '_status']}" for p in peers if row[p.name + "_status"] != OK]
    return line + (f"   ({'; '.join(notes)})" if notes else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="*", default=list(shapes.SEQ_LENS), help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--dq-mode", choices=["default", *DQ_CHOICES], default="default",
                    help="override FlashAttentionTriton.BACKWARD_DQ_MODE (versions that have it)")
    ap.add_argument("--config", default=None,
                    help="override FlashAttentionTriton.BACKWARD_CONFIG: 'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES'")
    ap.add_argument("--D", type=int, choices=shapes.HEAD_DIMS, default=shapes.HEAD_DIM,
                    help=f"head dimension (default {shapes.HEAD_DIM}, the harness's)")
    ap.add_argument("--peers", default="all",
                    help="peer backends timed beside (fa2lab.peers), comma-separated; all (default: those that "
                         "cannot run here get NaN and their status) or none")
    ap.add_argument("--run-id", default=os.environ.get("FA2_RUN_ID", ""), help="groups rows of one protocol run")
    ap.add_argument("--no-host", action="store_true", help="skip the host-time columns (bwd_host_us)")
    ap.add_argument("--no-save", action="store_true", help="print only; write no CSV")
    ap.add_argument("--out", type=Path, default=None,
                    help="CSV path (default results/<gpu>/bench_bwd/<version>.csv)")
    args = ap.parse_args(argv)
    from fa2lab import peers as peer_registry

    try:
        peers = peer_registry.chosen(args.peers)
    except ValueError as e:
        ap.error(f"--peers: {e}")

    import torch

    if not torch.cuda.is_available():
        print("bench_flashattention_backward.py needs a CUDA GPU; without one, run the tests under the "
              "interpreter (python -m pytest tests/test_backward.py).", file=sys.stderr)
        return 2

    import flashattention_autograd_function_triton as kernel_module
    from fa2lab.provenance import environment
    from fa2lab.results import append_rows, gpu_dir
    from fa2lab.switches import apply
    from fa2triton.versions import of_module

    apply(kernel_module)   # this process's FA2_V7_* switches

    FlashAttentionTriton = kernel_module.FlashAttentionTriton
    for option, attr, value in (("--dq-mode", "BACKWARD_DQ_MODE", None if args.dq_mode == "default" else args.dq_mode),
                                ("--config", "BACKWARD_CONFIG", args.config)):
        if value is None:
            continue
        if not hasattr(FlashAttentionTriton, attr):
            print(f"{option}: this version's FlashAttentionTriton has no {attr}", file=sys.stderr)
            return 2
        if attr == "BACKWARD_CONFIG":
            from fa2triton.backward_config import BackwardConfig

            value = BackwardConfig.parse(value)
        setattr(FlashAttentionTriton, attr, value)

    version = of_module(kernel_module)
    impl = backward_impl(FlashAttentionTriton)
    dq_mode = getattr(FlashAttentionTriton, "BACKWARD_DQ_MODE", "")
    bwd_config = getattr(FlashAttentionTriton, "BACKWARD_CONFIG", None)
    ran = (lambda shape: dq_mode)   # the mode each shape runs: "auto" resolves per shape
    config_of = None                # the configuration each shape runs, where that differs by shape
    if hasattr(FlashAttentionTriton, "BACKWARD_CONFIG"):   # the Triton backward
        from fa2triton import flash_backward_triton as bk
        from fa2triton.backward_config import default_config

        if bwd_config is None:   # the backward's own default
            bwd_config = default_config(args.D, torch.bfloat16)
        ws = bk.gluon_ws_takes(args.D, torch.bfloat16, getattr(FlashAttentionTriton, "BACKWARD_DKDV", "triton"))
        if dq_mode in ("auto", "deterministic"):   # "deterministic": auto without the ws kernel's dQ
            ran = (lambda shape: bk.auto_dq_mode(shape.B * shape.H, shape.N, shape.N, shape.D, shape.causal,
                                                 gluon_ws=ws and dq_mode == "auto"))
        if ws:   # where dQ is atomic the Gluon kernel runs, with its own configuration
            from fa2triton.gluon import gluon_backward_ws

            ws_config = gluon_backward_ws.label(args.D)
            config_of = (lambda shape, c=str(bwd_config): ws_config if ran(shape) == "atomic" else c)
    bwd_config = str(bwd_config or "")
    masks = shapes.masks_from(args.causal)
    shape_list = [dataclasses.replace(s, D=args.D) for s in shapes.harness_shapes(args.N, masks)]
    env = environment()
    rows = []
    print(f"{version.name} on {env['gpu']} (driver {env['driver']}, torch {env['torch']}, triton {env['triton']})")
    print(f"backward: {impl}" + (f", dq_mode {dq_mode}" if dq_mode else "") + (f", {bwd_config}" if bwd_config else "")
          + (f"; where dQ runs atomic, the Gluon kernel {ws_config}" if config_of else ""))
    for p in peers:
        print(f"peer {p.name} ({p.label}): {p.status()}" + (f", {p.versions()}" if p.versions() else ""))
    peer_registry.warm_up(peers, shape_list, backward=True)   # flash-attn-4 compiles here, before any timing
    print(table_header(peers))
    for shape in shape_list:
        m = measure(FlashAttentionTriton, shape, host=not args.no_host, peers=peers)
        meta = {"backward_impl": impl, "dq_mode": dq_mode, "dq_mode_ran": ran(shape),
                "bwd_config": config_of(shape) if config_of else bwd_config}
        row = make_row(version.name, args.run_id, shape, m, env, meta, peers)
        rows.append(row)
        print(table_line(row, peers), flush=True)
    if not args.no_save:
        out = args.out or gpu_dir() / "bench_bwd" / f"{version.name}.csv"
        append_rows(out, rows)
        print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
