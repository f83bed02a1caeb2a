"""The library's calls: attention() with SDPA's arguments and layout, flash_attn_func() in flash-attn's layout with
its options by keyword, any version by name. What the kernels lack (an attention mask, dropout) is a ValueError; grouped
k and v heads are repeated to q's (a copy).

Both reshape to the (B * H, N, D) tensors every version's FlashAttentionTriton takes and back, views wherever the
strides allow (copies otherwise: B and H must merge into one stride), and differentiate through autograd. Where no
gradient can be asked for, the lean path's versions take attention()'s 4-D tensors as they are (LeanApply.apply_heads:
no views and no shape checks on a repeat, so the call costs the host what apply does). The kernels'
own checks (fa2triton.inputs.validate_qkv) name a bad dtype, device or head dimension; here only what the 4-D layout
adds is checked. A version's class is loaded on its first call and kept: each later call is one dict hit.
Invariants: the mask is SDPA's is_causal (top-left aligned when N_q != N_k); the kernels use scale = 1/sqrt(D), and
another `scale` multiplies q by scale * sqrt(D) first (one elementwise pass in q's dtype). A head dimension below 128
that the kernels do not tile (versions.HEAD_DIMS) is zero-padded to the next one they do (copies of q, k and v, and
the padded size's work), and O is the view of its first D columns. A call on tensors of a
CUDA device other than the current one runs with theirs made current (Triton launches on the current device). Under
torch.compile the calls trace to two custom ops (fa2triton.compile_op: fullgraph works, and dynamo never enters the
lean path's caches or Triton's launcher); eagerly the check costs one flag read. Under CUDA autocast q, k and v run in
its dtype, as SDPA's do. A batch of more than fa2triton.inputs.MAX_SLICES (batch * heads) slices runs as several
calls, concatenated.
"""

from __future__ import annotations

import math

import torch
from torch import is_autocast_enabled   # without a device type: CUDA's (55 ns here, the typed form 125)
from torch.compiler import is_compiling

from . import compile_op, inputs, versions
from .versions import HEAD_DIMS

DEFAULT_VERSION = "v7_hopper"
_FUNCTIONS: dict[str, type] = {}   # version name -> its FlashAttentionTriton, loaded on first use


def _function(version: str) -> type:
    """The FlashAttentionTriton of `version`, loaded once (ValueError naming the known versions otherwise)."""
    fn = _FUNCTIONS.get(version)
    if fn is None:
        fn = _FUNCTIONS[version] = versions.function(version)
    return fn


LAYOUTS = {1: "(batch, heads, sequence, head_dim)", 2: "(batch, sequence, heads, head_dim)"}   # by the heads' axis


