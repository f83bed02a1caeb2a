"""The Round 2 matmul peak table: one Triton matmul with different input and accumulator types.

    python profiling/matmul_peak.py                 # time each variant (do_bench), write results/<gpu>/ceilings/
    python profiling/run_profile.py --tool ncu --kernel matmul   # the same variants under Nsight Compute

For each variant (bf16 -> fp32, fp16 -> fp32, tf32 -> fp32, fp16 -> fp16, int8 -> int32) it
reports TFLOP/s (TOP/s for int8) at M = N = K = 8192 against the tensor-core peak this
GPU's architecture gives for bf16 with fp32 accumulation; run under Nsight Compute, the
report gives both the tensor-pipe counter and the roofline's % of peak, which is how the
article found GeForce Ada's factor-of-two counter artefact. Also measures the two ceilings
METHOD.md asks for: a device-to-device copy's bandwidth and torch's bf16 matmul rate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# name -> (input torch dtype name, accumulator tl dtype name, output torch dtype name, tl.dot input_precision)
VARIANTS = {
    "bf16->fp32": ("bfloat16", "float32", "float32", None),
    "fp16->fp32": ("float16", "float32", "float32", None),
    "tf32->fp32": ("float32", "float32", "float32", "tf32"),
    "fp16->fp16": ("float16", "float16", "float16", None),
    "int8->int32": ("int8", "int32", "int32", None),
}


@triton.jit
def matmul_kernel(
    # pointers
    a_ptr, b_ptr, c_ptr,
    # sizes
    M, N, K,
    # strides
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    # meta-parameters
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACC_DTYPE: tl.constexpr, TF32: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0)
        if TF32:
            acc = tl.dot(a, b, acc=acc, input_precision="tf32", out_dtype=ACC_DTYPE)
        else:
            acc = tl.dot(a, b, acc=acc, out_dtype=ACC_DTYPE)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b, variant: str, block=(128, 128, 64), num_warps=8, num_stages=3):
    import torch

    _, acc, out, prec = VARIANTS[variant]
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=getattr(torch, out))
    bm, bn, bk = block
    matmul_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, ACC_DTYPE=getattr(tl, acc), TF32=prec == "tf32",
        num_warps=num_warps, num_stages=num_stages)
    return c


def range_name(variant: str, size: int) -> str:
    """The NVTX range (and so, in the ncu export, the kernel name) of one variant."""
    return f"matmul {variant} S={size}"


def operands(variant: str, M: int, N: int, K: int, device="cuda"):
    import torch

    dtype = getattr(torch, VARIANTS[variant][0])
    if dtype == torch.int8:
        return (torch.randint(-8, 8, (M, K), device=device, dtype=dtype),
                torch.randint(-8, 8, (K, N), device=device, dtype=dtype))
    scale = 0.1 if dtype == torch.float16 else 1.0   # keep fp16 accumulation finite
    return (torch.randn(M, K, device=device).mul(scale).to(dtype), torch.randn(K, N, device=device).to(dtype))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--iters", type=int, default=0, help="run each variant this many times untimed (under ncu)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("matmul_peak needs a CUDA GPU", file=sys.stderr)
        return 2
    from fa2triton.gpu import facts
    from fa2lab.provenance import ClockSampler, environment, now
    from fa2lab.results import append_rows, gpu_dir
    from fa2lab.timers import bench_ms, warm_gpu

    f, S = facts(), args.size
    if args.iters:
        # Under ncu (`invoke profile --tool ncu --kernel matmul`): compile and warm every variant, then one
        # profiler range in which each variant runs inside an NVTX range named after it.
        from profiling.drivers import Call, capture, warm_up

        calls = []
        for variant in args.variants.split(","):
            a, b = operands(variant, S, S, S)
            calls.append(Call(range_name(variant, S), lambda a=a, b=b, v=variant: matmul(a, b, v)))
        warm_up(calls, 1.0)
        capture(calls, args.iters)
        return 0
    warm_gpu(1.0)
    rows = []
    for variant in args.variants.split(","):
        a, b = operands(variant, S, S, S)
        with ClockSampler() as clocks:
            ms = bench_ms(lambda: matmul(a, b, variant))
        c = clocks.summary()
        tflops = 2 * S**3 / (ms * 1e-3) / 1e12
        peak = f.tensor_peak_tflops(c.get("sm_clock_mhz_median"))
        rows.append({"kind": "triton_matmul", "variant": variant, "size": S, "ms": ms, "tflops": tflops,
                     "bf16_fp32_peak_tflops_at_clock": peak, **c})
        print(f"{variant:<12} {ms:8.3f} ms {tflops:8.1f} T(FL)OP/s" + (f"  ({100 * tflops / peak:.0f}% of the "
              f"bf16->fp32 peak at {c.get('sm_clock_mhz_median')} MHz)" if peak else ""), flush=True)
    # The two ceilings of METHOD.md: a large device-to-device copy and torch's bf16 matmul.
    src = torch.empty(2 * 1024**3, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    rows.append({"kind": "d2d_copy", "variant": "read+write bytes", "size": src.numel(), "ms": ms,
                 "gb_per_s": 2 * src.numel() / (ms * 1e-3) / 1e9})
    a, b = operands("bf16->fp32", S, S, S)
    ms = bench_ms(lambda: a @ b)
    rows.append({"kind": "torch_matmul", "variant": "bf16", "size": S, "ms": ms, "tflops": 2 * S**3 / (ms * 1e-3) / 1e12})
    print(f"copy: {rows[-2]['gb_per_s']:.0f} GB/s (read + write); torch bf16 matmul: {rows[-1]['tflops']:.0f} TFLOP/s")
    if not args.no_save:
        out = append_rows(gpu_dir() / "ceilings" / "matmul_peak.csv", [{**r, "date": now(), **environment()}
                                                                        for r in rows])
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
