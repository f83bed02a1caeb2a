"""The FlashAttention-2 backward pass in Triton (issue 7). Per (batch*head) slice, from the forward's O and L (the
natural-log log-sum-exp of each query row's scaled scores) and dO, without ever holding a whole (N_q, N_k) matrix:

    P  = exp(scale * Q K^T - L)         recomputed from L, scale = 1/sqrt(D); no second pass over keys
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  Delta = rowsum(dO * O)  (= rowsum(P * dP))
    dQ = scale * dS K,  dK = scale * dS^T Q

The kernels, by dq_mode (DQ_CHOICES):
- `_bwd_preprocess_kernel`: Delta in fp32, one value per query row.
- `_bwd_dkdv_kernel`: one program per (key tile, batch*head) keeps K, V and the fp32 dK, dV on chip and streams the
  query tiles past (`_dkdv_query_tiles`); causal, it starts at the first query tile that sees the key tile (query i
  sees key j iff j <= i). "atomic": the same loop also adds dS K into an fp32 dQ with tl.atomic_add (dQ's last bits
  vary from run to run).
- `_bwd_dq_kernel` ("separate", deterministic): one program per (query tile, batch*head) over the key tiles
  (`_dq_key_tiles`), recomputing P and dP.
- `_bwd_fused_kernel` ("fused"): the dK/dV and the dQ programs in one launch, each computing Delta from O: no
  preprocess launch and no Delta buffer, for small N where the host's time dominates.
- "auto" (v6's and v7's default): fused up to AUTO_FUSED_MAX_WORK_PER_SM, separate above; with a Gluon dK/dV on
  Hopper (dkdv "auto") "atomic" wherever gluon_backward_ws.preferred says, its kernel computing all five products.

Units of L: the kernels take L in natural log as saved and load it as L * log2(e), so each score costs one FFMA and
one exp2: P = exp2(S_raw * qk_scale - L * log2(e)), S_raw = Q K^T, qk_scale = scale * log2(e).

Invariants: every product a tl.dot with fp32 accumulation; P and dS cast to the input dtype before their dots (as
FlashAttention-2); tiles inside the tensors and below the diagonal run a loop copy without masks (MASKED=False), the
diagonal and ragged last tiles pay for them; plain base + offsets * strides pointers (no block pointers: Triton 3.9
removed them). Configuration: default_config, this GPU's pick in backward_configs.json (`invoke sweep-backward
--pick`) for 16-bit inputs with D <= 64, else the built-in defaults. Autograd keys its cached launch on the forward's
key plus dO (backward_after_forward) and allocates a shape's gradients at once (gradient_buffers). Why each choice,
with its numbers: docs/worklogs/backward_hopper.md, "The Triton backward's notes".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import triton
import triton.language as tl

from .gpu import facts, has_gpu, interpreting
from .inputs import SUPPORTED_DTYPES, validate_qkv
from .launch import device_arch
from .lean_path import LaunchCache, aligned_cuda, compiled_or_none, run_compiled

LOG2E = 1.4426950408889634  # log2(e): natural-log L -> log2 units
# How dQ is computed (flash_attention_backward's dq_mode; the harness, the sweep and the tasks offer the same): its
# own kernel, atomics in the dK/dV kernel, or everything in one launch; and what a caller may ask for: a mode, or
# "auto" (v6's and v7's default: auto_dq_mode).
DQ_MODES = ("separate", "atomic", "fused")
DQ_CHOICES = ("auto", *DQ_MODES)
# Who computes dK and dV: this module's _bwd_dkdv_kernel, a Gluon kernel for Hopper, or "auto": the Gluon kernel
# wherever it takes the inputs. With dq_mode "separate" the Gluon kernel is gluon_backward_hopper's dK/dV kernel
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


# ----------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------

@triton.jit
def _bwd_preprocess_kernel(
    # pointers
    O_ptr, dO_ptr, Delta_ptr,
    # strides (batch, sequence, head dim)
    stride_ob, stride_oq, stride_od,
    stride_dob, stride_doq, stride_dod,
    stride_deltab, stride_deltaq,
    # sizes
    N_QUERIES,
    # compile-time meta-parameters
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,
):
    """Delta[b, i] = sum_d dO[b, i, d] * O[b, i, d], in fp32."""
    q_start = tl.program_id(0) * BLOCK_Q
    batch_index = tl.program_id(1)
    offs_q = q_start + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_mask = offs_q < N_QUERIES

    o = tl.load(O_ptr + batch_index * stride_ob + offs_q[:, None] * stride_oq + offs_d[None, :] * stride_od,
                mask=q_mask[:, None], other=0.0)
    do = tl.load(dO_ptr + batch_index * stride_dob + offs_q[:, None] * stride_doq + offs_d[None, :] * stride_dod,
                 mask=q_mask[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta_ptr + batch_index * stride_deltab + offs_q * stride_deltaq, delta, mask=q_mask)


@triton.jit
def _row_delta(Delta_ptr, O_ptr, do, offs_q, offs_d, stride_deltaq, stride_oq, stride_od, N_QUERIES,
               MASKED: tl.constexpr, DELTA_FROM_O: tl.constexpr):
    """Delta for the query rows offs_q (pointers offset to the batch*head slice): loaded from the
    preprocessing's output, or computed from O and the dO tile already loaded (the fused mode)."""
    if DELTA_FROM_O:
        o_ptrs = O_ptr + offs_q[:, None] * stride_oq + offs_d[None, :] * stride_od
        if MASKED:
            o = tl.load(o_ptrs, mask=(offs_q < N_QUERIES)[:, None], other=0.0)
        else:
            o = tl.load(o_ptrs)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    else:
        if MASKED:
            delta = tl.load(Delta_ptr + offs_q * stride_deltaq, mask=offs_q < N_QUERIES, other=0.0)
        else:
            delta = tl.load(Delta_ptr + offs_q * stride_deltaq)
    return delta