def _sizes(q, k, v, heads_axis: int) -> tuple[int, int, int, int, int]:
    """(B, H, N_q, N_k, D) of 4-D q, k, v with the heads on `heads_axis` (LAYOUTS), or one ValueError naming what
    does not fit: each must be 4-D; all three share batch, heads and head dimension, and k and v their length.
    Runs on every call: unpacking and integer compares only."""
    try:
        if heads_axis == 1:
            (B, H, N_q, D), (Bk, Hk, N_k, Dk), (Bv, Hv, N_v, Dv) = q.shape, k.shape, v.shape
        else:
            (B, N_q, H, D), (Bk, N_k, Hk, Dk), (Bv, N_v, Hv, Dv) = q.shape, k.shape, v.shape
    except (AttributeError, ValueError):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if getattr(t, "ndim", None) != 4:
                got = f"shape {tuple(t.shape)}" if hasattr(t, "shape") else f"a {type(t).__name__}"
                raise ValueError(f"{name} must be a 4-D tensor {LAYOUTS[heads_axis]}, got {got}") from None
        raise
    if Bk != B or Bv != B or Hk != H or Hv != H or Dk != D or Dv != D or N_v != N_k:
        only_heads = Bk == Bv == B and Dk == Dv == D and N_v == N_k and Hk == Hv
        raise (GroupedHeads if only_heads else ValueError)(
            f"q, k and v must share batch, heads and head dimension, and k and v their length {LAYOUTS[heads_axis]}; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    return B, H, N_q, N_k, D


class GroupedHeads(ValueError):
    """k and v have other heads than q and match it otherwise: flash_attn_func repeats them (_grouped); attention()
    only with enable_gqa, as SDPA."""


def _scaled(q, scale, D: int):
    """q itself for the kernels' own scale 1/sqrt(D), else q * scale * sqrt(D) (the kernels then apply 1/sqrt(D))."""
    if math.isclose(scale, 1.0 / math.sqrt(D), rel_tol=1e-12):
        return q
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return q * (scale * math.sqrt(D))


def _apply(fn, q, k, v, causal: bool, BH: int, N_q: int, N_k: int, D: int, window: tuple = (),
           traced: str | None = None):
    """fn.apply on q, k, v (B, H, N, D) as (B * H, N, D): views where B and H share one stride, else copies. Under
    torch.compile (`traced`: the version's name) the custom ops instead (fa2triton.compile_op)."""
    if traced is not None:
        q3, k3, v3 = q.reshape(BH, N_q, D), k.reshape(BH, N_k, D), v.reshape(BH, N_k, D)
        return compile_op.attention_op(q3, k3, v3, causal, window[0] if window else 0, traced)
    try:
        q3, k3, v3 = q.view(BH, N_q, D), k.view(BH, N_k, D), v.view(BH, N_k, D)   # view: cheaper than reshape
    except RuntimeError:
        q3, k3, v3 = q.reshape(BH, N_q, D), k.reshape(BH, N_k, D), v.reshape(BH, N_k, D)
    return fn.apply(q3, k3, v3, causal, *window)


def attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, *,
              scale: float | None = None, enable_gqa: bool = False, version: str = DEFAULT_VERSION):
    """torch.nn.functional.scaled_dot_product_attention, argument for argument: softmax(q k^T * scale) v with q
    (B, H, N_q, D), k and v (B, H_kv, N_k, D), any strides; returns (B, H, N_q, D) in q's dtype. enable_gqa: H_kv
    divides H, and k and v are repeated over their groups of q's heads (a copy). attn_mask and dropout_p are not
    implemented: anything but None and 0 is a ValueError. `version` names a round (fa2triton.VERSIONS)."""
    q, k, v = query, key, value
    traced = version if is_compiling() else None   # torch.compile: the custom ops, no lean path
    if traced is None and (device := inputs.other_device(q)) >= 0:   # Triton launches on the current device
        with torch.cuda.device(device):
            return attention(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa,
                             version=version)
    if is_autocast_enabled():
        q, k, v = _autocast(q, k, v)
    if attn_mask is not None or dropout_p or enable_gqa:
        k, v = _sdpa_extras(q, k, v, attn_mask, dropout_p, enable_gqa)
    if (padded := _padded_head_dim(q, k, v)) is not None:
        D = q.shape[-1]
        return attention(*_pad(padded, q, k, v), is_causal=is_causal, scale=_scale_of(scale, D),
                         version=version)[..., :D]
    try:
        if traced is not None and _too_many_slices(q, 1):   # eagerly the kernels' check says so, below
            raise inputs.TooManySlices
        return _attention(q, k, v, is_causal, scale, version, traced)
    except inputs.TooManySlices:
        return _in_batches(lambda *a: attention(*a, is_causal=is_causal, scale=scale, version=version), q, k, v, 1)


def _attention(q, k, v, is_causal: bool, scale, version: str, traced: str | None):
    """attention() past its options: the lean path's repeat where no gradient is asked, else apply (or, traced, the
    custom ops). TooManySlices comes from the kernels' checks on a signature's first call."""
    fn = None if traced is not None else _FUNCTIONS.get(version) or _function(version)   # (dynamo: no class)
    if scale is not None:
        q = _scaled(q, scale, _sizes(q, k, v, 1)[4])
    heads = None if fn is None else getattr(fn, "apply_heads", None)   # the lean versions, where no gradient is
    if heads is not None:                                              # asked: (B, H, N, D) as it is
        O = heads(_check_heads, q, k, v, is_causal)
        if O is not None:
            return O
    B, H, N_q, N_k, D = _sizes(q, k, v, 1)
    return _apply(fn, q, k, v, is_causal, B * H, N_q, N_k, D, traced=traced).view(B, H, N_q, D)


def _padded_head_dim(q, k, v) -> int | None:
    """The head dimension that q, k and v's shared one is zero-padded to: the next of versions.HEAD_DIMS above it, for
    one below the largest that is none of them; else None (as it is, or for the kernels' checks to name). Zero columns
    add nothing to q k^T, and give O columns that are dropped (flash-attn zero-pads its own to a multiple of 8)."""
    try:
        D = q.shape[-1]   # every call asks: one lookup where D is tiled as it is
        if D in HEAD_DIMS or not 0 < D < HEAD_DIMS[-1] or k.shape[-1] != D or v.shape[-1] != D:
            return None
    except (AttributeError, IndexError, TypeError):
        return None
    return next(d for d in HEAD_DIMS if d > D)


