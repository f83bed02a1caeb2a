"""The FlashAttention-2 backward's host side in Triton (issue 7): checks, configuration, gradient allocation and the
launches of fa2triton.flash_backward_kernels (the math and the kernels are described there), with the entry points
flash_attention_backward (a direct call) and backward_after_forward (v6's and v7's autograd backward).

dQ by dq_mode (DQ_CHOICES): "separate" (deterministic) its own kernel after the preprocess and dK/dV launches;
"atomic" added by the dK/dV kernel into an fp32 accumulator; "fused" one launch for everything; "auto" (v6's and
v7's default) fused up to AUTO_FUSED_MAX_WORK_PER_SM, separate above, and with a Gluon dK/dV on Hopper (dkdv "auto")
"atomic" wherever gluon_backward_ws.preferred says, its kernel computing all five products; "deterministic" what
"auto" picks among the modes whose dQ is the same bits every run (fused, separate). Under
torch.use_deterministic_algorithms(True), "auto" is "deterministic" and "atomic" is refused (a warning under
warn_only), as torch does for its own ops.

Configuration: fa2triton.backward_config.default_config unless one is given; a configuration that does not fit
drops stages, then falls back to FALLBACK's tiles (strict: raise). A checked call records a BackwardLaunch that its
repeats (same key) run without the checks (fa2triton.lean_path.LaunchCache); autograd keys it on the forward's key
plus dO (backward_after_forward) and allocates a shape's gradients at once (backward_buffers). Why each choice, with
its numbers: docs/worklogs/backward_hopper.md, "The Triton backward's notes".
"""

from __future__ import annotations

import math
import threading
import warnings
from dataclasses import dataclass

import torch
import triton

from .backward_config import FALLBACK, BackwardConfig, default_config
from .flash_backward_kernels import _bwd_dkdv_kernel, _bwd_dq_kernel, _bwd_fused_kernel, _bwd_preprocess_kernel
from .gpu import facts, has_gpu, interpreting
from .inputs import SUPPORTED_DTYPES, validate_qkv
from .lean_path import LaunchCache, aligned_cuda, compiled_or_none, current_stream, run_compiled
from . import scratch, tile_order

# How dQ is computed (flash_attention_backward's dq_mode; the harness, the sweep and the tasks offer the same): its
# own kernel, atomics in the dK/dV kernel, or everything in one launch; and what a caller may ask for: a mode,
# "auto" (v6's and v7's default: auto_dq_mode), or "deterministic" (auto_dq_mode among fused and separate).
DQ_MODES = ("separate", "atomic", "fused")
DQ_CHOICES = ("auto", "deterministic", *DQ_MODES)
# Who computes dK and dV: flash_backward_kernels' _bwd_dkdv_kernel, a Gluon kernel for Hopper, or "auto": the Gluon
# kernel wherever it takes the inputs. With dq_mode "separate" the Gluon kernel is gluon_backward_hopper's dK/dV kernel
# (0.68-0.92x this one's time, experiment bwd-gluon-dkdv; tests/test_gluon_backward.py checks it against the rows);
# with "atomic" it is gluon_backward_ws's warp-specialized kernel, which also reduce-adds dQ's partials (TMA) into the
# fp32 accumulator.
DKDV_CHOICES = ("triton", "gluon", "auto")


def _gluon_dkdv(atomic: bool):
    """The Gluon module for a dQ mode (fa2triton.gluon.gluon_backward_ws for atomic dQ, else
    gluon_backward_hopper), imported on first use (a backward that never asks for it never loads it)."""
    if atomic:
        from .gluon import gluon_backward_ws as module
    else:
        from .gluon import gluon_backward_hopper as module
    return module


def torch_determinism(dq_mode: str) -> str:
    """dq_mode as torch.use_deterministic_algorithms asks: unchanged where it is off; where it is on, "auto" becomes
    "deterministic", and "atomic" (dQ's partials added in no fixed order) raises RuntimeError, or warns under
    warn_only and stays. Each backward's entry asks it before its cache key, so a repeat follows the setting."""
    if dq_mode not in ("auto", "atomic") or not torch.are_deterministic_algorithms_enabled():
        return dq_mode
    if dq_mode == "auto":
        return "deterministic"
    message = ("dq_mode 'atomic' adds dQ's partials in no fixed order, and torch.use_deterministic_algorithms(True) "
               "is set: pass dq_mode 'deterministic' or 'separate'")
    if not torch.is_deterministic_algorithms_warn_only_enabled():
        raise RuntimeError(message)
    warnings.warn(message, stacklevel=3)
    return dq_mode