@triton.jit
def _dkdv_query_tiles(dK_acc, dV_acc, K_j, V_j, offs_k,
                      Q_ptr, dO_ptr, L_ptr, Delta_ptr, dQacc_ptr, O_ptr,
                      stride_qq, stride_qd, stride_doq, stride_dod, stride_lq, stride_deltaq,
                      stride_dqq, stride_dqd, stride_oq, stride_od,
                      start, stop, N_QUERIES, N_KEYS, qk_scale, scale,
                      D: tl.constexpr, BLOCK_Q: tl.constexpr,
                      MASKED: tl.constexpr, is_causal: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                      DELTA_FROM_O: tl.constexpr):
    """Fold the query tiles in [start, stop) into one key tile's dK and dV accumulators.

    Works in the transposed orientation (keys along rows), so P^T and dS^T come out of the
    dots in the shape dV and dK need. The pointer arguments are already offset to the
    (batch*head) slice. MASKED is a compile-time flag: the unmasked copy of this loop has
    no compare, no select and no bounds checks on its loads; it is only used on tiles that
    lie entirely inside the tensors and entirely below the causal diagonal. DELTA_FROM_O (the fused
    mode): each query tile's Delta = rowsum(dO * O) is computed here from O instead of loaded.
    """
    offs_d = tl.arange(0, D)
    for q_start in range(start, stop, BLOCK_Q):
        offs_q = q_start + tl.arange(0, BLOCK_Q)
        # Q^T (D, BLOCK_Q) is loaded transposed through its pointers; dO (BLOCK_Q, D) as is.
        qT_ptrs = Q_ptr + offs_q[None, :] * stride_qq + offs_d[:, None] * stride_qd
        do_ptrs = dO_ptr + offs_q[:, None] * stride_doq + offs_d[None, :] * stride_dod
        if MASKED:
            q_in = offs_q < N_QUERIES
            qT = tl.load(qT_ptrs, mask=q_in[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=q_in[:, None], other=0.0)
            l_i = tl.load(L_ptr + offs_q * stride_lq, mask=q_in, other=0.0)
        else:
            qT = tl.load(qT_ptrs)
            do = tl.load(do_ptrs)
            l_i = tl.load(L_ptr + offs_q * stride_lq)
        delta_i = _row_delta(Delta_ptr, O_ptr, do, offs_q, offs_d, stride_deltaq, stride_oq, stride_od, N_QUERIES,
                             MASKED, DELTA_FROM_O)

        # P^T = exp(scale * K Q^T - L), in log2 units: one FFMA and one exp2 per score.
        sT = tl.dot(K_j, qT)                                                  # (BLOCK_K, BLOCK_Q) fp32
        pT = tl.math.exp2(sT * qk_scale - (l_i * 1.4426950408889634)[None, :])
        if MASKED:
            keep = (offs_q[None, :] < N_QUERIES) & (offs_k[:, None] < N_KEYS)
            if is_causal:
                keep = keep & (offs_k[:, None] <= offs_q[None, :])
            pT = tl.where(keep, pT, 0.0)

        dV_acc = tl.dot(pT.to(do.dtype), do, acc=dV_acc)                      # dV += P^T dO
        dpT = tl.dot(V_j, tl.trans(do))                                       # dP^T = V dO^T
        dsT = pT * (dpT - delta_i[None, :])                                   # dS^T, unscaled
        dsT = dsT.to(qT.dtype)
        dK_acc = tl.dot(dsT, tl.trans(qT), acc=dK_acc)                        # dK += dS^T Q

        if ATOMIC_DQ:
            # dQ[q tile] += scale * dS K_j, added by every key tile's program.
            dq = tl.dot(tl.trans(dsT), K_j) * scale                           # (BLOCK_Q, D) fp32
            dq_ptrs = dQacc_ptr + offs_q[:, None] * stride_dqq + offs_d[None, :] * stride_dqd
            if MASKED:
                tl.atomic_add(dq_ptrs, dq, mask=(offs_q < N_QUERIES)[:, None], sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    return dK_acc, dV_acc


@triton.jit
def _dkdv_program(key_tile_index, batch_index,
                  Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr, dK_ptr, dV_ptr, dQacc_ptr, O_ptr,
                  stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                  stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                  stride_lb, stride_lq, stride_deltab, stride_deltaq,
                  stride_dkb, stride_dkk, stride_dkd, stride_dvb, stride_dvk, stride_dvd,
                  stride_dqb, stride_dqq, stride_dqd, stride_ob, stride_oq, stride_od,
                  N_QUERIES, N_KEYS, scale,
                  D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, is_causal: tl.constexpr,
                  ATOMIC_DQ: tl.constexpr, DELTA_FROM_O: tl.constexpr):
    """One key tile's dK and dV (and, with ATOMIC_DQ, its share of dQ): the body of _bwd_dkdv_kernel
    and of the fused kernel's key-tile programs. O_ptr and its strides are read only with DELTA_FROM_O."""
    k_start = key_tile_index * BLOCK_K
    offs_k = k_start + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, D)
    k_in = offs_k < N_KEYS

    K_j = tl.load(K_ptr + batch_index * stride_kb + offs_k[:, None] * stride_kk + offs_d[None, :] * stride_kd,
                  mask=k_in[:, None], other=0.0)
    V_j = tl.load(V_ptr + batch_index * stride_vb + offs_k[:, None] * stride_vk + offs_d[None, :] * stride_vd,
                  mask=k_in[:, None], other=0.0)
    dK_acc = tl.zeros((BLOCK_K, D), dtype=tl.float32)
    dV_acc = tl.zeros((BLOCK_K, D), dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634

    # The query tiles in three ranges, each a multiple of BLOCK_Q apart from 0:
    #   [lo, diag_stop)          masked: the tiles straddling the causal diagonal (query i
    #                            sees key j iff j <= i), or every tile when the key tile is
    #                            ragged (keys past N_KEYS must not leak into atomic dQ);
    #   [diag_stop, full_stop)   unmasked: whole tiles entirely below the diagonal;
    #   [tail_start, N_QUERIES)  masked: the ragged last query tile.
    full_stop = (N_QUERIES // BLOCK_Q) * BLOCK_Q
    if is_causal:
        # Query tiles wholly above the diagonal (all i < k_start) are skipped.
        lo = (k_start // BLOCK_Q) * BLOCK_Q
        # The first query tile whose first row sees the key tile's last key, rounded up to
        # a tile boundary so the unmasked range stays aligned when BLOCK_K < BLOCK_Q.
        diag_stop = tl.cdiv(k_start + BLOCK_K, BLOCK_Q) * BLOCK_Q
    else:
        lo = 0
        diag_stop = 0
    diag_stop = tl.where(k_start + BLOCK_K > N_KEYS, N_QUERIES, diag_stop)
    diag_stop = tl.minimum(diag_stop, N_QUERIES)
    tail_start = tl.maximum(diag_stop, full_stop)

    Q_b = Q_ptr + batch_index * stride_qb
    dO_b = dO_ptr + batch_index * stride_dob
    L_b = L_ptr + batch_index * stride_lb
    Delta_b = Delta_ptr + batch_index * stride_deltab
    dQ_b = dQacc_ptr + batch_index * stride_dqb
    O_b = O_ptr + batch_index * stride_ob
    dK_acc, dV_acc = _dkdv_query_tiles(dK_acc, dV_acc, K_j, V_j, offs_k, Q_b, dO_b, L_b, Delta_b, dQ_b, O_b,
                                       stride_qq, stride_qd, stride_doq, stride_dod, stride_lq, stride_deltaq,
                                       stride_dqq, stride_dqd, stride_oq, stride_od, lo, diag_stop, N_QUERIES, N_KEYS, qk_scale, scale,
                                       D=D, BLOCK_Q=BLOCK_Q, MASKED=True, is_causal=is_causal,
                                       ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=DELTA_FROM_O)
    dK_acc, dV_acc = _dkdv_query_tiles(dK_acc, dV_acc, K_j, V_j, offs_k, Q_b, dO_b, L_b, Delta_b, dQ_b, O_b,
                                       stride_qq, stride_qd, stride_doq, stride_dod, stride_lq, stride_deltaq,
                                       stride_dqq, stride_dqd, stride_oq, stride_od, diag_stop, full_stop, N_QUERIES, N_KEYS, qk_scale,
                                       scale, D=D, BLOCK_Q=BLOCK_Q, MASKED=False, is_causal=is_causal,
                                       ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=DELTA_FROM_O)
    dK_acc, dV_acc = _dkdv_query_tiles(dK_acc, dV_acc, K_j, V_j, offs_k, Q_b, dO_b, L_b, Delta_b, dQ_b, O_b,
                                       stride_qq, stride_qd, stride_doq, stride_dod, stride_lq, stride_deltaq,
                                       stride_dqq, stride_dqd, stride_oq, stride_od, tail_start, N_QUERIES, N_QUERIES, N_KEYS, qk_scale,
                                       scale, D=D, BLOCK_Q=BLOCK_Q, MASKED=True, is_causal=is_causal,
                                       ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=DELTA_FROM_O)

    # The softmax scale, once per element of dK instead of once per score.
    dK_acc = dK_acc * scale
    tl.store(dK_ptr + batch_index * stride_dkb + offs_k[:, None] * stride_dkk + offs_d[None, :] * stride_dkd,
             dK_acc.to(dK_ptr.dtype.element_ty), mask=k_in[:, None])
    tl.store(dV_ptr + batch_index * stride_dvb + offs_k[:, None] * stride_dvk + offs_d[None, :] * stride_dvd,
             dV_acc.to(dV_ptr.dtype.element_ty), mask=k_in[:, None])


@triton.jit
def _bwd_dkdv_kernel(
    # pointers: inputs (Q, K, V, dO in the input dtype; L, Delta fp32), outputs (dK, dV in
    # the input dtype), and the fp32 dQ accumulator (used only when ATOMIC_DQ)
    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr,
    dK_ptr, dV_ptr, dQacc_ptr,
    # strides (batch, sequence, head dim); L and Delta (batch, sequence)
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_dob, stride_doq, stride_dod,
    stride_lb, stride_lq,
    stride_deltab, stride_deltaq,
    stride_dkb, stride_dkk, stride_dkd,
    stride_dvb, stride_dvk, stride_dvd,
    stride_dqb, stride_dqq, stride_dqd,
    # sizes and the softmax scale
    N_QUERIES, N_KEYS,
    scale,
    # compile-time meta-parameters
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,     # query tile streamed through the loop
    BLOCK_K: tl.constexpr,     # key tile this program owns
    is_causal: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,   # also accumulate dQ with atomics (dq_mode="atomic")
):
    _dkdv_program(tl.program_id(0), tl.program_id(1),
                  Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr, dK_ptr, dV_ptr, dQacc_ptr, Q_ptr,
                  stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                  stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                  stride_lb, stride_lq, stride_deltab, stride_deltaq,
                  stride_dkb, stride_dkk, stride_dkd, stride_dvb, stride_dvk, stride_dvd,
                  stride_dqb, stride_dqq, stride_dqd, 0, 0, 0,
                  N_QUERIES, N_KEYS, scale,
                  D=D, BLOCK_Q=BLOCK_Q, BLOCK_K=BLOCK_K, is_causal=is_causal, ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=False)


@triton.jit
def _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q,
                  K_ptr, V_ptr, stride_kk, stride_kd, stride_vk, stride_vd,
                  start, stop, N_KEYS, qk_scale,
                  D: tl.constexpr, BLOCK_K: tl.constexpr,
                  MASKED: tl.constexpr, is_causal: tl.constexpr):
    """Fold the key tiles in [start, stop) into one query tile's dQ accumulator (unscaled).

    l2_i is the tile's L in log2 units, shape (BLOCK_Q, 1). K^T and V^T (D, BLOCK_K) are
    loaded transposed through their pointers. MASKED as in `_dkdv_query_tiles`.
    """
    offs_d = tl.arange(0, D)
    for k_start in range(start, stop, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        kT_ptrs = K_ptr + offs_k[None, :] * stride_kk + offs_d[:, None] * stride_kd
        vT_ptrs = V_ptr + offs_k[None, :] * stride_vk + offs_d[:, None] * stride_vd
        if MASKED:
            k_in = offs_k < N_KEYS
            kT = tl.load(kT_ptrs, mask=k_in[None, :], other=0.0)
            vT = tl.load(vT_ptrs, mask=k_in[None, :], other=0.0)
        else:
            kT = tl.load(kT_ptrs)
            vT = tl.load(vT_ptrs)

        s = tl.dot(Q_i, kT)                                                   # (BLOCK_Q, BLOCK_K) fp32
        p = tl.math.exp2(s * qk_scale - l2_i)
        if MASKED:
            keep = offs_k[None, :] < N_KEYS
            if is_causal:
                keep = keep & (offs_k[None, :] <= offs_q[:, None])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(dO_i, vT)                                                 # dP = dO V^T
        ds = p * (dp - delta_i)                                               # dS, unscaled
        dQ_acc = tl.dot(ds.to(kT.dtype), tl.trans(kT), acc=dQ_acc)            # dQ += dS K
    return dQ_acc


@triton.jit
def _dq_program(query_tile_index, batch_index,
                Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr, dQ_ptr, O_ptr,
                stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                stride_lb, stride_lq, stride_deltab, stride_deltaq,
                stride_dqb, stride_dqq, stride_dqd, stride_ob, stride_oq, stride_od,
                N_QUERIES, N_KEYS, scale,
                D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, is_causal: tl.constexpr,
                DELTA_FROM_O: tl.constexpr):
    """One query tile's dQ: the body of _bwd_dq_kernel and of the fused kernel's query-tile programs.
    O_ptr and its strides are read only with DELTA_FROM_O."""
    q_start = query_tile_index * BLOCK_Q
    offs_q = q_start + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_in = offs_q < N_QUERIES

    # Rows past N_QUERIES load as zeros (Q, dO, L, Delta); they give finite values that the
    # masked store drops.
    Q_i = tl.load(Q_ptr + batch_index * stride_qb + offs_q[:, None] * stride_qq + offs_d[None, :] * stride_qd,
                  mask=q_in[:, None], other=0.0)
    dO_i = tl.load(dO_ptr + batch_index * stride_dob + offs_q[:, None] * stride_doq + offs_d[None, :] * stride_dod,
                   mask=q_in[:, None], other=0.0)
    l_i = tl.load(L_ptr + batch_index * stride_lb + offs_q * stride_lq, mask=q_in, other=0.0)
    delta_i = _row_delta(Delta_ptr + batch_index * stride_deltab, O_ptr + batch_index * stride_ob, dO_i, offs_q, offs_d,
                         stride_deltaq, stride_oq, stride_od, N_QUERIES, True, DELTA_FROM_O)
    l2_i = (l_i * 1.4426950408889634)[:, None]
    delta_i = delta_i[:, None]
    qk_scale = scale * 1.4426950408889634
    dQ_acc = tl.zeros((BLOCK_Q, D), dtype=tl.float32)

    # As in the forward (v3/v4): whole key tiles below the tile's first query need no mask;
    # from there (rounded down to a key-tile boundary) to the tile's last query they straddle
    # the diagonal; nothing beyond. Without causal masking only a ragged last key tile is masked.
    full_stop = (N_KEYS // BLOCK_K) * BLOCK_K
    if is_causal:
        unmasked_stop = tl.minimum((q_start // BLOCK_K) * BLOCK_K, full_stop)
        masked_stop = tl.minimum(q_start + BLOCK_Q, N_KEYS)
    else:
        unmasked_stop = full_stop
        masked_stop = N_KEYS

    K_b = K_ptr + batch_index * stride_kb
    V_b = V_ptr + batch_index * stride_vb
    dQ_acc = _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q, K_b, V_b,
                           stride_kk, stride_kd, stride_vk, stride_vd, 0, unmasked_stop, N_KEYS, qk_scale,
                           D=D, BLOCK_K=BLOCK_K, MASKED=False, is_causal=is_causal)
    dQ_acc = _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q, K_b, V_b,
                           stride_kk, stride_kd, stride_vk, stride_vd, unmasked_stop, masked_stop, N_KEYS, qk_scale,
                           D=D, BLOCK_K=BLOCK_K, MASKED=True, is_causal=is_causal)

    dQ_acc = dQ_acc * scale
    tl.store(dQ_ptr + batch_index * stride_dqb + offs_q[:, None] * stride_dqq + offs_d[None, :] * stride_dqd,
             dQ_acc.to(dQ_ptr.dtype.element_ty), mask=q_in[:, None])


@triton.jit
def _bwd_dq_kernel(
    # pointers: inputs (Q, K, V, dO in the input dtype; L, Delta fp32), output dQ (input dtype)
    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr,
    dQ_ptr,
    # strides (batch, sequence, head dim); L and Delta (batch, sequence)
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_dob, stride_doq, stride_dod,
    stride_lb, stride_lq,
    stride_deltab, stride_deltaq,
    stride_dqb, stride_dqq, stride_dqd,
    # sizes and the softmax scale
    N_QUERIES, N_KEYS,
    scale,
    # compile-time meta-parameters
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,     # query tile this program owns
    BLOCK_K: tl.constexpr,     # key tile streamed through the loop
    is_causal: tl.constexpr,
):
    _dq_program(tl.program_id(0), tl.program_id(1),
                Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr, dQ_ptr, Q_ptr,
                stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                stride_lb, stride_lq, stride_deltab, stride_deltaq,
                stride_dqb, stride_dqq, stride_dqd, 0, 0, 0,
                N_QUERIES, N_KEYS, scale,
                D=D, BLOCK_Q=BLOCK_Q, BLOCK_K=BLOCK_K, is_causal=is_causal, DELTA_FROM_O=False)


@triton.jit
def _bwd_fused_kernel(
    # pointers: inputs (Q, K, V, dO, O in the input dtype; L fp32), outputs dK, dV, dQ (input dtype)
    Q_ptr, K_ptr, V_ptr, dO_ptr, O_ptr, L_ptr,
    dK_ptr, dV_ptr, dQ_ptr,
    # strides (batch, sequence, head dim); L (batch, sequence)
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_dob, stride_doq, stride_dod,
    stride_ob, stride_oq, stride_od,
    stride_lb, stride_lq,
    stride_dkb, stride_dkk, stride_dkd,
    stride_dvb, stride_dvk, stride_dvd,
    stride_dqb, stride_dqq, stride_dqd,
    # sizes and the softmax scale
    N_QUERIES, N_KEYS,
    scale,
    # compile-time meta-parameters: the dK/dV programs' tiles, then the dQ programs'
    D: tl.constexpr,
    KV_BLOCK_Q: tl.constexpr,
    KV_BLOCK_K: tl.constexpr,
    DQ_BLOCK_Q: tl.constexpr,
    DQ_BLOCK_K: tl.constexpr,
    is_causal: tl.constexpr,
):
    """dq_mode="fused": the whole backward in one launch, for shapes where the host's launches cost more
    than the kernels. Programs 0 .. cdiv(N_KEYS, KV_BLOCK_K) - 1 along axis 0 are _bwd_dkdv_kernel's,
    the rest _bwd_dq_kernel's, side by side on the GPU; neither reads a preprocessed Delta: each
    computes rowsum(dO * O) for the query tiles it loads (the dK/dV programs once per query tile they
    stream, so O is read once more per key tile: cheap at small N, not at large)."""
    n_key_tiles = tl.cdiv(N_KEYS, KV_BLOCK_K)
    tile = tl.program_id(0)
    if tile < n_key_tiles:
        _dkdv_program(tile, tl.program_id(1),
                      Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, L_ptr, dK_ptr, dV_ptr, dQ_ptr, O_ptr,
                      stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                      stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                      stride_lb, stride_lq, 0, 0,
                      stride_dkb, stride_dkk, stride_dkd, stride_dvb, stride_dvk, stride_dvd,
                      stride_dqb, stride_dqq, stride_dqd, stride_ob, stride_oq, stride_od,
                      N_QUERIES, N_KEYS, scale,
                      D=D, BLOCK_Q=KV_BLOCK_Q, BLOCK_K=KV_BLOCK_K, is_causal=is_causal, ATOMIC_DQ=False,
                      DELTA_FROM_O=True)
    else:
        _dq_program(tile - n_key_tiles, tl.program_id(1),
                    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, L_ptr, dQ_ptr, O_ptr,
                    stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                    stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                    stride_lb, stride_lq, 0, 0,
                    stride_dqb, stride_dqq, stride_dqd, stride_ob, stride_oq, stride_od,
                    N_QUERIES, N_KEYS, scale,
                    D=D, BLOCK_Q=DQ_BLOCK_Q, BLOCK_K=DQ_BLOCK_K, is_causal=is_causal, DELTA_FROM_O=True)


# ----------------------------------------------------------------------------------------
# Launch configuration
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackwardConfig:
    """Tile sizes, warps and stages of the backward's kernels (one point of fa2lab.backward_sweep).

    The dK/dV kernel owns a key tile of `dkdv_k_tile` rows and streams query tiles of
    `dkdv_q_tile`; the dQ kernel owns a query tile of `dq_q_tile` and streams key tiles of
    `dq_k_tile`. Tiles are powers of two >= 16 (tl.dot's minimum). num_warps and num_stages
    apply to both main kernels; the preprocessing kernel uses `preprocess_q_tile` rows and
    4 warps.
    """

    dkdv_q_tile: int = 32
    dkdv_k_tile: int = 128
    dq_q_tile: int = 128
    dq_k_tile: int = 32
    num_warps: int = 8
    num_stages: int = 3
    preprocess_q_tile: int = 64

    @classmethod
    def parse(cls, text: str) -> "BackwardConfig":
        """'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES' (the command-line form)."""
        parts = [int(p) for p in str(text).replace("x", ",").split(",") if p.strip()]
        if len(parts) != 6:
            raise ValueError(f"a backward configuration is 'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES', got {text!r}")
        return cls(*parts)

    def __str__(self) -> str:
        return (f"dkdv {self.dkdv_q_tile}x{self.dkdv_k_tile}, dq {self.dq_q_tile}x{self.dq_k_tile}, "
                f"{self.num_warps}w, {self.num_stages}s")

    def with_stages(self, stages: int) -> "BackwardConfig":
        return replace(self, num_stages=stages)

    def validate(self) -> None:
        for name in ("dkdv_q_tile", "dkdv_k_tile", "dq_q_tile", "dq_k_tile", "preprocess_q_tile"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"BackwardConfig.{name} must be a power of two >= 16, got {v!r}")
        if not isinstance(self.num_warps, int) or self.num_warps < 1 or self.num_warps & (self.num_warps - 1):
            raise ValueError(f"BackwardConfig.num_warps must be a power of two, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"BackwardConfig.num_stages must be >= 1, got {self.num_stages!r}")


# The built-in defaults (a sweep's pick in backward_configs.json overrides them where it applies). The
# numbers below are from offline sm_90 compiles (Triton 3.6.0, its ptxas; no GPU), causal, both dQ modes.
# sm_90: the shape of Triton's fused-attention tutorial (the owned tile 128, the streamed
# one 32) at 8 warps: wgmma, no spills for 16-bit inputs at D = 16..128 and fp32 at D <= 64
# (D = 64 bf16: 153/179 registers dK/dV without/with atomics, 112 dQ; 58/82 KB shared).
# At 4 warps the dK/dV kernel hits 255 registers and spills at D = 64.
SM90_DEFAULT = BackwardConfig(32, 128, 128, 32, num_warps=8, num_stages=3)
# sm_90, fp32 at D = 128: every configuration tried spills in dK/dV; this one least
# (236 B, 164/230 KB shared).
SM90_FP32_D128 = BackwardConfig(16, 128, 128, 16, num_warps=8, num_stages=2)
# sm_80/sm_86/sm_89 (mma.sync, 100-164 KB of shared memory): smaller owned tiles, 2 stages.
SM80_DEFAULT = BackwardConfig(32, 64, 64, 32, num_warps=4, num_stages=2)
# Any other GPU, and the last resort when a configuration does not fit.
FALLBACK = BackwardConfig(16, 64, 64, 16, num_warps=4, num_stages=1)


# The sweep's pick per architecture (sweeps/sweep_backward.py --pick writes backward_configs.json beside
# this file): the configuration with the best geometric mean over the harness shapes on that GPU. The
# sweep runs bf16 at D = 64, so the pick applies to 16-bit inputs with D <= 64; the rest keep the
# defaults above.
PICKS_FILE = Path(__file__).with_name("backward_configs.json")


def _load_picks(path: Path = PICKS_FILE) -> dict[str, BackwardConfig]:
    if not path.exists():
        return {}
    arches = json.loads(path.read_text()).get("arches", {})
    return {arch: BackwardConfig(*entry["config"]) for arch, entry in arches.items()}


PICKED = _load_picks()


def default_config(D: int, dtype: torch.dtype, arch: str | None = None) -> BackwardConfig:
    """The configuration used when none is given: by architecture, head dimension and dtype.
    Under the interpreter (arch None) the sm_90 choice, so the tests run what the H200 will."""
    arch = arch if arch is not None else device_arch()
    cc = int(arch.removeprefix("sm_").rstrip("a")) if arch else None
    picked = PICKED.get(f"sm_{cc if cc is not None else 90}")
    if picked is not None and dtype != torch.float32 and D <= 64:
        return picked
    if cc is None or cc >= 90:
        return SM90_FP32_D128 if (dtype == torch.float32 and D > 64) else SM90_DEFAULT
    if cc >= 80:
        return SM80_DEFAULT
    return FALLBACK


# ----------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------

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
    needs: the compiled kernel (None under the interpreter), its 3-D grid and the constexprs."""
    tried = []
    for c in [cfg] if strict else [cfg.with_stages(s) for s in range(cfg.num_stages, 0, -1)] + [FALLBACK]:
        try:
            compiled = kernel[grid(c)](*args, **meta(c), num_warps=c.num_warps, num_stages=c.num_stages)
            return compiled_or_none(compiled), (*grid(c), 1), tuple(meta(c).values())
        except triton.runtime.errors.OutOfResources as e:
            tried.append(f"{c}: {e}")
    raise triton.runtime.errors.OutOfResources(0, 0, "no backward configuration fits: " + "; ".join(tried))


@dataclass
class BackwardLaunch:
    """What one checked call launched (fa2triton.lean_path's lean repeat; issues 7 and 8): the three
    compiled kernels with their grids and the arguments after their tensors. A repeat is three or
    four allocations and two or three launches, without the checks, the configuration choice or
    Triton's argument binding (the host's cost at small N)."""

    preprocess: object | None  # None in dq_mode="fused" (dkdv is then the fused kernel)
    dkdv: object
    dq: object | None          # None in dq_mode="atomic" and "fused"
    grids: tuple               # one 3-D grid per kernel, in launch order
    tails: tuple               # per kernel, every argument after its tensors (constexprs included)
    delta_shape: tuple
    stack: int = 0             # how the gradients are allocated (gradient_stack)
    gluon_dkdv: bool = False   # dkdv is a gluon_backward_hopper.DkdvLaunch (grids[1] None)

    def __call__(self, Q, K, V, O, L, dO, ranges: tuple[str, str] | None = None):
        """The hot path: no checks (the cache key vouches). `ranges` = (prefix, suffix) puts each
        kernel in its own NVTX range, f"{prefix}:bwd_<kernel>{suffix}", for the profile drivers."""
        atomic = self.dq is None and self.preprocess is not None
        dQ, dK, dV = gradient_buffers(Q, K, self.stack, atomic)
        if self.preprocess is None:   # dq_mode="fused": one launch, no Delta buffer
            self._run("fused", self.dkdv, self.grids[0], self.fused_args(Q, K, V, O, L, dO, dQ, dK, dV),
                      Q.device.index, ranges)
            return dQ, dK, dV
        dev = Q.device
        Delta = torch.empty(self.delta_shape, device=dev, dtype=torch.float32)
        g, t, i = self.grids, self.tails, dev.index
        self._run("preprocess", self.preprocess, g[0], (O, dO, Delta, *t[0]), i, ranges)
        if self.gluon_dkdv:
            self._run("gluon_dkdv", self.dkdv, None, (Q, K, V, dO, L, Delta, dK, dV, *((dQ,) if atomic else ())), i,
                      ranges)
        else:
            self._run("atomic_dkdv" if atomic else "dkdv", self.dkdv, g[1],
                      (Q, K, V, dO, L, Delta, dK, dV, dQ, *t[1]), i, ranges)
        if atomic:
            return (dQ if Q.dtype == torch.float32 else dQ.to(Q.dtype)), dK, dV
        self._run("dq", self.dq, g[2], (Q, K, V, dO, L, Delta, dQ, *t[2]), i, ranges)
        return dQ, dK, dV

    def fused_args(self, Q, K, V, O, L, dO, dQ, dK, dV) -> tuple:
        """The fused kernel's arguments in its signature order (host_steps times its launch alone)."""
        return (Q, K, V, dO, O, L, dK, dV, dQ, *self.tails[0])

    @staticmethod
    def _run(name, kernel, grid, args, device_index, ranges):
        """Launch one compiled kernel (grid None: a recorded launch, called with the arguments)."""
        if ranges is not None:
            torch.cuda.nvtx.range_push(f"{ranges[0]}:bwd_{name}{ranges[1]}")
        if grid is None:
            kernel(*args)
        else:
            run_compiled(kernel, grid, args, device_index)
        if ranges is not None:
            torch.cuda.nvtx.range_pop()


def gradient_stack(Q, K, atomic: bool, allowed: bool = True) -> int:
    """How gradient_buffers allocates for these inputs: 3 = dQ, dK, dV from one allocation (Q and K of one
    shape, as in self-attention), 2 = dK and dV from one, 0 = three allocations. Only where `allowed`:
    autograd's call when Q, K and V all want their gradient (a kept view keeps its whole block alive, so
    with one gradient wanted the others' memory would stay with it). Stacking needs each slice's bytes to
    be a multiple of 16, so every view is as aligned as a fresh allocation, which Triton's compiled
    pointer specialisation (and so a recorded launch) assumes. Atomic dQ is fp32 zeros: never stacked."""
    if not allowed or K.numel() * K.element_size() % 16:
        return 0
    return 3 if Q.shape == K.shape and not atomic else 2


def gradient_buffers(Q, K, stack: int, atomic: bool = False):
    """dQ, dK, dV: contiguous, Q's and K's shapes, the input dtype (dQ fp32 zeros for atomic accumulation),
    allocated as gradient_stack said. One allocation unbound into views saves one or two trips through the
    caching allocator per backward; the views share one block, freed when all three gradients are."""
    if stack == 3:
        return torch.empty((3, *Q.shape), device=Q.device, dtype=Q.dtype).unbind(0)
    dQ = (torch.zeros(Q.shape, device=Q.device, dtype=torch.float32) if atomic
          else torch.empty(Q.shape, device=Q.device, dtype=Q.dtype))
    if stack == 2:
        dK, dV = torch.empty((2, *K.shape), device=K.device, dtype=K.dtype).unbind(0)
    else:
        dK, dV = (torch.empty(K.shape, device=K.device, dtype=K.dtype) for _ in range(2))
    return dQ, dK, dV


# Input signature -> BackwardLaunch: the forward's LaunchCache with the backward's own key.
LAUNCHES = LaunchCache()


def backward_signature(Q, K, V, O, L, dO, causal: bool, config, dq_mode: str, strict: bool, dkdv: str = "triton"):
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
            causal, config, dq_mode, strict, dkdv)


def forward_keyed_signature(fwd_key, dO, causal: bool, config, dq_mode: str, all_grads: bool = False,
                            dkdv: str = "triton"):
    """The cache key for autograd's call (FlashAttentionTriton.backward), or None: the forward's own cache
    key (fa2triton.lean_path.LaunchCache, kept on ctx as `launch_key`) stands for Q, K and V, and so for O and
    L, which that forward allocated with the layout its launch records; only dO is new. About 30 fewer
    attribute reads per call than backward_signature, which a direct call still takes."""
    if fwd_key is None or not aligned_cuda(dO):
        return None
    return ("fwd", fwd_key, dO.shape, dO.stride(), dO.dtype, dO.device, causal, config, dq_mode, all_grads, dkdv)


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
                             strict: bool = False, dkdv: str = "triton") -> tuple[torch.Tensor, torch.Tensor,
                                                                                 torch.Tensor]:
    """dQ, dK, dV of O = softmax(Q K^T / sqrt(D)) V (SDPA's top-left causal mask if is_causal).

    Q (B, N_q, D), K and V (B, N_k, D), O and dO like Q, all in one dtype (bf16, fp16, fp32);
    L (B, N_q) float32, the forward's natural-log log-sum-exp of the scaled scores.
    dq_mode "separate" (default) computes dQ in its own kernel, deterministically; "atomic"
    accumulates it in fp32 inside the dK/dV kernel (atomics, or the Gluon kernel's TMA reduce-adds: not
    deterministic); "fused" runs everything in one launch; "auto" is "atomic" where the warp-specialized
    Gluon kernel is preferred, else "fused" for small problems and "separate" otherwise (auto_dq_mode).
    Gradients come back in Q's dtype. strict launches exactly `config` (OutOfResources if it does not fit) instead of
    dropping stages. dkdv (DKDV_CHOICES) says which kernel computes dK and dV (with dq_mode "atomic", dQ's partials
    too): "gluon" a Hopper kernel (ValueError naming why where it cannot take the inputs, or with dq_mode "fused"),
    "auto" that kernel where it can, "triton" this module's.
    """
    causal = bool(is_causal)
    key = backward_signature(Q, K, V, O, L, dO, causal, config, dq_mode, strict, dkdv)
    return LAUNCHES.lookup(key, (Q, K, V, O, L, dO),
                           lambda: _checked_backward(Q, K, V, O, L, dO, causal, config, dq_mode, strict, dkdv=dkdv))


def backward_after_forward(fwd_key, Q, K, V, O, L, dO, causal: bool, config: BackwardConfig | None = None,
                           dq_mode: str = "auto", all_grads: bool = False,
                           dkdv: str = "triton") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """flash_attention_backward for a version's autograd backward: Q, K, V, O, L as its forward saved
    them and `fwd_key`, the forward's cache key (None when the forward took the normal path
    uncached), which makes the repeat's key cheaper to build (forward_keyed_signature). `all_grads`
    (ctx.needs_input_grad says Q, K and V all want one) lets the gradients share one allocation."""
    # Without a key (the forward was not cached: its inputs are not aligned CUDA tensors; or dO is not),
    # backward_signature would give none either: the checked path every time, as a direct call would.
    key = forward_keyed_signature(fwd_key, dO, causal, config, dq_mode, all_grads, dkdv)
    return LAUNCHES.lookup(key, (Q, K, V, O, L, dO),
                           lambda: _checked_backward(Q, K, V, O, L, dO, causal, config, dq_mode, False, all_grads,
                                                     dkdv=dkdv))


# dq_mode="auto": up to this much work per SM the backward runs fused (one launch, no Delta pass), beyond
# it separate (three launches, but each kernel leaner on the GPU). The unit is (query, key) pairs times D
# (half the pairs under the causal mask). 2^24 is B*H = 32, N = 1024, D = 64 non-causal on the H200's
# 132 SMs: the largest harness shape where the host, not the GPU, set the backward's time.
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
    (gluon_backward_ws, dQ by reduce-add) can take the inputs; "atomic" where it is the faster (its `preferred`)."""
    if gluon_ws and _gluon_dkdv(True).preferred(N_q, N_k, D, causal):
        return "atomic"
    if sm_count is None:
        sm_count = facts().sm_count if has_gpu() and not interpreting() else 1
    pairs = B * N_q * N_k * (0.5 if causal else 1.0)
    return "fused" if pairs * D <= AUTO_FUSED_MAX_WORK_PER_SM * sm_count else "separate"


def _checked_backward(Q, K, V, O, L, dO, causal: bool, config, dq_mode: str, strict: bool,
                      stack_grads: bool = False, dkdv: str = "triton"):
    """The normal path: check, choose the configuration, allocate, launch. Returns dQ, dK, dV and
    the BackwardLaunch that repeats it (None under the interpreter). stack_grads: the gradients may
    share one allocation (gradient_stack; autograd's call with all three wanted)."""
    if dq_mode not in DQ_CHOICES:
        raise ValueError(f"dq_mode must be one of {', '.join(DQ_CHOICES)}, got {dq_mode!r}")
    if dkdv not in DKDV_CHOICES:
        raise ValueError(f"dkdv must be one of {', '.join(DKDV_CHOICES)}, got {dkdv!r}")
    validate_backward_inputs(Q, K, V, O, L, dO)
    if dq_mode == "auto":   # (the Gluon kernels take what the dK/dV one takes, with L standing in for Delta)
        ws = dkdv != "triton" and _gluon_dkdv(False).unsupported(Q, K, V, dO, L, L, Q.shape[2] ** -0.5) is None
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
        return _checked_fused(Q, K, V, O, L, dO, causal, config, strict, stack_grads)
    B, N_q, D = Q.shape
    N_k = K.shape[1]
    scale = 1.0 / math.sqrt(D)
    atomic = dq_mode == "atomic"

    Delta = torch.empty((B, N_q), device=Q.device, dtype=torch.float32)
    stack = gradient_stack(Q, K, atomic, stack_grads)
    dQ_buf, dK, dV = gradient_buffers(Q, K, stack, atomic)

    pre = config.preprocess_q_tile
    pre_grid = (triton.cdiv(N_q, pre), B)
    pre_strides = (*_strides(O, dO, Delta), N_q)
    pre_kernel = compiled_or_none(
        _bwd_preprocess_kernel[pre_grid](O, dO, Delta, *pre_strides, D=D, BLOCK_Q=pre, num_warps=4))

    common = (*_strides(Q, K, V, dO, L, Delta),)
    gluon = None if dkdv == "triton" else _gluon_dkdv(atomic)
    dq_accum = (dQ_buf,) if atomic else ()
    why_not = None if gluon is None else gluon.unsupported(Q, K, V, dO, L, Delta, scale, *dq_accum)
    if dkdv == "gluon" and why_not is not None:
        raise ValueError(f"dkdv='gluon': {why_not}")
    use_gluon = gluon is not None and why_not is None
    if use_gluon:
        dkdv_kernel = gluon.launch(Q, K, V, dO, L, Delta, dK, dV, *dq_accum, causal, scale)
        dkdv_grid, dkdv_tail, dkdv_meta = None, (), ()
    else:
        dkdv_tail = (*common, *_strides(dK, dV, dQ_buf), N_q, N_k, scale)
        dkdv_kernel, dkdv_grid, dkdv_meta = _launch(
            _bwd_dkdv_kernel, lambda c: (triton.cdiv(N_k, c.dkdv_k_tile), B),
            (Q, K, V, dO, L, Delta, dK, dV, dQ_buf, *dkdv_tail),
            lambda c: dict(D=D, BLOCK_Q=c.dkdv_q_tile, BLOCK_K=c.dkdv_k_tile, is_causal=causal, ATOMIC_DQ=atomic),
            config, strict)
    dq_kernel, dq_grid, dq_tail = None, None, ()
    if atomic:
        dQ = dQ_buf if Q.dtype == torch.float32 else dQ_buf.to(Q.dtype)
    else:
        dq_tail = (*common, *_strides(dQ_buf), N_q, N_k, scale)
        dq_kernel, dq_grid, dq_meta = _launch(
            _bwd_dq_kernel, lambda c: (triton.cdiv(N_q, c.dq_q_tile), B),
            (Q, K, V, dO, L, Delta, dQ_buf, *dq_tail),
            lambda c: dict(D=D, BLOCK_Q=c.dq_q_tile, BLOCK_K=c.dq_k_tile, is_causal=causal),
            config, strict)
        dq_tail = (*dq_tail, *dq_meta)
        dQ = dQ_buf
    launch = None
    if pre_kernel is not None and dkdv_kernel is not None and (atomic or dq_kernel is not None):
        launch = BackwardLaunch(pre_kernel, dkdv_kernel, dq_kernel, ((*pre_grid, 1), dkdv_grid, dq_grid),
                                ((*pre_strides, D, pre), (*dkdv_tail, *dkdv_meta), dq_tail), (B, N_q), stack,
                                use_gluon)
    return dQ, dK, dV, launch


def _checked_fused(Q, K, V, O, L, dO, causal: bool, config: BackwardConfig, strict: bool,
                   stack_grads: bool = False):
    """dq_mode="fused", after _checked_backward's checks: allocate dQ, dK, dV and launch _bwd_fused_kernel,
    its grid the dK/dV programs' key tiles followed by the dQ programs' query tiles."""
    B, N_q, D = Q.shape
    N_k = K.shape[1]
    stack = gradient_stack(Q, K, False, stack_grads)
    dQ, dK, dV = gradient_buffers(Q, K, stack)
    tail = (*_strides(Q, K, V, dO, O, L, dK, dV, dQ), N_q, N_k, 1.0 / math.sqrt(D))
    kernel, grid, meta = _launch(
        _bwd_fused_kernel, lambda c: (triton.cdiv(N_k, c.dkdv_k_tile) + triton.cdiv(N_q, c.dq_q_tile), B),
        (Q, K, V, dO, O, L, dK, dV, dQ, *tail),
        lambda c: dict(D=D, KV_BLOCK_Q=c.dkdv_q_tile, KV_BLOCK_K=c.dkdv_k_tile, DQ_BLOCK_Q=c.dq_q_tile,
                       DQ_BLOCK_K=c.dq_k_tile, is_causal=causal),
        config, strict)
    launch = None if kernel is None else BackwardLaunch(None, kernel, None, (grid,), ((*tail, *meta),), (B, N_q),
                                                        stack)
    return dQ, dK, dV, launch
