"""Round 3's autotuning experiments: what @triton.autotune costs and how often it picks right.

Both experiments run in fresh child processes (`python -m fa2lab.autotuning child ...`), because
first-call costs and the autotuner's choice after an idle GPU are only visible in a new
process. The children wrap v4_exp2's kernel body in a new @triton.autotune over a list of
configurations and print one JSON line; the parents (sweeps/measure_compile_cost.py,
sweeps/autotune_bias.py) append the results as rows with provenance.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from fa2triton.budget import Config

BODY = "v4_exp2"


def ranked_configs(sweep_csv, k: int) -> list[Config]:
    """The sweep's configurations ranked by the geometric mean over shapes of their ratio to each
    shape's best. (The worst shape alone, the article's ranking, is dominated on the H200 by
    host-side noise at N = 512 and 1024, where do_bench times Python more than the kernel.)"""
    import numpy as np

    from .pick import ratio_table
    from .results import read_csv

    table = ratio_table(read_csv(sweep_csv, required=("status", "ms", "N", "causal")))
    order = np.exp(np.log(table).mean(axis=1)).sort_values(ascending=False)
    return [Config(*(int(x) for x in idx)) for idx in order.index[:k]]


def autotuned_kernel(configs: list[Config], cache_results: bool = False, long_bench: bool = False):
    """v4_exp2's kernel body under a new @triton.autotune over `configs`."""
    import triton

    from fa2triton.launch import autotune_configs
    from .switches import load

    jit_fn = load(BODY).flash_fwd_kernel
    kw = {}
    if long_bench:   # the article's "time more carefully": 5x longer per candidate
        kw["do_bench"] = lambda fn, quantiles: triton.testing.do_bench(fn, warmup=100, rep=500, quantiles=quantiles)
    return triton.autotune(configs=autotune_configs(configs), key=["N_QUERIES", "N_KEYS", "D", "is_causal"],
                           cache_results=cache_results, **kw)(jit_fn)


def call(kernel, N: int, causal: bool, D: int = 64):
    """One launch at the harness shape; returns after the GPU is done."""
    import torch
    import triton

    from . import shapes
    from fa2triton.launch import allocate_outputs, strides

    B = shapes.BATCH * shapes.HEADS
    q, k, v = (torch.randn(B, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = allocate_outputs(q)
    kernel[lambda meta: (triton.cdiv(N, meta["Q_TILE_SIZE"]), B)](
        q, k, v, o, lse, *strides(q, k, v, o, lse), N, N, 1.0 / math.sqrt(D), D=D, is_causal=causal)
    torch.cuda.synchronize()


def child_cost(args) -> dict:
    """Seconds for the first call (N=4096), each new N, and the first causal call."""
    t0 = time.perf_counter()
    import torch  # noqa: F401  (importing torch and triton is part of no call: timed separately)
    import triton  # noqa: F401

    t_import = time.perf_counter() - t0
    kernel = autotuned_kernel([Config.parse(c) for c in args.configs.split(";")], bool(args.cache_results))
    times = {"import_s": t_import}
    for label, N, causal in [("first_4096", 4096, False), ("new_2048", 2048, False), ("new_1024", 1024, False),
                             ("new_512", 512, False), ("first_causal_4096", 4096, True)]:
        t = time.perf_counter()
        call(kernel, N, causal)
        times[label] = time.perf_counter() - t
    return times


def child_bias(args) -> dict:
    """After an idle pause (and optionally a warm-up), which candidate does the autotuner pick?"""
    from .timers import warm_gpu

    time.sleep(args.pause)
    import torch

    torch.cuda.init()
    if args.warmup:
        warm_gpu(1.0)
    configs = [Config.parse(c) for c in args.configs.split(";")]
    kernel = autotuned_kernel(configs, long_bench=bool(args.long_bench))
    call(kernel, args.N, bool(args.causal))
    best = kernel.best_config
    timings = {Config.of_triton(c).key: t[0] for c, t in kernel.configs_timings.items()}
    return {"picked": Config.of_triton(best).key, "timings_ms": timings}


def child_careful(args) -> dict:
    """Careful timings of every candidate: rounds of do_bench(rep=500), interleaved, warm GPU."""
    import statistics

    import triton

    from .timers import warm_gpu

    warm_gpu(1.0)
    out: dict[str, list[float]] = {}
    kernels = {c: autotuned_kernel([Config.parse(c)]) for c in args.configs.split(";")}
    for c, k in kernels.items():
        call(k, args.N, bool(args.causal))   # compile outside the timing
    for _ in range(args.rounds):
        for c, k in kernels.items():
            out.setdefault(c, []).append(triton.testing.do_bench(lambda k=k: call(k, args.N, bool(args.causal)),
                                                                 warmup=100, rep=500, return_mode="median"))
    return {"careful_ms": {c: statistics.median(v) for c, v in out.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="child process of the autotuning experiments")
    ap.add_argument("mode", choices=("cost", "bias", "careful"))
    ap.add_argument("--configs", required=True, help="semicolon-separated Q,K,W,S")
    ap.add_argument("--cache-results", type=int, default=0)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--long-bench", type=int, default=0)
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    result = {"cost": child_cost, "bias": child_bias, "careful": child_careful}[args.mode](args)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def run_child(mode: str, env: dict | None = None, **kw) -> dict:
    """Run one child in a fresh process and return its JSON result (raises with its output on failure)."""
    import subprocess

    from .paths import REPO

    cmd = [sys.executable, "-m", "fa2lab.autotuning", mode] + [x for k, v in kw.items()
                                                           for x in (f"--{k.replace('_', '-')}", str(v))]
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    line = next((s for s in res.stdout.splitlines() if s.startswith("RESULT ")), None)
    if res.returncode != 0 or line is None:
        raise RuntimeError(f"child {' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return json.loads(line.removeprefix("RESULT "))


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
