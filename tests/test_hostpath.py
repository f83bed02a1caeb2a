"""The lean host path (issue 8): structure, not speed (CPU timings would mean nothing)."""

import contextlib
import time

import pytest
import torch

from fa2triton import versions
from fa2triton.lean_path import LaunchCache, LeanApply


class FakeLaunch:
    def __init__(self):
        self.calls = 0

    def __call__(self, Q, K, V, need_l=True):
        self.calls += 1
        return torch.zeros_like(Q), torch.zeros(Q.shape[:2])


def test_second_call_with_the_same_signature_skips_the_normal_path(monkeypatch):
    monkeypatch.setattr(LaunchCache, "signature", staticmethod(lambda Q, K, V, c: (Q.shape, K.shape, c)))
    cache, launch, slow_calls = LaunchCache(), FakeLaunch(), []

    def slow(Q, K, V, causal):
        slow_calls.append(Q.shape)
        return torch.ones_like(Q), torch.ones(Q.shape[:2]), launch

    q = torch.randn(2, 64, 32)
    O1, _ = cache(q, q, q, False, slow)
    O2, _ = cache(q, q, q, False, slow)
    assert len(slow_calls) == 1 and launch.calls == 1
    assert O1.sum() > 0 and O2.sum() == 0  # the second result came from the cached launch
    cache(q, q, q, True, slow)             # another mask is another signature
    cache(torch.randn(2, 96, 32), q, q, False, slow)
    assert len(slow_calls) == 3
    assert cache.stats == {"slow": 3, "fast": 1}


def test_no_launch_recorded_means_the_normal_path_every_time(monkeypatch):
    monkeypatch.setattr(LaunchCache, "signature", staticmethod(lambda Q, K, V, c: (Q.shape, c)))
    cache, calls = LaunchCache(), []
    slow = lambda Q, K, V, c: (calls.append(1), (Q, Q[..., 0], None))[1]  # noqa: E731
    q = torch.randn(1, 16, 16)
    for _ in range(3):
        cache(q, q, q, False, slow)
    assert len(calls) == 3


def test_four_d_inputs_merge_heads_on_a_first_call_and_repeat_without_views(monkeypatch):
    """LeanApply.apply_heads's path: a first call checks the 4-D layout and runs the normal path on (B * H, N, D)
    views, returning O as (B, H, N, D); its launch repeats on the 4-D tensors themselves, unchecked. Where B and H
    share no stride, every call is checked and runs the 3-D lean path on copies (the copies' signature keeps the
    launch), and nothing is kept under the 4-D signature (a repeat there would read other memory)."""
    from fa2triton.lean_path import HeadsContext

    checked = []
    ctx = HeadsContext(lambda *t: checked.append(len(t)))
    monkeypatch.setattr(LaunchCache, "signature", staticmethod(lambda Q, K, V, c: (Q.shape, Q.stride(), c)))
    cache, launch, seen = LaunchCache(), FakeLaunch(), []

    def slow(Q, K, V, causal):
        seen.append((Q.shape, Q.data_ptr()))
        return torch.ones_like(Q), torch.ones(Q.shape[:2]), launch

    q = torch.randn(2, 3, 16, 8)
    O1, _ = cache(q, q, q, False, slow, ctx)
    assert seen == [((6, 16, 8), q.data_ptr())] and O1.shape == (2, 3, 16, 8) and checked == [3]
    O2, _ = cache(q, q, q, False, slow, ctx)
    assert launch.calls == 1 and O2.shape == q.shape and len(seen) == 1   # the 4-D tensors went to the launch
    assert checked == [3]                                                 # and nothing checked them again
    apart = torch.randn(2, 16, 3, 8).transpose(1, 2)   # flash-attn's layout: B and H on no one stride
    for _ in range(3):
        O3, _ = cache(apart, apart, apart, False, slow, ctx)
    assert O3.shape == apart.shape and len(checked) == 4           # checked on every call
    assert len(seen) == 2 and seen[-1][1] != apart.data_ptr()     # the copies' first call took the normal path,
    assert launch.calls == 3                                      # their two repeats its recorded launch
    assert len(cache.entries) == 2   # q's 4-D signature and the copies' 3-D one
    flat = torch.randn(6, 16, 8)
    cache(flat, flat, flat, False, slow)              # apply's 3-D call records its launch ...
    cache(flat, flat, flat, False, slow, ctx)         # ... which a 3-D input to apply_heads does not reuse unchecked
    assert len(checked) == 5


