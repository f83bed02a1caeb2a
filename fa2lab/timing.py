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


def queued_ms(fn, repeats: int = 20, rounds: int = 3) -> float:
    """GPU time per call of fn with the host queued ahead and the clock settled (queued_times): the
    median of `rounds` batches of `repeats` calls, each batch between two events. A spin twice as long as a
    batch (host and GPU) before each batch, as an earlier form had it, timed a long call at a third of
    the duty it runs at (and at the clock that allows): hence SETTLE_MS. Events around calls the
    host cannot keep up with time the host instead: at N = 512 a lean Gluon launch costs the host about
    30 us and the GPU about 12 (the harness's host_us and graph_ms), so a ranking of
    candidates there needs the queue filled first."""
    import statistics

    return float(statistics.median(queued_times(fn, repeats, rounds)))


def queued_quantiles(fn, quantiles=(0.5, 0.2, 0.8), repeats: int = 10, rounds: int = 5) -> list[float]:
    """queued_ms as triton.autotune's `do_bench` (it asks for the quantiles (0.5, 0.2, 0.8) and keeps the
    least): the autotuner's own do_bench, a 256 MB flush before each call launched through Triton's front
    end, is paced by the host at small N, and v7's pick then changed from process to process (the
    harness's config column at N = 512 and 1024 causal: 85% and 90% of cuDNN in the
    processes that picked differently, 98-120% in the others)."""
    import statistics

    times = sorted(queued_times(fn, repeats, rounds))
    cuts = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    return [times[0] if q <= 0 else times[-1] if q >= 1 else cuts[round(q * 100) - 1] for q in quantiles]


# Calls run back to back for this long before the timed ones (queued_times): the SM clock then sits where
# the call's own power draw holds it. Without it, v7's tl autotuner timed 64,64,4,3 and 128,128,4,3 at 166 us
# each at causal N = 4096 (1980 MHz, bursts of 10 calls behind an idle spin), and took either; held busy, 64,64
# ran at 1665-1890 MHz and 190 us, 128,128 at 1845-1965 MHz and 172 us (experiment tl-pick).
SETTLE_MS = 40.0


def spin_ms(gpu_ms: float, host_ms: float, settle_calls: int, timed_calls: int) -> float:
    """How long a spin kernel must hold the stream after `settle_calls` calls so that the host has
    queued `timed_calls` more before the GPU reaches them (per-call GPU and host times): none when the
    settle calls leave the GPU that much work queued already (the GPU is the slower), else twice the
    host's time for the timed calls."""
    need = 2 * timed_calls * host_ms
    return 0.0 if settle_calls * (gpu_ms - host_ms) >= need else need


def queued_times(fn, repeats: int, rounds: int, settle_ms: float = SETTLE_MS) -> list[float]:
    """Per-call ms of `rounds` batches of `repeats` calls, run back to back after settle_ms of calls
    (SETTLE_MS), with the host queued ahead of the timed ones (behind a spin kernel where the settle
    calls leave too little queued: spin_ms)."""
    import torch

    from fa2lab.gpu import facts

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(repeats):
        fn()
    host_ms = 1e3 * (time.perf_counter() - t0) / repeats
    end.record()
    end.synchronize()
    gpu_ms = start.elapsed_time(end) / repeats   # the host's pace when the host is the slower
    settle_calls = int(settle_ms / max(gpu_ms, host_ms, 1e-3))
    for _ in range(settle_calls):
        fn()
    spin = spin_ms(gpu_ms, host_ms, settle_calls, rounds * repeats)
    if spin:
        torch.cuda._sleep(int(spin * 1e-3 * facts(torch.cuda.current_device()).sm_clock_mhz * 1e6))
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(rounds + 1)]
    marks[0].record()
    for r in range(rounds):
        for _ in range(repeats):
            fn()
        marks[r + 1].record()
    marks[-1].synchronize()
    return [a.elapsed_time(b) / repeats for a, b in zip(marks, marks[1:])]


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
