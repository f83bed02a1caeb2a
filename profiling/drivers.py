"""What profile_driver.py and compare_driver.py share: options, inputs, pinning a configuration,
the warm-up, and the captured region (the article's "A small program to profile").

The captured region is what `nsys --capture-range=cudaProfilerApi` and
`ncu --profile-from-start off` record: everything between cudaProfilerStart and
cudaProfilerStop. Compiling and autotuning happen before it, in the warm-up, which also
keeps the GPU busy for about a second so its clocks have ramped up when the capture starts.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fa2lab import shapes
from fa2triton.budget import Config
from fa2triton.launch import pin_config


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--N", type=int, default=4096, help="sequence length (queries = keys)")
    ap.add_argument("--causal", type=int, choices=(0, 1), default=0)
    ap.add_argument("--D", type=int, choices=shapes.HEAD_DIMS, default=shapes.HEAD_DIM,
                    help=f"head dimension (default {shapes.HEAD_DIM}, the harness's)")
    ap.add_argument("--iters", type=int, default=3, help="calls of each kernel inside the captured region")
    ap.add_argument("--sdpa", type=int, choices=(0, 1), default=1, help="also run SDPA on the same inputs")
    ap.add_argument("--config", default="", help="Q_TILE,K_TILE,WARPS,STAGES: run exactly this configuration "
                    "(an autotuned version keeps only it; a fixed one gets it as class attributes)")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="seconds of GPU work before the capture")
    ap.add_argument("--fresh-cache", type=int, choices=(0, 1), default=0,
                    help="point TRITON_CACHE_DIR at an empty folder first, so the binary's line info names "
                         "this checkout's file (the article's stale-cache trap)")
    ap.add_argument("--mode", choices=("fwd", "bwd"), default="fwd",
                    help="bwd: the Triton backward's kernels (v6 and later), each in its own NVTX range "
                         "('<version>:bwd_dkdv N=...'), in both dQ modes, beside SDPA's backward (issue 7)")
    ap.add_argument("--gluon", default="", help="comma-separated labels of the Gluon forward's configurations "
                    "(fa2triton/gluon/gluon_forward_hopper.py, EXPERIMENT_CONFIGS) to run beside the versions, each "
                    "in its own range ('gluon:<label> N=...'); forward mode only")
    ap.add_argument("--peer", default="", help="comma-separated peer backends (fa2lab.peers, e.g. fa4 = flash-attn-4 "
                    "sm90) to run beside the versions on the same inputs, each call in its own range ('fa4-fwd N=...'; "
                    "with --mode bwd, its backward on a kept graph: 'fa4-bwd N=...')")
    ap.add_argument("--dry-run", action="store_true", help="print what would run and exit, without CUDA")
    ap.add_argument("--torch-trace", default="", help="also capture the region with torch.profiler (CUPTI) and "
                    "write a Chrome/Perfetto trace here: the timeline where nsys is not available")


def version_name(text: str) -> str:
    """'v0_baseline' or a path like 'fa2triton/kernels/v0_baseline' (the article's command line) -> 'v0_baseline'."""
    from fa2triton.versions import get

    return get(Path(text.rstrip("/")).name).name


def range_name(label: str, N: int, causal: bool) -> str:
    """NVTX range name: f'{version} N={N} causal={c}', or 'sdpa N=... causal=...'."""
    return f"{label} N={N} causal={int(causal)}"


def use_fresh_cache() -> str:
    """Set TRITON_CACHE_DIR to a new empty folder (before anything compiles) and return it."""
    path = tempfile.mkdtemp(prefix="triton-cache-profile-")
    os.environ["TRITON_CACHE_DIR"] = path
    return path


def describe_config(module) -> str:
    """The configuration(s) a loaded version will launch, for the log."""
    kernel = module.flash_fwd_kernel
    if hasattr(kernel, "configs") and hasattr(kernel, "fn"):
        cfgs = [Config(c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"], c.num_warps, c.num_stages)
                for c in kernel.configs]
        return "autotuned over " + "; ".join(map(str, cfgs))
    cls = module.FlashAttentionTriton
    return str(Config(cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES))


@dataclass
class Call:
    """One thing to run: its NVTX range name and a zero-argument callable."""

    name: str
    fn: Callable[[], object]


def make_inputs(N: int, D: int = shapes.HEAD_DIM):
    """Q, K, V as the kernels take them, (B*H, N, D) bf16, and (B, H, N, D) views of the same memory for SDPA."""
    import torch

    B, H = shapes.BATCH, shapes.HEADS
    q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    return (q, k, v), tuple(t.view(B, H, N, D) for t in (q, k, v))


def gluon_configs(labels: str) -> list:
    """The Gluon forward's configurations named by --gluon (comma-separated labels), checked by name."""
    if not labels:
        return []
    from fa2triton.gluon import gluon_forward_hopper

    try:
        return gluon_forward_hopper.configs_named(labels.split(","))
    except ValueError as e:
        raise SystemExit(f"--gluon: {e}") from None


def peer_list(names: str) -> list:
    """The peers named by --peer (comma-separated, checked by name; '' for none)."""
    if not names:
        return []
    from fa2lab.peers import chosen

    try:
        return chosen(names)
    except ValueError as e:
        raise SystemExit(f"--peer: {e}") from None


def peer_range(peer: str, direction: str, N: int, causal: bool) -> str:
    """A peer's NVTX range: '<peer>-fwd N=... causal=...' or '<peer>-bwd ...' (ncu names its kernels by it)."""
    return range_name(f"{peer}-{direction}", N, causal)


def peer_calls(names: str, inputs: tuple, N: int, causal: bool, backward: bool = False) -> list[Call]:
    """Each --peer's call on the shared inputs (q, k, v[, dO]) in our layout, converted to its layout here, once,
    outside the captured region: its forward, or (backward) autograd.grad through it on a graph kept from one
    forward."""
    import torch

    B, H = shapes.BATCH, shapes.HEADS
    calls = []
    for p in peer_list(names):
        if not p.enabled:
            raise SystemExit(f"--peer {p.name} ({p.label}): {p.status()}")
        q, k, v = inputs[:3]
        if not backward:
            prepared = p.prepare(q, k, v, B, H)
            calls.append(Call(peer_range(p.name, "fwd", N, causal), lambda p=p, a=prepared: p.call(a, causal)))
            continue
        leaves, dO = p.prepare(q, k, v, B, H, requires_grad=True), p.to_peer(inputs[3], B, H)
        O = p.call(leaves, causal)
        calls.append(Call(peer_range(p.name, "bwd", N, causal),
                          lambda O=O, leaves=leaves, dO=dO: torch.autograd.grad(O, leaves, dO, retain_graph=True)))
    return calls


def build_calls(modules: dict, N: int, causal: bool, sdpa: bool, gluon: str = "",
                D: int = shapes.HEAD_DIM, peer: str = "") -> list[Call]:
    """The calls of one iteration: each version's FlashAttentionTriton.apply, each --gluon configuration,
    each --peer, then SDPA, on shared inputs of head dimension D."""
    import torch.nn.functional as F

    (q, k, v), (q4, k4, v4) = make_inputs(N, D)
    calls = [Call(range_name(name, N, causal), lambda m=m: m.FlashAttentionTriton.apply(q, k, v, causal))
             for name, m in modules.items()]
    if gluon:
        from fa2triton.gluon import gluon_forward_hopper as G

        calls += [Call(range_name(f"gluon:{cfg.label}", N, causal), lambda cfg=cfg: G.forward(q, k, v, causal, cfg))
                  for cfg in gluon_configs(gluon)]
    calls += peer_calls(peer, (q, k, v), N, causal)
    if sdpa:
        calls.append(Call(range_name("sdpa", N, causal),
                          lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)))
    return calls


def build_backward_calls(modules: dict, N: int, causal: bool, sdpa: bool, D: int = shapes.HEAD_DIM,
                         peer: str = "") -> list[Call]:
    """The backward's calls (--mode bwd): for each version with the Triton backward, its recorded
    launches (one per dQ mode, each kernel in its own NVTX range, so the ncu export names them), and the
    backward the version runs by default where that is another one (v7's Gluon kernels: its BACKWARD_DKDV and
    BACKWARD_DQ_MODE); then autograd.grad through SDPA's default and FLASH_ATTENTION backends on a kept graph."""
    import torch
    import torch.nn.functional as F

    from fa2triton import flash_backward_triton as fb
    from fa2triton.reference import saved_lse

    (q, k, v), (q4, k4, v4) = make_inputs(N, D)
    dO = torch.randn_like(q)
    calls = []
    for name, m in modules.items():
        cls = m.FlashAttentionTriton
        if not hasattr(cls, "BACKWARD_CONFIG"):
            raise SystemExit(f"--mode bwd: {name} has no Triton backward (v6_longest_first and later have)")
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        O = cls.apply(qg, kg, vg, causal)
        O_, L = O.detach(), saved_lse(O)
        modes = [(dq_mode, "triton") for dq_mode in fb.DQ_MODES]
        own = (cls.BACKWARD_DQ_MODE, getattr(cls, "BACKWARD_DKDV", "triton"))
        modes += [own] if own[1] != "triton" else []
        for dq_mode, dkdv in modes:
            args = (q, k, v, O_, L, dO, causal, cls.BACKWARD_CONFIG, dq_mode, False, dkdv)
            fb.flash_attention_backward(*args[:7], config=args[7], dq_mode=dq_mode, dkdv=dkdv)   # records the launch
            launch = fb.LAUNCHES.entries[fb.backward_signature(*args)]
            calls.append(Call("", lambda launch=launch, label=name: launch(q, k, v, O_, L, dO,
                                                                            ranges=(label, range_name("", N, causal)))))
    calls += peer_calls(peer, (q, k, v, dO), N, causal, backward=True)
    if sdpa:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q4g, k4g, v4g = (t.detach().requires_grad_() for t in (q4, k4, v4))
        dO4 = dO.view_as(q4)
        O4 = F.scaled_dot_product_attention(q4g, k4g, v4g, is_causal=causal)
        calls.append(Call(range_name("sdpa-bwd", N, causal),
                          lambda: torch.autograd.grad(O4, (q4g, k4g, v4g), dO4, retain_graph=True)))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            O4f = F.scaled_dot_product_attention(q4g, k4g, v4g, is_causal=causal)
        calls.append(Call(range_name("sdpa_flash-bwd", N, causal),
                          lambda: torch.autograd.grad(O4f, (q4g, k4g, v4g), dO4, retain_graph=True)))
    return calls


def warm_up(calls: list[Call], seconds: float) -> int:
    """Compile (and autotune) every call once, then keep the GPU busy for `seconds`. Returns rounds run."""
    import torch

    for c in calls:
        c.fn()
    torch.cuda.synchronize()
    rounds, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for c in calls:
            c.fn()
        torch.cuda.synchronize()
        rounds += 1
    return rounds


def capture(calls: list[Call], iters: int) -> None:
    """The profiled region: cudaProfilerStart, `iters` rounds of NVTX-ranged calls, cudaProfilerStop."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(iters):
        for c in calls:
            if c.name:   # an unnamed call opens its own ranges (the backward's kernels)
                torch.cuda.nvtx.range_push(c.name)
            c.fn()
            if c.name:
                torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def capture_torch(calls: list[Call], iters: int, path: str) -> None:
    """The same region under torch.profiler: kernels from CUPTI, each call in a record_function
    range named like its NVTX range; written as a Chrome trace (open in Perfetto)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            for c in calls:
                with record_function(c.name):
                    c.fn()
        torch.cuda.synchronize()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(path)


def load_versions(names: list[str], config: str) -> tuple[dict, list[str]]:
    """Load each version (fa2triton.versions.load) and pin --config if given. Returns modules and log lines."""
    from fa2lab.switches import load

    modules, log = {}, []
    cfg = Config.parse(config) if config else None
    for name in names:
        m = load(name)
        how = pin_config(m, cfg) if cfg else "its own configuration"
        modules[name] = m
        log.append(f"{name}: {how}; launches {describe_config(m)}")
    return modules, log


def plan(script: str, names: list[str], args, log: list[str]) -> str:
    """What a run would do, and the article's commands to profile it (for --dry-run and the log)."""
    causal = bool(args.causal)
    if getattr(args, "mode", "fwd") == "bwd":
        ranges = [range_name(f"{n}:bwd_{k}", args.N, causal) for n in names
                  for k in ("preprocess", "dkdv", "dq", "preprocess", "atomic_dkdv")]
        ranges += [peer_range(p.name, "bwd", args.N, causal) for p in peer_list(getattr(args, "peer", ""))]
        ranges += [range_name(s, args.N, causal) for s in ("sdpa-bwd", "sdpa_flash-bwd") if args.sdpa]
    else:
        gluon = [f"gluon:{cfg.label}" for cfg in gluon_configs(args.gluon)]
        peers = [f"{p.name}-fwd" for p in peer_list(getattr(args, "peer", ""))]
        ranges = [range_name(n, args.N, causal) for n in names + gluon + peers + (["sdpa"] if args.sdpa else [])]
    which = f"--kernel {names[0]}" if script == "profile_driver.py" else f"--kernels {','.join(names)}"
    cmd = f"python profiling/{script} {which} --N {args.N} --causal {args.causal}"
    cmd += f" --D {args.D}" if args.D != shapes.HEAD_DIM else ""
    cmd += f" --config {args.config}" if args.config else ""
    cmd += " --mode bwd" if getattr(args, "mode", "fwd") == "bwd" else ""
    cmd += f" --gluon {args.gluon}" if args.gluon else ""
    cmd += f" --peer {args.peer}" if getattr(args, "peer", "") else ""
    tag = names[0] if len(names) == 1 else "compare"
    lines = [
        f"{script}: B={shapes.BATCH} H={shapes.HEADS} N={args.N} D={args.D} bf16, causal={args.causal}",
        *[f"  {line}" for line in log],
        f"  warm-up: compile/autotune each call once, then ~{args.warmup_s:g} s of GPU work, outside the capture",
        f"  capture: cudaProfilerStart; {args.iters} x [{', '.join(ranges)}] as NVTX ranges; cudaProfilerStop",
        "  profile it with:",
        f"    nsys profile --trace=cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop "
        f"-o results/nsys/{tag}_N{args.N}_c{args.causal} {cmd}",
        f"    ncu --set full --import-source yes --profile-from-start off "
        f"-o results/ncu/{tag}_N{args.N}_c{args.causal} {cmd} --iters 1 --sdpa 0",
    ]
    return "\n".join(lines)


def run(script: str, names: list[str], args) -> int:
    """Shared body of both drivers."""
    if args.fresh_cache and not args.dry_run:
        print(f"TRITON_CACHE_DIR={use_fresh_cache()}")
    modules, log = load_versions(names, args.config)
    print(plan(script, names, args, log), flush=True)
    if args.dry_run:
        print("dry run: nothing launched")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible: the drivers only run on a GPU (use --dry-run to see the plan)")
        return 2
    if args.mode == "bwd":
        if args.gluon:
            print("--gluon profiles the Gluon forward: forward mode only")
            return 2
        calls = build_backward_calls(modules, args.N, bool(args.causal), bool(args.sdpa), args.D, args.peer)
    else:
        calls = build_calls(modules, args.N, bool(args.causal), bool(args.sdpa), args.gluon, args.D, args.peer)
    rounds = warm_up(calls, args.warmup_s)
    print(f"warm-up: {rounds} rounds after the first (compiling) one", flush=True)
    capture(calls, args.iters)
    if args.torch_trace:
        capture_torch(calls, args.iters, args.torch_trace)
        print(f"torch.profiler trace: {args.torch_trace}")
    for name, m in modules.items():
        if hasattr(m, "last_path") and m.last_path():   # v7: the route the race took (tma, gluon or v6) and its pick
            print(f"{name}: ran its {m.last_path()} path, {m.last_config()}")
            continue
        best = getattr(m.flash_fwd_kernel, "best_config", None)
        print(f"{name}: ran {best if best is not None else describe_config(m)}")
    print("captured region done")
    return 0
