"""A lean host path (issue 8): after the first call for a given input signature, launch the
compiled kernel directly, skipping input checks, autotune key building and argument binding.

At small N on a fast GPU the host's per-call work (checks, `.contiguous()`, Triton's
argument binding and specialisation, the autotuner's key) can take longer than the kernel,
so do_bench measures Python. The first call with a new signature goes through the normal
path (checks, autotuning, compilation) and records what it launched; later calls with the
same signature are a dictionary hit, two allocations and one launch.

The signature covers everything the checks and Triton's specialisation look at: shapes,
strides, dtypes, device and mask, and it only applies when every input is 16-byte aligned
with a unit last stride (so Triton's alignment specialisation is the same on every hit).
Under the interpreter, or for any other input, the normal path runs every time.

`LeanApply` is the second half: when no gradient can be asked for (grad mode off, or no input
requires one), `apply` calls the Function's forward directly with a context that keeps nothing,
so the call skips torch.autograd.Function's own machinery (7 us per call on the H200's host,
hostpath/steps.csv, step function_nop). With an input that requires a gradient it is
torch.autograd.Function.apply, unchanged.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import scratch
from .triton_compat import direct_launch, encode_descriptor, require_supported

require_supported()   # every kernel imports this module (directly or through fa2triton.launch): one line, here

from triton import knobs  # noqa: E402
from triton.runtime import driver  # noqa: E402


def empty_output(Q: torch.Tensor) -> torch.Tensor:
    """O for a forward on Q: Q's shape and dtype, contiguous (fa2triton.launch.allocate_outputs on a first call, and
    every repeat of the launch it recorded, so the two have one layout by construction). torch.empty_like costs
    the host about 3 us less per call than torch.empty(shape, dtype=..., device=...) on the H200's host:
    host-steps at N = 512, v7 apply 20.5-22.6 -> 17.3-17.5 us, SDPA 16.5-19.0 in the same processes."""
    return torch.empty_like(Q, memory_format=torch.contiguous_format)


class KeptL:
    """A recorded launch's kept L (l_shape float32) for calls whose L nobody reads."""

    l_shape: torch.Size
    l_scratch: torch.Tensor | None = None

    def scratch_l(self, Q) -> torch.Tensor:
        """Where the kernel writes L when nobody will read it (no gradient can be asked for: LeanApply's
        path): one buffer per recorded launch, allocated on first use and kept, instead of a fresh
        allocation per call. Calls on other streams may write it at the same time; nothing reads it. Kept within
        fa2triton.scratch's budget, which may drop it (drop_scratch)."""
        L = self.l_scratch
        if L is None:
            L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device)
            if scratch.KEPT.keep(self, None, L.numel() * 4):
                self.l_scratch = L
        return L

    def drop_scratch(self, key=None) -> None:
        self.l_scratch = None


@dataclass
class Launch(KeptL):
    """What one normal-path call launched: enough to repeat it without Triton's front end."""

    kernel: object            # triton.compiler.CompiledKernel
    grid: tuple[int, int, int]
    tail: tuple               # every argument after the five pointers, in signature order
    l_shape: torch.Size       # O needs no record: every call allocates it by empty_output(Q)

    l_scratch: torch.Tensor | None = field(default=None, repr=False)

    def __call__(self, Q, K, V, need_l: bool = True):   # the per-call hot path: no imports or checks here
        O = empty_output(Q)   # as the recorded call allocated it (allocate_outputs)
        L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device) if need_l else self.scratch_l(Q)
        run_compiled(self.kernel, self.grid, (Q, K, V, O, L, *self.tail), Q.device.index)
        return O, L


def current_stream(device_index: int) -> int:
    """The current CUDA stream of a device, as Triton's launcher takes it (run_compiled's `stream`)."""
    return driver.active.get_current_stream(device_index)