def _strides(*tensors: torch.Tensor) -> list[int]:
    return [s for t in tensors for s in t.stride()]


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    # Any strides work for the pointer arithmetic; a unit stride along D gives vector loads
    # (and Triton specialises a stride of 1 at compile time). Expanded gradients (stride 0,
    # e.g. from .sum()) are copied too.
    return t if t.stride(-1) == 1 else t.contiguous()


def _launch(kernel, grid, args, meta, cfg: BackwardConfig, strict: bool = False):
    """Launch with cfg's warps and stages; if it does not fit this GPU's shared memory, drop
    stages, then fall back to FALLBACK's tiles (strict: raise instead, as the sweep needs).
    `meta(cfg)` gives the tile constexprs, in the kernel's signature order. Returns what a repeat
    needs: the recorded kernel (_recorded), its 3-D grid and the constexprs."""
    tried = []
    for c in [cfg] if strict else [cfg.with_stages(s) for s in range(cfg.num_stages, 0, -1)] + [FALLBACK]:
        try:
            compiled = kernel[grid(c)](*args, **meta(c), num_warps=c.num_warps, num_stages=c.num_stages)
            return _recorded(kernel, compiled, (*grid(c), 1)) + (tuple(meta(c).values()),)
        except triton.runtime.errors.OutOfResources as e:
            tried.append(f"{c}: {e}")
    raise triton.runtime.errors.OutOfResources(0, 0, "no backward configuration fits: " + "; ".join(tried))


class Interpreted:
    """A kernel's repeat under Triton's interpreter, which compiles nothing: `jit_fn[grid](*args)`, every argument
    positional as run_compiled takes them. The repeat path then runs (and is tested) on the CPU; a CPU tensor has no
    cache key (aligned_cuda), so a user's call still takes the checked path every time."""

    __slots__ = ("fn", "grid")

    def __init__(self, fn, grid):
        self.fn, self.grid = fn, grid[:2]

    def __call__(self, *args):
        self.fn[self.grid](*args)


def _device(kernel, Q) -> int | None:
    """BackwardLaunch.device for a recorded kernel: Q's CUDA device index, None for the interpreter's repeat."""
    return None if isinstance(kernel, Interpreted) else Q.device.index


def _recorded(kernel, compiled, grid: tuple) -> tuple:
    """(kernel, grid) for BackwardLaunch._run: the binary and its 3-D grid, or under the interpreter an
    Interpreted repeat and None; (None, grid) for anything else (no repeat recorded)."""
    binary = compiled_or_none(compiled)
    if binary is None and interpreting():
        return Interpreted(kernel, grid), None
    return binary, grid


def _same(t):
    return t


