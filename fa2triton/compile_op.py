"""The library's call as torch.compile sees it: two custom ops, fa2triton::attention_forward and
fa2triton::attention_backward, opaque to dynamo and inductor, with shapes for the fake tensors and autograd between.

attention() and flash_attn_func() call `attention_op` only while torch.compile traces them (eagerly they keep their
lean path), so a model compiles with fullgraph=True and the kernels run as they do eagerly. The forward op runs a
version's FlashAttentionTriton.forward on (B * H, N, D) tensors and returns O and L; the backward op runs that class's
backward on what the forward saved (v6 and v7 their Triton and Gluon kernels, v0-v5 the recompute from L).
"""

from __future__ import annotations

import contextlib

import torch

from . import inputs, versions


class _Saved:
    """The ctx a version's forward and backward read: what the forward saves, the mask and window, the launch.
    needs_input_grad is read only by v6's and v7's backward, to stack the three gradients in one allocation where all
    are wanted; a custom op's outputs must not alias, so it says they are not (every gradient is still computed)."""

    needs_input_grad = (True, True, False, False, False)

    def __init__(self, causal: bool = False, window: int = 0, saved: tuple = ()):
        self.is_causal, self.window, self.saved_tensors, self.forward_launch = causal, window, saved, None

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _on_device_of(t):
    """A context making t's CUDA device current where it is not (Triton launches on the current one), else none."""
    device = inputs.other_device(t)
    return torch.cuda.device(device) if device >= 0 else contextlib.nullcontext()


def _window_args(window: int, version: str) -> tuple:
    if not window:
        return ()
    versions.require_window(version)
    return (window,)


@torch.library.custom_op("fa2triton::attention_forward", mutates_args=())
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, window: int,
                      version: str) -> tuple[torch.Tensor, torch.Tensor]:
    """O (q's shape) and L (B * H, N_q) float32 of (B * H, N, D) q, k, v: the version's forward."""
    ctx = _Saved()
    with _on_device_of(q):
        O = versions.function(version).forward(ctx, q, k, v, is_causal, *_window_args(window, version))
    return O, ctx.saved_tensors[4]


@attention_forward.register_fake
def _(q, k, v, is_causal, window, version):
    return q.new_empty(q.shape), q.new_empty(q.shape[:2], dtype=torch.float32)


@torch.library.custom_op("fa2triton::attention_backward", mutates_args=())
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                       do: torch.Tensor, is_causal: bool, window: int,
                       version: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV: the version's backward on what attention_forward returned."""
    with torch.no_grad(), _on_device_of(q):   # the kernels' backward, not the recompute that records a graph
        grads = versions.function(version).backward(_Saved(is_causal, window, (q, k, v, o, lse)), do.contiguous())
    return grads[0], grads[1], grads[2]


@attention_backward.register_fake
def _(q, k, v, o, lse, do, is_causal, window, version):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, is_causal, window, version = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.is_causal, ctx.window, ctx.version = is_causal, window, version
    ctx.mark_non_differentiable(lse)


def _backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, ctx.is_causal, ctx.window, ctx.version)
    return dq, dk, dv, None, None, None


attention_forward.register_autograd(_backward, setup_context=_setup_context)


def attention_op(q3, k3, v3, is_causal: bool, window: int, version: str) -> torch.Tensor:
    """O of (B * H, N, D) q3, k3, v3 through the ops (what torch.compile traces)."""
    return attention_forward(q3, k3, v3, bool(is_causal), int(window), version)[0]
