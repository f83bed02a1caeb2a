"""Where a call's host time goes (issues 8, 47, 48): each step of the lean host path, forward and backward, timed alone.

    python profiling/host_steps.py                            # v5_final, v6, v7 at N = 512, both masks
    python profiling/host_steps.py --kernel v7_hopper --N 512 4096 --steps sdpa,apply,attention,flash_attn_func

Each step is timed as the harness's host_us (fa2lab.timers.host_us_per_call), `--repeats` times, interleaved; rows
(median, min, max µs per call) go to results/<gpu>/hostpath/steps.csv. The steps, from the outside in:
  sdpa              F.scaled_dot_product_attention, the reference (one C++ op)
  attention, flash_attn_func   fa2triton's API on (B, H, N, D) and (B, N, H, D) views of apply's own inputs
  apply             FlashAttentionTriton.apply: the harness's host_us (no input needing a gradient: LeanApply)
  apply_grad        the same with Q requiring a gradient: autograd's apply, a graph recorded per call
  function_nop      an autograd.Function whose forward only allocates O: the Function machinery's price
  cache_hit         the cached Launch called directly: signature lookup skipped, 2 allocations + launch
  signature         LaunchCache.signature + the dictionary lookup
  allocate          fa2triton.lean_path.empty_output(Q) + torch.empty(L): what a recorded launch's repeat allocates
  descriptors       v7's TMA path only: building the four tensor descriptors it needs on every call
  launch            CompiledKernel.run with O and L preallocated: Triton's launcher alone
and, for versions with the Triton backward (v6, v7), each autograd.grad on a kept graph unless said:
  sdpa_backward, sdpa_flash_backward   through SDPA (its default backend; FLASH_ATTENTION)
  backward          through FlashAttentionTriton (what bench --mode bwd times), in its BACKWARD_DQ_MODE;
                    backward_separate, backward_fused: that dQ mode forced
  backward_nop      through a Python autograd.Function saving the same five tensors, launching nothing (the floor)
  backward_direct[_fused]   flash_attention_backward called directly (its key, allocations and launches)
  backward_key, backward_alloc, backward_launch   the fused mode's key and lookup, allocation and launch alone
  bwd_split         `backward` cut at the Function's backward's entry and exit: bwd_enter (the engine's hand-off to its
                    device thread), bwd_body (the backward), bwd_leave (the hand-back); bwd_inside cuts bwd_body
  bwd_*             the default mode's repeat (BackwardLaunch, issue 48) by piece: key, buffers, zero_fill (the fp32
                    dQ fill the Delta launch took over), delta, main, cast (dQ from fp32), repeat (all of it)

apply - cache_hit is what the autograd.Function and the lookup add; cache_hit - allocate is the launch."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402

STEPS = ("sdpa", "apply", "attention", "flash_attn_func", "apply_grad", "function_nop", "cache_hit", "signature",
         "allocate", "descriptors", "launch",
         "sdpa_backward", "sdpa_flash_backward", "backward", "backward_separate", "backward_fused", "backward_nop",
         "backward_direct", "backward_direct_fused", "backward_key", "backward_alloc", "backward_launch", "bwd_split",
         "bwd_inside", "bwd_key", "bwd_buffers", "bwd_zero_fill", "bwd_delta", "bwd_main", "bwd_cast", "bwd_repeat")
BACKWARD_STEPS = STEPS[STEPS.index("sdpa_backward"):]   # built only when one of them is asked for
REPEAT_STEPS = STEPS[STEPS.index("bwd_key"):]          # the backward's repeat path, piece by piece (issue 48)
SPLIT_PARTS = ("bwd_enter", "bwd_body", "bwd_leave")   # the rows step bwd_split writes
# the rows step bwd_inside writes: bwd_body cut at the recorded launch's pieces (inside_us_per_call)
INSIDE_PARTS = ("bwd_in_lookup", "bwd_in_buffers", "bwd_in_delta", "bwd_in_main", "bwd_in_rest")
PARTS = {"bwd_split": SPLIT_PARTS, "bwd_inside": INSIDE_PARTS}   # the steps that write several rows


def stamped(cls, stamps: list):
    """A subclass of the autograd.Function `cls` whose backward appends time.perf_counter_ns() to `stamps` on
    entry and on exit and otherwise is cls.backward (forward, class attributes and caches are cls's)."""
    import time

    class Stamped(cls):
        @staticmethod
        def backward(ctx, *grads):
            stamps.append(("enter", time.perf_counter_ns()))
            out = cls.backward(ctx, *grads)
            stamps.append(("exit", time.perf_counter_ns()))
            return out

    return Stamped


def split_us_per_call(grad, stamps: list, calls: int = 200) -> dict:
    """{bwd_enter, bwd_body, bwd_leave: µs per call}: `calls` calls of `grad` (an autograd.grad through a
    stamped() Function) back to back as host_us_per_call makes them, each cut at the backward's two stamps."""
    import time

    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    grad()
    sync()
    stamps.clear()
    edges = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        grad()
        edges.append((t0, time.perf_counter_ns()))
    sync()
    ends = [t for tag, t in stamps if tag in ("enter", "exit")]
    if len(ends) != 2 * calls:
        raise RuntimeError(f"{len(ends)} stamps for {calls} calls: the backward did not run once per call")
    inner = list(zip(ends[0::2], ends[1::2]))
    parts = [(b - a, c - b, d - c) for (a, d), (b, c) in zip(edges, inner)]
    return {name: sum(p[i] for p in parts) / calls / 1e3 for i, name in enumerate(SPLIT_PARTS)}


def inside_us_per_call(grad, stamps: list, calls: int = 200) -> dict:
    """{bwd_in_*: µs per call}: `calls` calls of `grad` (an autograd.grad through a stamped() Function whose backward
    runs a recorded BackwardLaunch) back to back, each body cut where the launch's pieces begin and end, as they run
    on autograd's device thread (the bwd_* steps time them alone, on the main thread): from the backward's entry to
    the buffers (the saved tensors, the key and the lookup), the buffers, the Delta launch (0 where there is none),
    the main launch(es), and the rest (the cast and the return); each piece holds its stamping wrapper's own call. A
    RuntimeError where a call ran no recorded launch."""
    import time

    from fa2triton.flash_backward_triton import BackwardLaunch

    def stamping(name, fn):
        def run(self, *args, **kwargs):
            if name == "buffers":
                stamps.append(("lookup", time.perf_counter_ns()))
            out = fn(self, *args, **kwargs)
            stamps.append((name, time.perf_counter_ns()))
            return out
        return run

    names = ("buffers", "run_delta", "run_main")
    kept = {n: BackwardLaunch.__dict__[n] for n in names}
    try:
        for n in names:
            setattr(BackwardLaunch, n, stamping(n, kept[n]))
        split_us_per_call(grad, stamps, calls)
    finally:
        for n in names:
            setattr(BackwardLaunch, n, kept[n])
    parts, call = {p: 0.0 for p in INSIDE_PARTS}, {}
    for tag, t in stamps:
        call[tag] = t
        if tag != "exit":
            continue
        if not {"enter", "lookup", "buffers", "run_main"} <= set(call):
            raise RuntimeError("a call's backward ran no recorded BackwardLaunch: nothing to cut")
        pieces = {"bwd_in_lookup": call["lookup"] - call["enter"], "bwd_in_buffers": call["buffers"] - call["lookup"],
                  "bwd_in_delta": call.get("run_delta", call["buffers"]) - call["buffers"],
                  "bwd_in_main": call["run_main"] - call.get("run_delta", call["buffers"]),
                  "bwd_in_rest": t - call["run_main"]}
        for p, ns in pieces.items():
            parts[p] += ns / calls / 1e3
        call = {}
    return parts


def backward_repeat_steps(launch, lookup, q, k, v, O, L, dO, buffers=None) -> dict:
    """{bwd_* step: zero-argument callable} for one recorded BackwardLaunch (fa2triton.flash_backward_triton) on
    its inputs: each piece of its repeat alone, on buffers allocated once (so that a piece's time holds no other
    piece), and `lookup` (the key and dictionary lookup that finds it). bwd_zero_fill and bwd_cast only where the
    launch accumulates dQ in fp32 apart from dQ, bwd_delta only where it has a Delta launch. Run in the order of
    REPEAT_STEPS, the pieces compute what launch(q, k, v, O, L, dO) computes, into `buffers` (launch.buffers's
    five; by default allocated here)."""
    dQ, dK, dV, acc, Delta = launch.buffers(q, k) if buffers is None else buffers
    fns = {"bwd_key": lookup, "bwd_buffers": lambda: launch.buffers(q, k)}
    if acc is not dQ:
        fns["bwd_zero_fill"] = acc.zero_
    if Delta is not None:
        fns["bwd_delta"] = lambda: launch.run_delta(O, dO, Delta, acc)
    fns["bwd_main"] = lambda: launch.run_main(q, k, v, O, L, dO, dQ, dK, dV, acc, Delta)
    if acc is not dQ:
        fns["bwd_cast"] = lambda: dQ.copy_(acc)
    fns["bwd_repeat"] = lambda: launch(q, k, v, O, L, dO)
    return fns


def same_launches(launches) -> bool:
    """Whether the recorded launches (apply's, and attention()'s under its (B, H, N, D) signature) are at most two and
    run one compiled kernel on one grid: then the API's steps time apply's call."""
    inner = [getattr(x, "launch", x) for x in launches]   # v7 marks another path's launch (_MarkedLaunch)
    return len(inner) <= 2 and len({(id(x.kernel), x.grid) for x in inner}) == 1


def api_steps(cls, version: str, q, k, v, causal: bool, B: int, H: int) -> dict:
    """{"apply", "attention", "flash_attn_func": zero-argument callable}: cls.apply on q, k, v (B·H, N, D), and
    fa2triton's attention() and flash_attn_func() on (B, H, N, D) and (B, N, H, D) views of the same storage, so that
    the wrapper is all that differs (issue 47). A RuntimeError if the API's class for `version` is not `cls` (the
    lab's, its switches set): then the API would time another class."""
    from fa2triton import api

    if api._function(version) is not cls:
        raise RuntimeError(f"fa2triton.api's {version} is not the FlashAttentionTriton the lab loaded: "
                           "attention() would time another class than apply")
    q4, k4, v4 = (t.view(B, H, *t.shape[1:]) for t in (q, k, v))
    qs, ks, vs = (t.transpose(1, 2) for t in (q4, k4, v4))   # flash-attn's (B, N, H, D), the same storage
    return {"apply": lambda: cls.apply(q, k, v, causal),
            "attention": lambda: api.attention(q4, k4, v4, is_causal=causal, version=version),
            "flash_attn_func": lambda: api.flash_attn_func(qs, ks, vs, causal=causal, version=version)}


def step_functions(module, version: str, N: int, causal: bool, wanted=STEPS) -> dict:
    """{step: zero-argument callable} for one version, shape and mask (CUDA inputs, the harness's layout); the
    backward's steps only when `wanted` holds one. The API's calls must hit apply's cached launch (a RuntimeError
    otherwise: they would not time the same call)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fa2triton.lean_path import empty_output, run_compiled

    cls = module.FlashAttentionTriton
    B, H, D = shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
    cache = cls.launches
    cache.entries.clear()
    cls.apply(q, k, v, causal)   # the normal path once: compiles, autotunes, records this shape's Launch
    torch.cuda.synchronize()
    if len(cache.entries) != 1:
        raise RuntimeError(f"{module.__name__}: {len(cache.entries)} cached launches after one call "
                           "(expected 1: is the lean host path on?)")
    (key, launch), = cache.entries.items()
    mode = key[-1]   # the signature ends with the version's mode (mask, window, ...)
    inner = getattr(launch, "launch", launch)   # v7's record of a launch that fell back to v6's kernel

    class Nop(torch.autograd.Function):
        @staticmethod
        def forward(ctx, Q, K, V, is_causal):
            return torch.empty_like(Q)

    def allocate():   # as every recorded launch's repeat allocates (Launch, TmaLaunch, GluonLaunch: need_l)
        return empty_output(q), torch.empty(inner.l_shape, dtype=torch.float32, device=q.device)

    O, L = allocate()
    fns = {}
    if hasattr(inner, "scalars"):   # v7's Gluon path (GluonLaunch): its own descriptors, bases swapped per call
        def raw_launch():
            inner.run(q, k, v, O, L)
    else:
        if getattr(inner, "blocks", ()):   # v7's TMA path: its step "descriptors" builds the four anew
            def descriptors():
                descs = module._descriptors(q, k, v, O)
                for d, block in zip(descs, inner.blocks):
                    d.block_shape = list(block)
                return descs

            fns["descriptors"] = descriptors
            pointers = (*descriptors(), L)
        else:
            pointers = (q, k, v, O, L)

        def raw_launch():
            run_compiled(inner.kernel, inner.grid, (*pointers, *inner.tail), q.device.index)

    api = api_steps(cls, version, q, k, v, causal, B, H)
    for name in ("attention", "flash_attn_func"):
        api[name]()
    if not same_launches(cache.entries.values()):
        raise RuntimeError(f"{module.__name__}: attention() or flash_attn_func() recorded another launch than apply's "
                           "(kernel or grid): the steps would not time the same call")

    if hasattr(cls, "BACKWARD_CONFIG") and set(wanted) & set(BACKWARD_STEPS):   # the Triton backward (v6, v7)
        from fa2triton import flash_backward_triton as bwd
        from fa2triton.reference import saved_lse

        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
        q4g, k4g, v4g = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
        dO = torch.randn_like(q)
        O_g = cls.apply(qg, kg, vg, causal)
        L_g = saved_lse(O_g)
        O_s = F.scaled_dot_product_attention(q4g, k4g, v4g, is_causal=causal)
        fns["sdpa_backward"] = lambda: torch.autograd.grad(O_s, (q4g, k4g, v4g), dO.view(B, H, N, D),
                                                            retain_graph=True)
        fns["backward"] = lambda: torch.autograd.grad(O_g, (qg, kg, vg), dO, retain_graph=True)
        stamps = []
        O_t = stamped(cls, stamps).apply(qg, kg, vg, causal)
        fns["bwd_split"] = lambda: split_us_per_call(
            lambda: torch.autograd.grad(O_t, (qg, kg, vg), dO, retain_graph=True), stamps)
        fns["bwd_inside"] = lambda: inside_us_per_call(
            lambda: torch.autograd.grad(O_t, (qg, kg, vg), dO, retain_graph=True), stamps)

        def backward_in(mode):
            def call():
                cls.BACKWARD_DQ_MODE = mode
                try:
                    return torch.autograd.grad(O_g, (qg, kg, vg), dO, retain_graph=True)
                finally:
                    cls.BACKWARD_DQ_MODE = default_mode
            return call

        default_mode = cls.BACKWARD_DQ_MODE
        fns["backward_separate"], fns["backward_fused"] = backward_in("separate"), backward_in("fused")
        O_d = O_g.detach()
        fns["backward_direct"] = lambda: bwd.flash_attention_backward(q, k, v, O_d, L_g, dO, causal)
        fns["backward_direct_fused"] = lambda: bwd.flash_attention_backward(q, k, v, O_d, L_g, dO, causal,
                                                                            dq_mode="fused")
        fns["backward_fused"]()   # records autograd's fused launch (all three gradients wanted), timed apart below
        def keyed(mode):   # autograd's key for the backward in `mode` (all three gradients wanted)
            return bwd.forward_keyed_signature(launch, dO, causal, cls.BACKWARD_CONFIG, mode, True,
                                               getattr(cls, "BACKWARD_DKDV", "triton"))

        fused = bwd.LAUNCHES.entries[keyed("fused")]
        fused_grads = bwd.gradient_buffers(q, k, fused.stack)   # dQ, dK, dV
        fns["backward_key"] = lambda: bwd.LAUNCHES.entries.get(keyed(cls.BACKWARD_DQ_MODE))
        fns["backward_alloc"] = lambda: bwd.gradient_buffers(q, k, fused.stack)
        fused_args = fused.fused_args(q, k, v, O_d, L_g, dO, *fused_grads)
        fns["backward_launch"] = lambda: run_compiled(fused.dkdv, fused.grids[0], fused_args, q.device.index)
        fns["backward"]()   # records autograd's launch in the default mode (all three gradients wanted)
        fns |= backward_repeat_steps(bwd.LAUNCHES.entries[keyed(cls.BACKWARD_DQ_MODE)],
                                     lambda: bwd.LAUNCHES.entries.get(keyed(cls.BACKWARD_DQ_MODE)), q, k, v, O_d, L_g, dO)
        grads = tuple(torch.zeros_like(t) for t in (q, k, v))

        class NopBackward(torch.autograd.Function):   # saves what FlashAttentionTriton saves, launches nothing
            @staticmethod
            def forward(ctx, Q, K, V, is_causal):
                O = torch.empty_like(Q)
                ctx.save_for_backward(Q, K, V, O, L_g)
                ctx.is_causal = is_causal
                return O

            @staticmethod
            def backward(ctx, dO):
                ctx.saved_tensors
                return (*grads, None)

        O_nop = NopBackward.apply(qg, kg, vg, causal)
        fns["backward_nop"] = lambda: torch.autograd.grad(O_nop, (qg, kg, vg), dO, retain_graph=True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            O_f = F.scaled_dot_product_attention(q4g, k4g, v4g, is_causal=causal)
        fns["sdpa_flash_backward"] = lambda: torch.autograd.grad(O_f, (q4g, k4g, v4g), dO.view(B, H, N, D),
                                                                  retain_graph=True)

    q_grad = q.detach().clone().requires_grad_()   # autograd's path: a graph is recorded on every call
    return fns | api | {
        "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal),
        "apply_grad": lambda: cls.apply(q_grad, k, v, causal),
        "function_nop": lambda: Nop.apply(q, k, v, causal),
        "cache_hit": lambda: launch(q, k, v),
        "signature": lambda: cache.entries.get(cache.signature(q, k, v, mode)),
        "allocate": allocate,
        "launch": raw_launch,
    }


def time_steps(fns: dict, wanted, repeats: int) -> dict:
    """{row's step: [µs per call, one per repeat]} for the `wanted` steps that `fns` (step_functions) has, in STEPS'
    order and interleaved, so a slow moment hits every step alike; a step of PARTS gives one row per part."""
    from fa2lab.timers import host_us_per_call

    steps = [s for s in STEPS if s in fns and s in wanted]
    samples = {p: [] for s in steps for p in PARTS.get(s, (s,))}
    for _ in range(repeats):
        for s in steps:
            if s in PARTS:
                for p, us in fns[s]().items():
                    samples[p].append(us)
            else:
                samples[s].append(host_us_per_call(fns[s]))
    return samples


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="v5_final,v6_longest_first,v7_hopper",
                    help="versions with the lean host path (comma-separated)")
    ap.add_argument("--N", type=int, nargs="*", default=[512], help="sequence lengths")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both")
    ap.add_argument("--repeats", type=int, default=5, help="timings of 200 calls per step")
    ap.add_argument("--steps", default=",".join(STEPS), help="the steps to time (comma-separated; default all)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    wanted = [s for s in args.steps.split(",") if s]
    unknown = [s for s in wanted if s not in STEPS]
    if unknown or not wanted:
        ap.error(f"--steps {args.steps!r}: {'unknown ' + ', '.join(unknown) if unknown else 'no step given'}; "
                 f"the steps are {', '.join(STEPS)}")

    import torch

    if not torch.cuda.is_available():
        print("host_steps times launches on a CUDA GPU; the committed results/<gpu>/hostpath/steps.csv "
              "can be read without one", file=sys.stderr)
        return 2
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir
    from fa2lab.switches import load
    from fa2triton.versions import resolve

    env, out, written = environment(), gpu_dir() / "hostpath" / "steps.csv", 0
    for version in resolve(args.kernel):
        module = load(version.name)
        for causal in shapes.masks_from(args.causal):
            for N in args.N:
                samples = time_steps(step_functions(module, version.name, N, causal, wanted), wanted, args.repeats)
                date = now()   # one per block: the report pairs attention's row with apply's timed beside it
                rows = [{"version": version.name, "N": N, "causal": int(causal), "step": s,
                         "us_median": statistics.median(xs), "us_min": min(xs), "us_max": max(xs),
                         "repeats": args.repeats, "calls_each": 200, "date": date, **env} for s, xs in samples.items()]
                line = "  ".join(f"{s} {statistics.median(xs):.1f}" for s, xs in samples.items())
                print(f"{version.name} N={N} causal={int(causal)} (µs per call): {line}", flush=True)
                if not args.no_save:   # each block as soon as it is timed: an interrupted run keeps the others
                    append_rows(out, rows)
                    written += len(rows)
    if not args.no_save:
        print(f"wrote {written} rows to {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
