"""The FlashAttention-2 backward's Triton kernels (issue 7); fa2triton.flash_backward_triton launches them. Per
(batch*head) slice, from the forward's O and L (the natural-log log-sum-exp of each query row's scaled scores) and dO,
without ever holding a whole (N_q, N_k) matrix:

    P  = exp(scale * Q K^T - L)         recomputed from L, scale = 1/sqrt(D); no second pass over keys
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  Delta = rowsum(dO * O)  (= rowsum(P * dP))
    dQ = scale * dS K,  dK = scale * dS^T Q

- `_bwd_preprocess_kernel`: Delta in fp32, one value per query row (and dq_mode "atomic"'s accumulator zeroed).
- `_bwd_dkdv_kernel`: one program per (key tile, batch*head) keeps K, V and the fp32 dK, dV on chip and streams the
  query tiles past (`_dkdv_query_tiles`); causal, it starts at the first query tile that sees the key tile (query i
  sees key j iff j <= i). ATOMIC_DQ (dq_mode "atomic"): the same loop also adds dS K into an fp32 dQ with
  tl.atomic_add (dQ's last bits vary from run to run).
- `_bwd_dq_kernel` (dq_mode "separate", deterministic): one program per (query tile, batch*head) over the key tiles
  (`_dq_key_tiles`), recomputing P and dP.
- Both: causal, every head's longest tiles start first (tile_order: one grid axis, the heads fastest).
- `_bwd_fused_kernel` (dq_mode "fused"): the dK/dV and the dQ programs in one launch, each computing Delta from O: no
  preprocess launch and no Delta buffer, for small N where the host's time dominates.

Units of L: the kernels take L in natural log as saved and load it as L * log2(e), so each score costs one FFMA and
one exp2: P = exp2(S_raw * qk_scale - L * log2(e)), S_raw = Q K^T, qk_scale = scale * log2(e).

Invariants: every product a tl.dot with fp32 accumulation; P and dS cast to the input dtype before their dots (as
FlashAttention-2); tiles inside the tensors and below the diagonal run a loop copy without masks (MASKED=False), the
diagonal and ragged last tiles pay for them; plain base + offsets * strides pointers (no block pointers: Triton 3.9
removed them), each slice's base offset in 64 bits (a tensor may pass 2^31 elements; the rest stays 32-bit);
HAS_WINDOW (a sliding window, causal) skips the tiles outside the band and masks its far edge as the diagonal is
masked, and without it every kernel compiles as before. Why each choice, with its numbers:
docs/worklogs/backward_hopper.md, "The Triton backward's notes".
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ptx_marks   # the wgmma kernels' PTX passes on Triton 3.9: fences and descriptors
from .tile_order import tile_and_head


@triton.jit
def _bwd_preprocess_kernel(
    # pointers (dQ_ptr: the fp32 dQ accumulator this launch zeroes where ZERO_DQ, else unused)
    O_ptr, dO_ptr, Delta_ptr, dQ_ptr,
    # strides (batch, sequence, head dim)
    stride_ob, stride_oq, stride_od,
    stride_dob, stride_doq, stride_dod,
    stride_deltab, stride_deltaq,
    stride_dqb, stride_dqq, stride_dqd,
    # sizes
    N_QUERIES,
    # compile-time meta-parameters
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    ZERO_DQ: tl.constexpr,
):
    """Delta[b, i] = sum_d dO[b, i, d] * O[b, i, d], in fp32; with ZERO_DQ also dQ[b, i, :] = 0 (dq_mode "atomic":
    the accumulator the main kernel adds into, zeroed here instead of by a fill launch of its own)."""
    q_start = tl.program_id(0) * BLOCK_Q
    batch_index = tl.program_id(1).to(tl.int64)   # 64-bit slice offsets, as in _dkdv_program
    offs_q = q_start + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_mask = offs_q < N_QUERIES

    o = tl.load(O_ptr + batch_index * stride_ob + offs_q[:, None] * stride_oq + offs_d[None, :] * stride_od,
                mask=q_mask[:, None], other=0.0)
    do = tl.load(dO_ptr + batch_index * stride_dob + offs_q[:, None] * stride_doq + offs_d[None, :] * stride_dod,
                 mask=q_mask[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta_ptr + batch_index * stride_deltab + offs_q * stride_deltaq, delta, mask=q_mask)
    if ZERO_DQ:
        tl.store(dQ_ptr + batch_index * stride_dqb + offs_q[:, None] * stride_dqq + offs_d[None, :] * stride_dqd,
                 tl.zeros([BLOCK_Q, D], dtype=tl.float32), mask=q_mask[:, None])


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
                      start, stop, N_QUERIES, N_KEYS, qk_scale, scale, WINDOW,
                      D: tl.constexpr, BLOCK_Q: tl.constexpr,
                      MASKED: tl.constexpr, is_causal: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                      DELTA_FROM_O: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """Fold the query tiles in [start, stop) into one key tile's dK and dV accumulators.

    Works in the transposed orientation (keys along rows), so P^T and dS^T come out of the
    dots in the shape dV and dK need. The pointer arguments are already offset to the
    (batch*head) slice. MASKED is a compile-time flag: the unmasked copy of this loop has
    no compare, no select and no bounds checks on its loads; it is only used on tiles that
    lie entirely inside the tensors and entirely below the causal diagonal. DELTA_FROM_O (the fused
    mode): each query tile's Delta = rowsum(dO * O) is computed here from O instead of loaded. HAS_WINDOW: the
    causal band of WINDOW keys (query i sees key j iff i - WINDOW < j <= i) masks the masked copy too.
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
            if HAS_WINDOW:
                keep = keep & (offs_q[None, :] < offs_k[:, None] + WINDOW)
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
                  N_QUERIES, N_KEYS, scale, WINDOW,
                  D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, is_causal: tl.constexpr,
                  ATOMIC_DQ: tl.constexpr, DELTA_FROM_O: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """One key tile's dK and dV (and, with ATOMIC_DQ, its share of dQ): the body of _bwd_dkdv_kernel
    and of the fused kernel's key-tile programs. O_ptr and its strides are read only with DELTA_FROM_O."""
    batch_index = batch_index.to(tl.int64)   # slice offsets in 64 bits: a tensor may pass 2^31 elements
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
    # With HAS_WINDOW the unmasked range ends where the band's far edge (i < k_start + WINDOW) starts to cut,
    # and the last masked range where no query sees the tile's last key.
    full_stop = (N_QUERIES // BLOCK_Q) * BLOCK_Q
    masked_stop = N_QUERIES
    if HAS_WINDOW:
        full_stop = tl.minimum(full_stop, ((k_start + WINDOW) // BLOCK_Q) * BLOCK_Q)
        masked_stop = tl.minimum(N_QUERIES, k_start + BLOCK_K - 1 + WINDOW)
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
                                       stride_dqq, stride_dqd, stride_oq, stride_od, lo, diag_stop,
                                       N_QUERIES, N_KEYS, qk_scale, scale, WINDOW,
                                       D=D, BLOCK_Q=BLOCK_Q, MASKED=True, is_causal=is_causal,
                                       ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=DELTA_FROM_O,
                                       HAS_WINDOW=HAS_WINDOW)
    dK_acc, dV_acc = _dkdv_query_tiles(dK_acc, dV_acc, K_j, V_j, offs_k, Q_b, dO_b, L_b, Delta_b, dQ_b, O_b,
                                       stride_qq, stride_qd, stride_doq, stride_dod, stride_lq, stride_deltaq,
                                       stride_dqq, stride_dqd, stride_oq, stride_od, diag_stop, full_stop,
                                       N_QUERIES, N_KEYS, qk_scale, scale, WINDOW,
                                       D=D, BLOCK_Q=BLOCK_Q, MASKED=False, is_causal=is_causal,
                                       ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=DELTA_FROM_O,
                                       HAS_WINDOW=HAS_WINDOW)
    dK_acc, dV_acc = _dkdv_query_tiles(dK_acc, dV_acc, K_j, V_j, offs_k, Q_b, dO_b, L_b, Delta_b, dQ_b, O_b,
                                       stride_qq, stride_qd, stride_doq, stride_dod, stride_lq, stride_deltaq,
                                       stride_dqq, stride_dqd, stride_oq, stride_od, tail_start, masked_stop,
                                       N_QUERIES, N_KEYS, qk_scale, scale, WINDOW,
                                       D=D, BLOCK_Q=BLOCK_Q, MASKED=True, is_causal=is_causal,
                                       ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=DELTA_FROM_O,
                                       HAS_WINDOW=HAS_WINDOW)

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
    # sizes, the softmax scale and the causal band's width (read only with HAS_WINDOW)
    N_QUERIES, N_KEYS,
    scale, WINDOW,
    # compile-time meta-parameters
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,     # query tile streamed through the loop
    BLOCK_K: tl.constexpr,     # key tile this program owns
    is_causal: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,   # also accumulate dQ with atomics (dq_mode="atomic")
    HAS_WINDOW: tl.constexpr,  # a sliding window: query i sees key j iff i - WINDOW < j <= i
):
    ptx_marks.plant(FENCES=True, DESCRIPTORS=True, REDUCTIONS=False)
    tile, head = tile_and_head(tl.cdiv(N_KEYS, BLOCK_K), is_causal, False)
    _dkdv_program(tile, head,
                  Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr, dK_ptr, dV_ptr, dQacc_ptr, Q_ptr,
                  stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                  stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                  stride_lb, stride_lq, stride_deltab, stride_deltaq,
                  stride_dkb, stride_dkk, stride_dkd, stride_dvb, stride_dvk, stride_dvd,
                  stride_dqb, stride_dqq, stride_dqd, 0, 0, 0,
                  N_QUERIES, N_KEYS, scale, WINDOW,
                  D=D, BLOCK_Q=BLOCK_Q, BLOCK_K=BLOCK_K, is_causal=is_causal, ATOMIC_DQ=ATOMIC_DQ, DELTA_FROM_O=False,
                  HAS_WINDOW=HAS_WINDOW)


@triton.jit
def _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q,
                  K_ptr, V_ptr, stride_kk, stride_kd, stride_vk, stride_vd,
                  start, stop, N_KEYS, qk_scale, WINDOW,
                  D: tl.constexpr, BLOCK_K: tl.constexpr,
                  MASKED: tl.constexpr, is_causal: tl.constexpr, HAS_WINDOW: tl.constexpr):
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
            if HAS_WINDOW:
                keep = keep & (offs_k[None, :] > offs_q[:, None] - WINDOW)
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
                N_QUERIES, N_KEYS, scale, WINDOW,
                D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, is_causal: tl.constexpr,
                DELTA_FROM_O: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """One query tile's dQ: the body of _bwd_dq_kernel and of the fused kernel's query-tile programs.
    O_ptr and its strides are read only with DELTA_FROM_O."""
    batch_index = batch_index.to(tl.int64)   # slice offsets in 64 bits: a tensor may pass 2^31 elements
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
    unmasked_start = 0
    tail_start = unmasked_stop
    if HAS_WINDOW:
        # Keys before the band of the tile's first query are skipped; from there to the first key every query of
        # the tile sees (j >= q_start + BLOCK_Q - WINDOW), masked.
        band_start = (tl.maximum(q_start - WINDOW + 1, 0) // BLOCK_K) * BLOCK_K
        unmasked_start = tl.minimum(tl.cdiv(tl.maximum(q_start + BLOCK_Q - WINDOW, 0), BLOCK_K) * BLOCK_K,
                                    unmasked_stop)
        dQ_acc = _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q, K_b, V_b,
                               stride_kk, stride_kd, stride_vk, stride_vd, band_start, unmasked_start, N_KEYS,
                               qk_scale, WINDOW, D=D, BLOCK_K=BLOCK_K, MASKED=True, is_causal=is_causal,
                               HAS_WINDOW=HAS_WINDOW)
        tail_start = tl.maximum(unmasked_start, unmasked_stop)
    dQ_acc = _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q, K_b, V_b,
                           stride_kk, stride_kd, stride_vk, stride_vd, unmasked_start, unmasked_stop, N_KEYS, qk_scale,
                           WINDOW, D=D, BLOCK_K=BLOCK_K, MASKED=False, is_causal=is_causal, HAS_WINDOW=HAS_WINDOW)
    dQ_acc = _dq_key_tiles(dQ_acc, Q_i, dO_i, l2_i, delta_i, offs_q, K_b, V_b,
                           stride_kk, stride_kd, stride_vk, stride_vd, tail_start, masked_stop, N_KEYS, qk_scale, WINDOW,
                           D=D, BLOCK_K=BLOCK_K, MASKED=True, is_causal=is_causal, HAS_WINDOW=HAS_WINDOW)

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
    # sizes, the softmax scale and the causal band's width (read only with HAS_WINDOW)
    N_QUERIES, N_KEYS,
    scale, WINDOW,
    # compile-time meta-parameters
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,     # query tile this program owns
    BLOCK_K: tl.constexpr,     # key tile streamed through the loop
    is_causal: tl.constexpr,
    HAS_WINDOW: tl.constexpr,  # a sliding window, as in _bwd_dkdv_kernel
):
    ptx_marks.plant(FENCES=True, DESCRIPTORS=True, REDUCTIONS=False)
    tile, head = tile_and_head(tl.cdiv(N_QUERIES, BLOCK_Q), is_causal, True)
    _dq_program(tile, head,
                Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Delta_ptr, dQ_ptr, Q_ptr,
                stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                stride_lb, stride_lq, stride_deltab, stride_deltaq,
                stride_dqb, stride_dqq, stride_dqd, 0, 0, 0,
                N_QUERIES, N_KEYS, scale, WINDOW,
                D=D, BLOCK_Q=BLOCK_Q, BLOCK_K=BLOCK_K, is_causal=is_causal, DELTA_FROM_O=False, HAS_WINDOW=HAS_WINDOW)


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
    # sizes, the softmax scale and the causal band's width (read only with HAS_WINDOW)
    N_QUERIES, N_KEYS,
    scale, WINDOW,
    # compile-time meta-parameters: the dK/dV programs' tiles, then the dQ programs'
    D: tl.constexpr,
    KV_BLOCK_Q: tl.constexpr,
    KV_BLOCK_K: tl.constexpr,
    DQ_BLOCK_Q: tl.constexpr,
    DQ_BLOCK_K: tl.constexpr,
    is_causal: tl.constexpr,
    HAS_WINDOW: tl.constexpr,  # a sliding window, as in _bwd_dkdv_kernel
):
    """dq_mode="fused": the whole backward in one launch, for shapes where the host's launches cost more
    than the kernels. Programs 0 .. cdiv(N_KEYS, KV_BLOCK_K) - 1 along axis 0 are _bwd_dkdv_kernel's,
    the rest _bwd_dq_kernel's, side by side on the GPU; neither reads a preprocessed Delta: each
    computes rowsum(dO * O) for the query tiles it loads (the dK/dV programs once per query tile they
    stream, so O is read once more per key tile: cheap at small N, not at large)."""
    ptx_marks.plant(FENCES=True, DESCRIPTORS=True, REDUCTIONS=False)
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
                      N_QUERIES, N_KEYS, scale, WINDOW,
                      D=D, BLOCK_Q=KV_BLOCK_Q, BLOCK_K=KV_BLOCK_K, is_causal=is_causal, ATOMIC_DQ=False,
                      DELTA_FROM_O=True, HAS_WINDOW=HAS_WINDOW)
    else:
        _dq_program(tile - n_key_tiles, tl.program_id(1),
                    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, L_ptr, dQ_ptr, O_ptr,
                    stride_qb, stride_qq, stride_qd, stride_kb, stride_kk, stride_kd,
                    stride_vb, stride_vk, stride_vd, stride_dob, stride_doq, stride_dod,
                    stride_lb, stride_lq, 0, 0,
                    stride_dqb, stride_dqq, stride_dqd, stride_ob, stride_oq, stride_od,
                    N_QUERIES, N_KEYS, scale, WINDOW,
                    D=D, BLOCK_Q=DQ_BLOCK_Q, BLOCK_K=DQ_BLOCK_K, is_causal=is_causal, DELTA_FROM_O=True,
                    HAS_WINDOW=HAS_WINDOW)
