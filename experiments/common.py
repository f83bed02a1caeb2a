"""What the experiments share: seeded inputs, the masks an experiment runs, interleaved timing, the kernels' own GPU
durations, forcing v7's path, a backward case on v7's forward, fresh worker processes, and each experiment's command
line and row saving (run)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fa2lab import shapes  # noqa: E402

V6 = "v6_longest_first"


def inputs(N, seed=0, D=shapes.HEAD_DIM, heads=shapes.BATCH * shapes.HEADS):
    """Q, K, V: (heads, N, D) bf16 from one seeded generator (heads: the harness's B * H unless given)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(heads, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]


def backward_case(N: int, D: int, causal: bool):
    """A backward experiment's shape on v7's forward: the harness's B * H heads of N x D bf16 (`inputs`) and a dO;
    returns (Q, K, V, dO, O, L, cudnn): the inputs detached, v7's O and the L it saves for its backward, and a call
    of cuDNN's whole backward (SDPA's default backend on B x H views, autograd on a kept graph)."""
    import torch
    import torch.nn.functional as F

    from fa2triton.reference import saved_lse
    from fa2lab.switches import load

    B, H = shapes.BATCH, shapes.HEADS
    q, k, v = (t.requires_grad_() for t in inputs(N, D=D))
    dO = torch.randn_like(q)
    q4, k4, v4 = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
    O_s = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
    O7 = load("v7_hopper").FlashAttentionTriton.apply(q, k, v, causal)
    cudnn = lambda: torch.autograd.grad(O_s, (q4, k4, v4), dO.view(B, H, N, D), retain_graph=True)  # noqa: E731
    return (*(t.detach() for t in (q, k, v)), dO, O7.detach(), saved_lse(O7), cudnn)


def masks(args) -> tuple[bool, ...]:
    """The causal flags an experiment runs: --causal 2 is both (causal first), 0 or 1 one of them."""
    return (True, False) if args.causal == 2 else (bool(args.causal),)


def spread(xs) -> tuple[float, float, float]:
    """(median, min, max) of repeated measurements; NaNs when there are none."""
    return (statistics.median(xs), min(xs), max(xs)) if xs else (float("nan"),) * 3


def interleaved(calls: dict, rounds: int, timer=None) -> dict:
    """(median, min, max) of `rounds` timings per call, the calls interleaved round by round; timer(fn) -> ms,
    do_bench (fa2lab.timers.bench_ms) unless given."""
    if timer is None:
        from fa2lab.timers import bench_ms as timer

    times: dict = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            times[k].append(timer(fn))
    return {k: spread(v) for k, v in times.items()}


def forced(FA, path: str, call):
    """call() with FA.FORCE_PATH = path (the launch cache keys on it, so each path keeps its own launch)."""
    before = FA.FORCE_PATH
    FA.FORCE_PATH = path
    try:
        return call()
    finally:
        FA.FORCE_PATH = before


def spin_cycles() -> int:
    """About 30 us of SM cycles at this GPU's clock (fa2triton.gpu.facts): torch.cuda._sleep's argument for a spin that
    keeps the GPU busy while the host queues the next call."""
    import torch

    from fa2triton.gpu import facts

    return int(30 * facts(torch.cuda.current_device()).sm_clock_mhz)


def kernel_ms(fn, prepares: dict, reps: int) -> dict:
    """Per call of fn, the sum over the kernels it launches of their median GPU duration (torch.profiler's
    CUDA activity), after each of `prepares` and under CUDA-graph replay ("graph", back to back); a
    protocol the profiler cannot record is left out, with the reason printed."""
    import torch

    from fa2lab.timers import kernel_durations, kernel_names

    try:
        names = kernel_names(fn)
    except Exception as e:  # noqa: BLE001 - a profiler that cannot record loses these rows, not the run
        print(f"kernel durations not recorded: {type(e).__name__}: {e}")
        return {}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    enqueues = {p: (lambda prep=prep: (prep(), fn())) for p, prep in prepares.items()}
    enqueues["graph"] = graph.replay
    out = {}
    for p, enqueue in enqueues.items():
        try:
            durations = kernel_durations(enqueue, 1 if p == "graph" else reps)
        except Exception as e:  # noqa: BLE001 - a profiler that cannot record loses this column, not the run
            print(f"kernel durations ({p}) not recorded: {type(e).__name__}: {e}")
            continue
        out[p] = sum(statistics.median(durations[k]) for k in names if k in durations)
    return out


def fresh_processes(script: str, args, extra=lambda i: []) -> None:
    """The experiment in `script` in --procs fresh processes, one after another (the script again, --worker, with
    --rounds, --causal, --N and extra(i) for process i); a failed process is reported and the others still run."""
    for i in range(args.procs):
        cmd = [sys.executable, script, "--worker", "--rounds", str(args.rounds), "--causal",
               str(args.causal), "--N", *map(str, args.Ns), *extra(i)]
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"process {i + 1} of {args.procs} exited with {rc}", file=sys.stderr)


# --------------------------------------------------------------------------- command line

def parser(doc: str, Ns: list[int], causal: int) -> argparse.ArgumentParser:
    """An experiment's command line: its docstring as the description, and the options every experiment takes
    (--N, --causal, --rounds) with its own defaults; the experiment adds its own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", dest="Ns", type=int, nargs="*", default=Ns,
                    help=f"sequence lengths (default: {' '.join(map(str, Ns))})")
    ap.add_argument("--causal", type=int, choices=(0, 1, 2), default=causal,
                    help=f"0, 1, or 2 for both (default: {causal})")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    return ap


def run(name: str, experiment, ap: argparse.ArgumentParser, argv=None) -> int:
    """Parse argv with the experiment's parser and run experiment(args, save) on a CUDA GPU, `save(file, rows)`
    appending rows with provenance to results/<gpu>/experiments/<file>.csv; without a GPU say so and return 2."""
    args = ap.parse_args(argv)
    args.Ns = args.Ns or ap.get_default("Ns")   # --N with no value: the experiment's own lengths
    args.N = args.Ns[0]
    import torch

    if not torch.cuda.is_available():
        print(f"experiment {name} needs a CUDA GPU; results/<gpu>/experiments/ holds the committed runs",
              file=sys.stderr)
        return 2
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir

    def save(file, rows):
        path = append_rows(gpu_dir() / "experiments" / f"{file}.csv",
                           [{**r, "date": now(), **environment()} for r in rows])
        print(f"wrote {len(rows)} rows to {path}")

    experiment(args, save)
    return 0
