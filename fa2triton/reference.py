"""Reference attention in PyTorch: the tests' ground truth and every version's backward."""

from __future__ import annotations

import math

import torch


def causal_keep(n_q: int, n_k: int, device=None, window: int | None = None) -> torch.Tensor:
    """SDPA's is_causal=True convention (top-left aligned): query i sees keys j <= i; with a
    sliding window, only keys i - window < j <= i."""
    q = torch.arange(n_q, device=device)[:, None]
    k = torch.arange(n_k, device=device)[None, :]
    keep = k <= q
    return keep & (k > q - window) if window else keep


def attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool = False,
              dtype: torch.dtype = torch.float64, window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """O and the natural-log L = logsumexp of the scaled, masked scores, computed in `dtype`.
    A row that sees no key gets O = 0 and L = -inf."""
    q, k, v = (t.to(dtype) for t in (Q, K, V))
    scale = 1.0 / math.sqrt(Q.shape[-1])
    S = torch.einsum("bqd,bkd->bqk", q, k) * scale
    if is_causal:
        S = S.masked_fill(~causal_keep(Q.shape[-2], K.shape[-2], Q.device, window), float("-inf"))
    L = torch.logsumexp(S, dim=-1)
    P = torch.exp(S - L[..., None])
    P = torch.nan_to_num(P, nan=0.0)  # rows with no visible key
    return torch.einsum("bqk,bkd->bqd", P, v), L


def backward_from_lse(Q, K, V, O, L, dO, is_causal: bool, window: int | None = None):
    """dQ, dK, dV by recomputing P from the saved log-sum-exp L, in fp32.

    The forward saved L (natural log), so P = exp(S - L) needs no second pass
    over the keys. This is the FlashAttention-2 backward's arithmetic written in
    PyTorch; a Triton backward is future work (issue 7).
    """
    q, k, v, o, do = (t.float() for t in (Q, K, V, O, dO))
    scale = 1.0 / math.sqrt(Q.shape[-1])
    S = torch.einsum("bqd,bkd->bqk", q, k) * scale
    Lf = L.float()[..., None]
    P = torch.where(torch.isfinite(Lf), torch.exp(S - Lf), 0.0)  # rows that saw no key: P = 0
    if is_causal:
        P = P.masked_fill(~causal_keep(Q.shape[-2], K.shape[-2], Q.device, window), 0.0)
    dV = torch.einsum("bqk,bqd->bkd", P, do)
    dP = torch.einsum("bqd,bkd->bqk", do, v)
    Di = (do * o).sum(-1, keepdim=True)
    dS = P * (dP - Di)
    dQ = torch.einsum("bqk,bkd->bqd", dS, k) * scale
    dK = torch.einsum("bqk,bqd->bkd", dS, q) * scale
    return dQ.to(Q.dtype), dK.to(K.dtype), dV.to(V.dtype)


def autograd_backward(ctx, dO):
    """The backward every version's FlashAttentionTriton shares (v6 and v7 where their kernels cannot serve):
    gradients for Q, K, V and None for each flag argument (is_causal, and window_size where a version takes it).
    backward_from_lse, unless autograd records this backward (create_graph=True: grad mode is on here); then
    differentiable_backward, since backward_from_lse's saved O and L are constants to autograd, and second
    derivatives through it came out wrong (38% off at 32 x 32)."""
    Q, K, V, O, L = ctx.saved_tensors
    window = getattr(ctx, "window", None)
    if torch.is_grad_enabled():
        dQ, dK, dV = differentiable_backward(Q, K, V, dO, ctx.is_causal, window, ctx.needs_input_grad[:3])
    else:
        dQ, dK, dV = backward_from_lse(Q, K, V, O, L, dO, ctx.is_causal, window)
    return (dQ, dK, dV, None) + ((None,) if hasattr(ctx, "window") else ())


def differentiable_backward(Q, K, V, dO, is_causal: bool, window: int | None, wanted) -> list:
    """dQ, dK, dV (None where `wanted` says not) as a graph of their own: the forward recomputed in fp32 from Q, K, V
    (attention()) and differentiated with create_graph, so that a gradient of these gradients is exact. Memory grows
    with N_q * N_k: it serves double backward, not speed."""
    inputs = [t for t, w in zip((Q, K, V), wanted) if w]
    with torch.enable_grad():
        O, _ = attention(Q, K, V, is_causal, torch.float32, window)
        grads = iter(torch.autograd.grad(O, inputs, dO.to(O.dtype), create_graph=True))
    return [next(grads) if w else None for w in wanted]


def saved_lse(O: torch.Tensor) -> torch.Tensor:
    """The L a version's forward saved beside O for its backward: the float32 (B, N_q) tensor among
    O.grad_fn's saved tensors (ctx.save_for_backward(Q, K, V, O, L) in every version)."""
    return next(t for t in O.grad_fn.saved_tensors if t.dtype == torch.float32 and t.dim() == 2)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf."""
    out64, ref64 = out.double(), ref.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-300))
