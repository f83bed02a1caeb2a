"""GPU time per call with the host queued ahead and the clock settled: how v7's autotuner (queued_quantiles, its
do_bench) and its race between paths (queued_ms) time their candidates, rather than by Triton's do_bench, whose
flush before each call leaves small-N calls paced by the host. The numbers behind it: docs/worklogs/v7_hopper.md."""

from __future__ import annotations

import time


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

    from .gpu import facts

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