@dataclass
class BackwardLaunch:
    """What one checked call launched (fa2triton.lean_path's lean repeat; issues 7, 8 and 48): the compiled
    kernels with their grids and the arguments after their tensors. A repeat is one allocation (the gradients; Delta
    and the fp32 dQ accumulator are kept scratch: buffers), the Delta launch (which zeroes the accumulator), the main
    launch(es) and, for atomic dQ in a 16-bit dtype, the cast into dQ; no checks, configuration choice, descriptor
    building or Triton argument binding; the stream is read once and compiled kernels get int addresses (Triton's
    launcher then skips a data_ptr() call and the driver's pointer check per tensor). Its pieces are methods, so
    profiling/host_steps.py times each alone."""

    preprocess: object | None  # None in dq_mode="fused" (dkdv is then the fused kernel)
    dkdv: object
    dq: object | None          # None in dq_mode="atomic" and "fused"
    grids: tuple               # per kernel, in launch order, its 3-D grid (None: a recorded callable)
    tails: tuple               # per kernel, every argument after its tensors (constexprs included)
    stack: int = 0             # how the gradients are allocated (gradient_stack)
    gluon_dkdv: bool = False   # dkdv is a gluon_backward_hopper.DkdvLaunch or gluon_backward_ws.WsLaunch
    acc_apart: bool = False    # dQ accumulates in fp32 scratch apart from dQ (atomic dQ in a 16-bit dtype)
    device: int | None = None  # the CUDA device's index (None: the interpreter's CPU tensors)

    def __post_init__(self):
        self.atomic = self.dq is None and self.preprocess is not None
        self.scratch = {}   # (stream, thread) -> (acc, Delta): scratch_buffers kept for the repeats (buffers)
        # a compiled kernel takes a tensor's address as an int; the interpreter's repeat (Interpreted) the tensor
        self.arg = _same if self.device is None else torch.Tensor.data_ptr

    def __call__(self, Q, K, V, O, L, dO, ranges: tuple[str, str] | None = None):
        """The hot path: no checks (the cache key vouches). `ranges` = (prefix, suffix) puts each kernel in its own
        NVTX range, f"{prefix}:bwd_<kernel>{suffix}", for the profile drivers."""
        stream = None if self.device is None else current_stream(self.device)
        dQ, dK, dV, acc, Delta = self.buffers(Q, K, stream)
        if Delta is not None:   # dq_mode="fused" has no Delta buffer (and acc is dQ): its one launch is run_main's
            self.run_delta(O, dO, Delta, acc, ranges, stream)
        self.run_main(Q, K, V, O, L, dO, dQ, dK, dV, acc, Delta, ranges, stream)
        if acc is not dQ:
            dQ.copy_(acc)   # the cast (bitwise Tensor.to's)
        return dQ, dK, dV

    def buffers(self, Q, K, stream=None) -> tuple:
        """dQ, dK, dV (gradient_buffers, new on every call), the fp32 dQ accumulator (dQ itself unless acc_apart) and
        Delta (None in dq_mode "fused"), as backward_buffers gives them; `stream` is the current one (None: read it).
        The accumulator and Delta are scratch that no caller keeps, so a repeat reuses them: kept per CUDA stream and
        thread (the next call's launches then queue behind this one's, which read them; another thread's could
        interleave with them), up to SCRATCH_KEPT_BYTES, within fa2triton.scratch's budget (which may drop them:
        drop_scratch), and not while a CUDA graph is being captured. Their allocation cost a repeat more than its
        launches on the H200 (docs/worklogs/backward_hopper.md, "The backward's host path")."""
        dQ, dK, dV = gradient_buffers(Q, K, self.stack)
        if self.preprocess is None:
            return dQ, dK, dV, dQ, None
        if stream is None and self.device is not None:
            stream = current_stream(self.device)
        key = (stream, threading.get_ident())
        kept = self.scratch.get(key)
        if kept is None:
            kept = scratch_buffers(Q, self.acc_apart)
            nbytes = kept[1].untyped_storage().nbytes()   # Delta's block holds both
            if nbytes <= SCRATCH_KEPT_BYTES and not (Q.is_cuda and torch.cuda.is_current_stream_capturing()) \
                    and scratch.KEPT.keep(self, key, nbytes):
                self.scratch[key] = kept
        return dQ, dK, dV, kept[0] if self.acc_apart else dQ, kept[1]

    def drop_scratch(self, key) -> None:
        self.scratch.pop(key, None)

    def run_delta(self, O, dO, Delta, acc, ranges=None, stream=None) -> None:
        """The preprocess: Delta, and in dq_mode "atomic" the accumulator zeroed."""
        a = self.arg
        self._run("preprocess", self.preprocess, self.grids[0], (a(O), a(dO), a(Delta), a(acc), *self.tails[0]),
                  self.device, ranges, stream)

    def run_main(self, Q, K, V, O, L, dO, dQ, dK, dV, acc, Delta, ranges=None, stream=None) -> None:
        """The main launch(es): the fused kernel; or dK/dV (atomic: dQ's partials added into acc), then dQ."""
        g, t, i, a = self.grids, self.tails, self.device, self.arg
        if Delta is None:
            self._run("fused", self.dkdv, g[0], self.fused_args(Q, K, V, O, L, dO, dQ, dK, dV), i, ranges, stream)
        elif self.gluon_dkdv:   # its descriptors take the tensors (Q, K, V, dO and acc); the rest goes as addresses
            self._run("gluon_atomic_dkdv" if self.atomic else "gluon_dkdv", self.dkdv, None,
                      (Q, K, V, dO, a(L), a(Delta), a(dK), a(dV), *((acc,) if self.atomic else ()), stream),
                      i, ranges, stream)
        else:
            self._run("atomic_dkdv" if self.atomic else "dkdv", self.dkdv, g[1],
                      (a(Q), a(K), a(V), a(dO), a(L), a(Delta), a(dK), a(dV), a(acc), *t[1]), i, ranges, stream)
        if self.dq is not None:
            self._run("dq", self.dq, g[2], (a(Q), a(K), a(V), a(dO), a(L), a(Delta), a(dQ), *t[2]), i, ranges, stream)

    def fused_args(self, Q, K, V, O, L, dO, dQ, dK, dV) -> tuple:
        """The fused kernel's arguments in its signature order."""
        a = self.arg
        return (a(Q), a(K), a(V), a(dO), a(O), a(L), a(dK), a(dV), a(dQ), *self.tails[0])

    @staticmethod
    def _run(name, kernel, grid, args, device_index, ranges, stream):
        """Launch one recorded kernel (grid None: a recorded callable, called with the arguments)."""
        if ranges is not None:
            torch.cuda.nvtx.range_push(f"{ranges[0]}:bwd_{name}{ranges[1]}")
        if grid is None:
            kernel(*args)
        else:
            run_compiled(kernel, grid, args, device_index, stream)
        if ranges is not None:
            torch.cuda.nvtx.range_pop()


