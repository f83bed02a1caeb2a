"""Experiments beyond the article's harness (issues 6 and 7): `invoke experiment NAME`.

    python experiments/run.py pcast          # where P is rounded: time at N = 4096 and error against float64
    python experiments/run.py launch-order   # v6's launch orders with the same configurations
    python experiments/run.py timing         # small N: do_bench against CUDA-graph replay (the harness, N = 512, 1024)
    python experiments/run.py other-shapes   # v7 against v6 and SDPA on shapes neither was tuned on (B, H, N, D = 128)
    python experiments/run.py exp2-poly      # v7 with part of the softmax's exp2 on the FMA pipe (EXP2_POLY 0, 2, 4)
    python experiments/run.py grid           # v7's persistent grid (1 or 2 programs per SM) against one program per tile
    python experiments/run.py bwd-modes      # the backward's dQ modes: GPU time (graph replay), host time, do_bench
    python experiments/run.py gluon          # the Gluon forward's configurations against v7's tl path and SDPA
    python experiments/run.py coldstart      # what do_bench's flush costs each kernel: cold data or cold code
    python experiments/run.py dobench        # do_bench's spread at small N over fresh processes, v7 and SDPA in turn
    python experiments/run.py items          # what a work item costs beside its key tiles: equal work, 1 to 8 items per SM
    python experiments/run.py tl-pick        # what v7's tl autotuner timed in fresh processes, each candidate pinned

Each appends rows with provenance to results/<gpu>/experiments/<name>.csv (grid and bwd-modes after
every shape, so an interrupted run keeps what it measured). GPU only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402
from fa2lab.budget import Config  # noqa: E402

V6 = "v6_longest_first"


def _inputs(N, seed=0, D=shapes.HEAD_DIM, heads=shapes.BATCH * shapes.HEADS):
    """Q, K, V: (heads, N, D) bf16 from one seeded generator (heads: the harness's B * H unless given)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(heads, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]


def _masks(args) -> tuple[bool, ...]:
    """The causal flags an experiment runs: --causal 2 is both (causal first), 0 or 1 one of them."""
    return (True, False) if args.causal == 2 else (bool(args.causal),)


def _spread(xs) -> tuple[float, float, float]:
    """(median, min, max) of repeated measurements; NaNs when there are none."""
    return (statistics.median(xs), min(xs), max(xs)) if xs else (float("nan"),) * 3


def _interleaved(calls: dict, rounds: int) -> dict:
    """Median of `rounds` do_bench medians per call, the calls interleaved round by round."""
    from fa2lab.timing import bench_ms

    times: dict = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            times[k].append(bench_ms(fn))
    return {k: _spread(v) for k, v in times.items()}


def pcast(args, save):
    """The article's P-cast table: three places for the rounding of P, time and mean absolute error."""
    import torch

    from fa2lab.reference import attention
    from fa2lab.versions import load

    FA = load(V6).FlashAttentionTriton
    causal = bool(args.causal)
    q, k, v = _inputs(args.N)

    def variant(p):
        def call():
            FA.P_CAST = p
            return FA.apply(q, k, v, causal)
        return call

    names = {0: "sum fp32 P, cast, multiply", 1: "cast first, sum the bf16 P", 2: "no cast: fp32 P, V upcast, TF32"}
    timed = _interleaved({p: variant(p) for p in names}, args.rounds)
    errors = {p: [] for p in names}
    floor = []
    for seed in range(args.seeds):
        qs, ks, vs = _inputs(args.N, seed + 1)
        exact = torch.cat([attention(qs[i:i + 1], ks[i:i + 1], vs[i:i + 1], causal)[0] for i in range(qs.shape[0])])
        floor.append((exact.to(torch.bfloat16).double() - exact).abs().mean().item())
        for p in names:
            FA.P_CAST = p
            errors[p].append((FA.apply(qs, ks, vs, causal).double() - exact).abs().mean().item())
    FA.P_CAST = 0
    flop = shapes.flops(shapes.BATCH, shapes.HEADS, args.N, shapes.HEAD_DIM, causal)
    rows = [{"variant": names[p], "p_cast": p, "N": args.N, "causal": int(causal), "ms": t[0], "ms_min": t[1],
             "ms_max": t[2], "tflops": shapes.tflops(flop, t[0]), "mae_vs_float64": statistics.mean(errors[p]),
             "bf16_rounding_floor": statistics.mean(floor), "seeds": args.seeds, "rounds": args.rounds}
            for p, t in timed.items()]
    for r in rows:
        print(f"{r['variant']:<34} {r['ms']:.3f} ms  {r['tflops']:.1f} TFLOP/s  MAE {r['mae_vs_float64']:.3e}")
    print(f"floor (exact output rounded to bf16): {rows[0]['bf16_rounding_floor']:.3e}")
    save("pcast", rows)


def launch_order(args, save):
    """v6's three launch orders, each configuration pinned so only the order changes."""
    import triton

    from fa2lab.interpret import autotuner_of, only_config
    from fa2lab.versions import load

    module = load(V6)
    FA, tuner = module.FlashAttentionTriton, autotuner_of(module)
    rows = []
    for causal in _masks(args):
        for N in args.Ns:
            q, k, v = _inputs(N)
            for cfg in tuner.configs[: args.configs]:
                one = triton.Config(dict(cfg.kwargs), num_warps=cfg.num_warps, num_stages=cfg.num_stages)

                def order(o):
                    def call():
                        FA.LAUNCH_ORDER = o
                        return FA.apply(q, k, v, causal)
                    return call
                with only_config(tuner, one):
                    FA.launches.entries.clear()   # a cached launch would keep the previous configuration
                    timed = _interleaved({o: order(o) for o in module.LAUNCH_ORDERS}, args.rounds)
                FA.launches.entries.clear()
                FA.LAUNCH_ORDER = "longest_first"
                key = Config.of_triton(cfg).key
                base = timed["forward"][0]
                for o, t in timed.items():
                    rows.append({"order": o, "config": key, "N": N, "causal": int(causal), "ms": t[0], "ms_min": t[1],
                                 "ms_max": t[2], "speedup_vs_forward": base / t[0], "rounds": args.rounds})
                print(f"N={N} causal={int(causal)} {key}: " + ", ".join(
                    f"{o} {t[0]:.3f} ms ({base / t[0]:.3f}x)" for o, t in timed.items()), flush=True)
    save("launch_order", rows)


def timing(args, save):
    """The harness at small N for v5, v6, v7 (and SDPA in the same runs), with graph and host columns."""
    from fa2lab.protocol import HARNESS, version_env
    from fa2lab.results import gpu_dir
    from fa2lab.versions import get

    out = gpu_dir() / "experiments" / "timing.csv"
    for name in ("v5_final", V6, "v7_hopper"):   # the issue names v5, v7 and SDPA; v6 is v7's fallback
        cmd = [sys.executable, str(HARNESS), "--N", *map(str, args.Ns), "--out", str(out)]
        subprocess.run(cmd, env=version_env(get(name), FA2_RUN_ID=f"experiment-timing/{name}"), check=True)


def exp2_poly(args, save):
    """Per shape, the configuration v7's autotuner picks (and --configs - 1 more of its candidates), each
    pinned with EXP2_POLY = 0 (v7 as measured), 2 and 4, and SDPA, timed interleaved in the same rounds
    at the harness shape; the output's relative error against SDPA's."""
    import torch.nn.functional as F
    import triton

    from fa2lab.interpret import autotuner_of, only_config
    from fa2lab.reference import relative_error
    from fa2lab.versions import load

    module = load("v7_hopper")
    FA, tuner = module.FlashAttentionTriton, autotuner_of(module)
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    rows = []
    for causal in _masks(args):
        for N in args.Ns:
            q, k, v = _inputs(N)
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D)
            flop = shapes.flops(B, H, N, D, causal)
            FA.launches.entries = {}
            FA.apply(q, k, v, causal)                  # v7's autotuner picks its configuration for this shape
            picked = tuner.best_config
            others = [c for c in tuner.configs if c.all_kwargs() != picked.all_kwargs()]
            for cfg in [picked, *others[: args.configs - 1]]:
                key = f"{Config.of_triton(cfg).key},pqk{cfg.kwargs.get('PIPELINE_QK', 1)}"

                # Each variant's first call compiles and records its launch (fa2lab.hostpath); its timed
                # calls then repeat that launch, with the cache's entries swapped in per variant (the key
                # does not hold EXP2_POLY), so every variant has the same lean host path.
                entries, errors = {}, {}
                for e in (0, 2, 4):
                    FA.launches.entries = {}
                    with only_config(tuner, triton.Config({**cfg.kwargs, "EXP2_POLY": e}, num_warps=cfg.num_warps,
                                                          num_stages=cfg.num_stages)):
                        errors[e] = relative_error(FA.apply(q, k, v, causal), ref)
                    entries[e] = FA.launches.entries

                def variant(e):
                    def call():
                        FA.launches.entries = entries[e]
                        return FA.apply(q, k, v, causal)
                    return call
                timed = _interleaved({**{f"exp2_poly={e}": variant(e) for e in entries},
                                      "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)},
                                     args.rounds)
                FA.launches.entries = {}
                base = timed["exp2_poly=0"][0]
                for name, t in timed.items():
                    e = None if name == "sdpa" else int(name.split("=")[1])
                    rows.append({"variant": name, "exp2_poly": e, "config": key, "autotuner_pick": int(cfg is picked),
                                 "N": N, "causal": int(causal),
                                 "ms": t[0], "ms_min": t[1], "ms_max": t[2], "tflops": shapes.tflops(flop, t[0]),
                                 "speedup_vs_exp2_poly0": base / t[0],
                                 "rel_err_vs_sdpa": errors.get(e, float("nan")), "rounds": args.rounds})
                print(f"N={N} causal={int(causal)} {key}: " + ", ".join(
                    f"{n} {t[0]:.3f} ms ({base / t[0]:.3f}x)" for n, t in timed.items())
                    + " | rel err " + ", ".join(f"{e}: {x:.2e}" for e, x in errors.items()), flush=True)
    save("exp2_poly", rows)


# Shapes none of v6's or v7's configurations were picked on (the harness is B = 4, H = 8, D = 64,
# N = 512..4096): (B, H, N, D). A long sequence, many short ones, head dimension 128, a ragged length.
OTHER_SHAPES = ((1, 16, 8192, 64), (8, 16, 1024, 64), (2, 16, 2048, 128), (4, 8, 4096, 128), (16, 4, 777, 64))


def other_shapes(args, save):
    """v7 against v6 (and SDPA, same process) where neither was tuned: issue 6's 'not slower than v6'."""
    import torch
    import torch.nn.functional as F

    from fa2lab.versions import load

    v6, v7 = load(V6).FlashAttentionTriton, load("v7_hopper")
    rows = []
    for B, H, N, D in OTHER_SHAPES:
        for causal in (False, True) if args.causal == 2 else (bool(args.causal),):
            q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D).float()
            calls = {"v6_longest_first": lambda: v6.apply(q, k, v, causal),
                     "v7_hopper": lambda: v7.FlashAttentionTriton.apply(q, k, v, causal),
                     "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
            errs = {name: (calls[name]().float() - ref).abs().max().item() for name in ("v6_longest_first", "v7_hopper")}
            path, config = v7.last_path(), v7.last_config()
            timed = _interleaved(calls, args.rounds)
            flop = shapes.flops(B, H, N, D, causal)
            for name, t in timed.items():
                rows.append({"who": name, "B": B, "H": H, "N": N, "D": D, "causal": int(causal), "ms": t[0],
                             "ms_min": t[1], "ms_max": t[2], "tflops": shapes.tflops(flop, t[0]),
                             "pct_of_sdpa": 100.0 * timed["sdpa"][0] / t[0],
                             "v7_over_v6": timed["v6_longest_first"][0] / timed["v7_hopper"][0],
                             "v7_path": path, "v7_config": config, "max_abs_err_vs_sdpa": errs.get(name, float("nan")),
                             "rounds": args.rounds})
            print(f"B={B} H={H} N={N} D={D} causal={int(causal)}: " + ", ".join(
                f"{n} {t[0]:.3f} ms" for n, t in timed.items())
                + f"; v7 {timed['v6_longest_first'][0] / timed['v7_hopper'][0]:.3f}x v6 (path {path})", flush=True)
    save("other_shapes", rows)


def grid(args, save):
    """v7's persistent grid against its default (one program per (head, query tile)): each with its own
    autotuned configuration (PERSISTENT is in the autotuner's key), interleaved with SDPA at the harness
    shape. The persistent grid runs PERSISTENT_PROGRAMS_PER_SM = 2 (v7's setting) and 1."""
    import torch.nn.functional as F

    from fa2lab.reference import relative_error
    from fa2lab.versions import load

    FA = load("v7_hopper").FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    variants = {"per_tile": ("per_tile", 2), "persistent_2": ("persistent", 2), "persistent_1": ("persistent", 1)}
    saved = FA.GRID, FA.PERSISTENT_PROGRAMS_PER_SM
    try:
        for causal in _masks(args):
            for N in args.Ns:
                q, k, v = _inputs(N)
                q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
                ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D)
                # Each variant's first call autotunes / compiles and records its launch; the cache's key
                # holds GRID but not the programs per SM, so each variant keeps its own entries.
                entries, errors = {}, {}
                for name, (g, per_sm) in variants.items():
                    FA.GRID, FA.PERSISTENT_PROGRAMS_PER_SM = g, per_sm
                    FA.launches.entries = {}
                    errors[name] = relative_error(FA.apply(q, k, v, causal), ref)
                    entries[name] = FA.launches.entries

                def variant(name):
                    g, per_sm = variants[name]

                    def call():
                        FA.GRID, FA.PERSISTENT_PROGRAMS_PER_SM = g, per_sm
                        FA.launches.entries = entries[name]
                        return FA.apply(q, k, v, causal)
                    return call
                timed = _interleaved({**{n: variant(n) for n in variants},
                                      "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)},
                                     args.rounds)
                flop, base = shapes.flops(B, H, N, D, causal), timed["per_tile"][0]
                save("grid", [{"variant": n, "N": N, "causal": int(causal), "ms": t[0], "ms_min": t[1],
                               "ms_max": t[2], "tflops": shapes.tflops(flop, t[0]),
                               "pct_of_sdpa": 100.0 * timed["sdpa"][0] / t[0], "speedup_vs_per_tile": base / t[0],
                               "rel_err_vs_sdpa": errors.get(n, float("nan")), "rounds": args.rounds}
                              for n, t in timed.items()])
                print(f"N={N} causal={int(causal)}: " + ", ".join(
                    f"{n} {t[0]:.3f} ms ({100.0 * timed['sdpa'][0] / t[0]:.1f}% of SDPA)" for n, t in timed.items()),
                    flush=True)
    finally:
        FA.GRID, FA.PERSISTENT_PROGRAMS_PER_SM = saved
        FA.launches.entries = {}


def bwd_modes(args, save):
    """The backward's dQ modes on v7's forward at the harness shape, to place dq_mode="auto"'s threshold:
    per mode, the GPU's time (CUDA-graph replay of the backward called directly: no host in it), the
    host's time per autograd backward (fa2lab.timing.host_us_per_call) and the harness's number (do_bench
    of autograd.grad on a kept graph), with SDPA's default and FLASH_ATTENTION backends in the same rounds."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fa2lab.reference import relative_error, saved_lse
    from fa2lab.timing import bench_graph_ms, bench_ms, host_us_per_call
    from fa2lab.versions import load, load_shared

    FA, bk = load("v7_hopper").FlashAttentionTriton, load_shared("flash_backward_triton")
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    modes = ("separate", "fused")
    saved_mode = FA.BACKWARD_DQ_MODE
    try:
        for causal in _masks(args):
            for N in args.Ns:
                q, k, v = (t.requires_grad_() for t in _inputs(N))
                dO = torch.randn_like(q)
                q4, k4, v4 = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
                O = FA.apply(q, k, v, causal)
                Od, L = O.detach(), saved_lse(O)
                O_s = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    O_f = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
                ref = torch.autograd.grad(O_s, (q4, k4, v4), dO.view(B, H, N, D), retain_graph=True)

                def autograd_of(mode):
                    def call():
                        FA.BACKWARD_DQ_MODE = mode
                        return torch.autograd.grad(O, (q, k, v), dO, retain_graph=True)
                    return call

                calls = {m: autograd_of(m) for m in modes} | {
                    "sdpa": lambda: torch.autograd.grad(O_s, (q4, k4, v4), dO.view(B, H, N, D), retain_graph=True),
                    "sdpa_flash": lambda: torch.autograd.grad(O_f, (q4, k4, v4), dO.view(B, H, N, D),
                                                              retain_graph=True)}
                direct = {m: (lambda m=m: bk.flash_attention_backward(q.detach(), k.detach(), v.detach(), Od, L, dO,
                                                                       causal, dq_mode=m)) for m in modes}
                errors = {m: max(relative_error(a.view(B, H, N, D), b) for a, b in zip(calls[m](), ref)) for m in modes}
                for m in modes:   # the direct call's first (checked, compiling) run, before any graph capture
                    direct[m]()
                samples = {(w, m): [] for m in calls for w in ("do_bench", "host", "graph")
                           if w != "graph" or m in modes}
                for _ in range(args.rounds):   # interleaved, so a slow moment hits every mode alike
                    for m, fn in calls.items():
                        samples[("do_bench", m)].append(bench_ms(fn) * 1e3)
                        samples[("host", m)].append(host_us_per_call(fn, calls=100))
                        if m in modes:
                            samples[("graph", m)].append(bench_graph_ms(direct[m]) * 1e3)
                flop = shapes.BWD_FLOP_FACTOR * shapes.flops(B, H, N, D, causal)
                rows = []
                for m in calls:
                    row = {"who": m, "N": N, "causal": int(causal), "rounds": args.rounds,
                           "auto_picks": bk.auto_dq_mode(B * H, N, N, D, causal) if m in modes else "",
                           "max_rel_err_vs_sdpa": errors.get(m, float("nan"))}
                    for w in ("do_bench", "host", "graph"):
                        row.update(zip((f"{w}_us", f"{w}_us_min", f"{w}_us_max"), _spread(samples.get((w, m)))))
                    row["do_bench_tflops"] = shapes.tflops(flop, row["do_bench_us"] / 1e3)
                    rows.append(row)
                save("bwd_modes", rows)
                print(f"N={N} causal={int(causal)} (µs; auto -> {rows[0]['auto_picks']}): " + "; ".join(
                    f"{r['who']} do_bench {r['do_bench_us']:.1f} host {r['host_us']:.1f}"
                    + (f" graph {r['graph_us']:.1f}" if r["who"] in modes else "") for r in rows), flush=True)
    finally:
        FA.BACKWARD_DQ_MODE = saved_mode


# Ragged and non-square shapes every Gluon configuration must get right before it is timed:
# (heads, N_q, N_k, D); the last key tile is partial, queries outnumber keys and the reverse.
GLUON_CHECK_SHAPES = ((3, 1000, 1000, 64), (2, 333, 777, 64), (2, 777, 333, 64), (2, 130, 130, 64),
                      (2, 1000, 1000, 128), (2, 64, 200, 128),
                      (32, 1000, 1000, 64))   # more tiles than SMs: split_tail's whole tiles and split tail in one launch


def forced(FA, path: str, call):
    """call() with FA.FORCE_PATH = path (the launch cache keys on it, so each path keeps its own launch)."""
    before = FA.FORCE_PATH
    FA.FORCE_PATH = path
    try:
        return call()
    finally:
        FA.FORCE_PATH = before


def v7_gluon_runs(q, k, v, causal: bool = False) -> bool:
    """Whether v7's Gluon path can be forced on these inputs, printing why not when it cannot."""
    from fa2lab.versions import load

    why = load("v7_hopper").gluon_applies(q, k, v, causal, 0, "gluon")
    if why is not None:
        print(f"v7's Gluon path not timed: {why}")
    return why is None


def gluon(args, save):
    """The Gluon forward (kernels/_shared/gluon_forward_hopper.py), each configuration of its
    EXPERIMENT_CONFIGS: errors of O and L against float64 on ragged shapes (GLUON_CHECK_SHAPES) and at
    the harness shape, then do_bench and graph-replay times interleaved with v7's tl path (FORCE_PATH =
    "tma"), v7's own Gluon path (non-causal: FORCE_PATH = "gluon") and SDPA. The warp-specialized configurations are timed through
    their lean repeat (gluon_forward_hopper.GluonLaunch; rows with lean = 1), so that do_bench is the
    GPU's time rather than Gluon's normal launch path (60-300 us of host time per call); rows without the
    column came before it, through that normal path."""
    import torch
    import torch.nn.functional as F

    from fa2lab.gpu import facts
    from fa2lab.reference import attention, relative_error
    from fa2lab.timing import bench_graph_ms
    from fa2lab.versions import load, load_shared

    G = load_shared("gluon_forward_hopper")
    FA = load("v7_hopper").FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, args.D
    configs = G.configs_named(args.only) if args.only else list(G.EXPERIMENT_CONFIGS)
    unfit = [c.label for c in configs if not c.fits(D, facts().smem_per_block)]
    if unfit:
        print(f"not timed at D = {D} (shared memory): {', '.join(unfit)}")
        configs = [c for c in configs if c.label not in unfit]

    def errors(cfg, q, k, v, causal):
        O, L, _ = G.forward(q, k, v, causal, cfg)
        ref_o, ref_l = attention(q, k, v, causal)
        return relative_error(O, ref_o), float((L.double() - ref_l).abs().max())

    broken = {}
    for cfg in configs:
        worst_o = worst_l = 0.0
        checked = 0    # shapes run: a D whose shared memory this configuration cannot fit is skipped
        try:
            for causal in (False,) if cfg.stream else (False, True):   # stream is non-causal only
                for bh, nq, nk, d in GLUON_CHECK_SHAPES:
                    if not cfg.fits(d, facts().smem_per_block):
                        continue
                    g = torch.Generator(device="cuda").manual_seed(nq + nk + d)
                    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
                               for n in (nq, nk, nk))
                    eo, el = errors(cfg, q, k, v, causal)
                    worst_o, worst_l = max(worst_o, eo), max(worst_l, el)
                    checked += 1
            ok = worst_o < 2e-2 and worst_l < 1e-2
            if not ok:
                broken[cfg.label] = f"error O {worst_o:.3g}, L {worst_l:.3g}"
        except Exception as e:  # noqa: BLE001 - a configuration that fails is recorded, not fatal
            broken[cfg.label] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            ok = False
        save("gluon_check", [{"config": cfg.label, "shapes": checked, "ok": int(ok),
                              "worst_rel_err_o": worst_o, "worst_abs_err_l": worst_l,
                              "failure": broken.get(cfg.label, "")}])
        print(f"check {cfg.label}: {'ok' if ok else broken[cfg.label]} (O {worst_o:.2e}, L {worst_l:.2e})", flush=True)
    configs = [c for c in configs if c.label not in broken]

    for causal in _masks(args):
        for N in args.Ns:
            q, k, v = _inputs(N, D=D)
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D)
            calls = {"v7_tl": lambda: forced(FA, "tma", lambda: FA.apply(q, k, v, causal)),
                     "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
            if v7_gluon_runs(q, k, v, causal):
                calls["v7_gluon"] = lambda: forced(FA, "gluon", lambda: FA.apply(q, k, v, causal))
            lean = {}
            for cfg in configs:
                repeat = G.forward(q, k, v, causal, cfg)[2]   # the warp-specialized form's lean repeat
                lean[cfg.label] = int(repeat is not None)
                calls[cfg.label] = ((lambda r: lambda: r(q, k, v)[0])(repeat) if repeat is not None else
                                    (lambda c: lambda: G.forward(q, k, v, causal, c)[0])(cfg))
            errs = {name: relative_error(fn() if name != "sdpa" else fn().view(B * H, N, D), ref)
                    for name, fn in calls.items()}
            timed = _interleaved(calls, args.rounds)
            graph = {name: bench_graph_ms(fn) for name, fn in calls.items()}
            flop, sdpa = shapes.flops(B, H, N, D, causal), timed["sdpa"][0]
            save("gluon", [{"variant": n, "N": N, "D": D, "causal": int(causal), "ms": t[0], "ms_min": t[1], "ms_max": t[2],
                            "graph_ms": graph[n], "tflops": shapes.tflops(flop, t[0]),
                            "pct_of_sdpa": 100.0 * sdpa / t[0],
                            "graph_pct_of_sdpa": 100.0 * graph["sdpa"] / graph[n],
                            "rel_err_vs_sdpa": errs[n], "rounds": args.rounds, "lean": lean.get(n, 1)}
                           for n, t in timed.items()])
            print(f"N={N} D={D} causal={int(causal)}: " + ", ".join(
                f"{n} {t[0]:.3f} ms ({100.0 * sdpa / t[0]:.1f}%; graph {100.0 * graph['sdpa'] / graph[n]:.1f}%)"
                for n, t in timed.items()), flush=True)


COLDSTART_PROTOCOLS = {
    "spin": "a spin kernel only (nothing evicted): the warm time, host queued ahead",
    "flush": "do_bench's 256 MB flush: inputs and kernel code cold in L2",
    "flush_data": "the flush, then the inputs read (Q, K, V summed): the data warm, the code cold",
    "flush_code": "the flush, then the same call on other inputs of the same shape: the code warm, the data cold",
}


def _spin_cycles() -> int:
    """About 30 us of SM cycles at this GPU's clock (fa2lab.gpu.facts): torch.cuda._sleep's argument for a spin that
    keeps the GPU busy while the host queues the next call."""
    import torch

    from fa2lab.gpu import facts

    return int(30 * facts(torch.cuda.current_device()).sm_clock_mhz)


def coldstart(args, save):
    """Why a kernel loses more than another to do_bench's flush (issue 6: v7 non-causal at N = 1024 and
    2048 is ahead of cuDNN by graph replay and behind it by do_bench). Each call is timed alone between
    two events after one of COLDSTART_PROTOCOLS; the calls and protocols interleaved round by round,
    per round the median of --reps calls, and the rounds' median with their min and max (rows with
    timer = "events"). Then the kernels' own GPU durations from torch.profiler, after the spin, after
    the flush and under graph replay (timer = "kernel"): what is left of a gap once launch latency and
    the events are taken out."""
    import torch
    import torch.nn.functional as F

    from fa2lab.timing import flush_buffer, prepared_times
    from fa2lab.versions import load

    v7 = load("v7_hopper")
    FA = v7.FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    cache = flush_buffer()
    for causal in _masks(args):
        for N in args.Ns:
            q, k, v = _inputs(N)
            q2, k2, v2 = _inputs(N, seed=1)
            as4 = (lambda *ts: [t.view(B, H, N, D) for t in ts])

            def calls_on(q, k, v):
                q4, k4, v4 = as4(q, k, v)
                return {"v7": lambda: FA.apply(q, k, v, causal),
                        "v7_tl": lambda: forced(FA, "tma", lambda: FA.apply(q, k, v, causal)),
                        "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}

            calls, others = calls_on(q, k, v), calls_on(q2, k2, v2)
            spin = _spin_cycles()

            def prepare(name, protocol):
                def run():
                    if protocol == "spin":
                        torch.cuda._sleep(spin)
                        return
                    cache.zero_()
                    if protocol == "flush_data":
                        for t in (q, k, v):
                            t.sum(dtype=torch.float32)
                    elif protocol == "flush_code":
                        others[name]()
                return run

            times = {(n, p): [] for n in calls for p in COLDSTART_PROTOCOLS}
            for _ in range(args.rounds):
                for (n, p), ts in times.items():
                    ts.append(statistics.median(prepared_times(calls[n], prepare(n, p), args.reps)))
            paths = {}
            for n in ("v7", "v7_tl"):   # the path and configuration each v7 call ran
                calls[n]()
                paths[n] = f"{v7.last_path()}:{v7.last_config()}"
            rows = []
            for (n, p), ts in times.items():
                med, lo, hi = _spread(ts)
                rows.append({"variant": n, "N": N, "causal": int(causal), "protocol": p, "ms": med, "ms_min": lo,
                             "ms_max": hi, "rounds": args.rounds, "reps": args.reps, "path": paths.get(n, ""),
                             "timer": "events"})
            save("coldstart", rows)
            kernel_rows = []
            for n in calls:   # the kernels' own GPU durations (no events, no launch latency), and under graph replay
                for p, ms in _kernel_ms(calls[n], {p: prepare(n, p) for p in ("spin", "flush")}, args.reps).items():
                    kernel_rows.append({"variant": n, "N": N, "causal": int(causal), "protocol": p, "ms": ms,
                                        "rounds": 1, "reps": args.reps, "path": paths.get(n, ""), "timer": "kernel"})
            if kernel_rows:
                save("coldstart", kernel_rows)
            for n in calls:
                ms = {(r["timer"], r["protocol"]): r["ms"] * 1e3 for r in rows + kernel_rows if r["variant"] == n}
                print(f"N={N} causal={int(causal)} {n:6s} " + ", ".join(
                    f"{p} {ms['events', p]:.1f} us (+{ms['events', p] - ms['events', 'spin']:.1f})"
                    for p in COLDSTART_PROTOCOLS) + "; kernels alone: " + ", ".join(
                    f"{p} {v:.1f} us" for (timer, p), v in ms.items() if timer == "kernel"), flush=True)


def _fresh_processes(name: str, args, extra=lambda i: []) -> None:
    """Experiment `name` in --procs fresh processes, one after another (this script again, --worker, with --rounds,
    --causal, --N and extra(i) for process i); a failed process is reported and the others still run."""
    for i in range(args.procs):
        cmd = [sys.executable, __file__, name, "--worker", "--rounds", str(args.rounds), "--causal",
               str(args.causal), "--N", *map(str, args.Ns), *extra(i)]
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"process {i + 1} of {args.procs} exited with {rc}", file=sys.stderr)


def dobench(args, save):
    """Where the harness's spread at N = 512 comes from (issue 6: v7 non-causal 58-99% of cuDNN by do_bench over five
    fresh processes, commit 2eb9943, while its graph replay stayed at 8.7 us against cuDNN's 9.8 in all five). In each
    of --procs fresh processes (this script again, --worker): the GPU time of do_bench's flush (256 MB zeroed, events
    around it), each call's host time (back to back, fa2lab.timing.host_us_per_call), and --rounds do_bench rounds of v7
    and SDPA, the one timed first alternating, with each round's median, 10th and 90th percentile. A process-wide
    cause (host, clocks, memory placement) moves both calls' rounds in that process; the order shows in `position`.
    Every second process times its rounds as the harness does, inside its NVML clock sampler (a thread polling
    clocks, power and temperature every 20 ms: column `sampler`), the others without it."""
    if not args.worker:
        _fresh_processes("dobench", args, lambda i: ["--sampler"] if i % 2 else [])
        return
    import contextlib
    import os

    import torch.nn.functional as F
    import triton.testing

    from fa2lab.provenance import ClockSampler
    from fa2lab.timing import event_times, flush_buffer, host_us_per_call
    from fa2lab.versions import load

    v7 = load("v7_hopper")
    FA = v7.FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    cache = flush_buffer()
    flush_us = 1e3 * statistics.median(event_times(cache.zero_, 20))   # do_bench's flush alone, GPU time
    for causal in _masks(args):
        for N in args.Ns:
            q, k, v = _inputs(N)
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            calls = {"v7": lambda: FA.apply(q, k, v, causal),
                     "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)}
            calls["v7"]()
            path = f"{v7.last_path()}:{v7.last_config()}"
            rows = []
            for r in range(args.rounds):
                order = list(calls) if r % 2 == 0 else list(calls)[::-1]
                for position, name in enumerate(order):
                    with ClockSampler() if args.sampler else contextlib.nullcontext():
                        times = sorted(triton.testing.do_bench(calls[name], return_mode="all"))
                    rows.append({"variant": name, "N": N, "causal": int(causal), "pid": os.getpid(), "round": r,
                                 "sampler": int(args.sampler), "position": position, "ms": statistics.median(times),
                                 "ms_p10": times[len(times) // 10], "ms_p90": times[(9 * len(times)) // 10],
                                 "calls": len(times), "path": path if name == "v7" else ""})
            host = {name: host_us_per_call(fn) for name, fn in calls.items()}
            for row in rows:
                row.update(host_us=host[row["variant"]], flush_us=flush_us)
            save("dobench", rows)
            where = f"pid {os.getpid()}{' (sampler)' if args.sampler else ''} N={N} causal={int(causal)}"
            print(f"{where} flush {flush_us:.1f} us; "
                  + "; ".join(f"{n} host {host[n]:.1f} us, do_bench " + " ".join(
                      f"{1e3 * row['ms']:.1f}{'*' if row['position'] == 0 else ''}" for row in rows
                      if row["variant"] == n) + " us" for n in calls) + " (* timed first in its round)", flush=True)


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
    fa2lab.timing.queued_ms up per call, the Gluon module's own candidate timing does not): the launch timed,
    named "<path>:<label>" from the launch the timed call wraps (its default argument), its ms, its place among the
    shape's race timings, and the SM clock before and after, tagged with `shape` (_ShapeRows)."""

    def __enter__(self):
        import fa2lab.timing

        self._queued_ms = timed = fa2lab.timing.queued_ms

        def recording(fn, *args, **kw):
            launch = (fn.__defaults__ or (None,))[0]
            before = self.clock()
            ms = timed(fn, *args, **kw)
            self._append(before, candidate=f"{getattr(launch, 'path', 'tma')}:{getattr(launch, 'label', '?')}",
                         race_ms=float(ms))
            return ms

        fa2lab.timing.queued_ms = recording
        return self

    def __exit__(self, *exc):
        import fa2lab.timing

        fa2lab.timing.queued_ms = self._queued_ms
        return False


def tl_pick(args, save):
    """Why v7's tl path picks differently from process to process (issue 6: at causal N = 4096 its autotuner took
    64,64,4,3 in 16 of 31 harness runs, sessions 30's two commits, and 128,128,4,3 in the other 15, though 128,128 is
    6% faster there by graph replay and by do_bench without the flush). In each of --procs fresh processes (this script
    again, --worker): v7 called once at every harness shape in the harness's order (non-causal, then causal, N up; v7's
    defaults, the Gluon path and the race on), each timing its tl autotuner makes recorded (TuningRecorder: candidate,
    kept median, order, SM clock before and after, seconds) and each timing of its race (RaceRecorder), then at the --N
    shapes and --causal masks every candidate it timed there pinned on the tl path, and the Gluon path's pick where it
    ran in the race, --rounds interleaved rounds of graph replay and do_bench (its flush). Rows: kind "tuner" (one per
    autotuner timing, the process's pick beside it), "race" (one per race timing) and "pinned" (one per candidate and
    round). Session 31's first run (6e57db1) found the cause: the autotuner timed 64,64 and 128,128 at 166 us each at
    1980 MHz, while held busy they ran at 190 and 172 us, 64,64 at a lower clock (fa2lab.timing.SETTLE_MS)."""
    if not args.worker:
        _fresh_processes("tl-pick", args)
        return
    import contextlib
    import os

    import torch
    import triton.testing

    from fa2lab.interpret import autotuner_of, only_config
    from fa2lab.provenance import sm_clock_mhz
    from fa2lab.timing import bench_graph_ms
    from fa2lab.versions import load

    v7 = load("v7_hopper")
    FA, tuner = v7.FlashAttentionTriton, autotuner_of(v7)

    def clock() -> float:
        return sm_clock_mhz(torch.cuda.current_device())

    picked = {}
    with TuningRecorder(tuner, v7.config_label, clock) as rec, RaceRecorder(clock) as race:
        for shape in shapes.harness_shapes():
            rec.shape = race.shape = {"N": shape.N, "causal": int(shape.causal)}
            q, k, v = _inputs(shape.N)
            FA.apply(q, k, v, shape.causal)
            torch.cuda.synchronize()
            picked[(shape.N, int(shape.causal))] = f"{v7.last_path()}:{v7.last_config()}"
    pid = os.getpid()
    rows = [{"kind": kind, "pid": pid, **r.pop("shape"), **r}
            for kind, recorded in (("tuner", rec.rows), ("race", race.rows)) for r in recorded]
    for r in rows:
        r["picked"] = picked[(r["N"], r["causal"])]
    for causal in _masks(args):
        for N in args.Ns:
            here = [r for r in rows if (r["N"], r["causal"]) == (N, int(causal))]
            # (path, configuration): each tl candidate timed here, and the Gluon path's pick if it ran in the race
            pins = [("tma", rec.configs[label])
                    for label in dict.fromkeys(r["candidate"] for r in here if r["kind"] == "tuner")]
            pins += [("gluon", None)] * any(r["kind"] == "race" and r["candidate"].startswith("gluon:") for r in here)
            q, k, v = _inputs(N)
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
    for causal in _masks(args):
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


# items: (heads, N) with the harness's work (heads * N^2 = 32 * 2048^2) in 128-row items: 1, 2, 4 and 8 rounds of items
# per SM on 132 SMs, each round 64 key tiles of 128 in all
ITEM_SHAPES = ((2, 8192), (8, 4096), (32, 2048), (128, 1024))
# v7's Gluon candidate at N = 1024 and 2048 (/et1 from session 25, with one inlined copy of the consumers' code, /sc2,
# since session 30)
ITEM_CONFIG = "ws2x64x128/3s/preg/persist/ua/et1/sc2"


def items(args, save):
    """What a work item costs beside its key tiles (issue 6: v7 level with cuDNN at N = 1024 and 2048 non-causal).
    The shapes of ITEM_SHAPES hold the same work, spread over 1, 2, 4 or 8 rounds of 128-row items per SM (at 132 SMs)
    of 64, 32, 16 or 8 key tiles: the kernel's time against the rounds, for v7's persistent Gluon kernel (ITEM_CONFIG,
    pinned, or the 128-row configurations --only names) and SDPA, is a line whose slope is what each round of items
    costs beyond its products and softmax. Kernel durations from torch.profiler after a spin, after do_bench's flush
    (whose inputs, twice as many rows per round added, come cold: the slope then holds what a round's cold inputs cost)
    and in graph replay (experiments' _kernel_ms), the medians of --rounds rounds of --reps calls."""
    import math

    import numpy as np
    import torch
    import torch.nn.functional as F

    from fa2lab.gpu import facts
    from fa2lab.timing import flush_buffer
    from fa2lab.versions import load_shared

    G = load_shared("gluon_forward_hopper")
    configs = G.configs_named(args.only or [ITEM_CONFIG])
    cache = flush_buffer()
    sms = facts(torch.cuda.current_device()).sm_count
    spin = _spin_cycles()
    D = shapes.HEAD_DIM
    fits = {}
    for heads, N in ITEM_SHAPES:
        q, k, v = _inputs(N, D=D, heads=heads)
        q4, k4, v4 = (t.view(1, heads, N, D) for t in (q, k, v))
        calls = {}
        for cfg in configs:
            launch = G.forward(q, k, v, False, cfg)[2]
            calls[cfg.label] = lambda launch=launch: launch(q, k, v)
        calls["sdpa"] = lambda: F.scaled_dot_product_attention(q4, k4, v4)
        key_tiles = math.ceil(N / 128)   # per item, as each item has 128 rows
        tiles = heads * key_tiles
        rounds = math.ceil(tiles / sms)
        rows = []
        for name, fn in calls.items():
            per = {p: [] for p in ("spin", "flush", "graph")}
            for _ in range(args.rounds):
                for p, ms in _kernel_ms(fn, {"spin": lambda: torch.cuda._sleep(spin), "flush": cache.zero_},
                                        args.reps).items():
                    per[p].append(ms)
            for p, ts in per.items():
                med, lo, hi = _spread(ts)
                rows.append({"variant": name, "heads": heads, "N": N, "D": D, "causal": 0, "items": tiles,
                             "rounds_per_sm": rounds, "key_tiles_per_item": key_tiles,
                             "protocol": p, "ms": med, "ms_min": lo, "ms_max": hi, "rounds": args.rounds,
                             "reps": args.reps, "timer": "kernel"})
                fits.setdefault((name, p), []).append((rounds, med * 1e3))
        print(f"heads={heads} N={N} ({tiles} items, {rounds} per SM): " + ", ".join(
            f"{r['variant']} {r['protocol']} {r['ms'] * 1e3:.1f} us" for r in rows), flush=True)
        save("items", rows)
    for (name, p), pts in fits.items():   # least squares: us = a + b * rounds
        b, a = np.polyfit(*zip(*pts), 1)
        print(f"{name} ({p}): {b:.2f} us per round of items, {a:.1f} us at none")


def _kernel_ms(fn, prepares: dict, reps: int) -> dict:
    """Per call of fn, the sum over the kernels it launches of their median GPU duration (torch.profiler's
    CUDA activity), after each of `prepares` and under CUDA-graph replay ("graph", back to back); a
    protocol the profiler cannot record is left out, with the reason printed."""
    import torch

    from fa2lab.timing import kernel_durations, kernel_names

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=("pcast", "launch-order", "timing", "other-shapes", "exp2-poly", "grid", "bwd-modes",
                                     "gluon", "coldstart", "dobench", "items", "tl-pick"))
    ap.add_argument("--N", dest="Ns", type=int, nargs="*", default=None, help="sequence lengths")
    ap.add_argument("--causal", type=int, choices=(0, 1, 2), default=None, help="0, 1, or 2 for both")
    ap.add_argument("--D", type=int, choices=shapes.GLUON_HEAD_DIMS, default=shapes.HEAD_DIM,
                    help="gluon: head dimension (default the harness's; configurations whose shared memory does not "
                         "fit it are listed and skipped)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--seeds", type=int, default=3, help="pcast: inputs for the error")
    ap.add_argument("--configs", type=int, default=3,
                    help="launch-order, exp2-poly: how many of v6's / v7's candidates")
    ap.add_argument("--reps", type=int, default=50, help="coldstart, items: calls per protocol and round")
    ap.add_argument("--only", nargs="*", default=None,
                    help="gluon, items: configuration labels to run (default: all; items: ITEM_CONFIG)")
    ap.add_argument("--procs", type=int, default=6, help="dobench, tl-pick: fresh processes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)   # dobench, tl-pick: one of its processes
    ap.add_argument("--sampler", action="store_true", help=argparse.SUPPRESS)  # dobench: rounds inside ClockSampler
    args = ap.parse_args(argv)
    defaults = {"pcast": ([4096], 0), "launch-order": ([2048, 4096], 1), "timing": ([512, 1024], 2),
                "other-shapes": ([0], 2), "exp2-poly": ([2048, 4096], 2), "grid": ([1024, 2048, 4096], 2),
                "bwd-modes": (list(shapes.SEQ_LENS), 2), "gluon": ([1024, 2048, 4096], 2),
                "coldstart": (list(shapes.SEQ_LENS), 0), "dobench": ([512], 0), "items": ([0], 0),
                "tl-pick": ([4096], 1)}[args.name]
    args.Ns = args.Ns or defaults[0]
    args.causal = defaults[1] if args.causal is None else args.causal
    args.N = args.Ns[0]

    import torch

    if not torch.cuda.is_available():
        print(f"experiment {args.name} needs a CUDA GPU; results/<gpu>/experiments/ holds the committed runs",
              file=sys.stderr)
        return 2
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir

    def save(name, rows):
        path = append_rows(gpu_dir() / "experiments" / f"{name}.csv",
                           [{**r, "date": now(), **environment()} for r in rows])
        print(f"wrote {len(rows)} rows to {path}")

    {"pcast": pcast, "launch-order": launch_order, "timing": timing, "other-shapes": other_shapes,
     "exp2-poly": exp2_poly, "grid": grid, "bwd-modes": bwd_modes, "gluon": gluon,
     "coldstart": coldstart, "dobench": dobench, "items": items, "tl-pick": tl_pick}[args.name](args, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