def run_compiled(kernel, grid: tuple[int, int, int], args: tuple, device_index: int,
                 stream: int | None = None, bases: tuple = ()) -> None:
    """Launch a CompiledKernel (what `jit_fn[grid](...)` returned) on `stream` (default: the current one),
    skipping Triton's argument binding and specialisation: `args` is every parameter in signature order,
    constexprs included, exactly as the first launch bound them; a pointer may be given as its int address (Triton's
    launcher then skips its data_ptr() call and the driver's pointer check). `bases`: the base tensors of the host
    descriptors that lead `args` (a recorded launch's templates, `templates`), in order; the templates stay as they are.

    Launch hooks (Proton's, any registered with knobs.runtime) still fire. When none is registered
    the launcher gets None for both hooks and no launch metadata: in Triton 3.6 and 3.9 the hooks are
    HookChain objects that are never None, so its own JIT path builds the metadata and has the C
    launcher call two empty chains back into Python on every launch. Without hooks the C launcher
    is called directly (DirectLauncher), each tensor descriptor's CUtensorMap encoded once per base
    address rather than on every launch."""
    if stream is None:
        stream = driver.active.get_current_stream(device_index)
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    hooked = _hooked(enter) or _hooked(leave)
    if not hooked:
        direct = DirectLauncher.of(kernel)
        if direct is not None:
            direct(grid, stream, args, bases)
            return
    if bases:   # Triton's own launcher reads each descriptor's base: copies of the templates with theirs
        args = (*(with_base(d, b) for d, b in zip(args, bases)), *args[len(bases):])
    if not hooked:
        kernel.run(*grid, stream, kernel.function, kernel.packed_metadata, None, None, None, *args)
        return
    meta = kernel.launch_metadata(grid, stream, *args)
    kernel.run(*grid, stream, kernel.function, kernel.packed_metadata, meta, enter, leave, *args)


def with_base(desc, base):
    """A copy of host descriptor `desc` over `base` (same shape, strides, block and layout)."""
    out = copy.copy(desc)
    out.base = base
    return out


def templates(descs) -> list:
    """A recorded launch's descriptors: copies of `descs` without a base, which each launch gives through
    run_compiled's `bases`. Nothing sets a template's base, so threads may share a launch, and a template keeps no
    caller's tensor alive: one that kept the last call's O made the next O take another address, and DirectLauncher
    encoded it again on every tl repeat (docs/worklogs/v7_hopper.md, "The tl path's host cost since the port")."""
    return [with_base(d, None) for d in descs]


class DirectLauncher:
    """A CompiledKernel's C launch function called directly, for a hook-free repeat.

    Triton's launcher (backends/nvidia/driver.py) wraps the C function in Python: CudaLauncher allocates scratch
    (none for these kernels) and its descriptor wrapper turns every host TensorDescriptor into a CUtensorMap on every
    launch (cuTensorMapEncodeTiled through fill_tma_descriptor). With four descriptors that is most of v7's launch
    step, 18.5 us per call against v6's 6.9 without descriptors (results/nvidia-h200/hostpath/steps.csv). Here each
    descriptor's expansion is kept on the descriptor object and reused while its base address is the same (the
    recorded launches keep their descriptors and change only the base; shapes and strides are fixed by the launch's
    signature).

    The C function and its argument order come from fa2triton.triton_compat.direct_launch (Triton 3.6's per-kernel
    launcher, 3.9's generic one); for any other layout, a kernel with scratch, or a descriptor the frontend
    decomposed itself (no TMA metadata), `of` returns None and run_compiled takes Triton's own launcher."""

    __slots__ = ("call", "expand", "function", "packed")

    @staticmethod
    def of(kernel):
        """The kernel's DirectLauncher, built on first use and kept on the kernel; None where it cannot apply."""
        try:
            return kernel.__dict__["_fa2_direct"]
        except KeyError:
            pass
        try:
            direct = DirectLauncher(kernel)
        except Exception:  # noqa: BLE001 - another Triton's launcher: its own path still works
            direct = None
        kernel.__dict__["_fa2_direct"] = direct
        return direct

    def __init__(self, kernel):
        self.call, self.expand = direct_launch(kernel.run)
        self.function, self.packed = kernel.function, kernel.packed_metadata

    def __call__(self, grid, stream, args, bases=()):   # the per-call hot path
        if self.expand:
            args = list(args)
            n = len(bases)
            for i, meta in self.expand:
                args[i:i + 1] = self.encoded(args[i], meta, bases[i] if i < n else args[i].base)
        self.call(grid, stream, self.function, self.packed, args)

    @staticmethod
    def encoded(desc, meta, base) -> list:
        """[CUtensorMap, *shape, *strides] for descriptor `desc` over `base`, as Triton's launcher expands it, kept
        on the descriptor (one tuple, replaced whole) while the base address and this kernel's metadata for it are
        unchanged."""
        ptr = base.data_ptr()
        kept = desc.__dict__.get("_fa2_encoded")
        if kept is not None and kept[0] == ptr and kept[1] is meta:
            return kept[2]
        out = encode_descriptor(desc if base is desc.base else with_base(desc, base), meta)
        desc.__dict__["_fa2_encoded"] = (ptr, meta, out)
        return out