def _pad(D: int, *ts) -> tuple:
    """Each tensor's last dimension zero-padded to D (a copy)."""
    return tuple(torch.nn.functional.pad(t, (0, D - t.shape[-1])) for t in ts)


def _scale_of(scale, D: int) -> float:
    """The softmax scale of a call at head dimension D: `scale`, else SDPA's and flash-attn's default 1/sqrt(D)."""
    return 1.0 / math.sqrt(D) if scale is None else scale


def _autocast(q, k, v):
    """Under CUDA autocast, its dtype for the CUDA tensors among q, k, v, as SDPA takes them there (a
    lower-precision op in autocast's list); the others as they are."""
    dtype = torch.get_autocast_dtype("cuda")
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_cuda and t.is_floating_point() else t
                 for t in (q, k, v))


def _sdpa_extras(q, k, v, attn_mask, dropout_p, enable_gqa):
    """SDPA's arguments beyond the kernels': k and v with their heads repeated for enable_gqa, or a ValueError
    naming what is not implemented."""
    if attn_mask is not None:
        raise ValueError("attn_mask is not implemented: pass None (is_causal=True gives the causal mask)")
    if dropout_p:
        raise _dropout_error(dropout_p)
    return _grouped(q, k, v, 1)


def _dropout_error(dropout_p) -> ValueError:
    return ValueError(f"dropout_p={dropout_p!r}: dropout is not implemented; pass 0.0")


def _grouped(q, k, v, heads_axis: int):
    """k and v with each head repeated for its group of q's heads along `heads_axis` (a copy); ValueError where
    their heads do not divide q's; as they are where the heads match or the inputs are not tensors (_sizes names it)."""
    try:
        H, H_kv = q.shape[heads_axis], k.shape[heads_axis]
    except (AttributeError, IndexError, TypeError):
        return k, v
    if H_kv == H:
        return k, v
    if H_kv == 0 or H % H_kv:
        raise ValueError(f"grouped heads: k and v's {H_kv} heads must divide q's {H}")
    return k.repeat_interleave(H // H_kv, heads_axis), v.repeat_interleave(H // H_kv, heads_axis)


def _too_many_slices(q, heads_axis: int) -> bool:
    """Whether q's batch * heads passes what one call takes (fa2triton.inputs.MAX_SLICES); False for anything
    that is not a 4-D tensor (_sizes names it)."""
    try:
        return q.shape[0] * q.shape[heads_axis] > inputs.MAX_SLICES and q.ndim == 4
    except (AttributeError, IndexError, TypeError):
        return False


def _in_batches(call, q, k, v, heads_axis: int, *args):
    """call(q, k, v, *args) over batches of at most MAX_SLICES slices each, concatenated along the batch (autograd
    flows through the slices and the concatenation). A single batch element with more heads than that is refused."""
    _sizes(q, k, v, heads_axis)
    per_call = inputs.MAX_SLICES // q.shape[heads_axis]
    if per_call == 0:
        raise ValueError(f"{q.shape[heads_axis]} heads: one batch element must have at most {inputs.MAX_SLICES}")
    return torch.cat([call(q[i:i + per_call], k[i:i + per_call], v[i:i + per_call], *args)
                      for i in range(0, q.shape[0], per_call)])


def _check_heads(q, k, v) -> None:
    """_sizes in SDPA's layout, for LeanApply.apply_heads: a signature's first call checks it, its repeats do not."""
    _sizes(q, k, v, 1)


def flash_attn_func(q, k, v, *, dropout_p: float = 0.0, softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1), version: str = DEFAULT_VERSION):
    """attention() in flash-attn's layout: q (B, N_q, H, D), k and v (B, N_k, H_kv, D) with H_kv dividing H (grouped
    heads, repeated: a copy); returns (B, N_q, H, D). Every option is by keyword, so that a call written for
    flash-attn 2 (dropout_p, softmax_scale, causal) or 4 (softmax_scale, causal) cannot bind one argument to
    another's name. window_size (left, right) as flash-attn's: a band that looks back `left` keys and not ahead
    (right 0, or causal), in the versions with a window (v6, v7; their backward by the Triton kernels, which mask the
    same band). dropout_p other than 0 is a ValueError, and so are a window that looks ahead and causal with
    N_q != N_k: flash-attn aligns that mask bottom-right, these kernels top-left (SDPA's)."""
    traced = version if is_compiling() else None
    if traced is None and (device := inputs.other_device(q)) >= 0:   # as in attention()
        with torch.cuda.device(device):
            return flash_attn_func(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                   window_size=window_size, version=version)
    if dropout_p:
        raise _dropout_error(dropout_p)
    if is_autocast_enabled():
        q, k, v = _autocast(q, k, v)
    if traced is not None:   # eagerly _sizes says so on a signature's first call (GroupedHeads, below)
        k, v = _grouped(q, k, v, 2)
    if (padded := _padded_head_dim(q, k, v)) is not None:
        D = q.shape[-1]
        return flash_attn_func(*_pad(padded, q, k, v), softmax_scale=_scale_of(softmax_scale, D), causal=causal,
                               window_size=window_size, version=version)[..., :D]
    try:
        if traced is not None and _too_many_slices(q, 2):
            raise inputs.TooManySlices
        return _flash(q, k, v, softmax_scale, causal, window_size, version, traced)
    except GroupedHeads:
        k, v = _grouped(q, k, v, 2)
        return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                               version=version)
    except inputs.TooManySlices:
        return _in_batches(lambda *a: flash_attn_func(*a, softmax_scale=softmax_scale, causal=causal,
                                                      window_size=window_size, version=version), q, k, v, 2)


