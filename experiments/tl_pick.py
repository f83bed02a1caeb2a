"""Experiment tl-pick: what v7's tl autotuner and race timed in fresh processes, each candidate pinned beside.

    python experiments/tl_pick.py [--N N ...] [--causal 0|1|2] [--rounds R] [--procs P]

Rows: results/<gpu>/experiments/tl_pick.csv (`invoke experiment tl-pick`). GPU only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fa2lab import shapes  # noqa: E402
from experiments.common import parser, run, forced, fresh_processes, inputs, masks  # noqa: E402


class _ShapeRows:
    """Rows tagged with `shape` (a dict the caller updates before each call), each with its place among that shape's
    rows and the SM clock (clock(), MHz) before and after what it records."""

    def __init__(self, clock):
        self.clock = clock
        self.rows: list[dict] = []
        self.shape: dict = {}

    def _append(self, before: float, **fields) -> None:
        self.rows.append({"shape": dict(self.shape), "order": sum(r["shape"] == self.shape for r in self.rows),
                          **fields, "clock_before_mhz": before, "clock_after_mhz": self.clock()})

class TuningRecorder(_ShapeRows):
    """Every timing a triton.autotune object makes while installed (`with TuningRecorder(tuner, label, clock):`): its
    candidate (label(config)), the median it kept (the first of do_bench's quantiles), its place in the order of
    timing, the SM clock before and after, and its seconds (the first call compiles), tagged with `shape`
    (_ShapeRows); `configs` keeps each label's configuration as timed (after the tuner's pruning). The tuner's own
    _bench is put back on exit."""

    def __init__(self, tuner, label, clock):
        super().__init__(clock)
        self.tuner, self.label = tuner, label
        self.configs: dict = {}

    def __enter__(self):
        import time

        self._own = self.tuner.__dict__.get("_bench")   # an instance's own _bench, if it had one (else its class's)
        bench = self.tuner._bench

        def recording(*args, config, **meta):
            t0, before = time.perf_counter(), self.clock()
            times = bench(*args, config=config, **meta)
            kept = times[0] if isinstance(times, (list, tuple)) else times
            self.configs[self.label(config)] = config
            self._append(before, candidate=self.label(config), tuner_ms=float(kept), bench_s=time.perf_counter() - t0)
            return times

        self.tuner._bench = recording
        return self

    def __exit__(self, *exc):
        if self._own is None:
            del self.tuner._bench
        else:
            self.tuner._bench = self._own
        return False

class RaceRecorder(_ShapeRows):
    """Every timing v7's race makes while installed (`with RaceRecorder(clock):`; v7._faster_of looks
    fa2triton.queued_timing.queued_ms up per call, the Gluon module's own candidate timing does not): the launch timed,
    named "<path>:<label>" from the launch the timed call wraps (its default argument), its ms, its place among the
    shape's race timings, and the SM clock before and after, tagged with `shape` (_ShapeRows)."""

    def __enter__(self):
        import fa2triton.queued_timing

        self._queued_ms = timed = fa2triton.queued_timing.queued_ms

        def recording(fn, *args, **kw):
            launch = (fn.__defaults__ or (None,))[0]
            before = self.clock()
            ms = timed(fn, *args, **kw)
            self._append(before, candidate=f"{getattr(launch, 'path', 'tma')}:{getattr(launch, 'label', '?')}",
                         race_ms=float(ms))
            return ms

        fa2triton.queued_timing.queued_ms = recording
        return self

    def __exit__(self, *exc):
        import fa2triton.queued_timing

        fa2triton.queued_timing.queued_ms = self._queued_ms
        return False