def test_apply_heads_leaves_a_gradient_to_the_caller():
    class Fn(LeanApply, torch.autograd.Function):
        @staticmethod
        def forward(ctx, Q, K, V, causal):
            return Q * 2

    q, check = torch.randn(1, 2, 4, 8), print
    assert torch.equal(Fn.apply_heads(check, q, q, q, False), q * 2)
    assert Fn.apply_heads(check, q.requires_grad_(), q, q, False) is None
    with torch.no_grad():
        assert Fn.apply_heads(check, q, q, q, False) is not None


def test_signature_refuses_cpu_and_odd_inputs():
    q = torch.randn(1, 32, 64)
    assert LaunchCache.signature(q, q, q, False) is None          # CPU tensors: normal path (and its error)
    assert LaunchCache.signature(q[0], q, "x", False) is None     # not tensors: normal path raises clearly


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the cached launch replays a real binary")
def test_v5_second_call_does_not_autotune_or_bind_again(monkeypatch):
    module = versions.load("v5_final")
    kernel = module.flash_fwd_kernel
    q, k, v = (torch.randn(4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    first = module.FlashAttentionTriton.apply(q, k, v, True)
    runs = []
    original = type(kernel).run
    monkeypatch.setattr(type(kernel), "run", lambda self, *a, **kw: (runs.append(1), original(self, *a, **kw))[1])
    second = module.FlashAttentionTriton.apply(q, k, v, True)
    assert runs == [], "the second call with the same signature went through the autotuner"
    assert torch.equal(first, second)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(second.float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script measures and appends to results/")
def test_host_steps_refuses_without_a_gpu_and_names_the_committed_file():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(repo / "profiling" / "host_steps.py")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "hostpath/steps.csv" in p.stderr


class _Twice(LeanApply, torch.autograd.Function):
    """A toy Function with the lean apply: forward doubles its input and records what ctx it got."""

    seen = []

    @staticmethod
    def forward(ctx, x, scale=2.0):
        _Twice.seen.append(type(ctx).__name__)
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * scale

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


def test_lean_apply_skips_autograd_only_when_no_gradient_can_be_asked_for(monkeypatch):
    from fa2triton.lean_path import NoGradContext

    calls = []
    original = torch.autograd.Function.apply.__func__
    monkeypatch.setattr(torch.autograd.Function, "apply",
                        classmethod(lambda cls, *a, **k: (calls.append(cls.__name__), original(cls, *a, **k))[1]))
    _Twice.seen.clear()
    x = torch.randn(4)
    y = _Twice.apply(x, 3.0)                         # no input requires a gradient: straight to forward
    assert calls == [] and _Twice.seen == [NoGradContext.__name__]
    assert y.grad_fn is None and torch.equal(y, 3 * x)
    xg = x.clone().requires_grad_()
    # a gradient can be asked for: autograd's apply, unchanged (positional: torch 2.11's C apply, which the
    # H200 runs, takes no keyword arguments where 2.13's Python apply binds them)
    z = _Twice.apply(xg, 3.0)
    assert calls == ["_Twice"] and z.grad_fn is not None
    z.sum().backward()
    assert torch.equal(xg.grad, torch.full_like(x, 3.0))
    with torch.no_grad():                            # grad mode off: no graph either way
        w = _Twice.apply(xg, 3.0)
    assert calls == ["_Twice"] and w.grad_fn is None and not w.requires_grad


@pytest.mark.parametrize("name", ["v5_final", "v6_longest_first", "v7_hopper"])
def test_versions_with_the_lean_host_path_skip_autograd_without_gradients(name, monkeypatch):
    """The harness's call (inputs that need no gradient) does not enter torch.autograd.Function.apply, and
    gives what the autograd path gives; inputs that need one still get a grad_fn and the saved L."""
    from fa2triton.interpret import autotuner_of, only_config
    from fa2triton.reference import saved_lse

    module = versions.load(name)
    FA = module.FlashAttentionTriton
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = (torch.randn(2, 96, 32, device=device, dtype=torch.bfloat16) for _ in range(3))
    tuner = autotuner_of(module)
    pinned = only_config(tuner, tuner.configs[0]) if device == "cpu" else contextlib.nullcontext()
    with pinned:
        qg = q.clone().requires_grad_()
        O_grad = FA.apply(qg, k, v, True)
        assert O_grad.grad_fn is not None and saved_lse(O_grad).shape == (2, 96)
        original = torch.autograd.Function.apply.__func__
        entered = []
        monkeypatch.setattr(torch.autograd.Function, "apply",
                            classmethod(lambda cls, *a, **kw: (entered.append(1), original(cls, *a, **kw))[1]))
        O = FA.apply(q, k, v, True)
    assert entered == [] and O.grad_fn is None
    assert torch.equal(O, O_grad.detach())


def test_aligned_cuda_refuses_what_a_recorded_launch_cannot_repeat():
    from fa2triton.lean_path import aligned_cuda

    q = torch.randn(2, 32, 16)
    assert not aligned_cuda(q)                                   # CPU
    assert not aligned_cuda("Q") and not aligned_cuda(None)      # not tensors: the checked path names them
    assert not aligned_cuda(torch.tensor(1.0))                   # 0-d
    if torch.cuda.is_available():
        g = q.cuda()
        assert aligned_cuda(g, g)
        assert not aligned_cuda(g.transpose(1, 2))               # last stride 16, not 1
        assert not aligned_cuda(g.flatten()[1:64])                # data 4 bytes past a 16-byte boundary


def test_run_compiled_skips_empty_launch_hooks_and_keeps_registered_ones(monkeypatch):
    """Without a registered hook the launcher gets None for the metadata and both hooks (no call
    back into Python per launch); with one, the metadata and the chains, so a profiler still sees
    every lean launch."""
    import types

    from triton import knobs

    import fa2triton.lean_path as hostpath

    launched = []

    class FakeKernel:
        function, packed_metadata = "fn", "packed"

        def run(self, *args):
            launched.append(args)

        def launch_metadata(self, grid, stream, *args):
            return ("meta", grid, stream, args)

    monkeypatch.setattr(hostpath, "driver",
                        types.SimpleNamespace(active=types.SimpleNamespace(get_current_stream=lambda i: 42)))
    hostpath.run_compiled(FakeKernel(), (3, 2, 1), ("a", 7), 0)
    assert launched[-1] == (3, 2, 1, 42, "fn", "packed", None, None, None, "a", 7)

    seen = []
    hook = seen.append
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        hostpath.run_compiled(FakeKernel(), (3, 2, 1), ("a", 7), 0)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    args = launched[-1]
    assert args[6] == ("meta", (3, 2, 1), 42, ("a", 7))
    assert args[7] is knobs.runtime.launch_enter_hook and args[8] is knobs.runtime.launch_exit_hook
    assert args[9:] == ("a", 7)
    assert not knobs.runtime.launch_enter_hook.calls



def test_a_launch_on_templates_gives_each_base_and_keeps_none(monkeypatch):
    """run_compiled's `bases`: Triton's own launcher (here, a kernel without a DirectLauncher) gets copies of the
    recorded templates over the call's tensors; the templates are never given a base, so threads may share them,
    and none keeps a caller's tensor alive (one that kept the last O made every tl repeat encode O again)."""
    import types
    import weakref

    import fa2triton.lean_path as hostpath

    seen = []

    class FakeKernel:
        function, packed_metadata = "fn", "packed"

        def run(self, *args):   # after grid x3, stream, function, metadata, hooks: the descriptors, then the rest
            seen.append(([d.base for d in args[9:11]], [d.name for d in args[9:11]], args[11:]))

    monkeypatch.setattr(hostpath, "driver",
                        types.SimpleNamespace(active=types.SimpleNamespace(get_current_stream=lambda i: 0)))
    descs = hostpath.templates([types.SimpleNamespace(name=n, base=torch.empty(1)) for n in "qo"])
    assert [d.base for d in descs] == [None, None]
    q, o = torch.empty(4, 8), torch.empty(4, 8)
    hostpath.run_compiled(FakeKernel(), (1, 1, 1), (*descs, "L", 5), 0, None, (q, o))
    (bases, names, rest), = seen
    assert bases[0] is q and bases[1] is o and names == ["q", "o"] and rest == ("L", 5)
    assert [d.base for d in descs] == [None, None]
    gone = weakref.ref(o)
    del o, bases, seen[:]   # the test's own records hold it too
    assert gone() is None, "the launch's descriptor holds the caller's O"


def test_a_repeat_allocates_o_as_the_recorded_call_did(monkeypatch):
    """A recorded launch's repeat allocates O (empty_output) with the shape and strides the first call's
    allocate_outputs gave it (the kernel's O strides are fixed in the launch), in Q's dtype,
    also for a dense but permuted Q, whose own strides differ from O's."""
    import fa2triton.lean_path as hostpath
    from fa2triton.lean_path import Launch
    from fa2triton.launch import allocate_outputs

    launched = []
    monkeypatch.setattr(hostpath, "run_compiled", lambda kernel, grid, args, i: launched.append(args))
    Q = torch.zeros(3, 2, 4, dtype=torch.bfloat16).transpose(0, 1)   # (2, 3, 4), strides (4, 8, 1)
    O, L = allocate_outputs(Q)
    launch = Launch(None, (1, 1, 1), (), L.shape)
    O2, _ = launch(Q, Q, Q)
    assert launched[0][3] is O2 and O2 is not O
    assert (O2.shape, O2.stride(), O2.dtype) == (O.shape, O.stride(), Q.dtype) == ((2, 3, 4), (12, 4, 1), Q.dtype)


def test_repeats_without_gradient_write_l_to_a_kept_scratch(monkeypatch):
    """With LeanApply's NoGradContext a repeat launch gets need_l=False (L to the launch's scratch,
    allocated once); with any other context a fresh L per call, since backward will read it."""
    import fa2triton.lean_path as hostpath
    from fa2triton.lean_path import Launch, NoGradContext

    class Recording:
        def __init__(self):
            self.need = []

        def __call__(self, Q, K, V, need_l=True):
            self.need.append(need_l)
            return Q, None

    cache, rec = LaunchCache(), Recording()
    monkeypatch.setattr(LaunchCache, "signature", staticmethod(lambda Q, K, V, mode: ("k", mode)))
    cache.entries[("k", 1)] = rec
    q = torch.zeros(1)
    class AutogradCtx:   # stands in for autograd's ctx: takes attributes
        pass

    ctx = AutogradCtx()
    cache(q, q, q, 1, slow=None, ctx=NoGradContext())
    cache(q, q, q, 1, slow=None, ctx=ctx)
    cache(q, q, q, 1, slow=None)
    assert rec.need == [False, True, True] and cache.stats["fast"] == 3
    assert ctx.forward_launch is rec   # the backward's cache builds on the forward's launch

    launched = []
    monkeypatch.setattr(hostpath, "run_compiled", lambda kernel, grid, args, i: launched.append(args))
    launch = Launch(None, (1, 1, 1), (), torch.Size((2, 3)))
    Q = torch.zeros(2, 3, 4)
    (_, L1), (_, L2), (_, L3) = launch(Q, Q, Q, need_l=False), launch(Q, Q, Q, need_l=False), launch(Q, Q, Q)
    assert L1 is L2 and L3 is not L1 and L1.shape == (2, 3) and L1.dtype == torch.float32
    assert launched[0][4] is L1 and launched[2][4] is L3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times a GPU")
def test_queued_ms_times_the_gpu_when_the_host_is_slower():
    """A call that costs the host 300 us and the GPU about 50: events around host-paced calls would say
    300 or more; queued_ms, with the queue filled behind a spin kernel first, says the GPU's time."""
    from fa2triton.gpu import facts
    from fa2triton.queued_timing import queued_ms

    spin = int(50e-6 * facts(torch.cuda.current_device()).sm_clock_mhz * 1e6)

    def slow_host_call():
        time.sleep(300e-6)
        torch.cuda._sleep(spin)

    assert 0.025 < queued_ms(slow_host_call, repeats=10) < 0.15


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times a GPU")
def test_prepared_times_time_the_call_alone_behind_its_preparation():
    """prepared_times (experiment coldstart): a 200 us spin as the preparation, then a call that costs the
    host 100 us and the GPU about 50: each time is the call's GPU time, not the preparation's nor the host's."""
    from fa2triton.gpu import facts
    from fa2lab.timers import prepared_times

    per_us = facts(torch.cuda.current_device()).sm_clock_mhz

    def call():
        time.sleep(100e-6)
        torch.cuda._sleep(int(50 * per_us))

    times = prepared_times(call, lambda: torch.cuda._sleep(int(200 * per_us)), reps=10)
    assert len(times) == 10 and 0.025 < sorted(times)[5] < 0.15


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times a GPU")
def test_kernel_durations_are_the_kernels_own_gpu_time():
    """kernel_durations (experiment coldstart): three calls of a 50 us spin behind a 200 us host sleep give
    three records of about 50 us each under the spin kernel's name; the host's time is not in them."""
    from fa2triton.gpu import facts
    from fa2lab.timers import kernel_durations, kernel_names

    per_us = facts(torch.cuda.current_device()).sm_clock_mhz

    def call():
        time.sleep(200e-6)
        torch.cuda._sleep(int(50 * per_us))

    (name,) = kernel_names(call)
    durations = kernel_durations(call, 3)
    assert list(durations) == [name] and len(durations[name]) == 3
    assert all(0.03 < ms < 0.15 for ms in durations[name])


def _fake_kernel(launch, **run_fields):
    """A CompiledKernel stand-in whose `run` is this Triton's own CudaLauncher (its __init__, which compiles and loads,
    skipped) around `launch`: calling kernel.run(...) is Triton's launch path, as run_compiled's fallback calls it."""
    from types import SimpleNamespace

    from triton.backends.nvidia import driver as nv

    run = object.__new__(nv.CudaLauncher)
    run.__dict__.update(launch=launch, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
                        profile_scratch_align=1, num_ctas=1, launch_cooperative_grid=False, launch_pdl=False,
                        gsan_enabled=False, arg_annotations="annotations", kernel_signature=b"signature")
    run.__dict__.update(run_fields)
    return SimpleNamespace(run=run, function=11, packed_metadata=22)


def _kernel_args(launched: tuple) -> list:
    """The kernel's arguments in one C launch call: spread after its 13 leading ones (Triton 3.6), or its last
    argument, one sequence (Triton 3.9's generic launch)."""
    return list(launched[-1]) if isinstance(launched[-1], list) else list(launched[13:])


def test_direct_launcher_passes_what_tritons_wrapper_passes_and_encodes_once_per_base(monkeypatch):
    """Triton's own CudaLauncher (its descriptor wrapper, this Triton's argument order) and DirectLauncher, on the
    same arguments, must hand the C launch function the same arguments; a descriptor is encoded again only when
    its base address changes."""
    from types import SimpleNamespace

    import triton
    from triton.backends.nvidia import driver as nv

    from fa2triton.lean_path import DirectLauncher, templates

    encodes = []

    def fake_encode(desc, meta, *_):   # stands in for cuTensorMapEncodeTiled: records what it was asked
        encodes.append((desc.name, desc.base.data_ptr(), meta["id"]))
        return [f"map-{desc.name}-{meta['id']}", *desc.shape, *desc.strides]

    monkeypatch.setattr(nv, "make_tensordesc_arg", fake_encode)
    launched = []
    signature = {"q": "tensordesc<bf16[64, 64]>", "o": "*bf16", "k": "tensordesc<bf16[64, 64]>", "n": "i32"}
    metas = [{"id": 0}, {"id": 1}]
    kernel = _fake_kernel(nv.wrap_handle_tensordesc(lambda *a: launched.append(a), signature, metas))
    q = SimpleNamespace(name="q", base=torch.empty(64, 64), shape=[64, 64], strides=[64, 1])
    k = SimpleNamespace(name="k", base=torch.empty(64, 64), shape=[64, 64], strides=[64, 1])
    args = (q, "o_ptr", k, 1000)

    # CudaLauncher.__call__ reads the active driver (3.9): a stand-in, restored after the test (no GPU here)
    monkeypatch.setattr(triton.runtime.driver, "_active", SimpleNamespace())
    kernel.run(1, 2, 3, 99, 11, 22, None, None, None, *args)   # Triton's path (run_compiled's fallback)
    direct = DirectLauncher.of(kernel)
    assert direct is not None and DirectLauncher.of(kernel) is direct
    direct((1, 2, 3), 99, args)
    assert launched[0] == launched[1]
    assert _kernel_args(launched[1]) == ["map-q-0", 64, 64, 64, 1, "o_ptr", "map-k-1", 64, 64, 64, 1, 1000]
    assert len(encodes) == 4                 # Triton's path encodes both every time; ours once each so far
    direct((1, 2, 3), 99, args)
    assert len(encodes) == 4 and launched[2] == launched[1]
    k.base = torch.empty(64, 64)             # a new base address: that descriptor alone is encoded again
    direct((1, 2, 3), 99, args)
    assert [e[0] for e in encodes[4:]] == ["k"]
    tq, = templates([q])                     # a recorded launch's template, its base given per call
    q2 = torch.empty(64, 64)
    direct((1, 2, 3), 99, (tq, "o_ptr", k, 1000), (q2,))
    assert encodes[-1] == ("q", q2.data_ptr(), 0) and tq.base is None and len(encodes) == 6
    direct((1, 2, 3), 99, (tq, "o_ptr", k, 1000), (q2,))
    assert len(encodes) == 6                 # the same base again: kept


def test_direct_launcher_declines_what_only_tritons_launcher_handles():
    from triton.backends.nvidia import driver as nv

    from fa2triton.lean_path import DirectLauncher

    def c_launch(*a):
        return None

    assert DirectLauncher.of(_fake_kernel(c_launch)) is not None              # no descriptors: the C function
    assert DirectLauncher.of(_fake_kernel(c_launch, global_scratch_size=64)) is None   # scratch to allocate
    assert DirectLauncher.of(_fake_kernel(c_launch, gsan_enabled=True)) is None        # GSan's extra arguments
    undecomposed = nv.wrap_handle_tensordesc(c_launch, {"q": "tensordesc<bf16[64, 64]>"}, None)
    assert DirectLauncher.of(_fake_kernel(undecomposed)) is None             # no TMA metadata


def test_spin_ms_spins_only_when_the_settle_calls_leave_too_little_queued():
    """queued_times' spin: none behind calls the GPU is slower at once they leave the host's time for the timed calls
    queued, twice that time otherwise (host-paced calls, or too few settle calls)."""
    from fa2triton.queued_timing import spin_ms

    assert spin_ms(gpu_ms=0.17, host_ms=0.03, settle_calls=235, timed_calls=50) == 0.0
    assert spin_ms(gpu_ms=0.012, host_ms=0.03, settle_calls=1333, timed_calls=60) == pytest.approx(3.6)
    assert spin_ms(gpu_ms=0.031, host_ms=0.03, settle_calls=10, timed_calls=60) == pytest.approx(3.6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times a GPU")
def test_queued_times_holds_the_gpu_busy_for_settle_ms_first():
    """A call of about 200 us on the GPU and little on the host: queued_times takes settle_ms of calls before the
    timed ones (the wall time shows it) and still times the GPU's per-call time, as CUDA events around 20 calls
    back to back measure it (torch.cuda._sleep counts cycles of a clock whose rate is the GPU's own)."""
    from fa2triton.gpu import facts
    from fa2lab.timers import event_times
    from fa2triton.queued_timing import queued_times

    spin = int(200e-6 * facts(torch.cuda.current_device()).sm_clock_mhz * 1e6)
    call = lambda: torch.cuda._sleep(spin)  # noqa: E731
    alone = sorted(event_times(call, 20))[10]
    t0 = time.perf_counter()
    times = queued_times(call, repeats=5, rounds=3, settle_ms=150)
    assert time.perf_counter() - t0 >= 0.15
    # the least round: other processes' kernels only add time (under xdist on the H200 two rounds of 3 read 3.4x,
    # alone one in a few read 3x: results/nvidia-h200/logs/native_all39_3a0b76e.log)
    assert len(times) == 3 and 0.7 * alone < min(times) < 1.3 * alone, (times, alone)


def test_queued_quantiles_answers_the_autotuner_in_its_order(monkeypatch):
    """triton.autotune asks do_bench for the quantiles (0.5, 0.2, 0.8) and keeps the least list; v7's
    autotuner is given queued_quantiles."""
    from fa2triton import queued_timing as timing

    monkeypatch.setattr(timing, "queued_times", lambda fn, repeats, rounds: [5.0, 1.0, 3.0, 2.0, 4.0])
    assert timing.queued_quantiles(lambda: None, quantiles=(0.5, 0.2, 0.8)) == pytest.approx([3.0, 1.8, 4.2])
    assert timing.queued_quantiles(lambda: None, quantiles=(0.0, 1.0)) == [1.0, 5.0]
    from fa2triton.interpret import autotuner_of

    assert autotuner_of(versions.load("v7_hopper"))._do_bench is timing.queued_quantiles