def gradient_stack(Q, K, allowed: bool = True) -> int:
    """How gradient_buffers allocates for these inputs: 3 = dQ, dK, dV from one allocation (Q and K of one
    shape, as in self-attention), 2 = dK and dV from one, 0 = three allocations. Only where `allowed`:
    autograd's call when Q, K and V all want their gradient (a kept view keeps its whole block alive, so
    with one gradient wanted the others' memory would stay with it). Stacking needs each slice's bytes to
    be a multiple of 16, so every view is as aligned as a fresh allocation, which Triton's compiled
    pointer specialisation (and so a recorded launch) assumes."""
    if not allowed or K.numel() * K.element_size() % 16:
        return 0
    return 3 if Q.shape == K.shape else 2


def gradient_buffers(Q, K, stack: int):
    """dQ, dK, dV: contiguous, Q's and K's shapes and dtype, uninitialised, allocated as gradient_stack said.
    One allocation unbound into views saves one or two trips through the caching allocator per backward; the
    views share one block, freed when all of them are."""
    if stack == 3:
        return Q.new_empty((3, *Q.shape)).unbind(0)
    dQ = Q.new_empty(Q.shape)
    if stack == 2:
        dK, dV = K.new_empty((2, *K.shape)).unbind(0)
    else:
        dK, dV = K.new_empty(K.shape), K.new_empty(K.shape)
    return dQ, dK, dV