def tl_pick(args, save):
    """Why v7's tl path picks differently from process to process (issue 6: at causal N = 4096 its autotuner took
    64,64,4,3 in 16 of 31 harness runs, two protocols of 16 and 15 in results/nvidia-h200/bench/v7_hopper.csv, and
    128,128,4,3 in the other 15, though 128,128 is 6% faster there by graph replay and by do_bench without the flush).
    In each of --procs fresh processes (this script again, --worker): v7 called once at every harness shape in the
    harness's order (non-causal, then causal, N up; v7's defaults, the Gluon path and the race on), each timing its tl
    autotuner makes recorded (TuningRecorder: candidate, kept median, order, SM clock before and after, seconds) and
    each timing of its race (RaceRecorder), then at the --N shapes and --causal masks every candidate it timed there
    pinned on the tl path, and the Gluon path's pick where it ran in the race, --rounds interleaved rounds of graph
    replay and do_bench (its flush). Rows: kind "tuner" (one per autotuner timing, the process's pick beside it), "race"
    (one per race timing) and "pinned" (one per candidate and round). The experiment's first run (the earliest rows of
    results/nvidia-h200/experiments/tl_pick.csv) found the cause: the autotuner timed 64,64 and 128,128 at 166 us each
    at 1980 MHz, while held busy they ran at 190 and 172 us, 64,64 at a lower clock (fa2triton.queued_timing.SETTLE_MS)."""
    if not args.worker:
        fresh_processes(__file__, args)
        return
    import contextlib
    import os

    import torch
    import triton.testing

    from fa2triton.interpret import autotuner_of, only_config
    from fa2lab.provenance import sm_clock_mhz
    from fa2lab.timers import bench_graph_ms
    from fa2lab.switches import load

    v7 = load("v7_hopper")
    FA, tuner = v7.FlashAttentionTriton, autotuner_of(v7)
    FA.LAUNCH_FROM = "race"   # what this experiment records: the race, not the launch table's entry

    def clock() -> float:
        return sm_clock_mhz(torch.cuda.current_device())

    picked = {}
    with TuningRecorder(tuner, v7.config_label, clock) as rec, RaceRecorder(clock) as race:
        for shape in shapes.harness_shapes():
            rec.shape = race.shape = {"N": shape.N, "causal": int(shape.causal)}
            q, k, v = inputs(shape.N)
            FA.apply(q, k, v, shape.causal)
            torch.cuda.synchronize()
            picked[(shape.N, int(shape.causal))] = f"{v7.last_path()}:{v7.last_config()}"
    pid = os.getpid()
    rows = [{"kind": kind, "pid": pid, **r.pop("shape"), **r}
            for kind, recorded in (("tuner", rec.rows), ("race", race.rows)) for r in recorded]
    for r in rows:
        r["picked"] = picked[(r["N"], r["causal"])]
    for causal in masks(args):
        for N in args.Ns:
            here = [r for r in rows if (r["N"], r["causal"]) == (N, int(causal))]
            # (path, configuration): each tl candidate timed here, and the Gluon path's pick if it ran in the race
            pins = [("tma", rec.configs[label])
                    for label in dict.fromkeys(r["candidate"] for r in here if r["kind"] == "tuner")]
            pins += [("gluon", None)] * any(r["kind"] == "race" and r["candidate"].startswith("gluon:") for r in here)
            q, k, v = inputs(N)
            for r in range(args.rounds):
                for path, cfg in pins:
                    with only_config(tuner, cfg) if cfg is not None else contextlib.nullcontext():
                        FA.launches.entries.clear()
                        call = lambda: forced(FA, path, lambda: FA.apply(q, k, v, causal))  # noqa: E731
                        call()
                        rows.append({"kind": "pinned", "pid": pid, "N": N, "causal": int(causal), "round": r,
                                     "candidate": v7.config_label(cfg) if cfg is not None else
                                     f"gluon:{v7.last_config()}", "graph_ms": bench_graph_ms(call),
                                     "ms": triton.testing.do_bench(call, return_mode="median"), "clock_after_mhz":
                                     clock(), "picked": picked[(N, int(causal))]})
                FA.launches.entries.clear()
    save("tl_pick", rows)
    for causal in masks(args):
        for N in args.Ns:
            tuned, raced, pinned = ([r for r in rows if r["kind"] == kind and (r["N"], r["causal"]) == (N, int(causal))]
                                    for kind in ("tuner", "race", "pinned"))
            print(f"pid {pid} N={N} causal={int(causal)} picked {picked[(N, int(causal))]}; tuner: "
                  + ", ".join(f"{r['candidate']} {1e3 * r['tuner_ms']:.1f} us @{r['clock_before_mhz']:.0f}-"
                              f"{r['clock_after_mhz']:.0f} MHz" for r in tuned) + "; race: "
                  + ", ".join(f"{r['candidate']} {1e3 * r['race_ms']:.1f}" for r in raced)
                  + "; pinned (graph / do_bench): "
                  + ", ".join(f"{c} {1e3 * statistics.median(r['graph_ms'] for r in pinned if r['candidate'] == c):.1f}"
                              f" / {1e3 * statistics.median(r['ms'] for r in pinned if r['candidate'] == c):.1f} us"
                              for c in dict.fromkeys(r["candidate"] for r in pinned)), flush=True)


def main(argv=None) -> int:
    ap = parser(__doc__ + "\n" + tl_pick.__doc__, Ns=[4096], causal=1)
    ap.add_argument("--procs", type=int, default=6, help="fresh processes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)   # one of its processes
    return run("tl-pick", tl_pick, ap, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
