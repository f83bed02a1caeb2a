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
    """The backward every version's FlashAttentionTriton shares: gradients for Q, K, V and None
    for each flag argument (is_causal, and window_size where a version takes it)."""
    Q, K, V, O, L = ctx.saved_tensors
    window = getattr(ctx, "window", None)
    dQ, dK, dV = backward_from_lse(Q, K, V, O, L, dO, ctx.is_causal, window)
    return (dQ, dK, dV, None) + ((None,) if hasattr(ctx, "window") else ())


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