def _hooked(hook) -> bool:
    """A launch hook that would do something: a HookChain (Triton >= 3.4) with calls, or any other
    non-None callable (earlier Triton)."""
    return bool(getattr(hook, "calls", hook))


def compiled_or_none(ret):
    """What a `jit_fn[grid](...)` call returned, if it is a binary that `run_compiled` can repeat:
    None under the interpreter, which launches nothing."""
    return ret if ret is not None and hasattr(ret, "packed_metadata") else None


def aligned_cuda(*tensors) -> bool:
    """Every tensor on a GPU, its data 16-byte aligned and its last stride 1: the inputs for which
    Triton's specialisation (pointer alignment, unit stride) is the same on every call with the
    same shapes and strides, so a recorded launch may be repeated. Anything else (not a tensor,
    0-d) is False. It runs on every call, so it is kept to attribute reads: no check of the
    interpreter here, since under it nothing is compiled and no launch is ever recorded
    (compiled_or_none), whatever the inputs' device."""
    try:
        for t in tensors:
            if not t.is_cuda or t.data_ptr() % 16 or t.stride(-1) != 1:
                return False
    except (AttributeError, TypeError, IndexError, RuntimeError):
        return False
    return True


class NoGradContext:
    """What `forward(ctx, ...)` gets when no gradient can be asked for: saves and marks go nowhere,
    attributes are kept on the object (and dropped with it)."""

    def save_for_backward(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass


class HeadsContext(NoGradContext):
    """LeanApply.apply_heads's context: LaunchCache takes (B, H, N, D) inputs (LaunchCache.merged_heads), `check`ed
    on a signature's first call."""

    def __init__(self, check: Callable):
        self.check = check


class LeanApply:
    """Mixin for a torch.autograd.Function (listed first among the bases): `apply` skips autograd when
    grad mode is off or no argument is a tensor that requires a gradient (the output then has no
    grad_fn either way), and is torch.autograd.Function.apply otherwise."""

    @classmethod
    def apply(cls, *args, **kwargs):
        if _gradient_wanted(args):
            return super().apply(*args, **kwargs)
        return cls.forward(NoGradContext(), *args, **kwargs)

    @classmethod
    def apply_heads(cls, check: Callable, q, k, v, *args):
        """forward on (B, H, N, D) q, k, v where no gradient can be asked for, with no views and no shape checks on
        a repeat (HeadsContext); None where one can (the caller then merges B and H and calls apply). `check(q, k,
        v)` raises on a bad 4-D layout; it runs on a signature's first call only. fa2triton.api's path: views and
        checks on every call cost the host more than apply's whole repeat (docs/report/host-path.md)."""
        if _gradient_wanted((q, k, v)):
            return None
        return cls.forward(HeadsContext(check), q, k, v, *args)


def _gradient_wanted(args) -> bool:
    """Whether autograd would record a graph: grad mode on and an argument a tensor that requires a gradient."""
    if torch.is_grad_enabled():
        for a in args:   # a loop: no generator built on every call
            if getattr(a, "requires_grad", False):
                return True
    return False


_KEEP_L, _NO_L = {}, {"need_l": False}   # a forward repeat's keyword arguments: fresh L, or the scratch


class LaunchCache:
    """signature -> launch. `stats` counts normal-path ('slow') and cached ('fast') calls. The
    forward's key is `signature`; the backward (fa2triton/flash_backward_triton.py) builds
    its own and calls `lookup`."""

    def __init__(self):
        self.entries: dict[tuple, Launch] = {}
        self.stats: Counter = Counter()

    @staticmethod
    def signature(Q, K, V, mode):
        """The cache key, or None when this input must take the normal path."""
        if not aligned_cuda(Q, K, V):
            return None
        return (Q.shape, K.shape, V.shape, Q.stride(), K.stride(), V.stride(), Q.dtype, K.dtype, V.dtype,
                Q.device, mode)

    def __call__(self, Q, K, V, mode, slow: Callable, ctx=None):
        """The forward's entry: `mode` is whatever else selects the kernel (the mask, a window:
        hashable); `slow(Q, K, V, mode)` runs the normal path and returns (O, L, Launch or None).
        With a NoGradContext as `ctx` (nobody will read L) a repeat writes L to the launch's scratch;
        any other ctx (autograd's) gets the recorded launch as `ctx.forward_launch` (None where none is), which the
        backward's own cache keys on (its identity stands for this signature: one launch per key)."""
        key, kind = self.signature(Q, K, V, mode), type(ctx)
        if kind is HeadsContext:   # LeanApply.apply_heads: a repeat launches on the 4-D tensors themselves
            key = None if key is None else (key, HeadsContext)   # never a 3-D call's: a 3-D input meets the check
            return self.lookup(key, (Q, K, V), self.merged_heads, _NO_L, (ctx.check, slow, Q, K, V, mode))
        no_grad = kind is NoGradContext
        # slow's own arguments rather than a closure over them: no closure built on every call, hit or not
        return self.lookup(key, (Q, K, V), slow, _NO_L if no_grad else _KEEP_L, (Q, K, V, mode),
                           None if no_grad else ctx)

    def merged_heads(self, check, slow, Q, K, V, mode):
        """A (B, H, N, D) signature's first call: check(Q, K, V) (raises on a bad 4-D layout), then the normal path
        on (B * H, N, D) views, O returned as (B, H, N, D), and its launch kept under the 4-D signature: a repeat
        launches on the 4-D tensors, the same memory the views address (the signature fixes every shape and stride,
        and O and L are allocated by shape alone). Where B and H share no stride, every call checks and runs the
        3-D lean path on copies (its own signature's launch), and nothing is kept under the 4-D one."""
        check(Q, K, V)
        merged = [(t.shape[0] * t.shape[1], *t.shape[2:]) for t in (Q, K, V)]   # not -1: a length may be 0
        try:
            views = [t.view(shape) for t, shape in zip((Q, K, V), merged)]
        except RuntimeError:
            O, L = self(*(t.reshape(shape) for t, shape in zip((Q, K, V), merged)), mode, slow, NoGradContext())
            return O.view(Q.shape), L, None
        O, L, launch = slow(*views, mode)
        return O.view(Q.shape), L, launch

    def lookup(self, key, fast_args: tuple, slow: Callable, fast_kwargs: dict = _KEEP_L,
               slow_args: tuple = (), ctx=None) -> tuple:
        """`launch(*fast_args, **fast_kwargs)` if `key` has a recorded launch; otherwise `slow(*slow_args)`,
        which returns (*outputs, launch or None), and the launch is recorded under `key` (unless key is None).
        A `ctx` gets the launch that ran or was recorded as `ctx.forward_launch` (None: nothing recorded)."""
        launch = self.entries.get(key) if key is not None else None
        if launch is not None:
            self.stats["fast"] += 1
            if ctx is not None:
                ctx.forward_launch = launch
            return launch(*fast_args, **fast_kwargs)
        self.stats["slow"] += 1
        *outputs, launch = slow(*slow_args)
        if key is None:
            launch = None
        elif launch is not None:
            self.entries[key] = launch
        if ctx is not None:
            ctx.forward_launch = launch
        return tuple(outputs)