def _flash(q, k, v, softmax_scale, causal: bool, window_size, version: str, traced: str | None):
    """flash_attn_func() past its options, as _attention; GroupedHeads comes from _sizes on a first call."""
    fn = None if traced is not None else _FUNCTIONS.get(version) or _function(version)
    window = ()
    if window_size != (-1, -1):
        causal, window = _band(window_size, causal, version, traced is None)
    if softmax_scale is not None:
        q = _scaled(q, softmax_scale, _sizes(q, k, v, 2)[4])
    heads = None if fn is None else getattr(fn, "apply_heads", None)   # as in attention(), on the transposes
    if heads is not None:
        try:
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        except (AttributeError, TypeError, IndexError, RuntimeError):
            qt = None   # not tensors of at least 3 dimensions: _sizes below names what is wrong
        if qt is not None:
            O = heads(_check_flash_causal if causal else _check_flash, qt, kt, vt, causal, *window)
            if O is not None:
                return O.transpose(1, 2)
    B, H, N_q, N_k, D = _sizes(q, k, v, 2)
    if causal:
        _top_left_only(N_q, N_k)
    O = _apply(fn, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, B * H, N_q, N_k, D, window,
               traced)
    return O.view(B, H, N_q, D).transpose(1, 2)


def _band(window_size, causal: bool, version: str, check: bool = True) -> tuple[bool, tuple]:
    """(causal, the version's window argument as a 1-tuple, or () for none) for flash-attn's window_size (left,
    right), -1 meaning unbounded: a band that looks back `left` keys is the kernels' causal window of left + 1 keys
    (query i sees keys i - left <= j <= i); right must be 0 unless causal (which sets it to 0). ValueError for a window
    that looks ahead, and (`check`; under torch.compile the custom op checks) for a version without a window."""
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be two integers (left, right), got {window_size!r}") from None
    if left == right == -1:   # unbounded both ways: no window (the default as a list, say)
        return causal, ()
    if not causal and right != 0:
        raise ValueError(f"window_size={tuple(window_size)!r} looks ahead: not implemented; pass right = 0 or "
                         "causal=True")
    if left < -1:
        raise ValueError(f"window_size={tuple(window_size)!r}: left must be -1 (unbounded) or at least 0")
    if left == -1:
        return True, ()
    if check:
        versions.require_window(version)
    return True, (left + 1,)


def _top_left_only(N_q: int, N_k: int) -> None:
    if N_q != N_k:
        raise ValueError(f"causal with seqlen_q {N_q} != seqlen_k {N_k}: flash-attn aligns that mask bottom-right, "
                         "these kernels top-left (SDPA's is_causal); fa2triton.attention takes it")


def _check_flash(qt, k, v) -> None:
    """_sizes in flash-attn's layout, of the (B, H, N, D) transposes apply_heads gets (a first call only)."""
    _sizes(qt.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 2)


def _check_flash_causal(qt, k, v) -> None:
    _check_flash(qt, k, v)
    _top_left_only(qt.shape[2], k.shape[2])
