"""Timing, exactly as the harness times: triton.testing.do_bench medians."""

from __future__ import annotations

import time


def bench_ms(fn, **kw) -> float:
    """The harness's number: do_bench median (25 ms warm-up, 100 ms of repetitions,
    a 256 MB cache flush before every call)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, return_mode="median", **kw))


def bench_graph_ms(fn, **kw) -> float:
    """CUDA-graph replay median: the kernel's time without Python's per-call cost or the flush."""
    import torch
    import triton.testing

    with torch.cuda.stream(torch.cuda.Stream()):
        return float(triton.testing.do_bench_cudagraph(fn, return_mode="median", **kw))


def host_us_per_call(fn, calls: int = 200) -> float:
    """Wall time per call on the host with the GPU queue never drained (launch cost)."""
    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def warm_gpu(seconds: float = 1.0) -> None:
    """Keep the GPU busy with matrix products so its clock has ramped up (Round 0, Round 3)."""
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
