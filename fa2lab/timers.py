"""Timing, exactly as the harness times: triton.testing.do_bench medians, graph replay, per-call events, kernel
durations. The queued timing that v7's race and autotuner use is the runtime's (fa2triton.queued_timing)."""

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


def bench_noflush_ms(fn, warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """do_bench without its cache flush: the median of per-call CUDA-event times, calls back to
    back. Beside do_bench and graph replay it splits a small-N gap in two (issue 8): do_bench -
    no-flush is what the 256 MB flush costs the next call (a cold L2, and the call waiting behind
    the flush); no-flush - graph is the per-call cost a graph removes (events, launch latency, and
    the host's time whenever it exceeds the kernel's, since nothing is queued ahead)."""
    import statistics

    import torch

    fn()
    torch.cuda.synchronize()
    probe_s, probe_e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe_s.record()
    for _ in range(5):
        fn()
    probe_e.record()
    torch.cuda.synchronize()
    per_call = max(probe_s.elapsed_time(probe_e) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / per_call))):
        fn()
    return float(statistics.median(event_times(fn, max(1, int(rep_ms / per_call)))))


FLUSH_BYTES = 256 * 1024 * 1024   # triton.testing.do_bench's cache flush (its 256 MB buffer, zeroed before each call)


def flush_buffer():
    """A buffer of FLUSH_BYTES to zero before a call, as do_bench does: L2 then holds its dirty lines."""
    import torch

    return torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def prepared_times(fn, prepare, reps: int = 50) -> list[float]:
    """Per-call ms of fn, each call timed alone by two CUDA events with prepare() enqueued before the
    first: do_bench's protocol with its flush replaced by prepare (a flush, a flush and then a read of
    the inputs, ...). prepare should keep the GPU busy for longer than the host needs to launch fn,
    so that fn's time is the GPU's."""
    import torch

    fn()
    torch.cuda.synchronize()
    return event_times(fn, reps, prepare)


def event_times(fn, reps: int, prepare=None) -> list[float]:
    """Per-call ms of `reps` calls of fn, each between two CUDA events, enqueued back to back (with
    prepare() before each first event when given), read after one synchronisation."""
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        if prepare is not None:
            prepare()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def kernel_names(fn) -> set[str]:
    """The names of the GPU kernels one call of fn launches (torch.profiler's CUDA activity)."""
    return set(kernel_durations(fn, 1))


def kernel_durations(enqueue, reps: int) -> dict[str, list[float]]:
    """GPU kernel durations in ms, by kernel name, of `reps` calls of enqueue (each may launch several
    kernels, or replay a CUDA graph), from torch.profiler's CUDA activity records: the kernels' own start
    and end on the GPU, without the events, launch latency or gaps that per-call timing includes."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            enqueue()
        torch.cuda.synchronize()
    out: dict[str, list[float]] = {}
    for e in prof.events():   # FunctionEvents; a GPU activity's time_range is its start and end on the GPU, in us
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.setdefault(e.name, []).append(e.time_range.elapsed_us() / 1e3)
    return out


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