def scratch_buffers(Q, atomic: bool) -> tuple:
    """(the fp32 dQ accumulator or None, Delta (B, N_q) fp32). With `atomic` (a 16-bit dtype: the accumulator is not
    dQ itself) both are views of one fp32 allocation, the accumulator first (offset 0, contiguous) and Delta after it
    (its offset a whole number of 16 bytes, as Triton's pointer specialisation assumes). Nothing is zeroed: the
    preprocess zeroes the accumulator (ZERO_DQ) before the main kernel adds into it."""
    B, N, D = Q.shape
    if not atomic:
        return None, torch.empty((B, N), device=Q.device, dtype=torch.float32)
    n = -(-B * N * D // 4) * 4
    flat = torch.empty(n + B * N, device=Q.device, dtype=torch.float32)
    return flat.as_strided(Q.shape, (N * D, D, 1)), flat.as_strided((B, N), (N, 1), n)


def backward_buffers(Q, K, stack: int, atomic: bool, delta: bool = True) -> tuple:
    """dQ, dK, dV (gradient_buffers), the fp32 dQ accumulator and Delta (None without `delta`: dq_mode "fused"),
    all new. The accumulator is dQ itself unless `atomic` in a 16-bit dtype (scratch_buffers)."""
    dQ, dK, dV = gradient_buffers(Q, K, stack)
    if not delta:
        return dQ, dK, dV, dQ, None
    acc, Delta = scratch_buffers(Q, atomic and Q.dtype != torch.float32)
    return dQ, dK, dV, dQ if acc is None else acc, Delta


# Input signature -> BackwardLaunch: the forward's LaunchCache with the backward's own key. Clearing it also frees the
# scratch its launches keep (BackwardLaunch.buffers).
LAUNCHES = LaunchCache()
# The most scratch (fp32 dQ accumulator and Delta) one BackwardLaunch keeps per stream and thread: 64 MiB covers
# B·H = 32 heads of N = 2048, D = 128, beyond which the GPU's time, not the allocation, sets a backward's.
SCRATCH_KEPT_BYTES = 64 << 20


def backward_signature(Q, K, V, O, L, dO, causal: bool, config, dq_mode: str, strict: bool, dkdv: str = "triton",
                       window: int = 0):
    """The cache key, or None when the call must take the checked path: every shape, stride,
    dtype and device that the checks and Triton's specialisation look at, and what selects the
    kernels. Only GPU tensors, 16-byte aligned with a unit last stride (fa2triton.lean_path)."""
    if not aligned_cuda(Q, K, V, O, dO, L) or not isinstance(dq_mode, str) \
            or not (config is None or isinstance(config, BackwardConfig)):
        return None   # the checked path names what is wrong
    return (Q.shape, K.shape, V.shape, O.shape, dO.shape, L.shape,
            Q.stride(), K.stride(), V.stride(), O.stride(), dO.stride(), L.stride(),
            Q.dtype, K.dtype, V.dtype, O.dtype, dO.dtype, L.dtype,
            Q.device, K.device, V.device, O.device, dO.device, L.device,
            causal, config, dq_mode, strict, dkdv, window)


def forward_keyed_signature(forward_launch, dO, causal: bool, config, dq_mode: str, all_grads: bool = False,
                            dkdv: str = "triton"):
    """The cache key for autograd's call (FlashAttentionTriton.backward), or None: the forward's recorded launch
    (fa2triton.lean_path.LaunchCache, kept on ctx as `forward_launch`) stands for Q, K and V, and so for O and L,
    which that forward allocated with the layout its launch records. It enters by its id (one step to hash, where
    the forward's own key is a nested tuple); the backward launch recorded under the key keeps it alive
    (_checked_after_forward), so the id is not reused while the entry lives. Of dO only the strides and alignment
    are read: autograd's engine hands the backward a gradient of O's shape, dtype and device (it casts or rejects
    any other). A direct call takes backward_signature instead."""
    if forward_launch is None:
        return None
    stride = dO.stride()
    if stride[-1] != 1 or dO.data_ptr() % 16:
        return None
    return (id(forward_launch), stride, causal, config, dq_mode, all_grads, dkdv)


def validate_backward_inputs(Q, K, V, O, L, dO) -> None:
    """Raise TypeError or ValueError naming the problem with the backward's inputs."""
    validate_qkv(Q, K, V)
    B, N_q, D = Q.shape
    for name, t in (("O", O), ("dO", dO), ("L", L)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != Q.device:
            raise ValueError(f"{name} is on {t.device} but Q is on {Q.device}")
    for name, t in (("O", O), ("dO", dO)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: bfloat16, float16, float32")
        if t.dtype != Q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but Q, K, V are {Q.dtype}")
        if tuple(t.shape) != (B, N_q, D):
            raise ValueError(f"{name} must have Q's shape {(B, N_q, D)}, got {tuple(t.shape)}")
    if L.dtype != torch.float32:
        raise TypeError(f"L must be float32 (the forward's natural-log log-sum-exp), got {L.dtype}")
    if tuple(L.shape) != (B, N_q):
        raise ValueError(f"L must have shape (batch, N_q) = {(B, N_q)}, got {tuple(L.shape)}")


def flash_attention_backward(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, O: torch.Tensor,
                             L: torch.Tensor, dO: torch.Tensor, is_causal: bool = False, *,
                             config: BackwardConfig | None = None, dq_mode: str = "separate",
                             strict: bool = False, dkdv: str = "triton",
                             window: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of O = softmax(Q K^T / sqrt(D)) V (SDPA's top-left causal mask if is_causal).

    Q (B, N_q, D), K and V (B, N_k, D), O and dO like Q, all in one dtype (bf16, fp16, fp32);
    L (B, N_q) float32, the forward's natural-log log-sum-exp of the scaled scores.
    dq_mode "separate" (default) computes dQ in its own kernel, deterministically; "atomic"
    accumulates it in fp32 inside the dK/dV kernel (atomics, or the Gluon kernel's TMA reduce-adds: not
    deterministic); "fused" runs everything in one launch; "auto" is "atomic" where the warp-specialized
    Gluon kernel is preferred, else "fused" for small problems and "separate" otherwise (auto_dq_mode);
    "deterministic" is "auto" without "atomic", and what "auto" means under torch.use_deterministic_algorithms(True)
    (torch_determinism).
    Gradients come back in Q's dtype. strict launches exactly `config` (OutOfResources if it does not fit) instead of
    dropping stages. dkdv (DKDV_CHOICES) says which kernel computes dK and dV (with dq_mode "atomic", dQ's partials
    too): "gluon" a Hopper kernel (ValueError naming why where it cannot take the inputs, or with dq_mode "fused"),
    "auto" that kernel where it can, "triton" this module's. window (with is_causal): the sliding window the forward
    ran, query i seeing keys i - window < j <= i; 0 for none. Only this module's kernels take one (dkdv "auto" picks
    them; "gluon" is a ValueError).
    """
    causal = bool(is_causal)
    dq_mode = torch_determinism(dq_mode)
    key = backward_signature(Q, K, V, O, L, dO, causal, config, dq_mode, strict, dkdv, window)
    return LAUNCHES.lookup(key, (Q, K, V, O, L, dO),
                           lambda: _checked_backward(Q, K, V, O, L, dO, causal, config, dq_mode, strict, dkdv=dkdv,
                                                     window=window))


def backward_after_forward(forward_launch, Q, K, V, O, L, dO, causal: bool, config: BackwardConfig | None = None,
                           dq_mode: str = "auto", all_grads: bool = False, dkdv: str = "triton",
                           window: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """flash_attention_backward for a version's autograd backward, and only for it: Q, K, V, O, L as its forward saved
    them, dO from autograd's engine and `forward_launch`, the launch the forward ran (None when it recorded none),
    which makes the repeat's key cheaper to build (forward_keyed_signature). `all_grads` (ctx.needs_input_grad says
    Q, K and V all want one) lets the gradients share one allocation. window: the forward's sliding window (its
    launch, in the key, stands for it too)."""
    # Without a key (the forward was not cached: its inputs are not aligned CUDA tensors; or dO is not),
    # backward_signature would give none either: the checked path every time, as a direct call would.
    dq_mode = torch_determinism(dq_mode)
    key = forward_keyed_signature(forward_launch, dO, causal, config, dq_mode, all_grads, dkdv)
    return LAUNCHES.lookup(key, (Q, K, V, O, L, dO), _checked_after_forward,
                           slow_args=(forward_launch, Q, K, V, O, L, dO, causal, config, dq_mode, all_grads, dkdv,
                                      window))


def _checked_after_forward(forward_launch, Q, K, V, O, L, dO, causal, config, dq_mode, all_grads, dkdv, window):
    """backward_after_forward's checked path: _checked_backward, its launch holding the forward's (`forward`), whose
    id is in the key it is recorded under."""
    *grads, launch = _checked_backward(Q, K, V, O, L, dO, causal, config, dq_mode, False, all_grads, dkdv, window)
    if launch is not None:
        launch.forward = forward_launch
    return (*grads, launch)


# dq_mode="auto": up to this much work per SM the backward runs fused (one launch, no Delta pass), beyond
# it separate or, on Hopper, the Gluon ws kernel (three launches, but each kernel leaner on the GPU). The unit
# is (query, key) pairs times D (half the pairs under the causal mask). 2^24 is B*H = 32, N = 1024, D = 64
# non-causal on the H200's 132 SMs: the largest harness shape where the host, not the GPU, set the backward's
# time, against the ws kernel too (docs/worklogs/backward_hopper.md, "One launch at N = 1024").
AUTO_FUSED_MAX_WORK_PER_SM = 2 ** 24


def gluon_ws_takes(D: int, dtype: torch.dtype, dkdv: str = "auto") -> bool:
    """Whether dkdv (DKDV_CHOICES) lets the warp-specialized Gluon backward run inputs of head dimension D and
    dtype on this machine's GPU (a Hopper one, with Gluon): what auto_dq_mode's gluon_ws says for contiguous inputs."""
    if dkdv == "triton" or not has_gpu() or interpreting() or torch.cuda.get_device_capability()[0] != 9:
        return False
    ws = _gluon_dkdv(True)
    return ws.HAVE_GLUON and D in ws.HEAD_DIMS and dtype in ws.DTYPES


def auto_dq_mode(B: int, N_q: int, N_k: int, D: int, causal: bool, sm_count: int | None = None,
                 gluon_ws: bool = False) -> str:
    """"fused", "separate" or "atomic" for dq_mode="auto". `sm_count` defaults to this GPU's (fa2triton.gpu.facts);
    under the interpreter, which runs one program at a time, to 1. gluon_ws: the warp-specialized Gluon backward
    (gluon_backward_ws, dQ by reduce-add) can take the inputs; "atomic" where it is the faster (its `preferred`)
    and the work is past the fused threshold, since up to it the host sets the time and fused is one launch."""
    if sm_count is None:
        sm_count = facts().sm_count if has_gpu() and not interpreting() else 1
    pairs = B * N_q * N_k * (0.5 if causal else 1.0)
    if pairs * D <= AUTO_FUSED_MAX_WORK_PER_SM * sm_count:
        return "fused"
    return "atomic" if gluon_ws and _gluon_dkdv(True).preferred(N_q, N_k, D, causal) else "separate"


def _window_dkdv(window, causal: bool, dkdv: str) -> str:
    """dkdv for a sliding window (0: none, dkdv as given): the Triton kernels, the only ones with the band; a
    ValueError for a window that is not a causal band of at least one key, or with dkdv "gluon"."""
    if not window:
        return dkdv
    if not isinstance(window, int) or window < 1 or not causal:
        raise ValueError(f"window={window!r}: a sliding window is a causal band of at least one key; pass is_causal "
                         "and an integer window >= 1")
    if dkdv == "gluon":
        raise ValueError("dkdv='gluon' has no sliding window: pass 'auto' or 'triton'")
    return "triton"


def _ws_takes(Q, K, V, dO, L, dkdv: str) -> bool:
    """Whether dkdv lets the Gluon kernels run these inputs (they take what the dK/dV one takes, L for Delta)."""
    return dkdv != "triton" and _gluon_dkdv(False).unsupported(Q, K, V, dO, L, L, Q.shape[2] ** -0.5) is None


def _checked_backward(Q, K, V, O, L, dO, causal: bool, config, dq_mode: str, strict: bool,
                      stack_grads: bool = False, dkdv: str = "triton", window: int = 0):
    """The normal path: check, choose the configuration, allocate, launch. Returns dQ, dK, dV and
    the BackwardLaunch that repeats it (None under the interpreter). stack_grads: the gradients may
    share one allocation (gradient_stack; autograd's call with all three wanted)."""
    if dq_mode not in DQ_CHOICES:
        raise ValueError(f"dq_mode must be one of {', '.join(DQ_CHOICES)}, got {dq_mode!r}")
    if dkdv not in DKDV_CHOICES:
        raise ValueError(f"dkdv must be one of {', '.join(DKDV_CHOICES)}, got {dkdv!r}")
    validate_backward_inputs(Q, K, V, O, L, dO)
    dkdv = _window_dkdv(window, causal, dkdv)
    if dq_mode in ("auto", "deterministic"):   # "deterministic" never asks for the ws kernel (its dQ is atomic)
        ws = dq_mode == "auto" and _ws_takes(Q, K, V, dO, L, dkdv)
        dq_mode = auto_dq_mode(Q.shape[0], Q.shape[1], K.shape[1], Q.shape[2], causal, gluon_ws=ws)
    if dkdv == "gluon" and dq_mode == "fused":
        raise ValueError("dkdv='gluon' is a kernel of its own: it needs dq_mode 'separate' or 'atomic', not 'fused'")
    if config is None:
        config = default_config(Q.shape[2], Q.dtype)
    elif not isinstance(config, BackwardConfig):
        raise TypeError(f"config must be a BackwardConfig, got {type(config).__name__}")
    config.validate()

    Q, K, V, O, dO = (_last_dim_contiguous(t) for t in (Q, K, V, O, dO))
    if dq_mode == "fused":
        return _checked_fused(Q, K, V, O, L, dO, causal, config, strict, stack_grads, window)
    B, N_q, D = Q.shape
    N_k = K.shape[1]
    scale = 1.0 / math.sqrt(D)
    atomic = dq_mode == "atomic"

    stack = gradient_stack(Q, K, stack_grads)
    dQ, dK, dV, acc, Delta = backward_buffers(Q, K, stack, atomic)

    pre = config.preprocess_q_tile
    pre_tail = (*_strides(O, dO, Delta), *(_strides(acc) if atomic else (0, 0, 0)), N_q, D, pre, atomic)
    pre_kernel, pre_grid = _recorded(_bwd_preprocess_kernel, _bwd_preprocess_kernel[(triton.cdiv(N_q, pre), B)](
        O, dO, Delta, acc, *pre_tail, num_warps=4), (triton.cdiv(N_q, pre), B, 1))

    common = (*_strides(Q, K, V, dO, L, Delta),)
    gluon = None if dkdv == "triton" else _gluon_dkdv(atomic)
    dq_accum = (acc,) if atomic else ()
    why_not = None if gluon is None else gluon.unsupported(Q, K, V, dO, L, Delta, scale, *dq_accum)
    if dkdv == "gluon" and why_not is not None:
        raise ValueError(f"dkdv='gluon': {why_not}")
    use_gluon = gluon is not None and why_not is None
    if use_gluon:
        dkdv_kernel = gluon.launch(Q, K, V, dO, L, Delta, dK, dV, *dq_accum, causal, scale)
        dkdv_grid, dkdv_tail, dkdv_meta = None, (), ()
    else:
        dkdv_tail = (*common, *_strides(dK, dV, acc), N_q, N_k, scale, window)
        dkdv_kernel, dkdv_grid, dkdv_meta = _launch(
            _bwd_dkdv_kernel, lambda c: tile_order.grid(triton.cdiv(N_k, c.dkdv_k_tile), B, causal),
            (Q, K, V, dO, L, Delta, dK, dV, acc, *dkdv_tail),
            lambda c: dict(D=D, BLOCK_Q=c.dkdv_q_tile, BLOCK_K=c.dkdv_k_tile, is_causal=causal, ATOMIC_DQ=atomic,
                           HAS_WINDOW=window > 0),
            config, strict)
    dq_kernel, dq_grid, dq_tail = None, None, ()
    if atomic:
        if acc is not dQ:
            dQ.copy_(acc)   # the cast, into the gradients' own allocation
    else:
        dq_tail = (*common, *_strides(dQ), N_q, N_k, scale, window)
        dq_kernel, dq_grid, dq_meta = _launch(
            _bwd_dq_kernel, lambda c: tile_order.grid(triton.cdiv(N_q, c.dq_q_tile), B, causal),
            (Q, K, V, dO, L, Delta, dQ, *dq_tail),
            lambda c: dict(D=D, BLOCK_Q=c.dq_q_tile, BLOCK_K=c.dq_k_tile, is_causal=causal, HAS_WINDOW=window > 0),
            config, strict)
        dq_tail = (*dq_tail, *dq_meta)
    launch = None
    if pre_kernel is not None and dkdv_kernel is not None and (atomic or dq_kernel is not None):
        launch = BackwardLaunch(pre_kernel, dkdv_kernel, dq_kernel, (pre_grid, dkdv_grid, dq_grid),
                                (pre_tail, (*dkdv_tail, *dkdv_meta), dq_tail), stack, use_gluon, acc is not dQ,
                                _device(pre_kernel, Q))
    return dQ, dK, dV, launch


def _checked_fused(Q, K, V, O, L, dO, causal: bool, config: BackwardConfig, strict: bool,
                   stack_grads: bool = False, window: int = 0):
    """dq_mode="fused", after _checked_backward's checks: allocate dQ, dK, dV and launch _bwd_fused_kernel,
    its grid the dK/dV programs' key tiles followed by the dQ programs' query tiles."""
    B, N_q, D = Q.shape
    N_k = K.shape[1]
    stack = gradient_stack(Q, K, stack_grads)
    dQ, dK, dV = gradient_buffers(Q, K, stack)
    tail = (*_strides(Q, K, V, dO, O, L, dK, dV, dQ), N_q, N_k, 1.0 / math.sqrt(D), window)
    kernel, grid, meta = _launch(
        _bwd_fused_kernel, lambda c: (triton.cdiv(N_k, c.dkdv_k_tile) + triton.cdiv(N_q, c.dq_q_tile), B),
        (Q, K, V, dO, O, L, dK, dV, dQ, *tail),
        lambda c: dict(D=D, KV_BLOCK_Q=c.dkdv_q_tile, KV_BLOCK_K=c.dkdv_k_tile, DQ_BLOCK_Q=c.dq_q_tile,
                       DQ_BLOCK_K=c.dq_k_tile, is_causal=causal, HAS_WINDOW=window > 0),
        config, strict)
    launch = None if kernel is None else BackwardLaunch(None, kernel, None, (grid,), ((*tail, *meta),), stack,
                                                        device=_device(kernel, Q))
    return dQ, dK, dV, launch
