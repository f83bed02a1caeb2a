"""v7 feasibility's Triton variants (experiments/v7_feasibility.py compiles them): one FlashAttention-2 forward (v6's
algorithm) written once with compile-time switches, so that each variant differs from the pointer reference by one
feature:

  LOADS        0 pointers with row masks (v6: cp.async = LDGSTS), 1 host TensorDescriptor over the flattened
               (B*N, D) rows, 2 over (B, N, D) with a (1, tile, D) block, 3 tl.make_tensor_descriptor per head
  WS           tl.range(..., warp_specialize=True) on the key loops
  LOOP_STAGES  tl.range(..., num_stages=LOOP_STAGES) on the key loops (0: only the kernel's num_stages)
  PIPELINE_QK  the key loop software-pipelined by hand: Q K^T of tile j+1 issued before the softmax
               of tile j (the last tile peeled off)
  PERSISTENT   a persistent grid: NUM_PROGRAMS programs loop over (head, query tile) work items,
               longest causal tiles first

What the kernels ship is imported, not copied: the online-softmax update and, for LOADS 2 without WS or LOOP_STAGES,
the whole key loop are v7_hopper's. The other loads, WS, LOOP_STAGES and PERSISTENT exist only here. LOADS 0 used
block pointers until Triton 3.9 removed them: the committed rows (Triton 3.6) name those blockptr*, the port
pointers*.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from fa2lab.switches import load

_V7 = load("v7_hopper")
_v7_softmax_step = _V7._online_softmax_step   # v6's update; HAS_WINDOW = False here
_v7_key_tiles = _V7._attend_key_tiles         # v7's key loop over (B, N, D) descriptors, PIPELINE_QK 0 or 1


@triton.jit
def _load_tile(src, b, row, N, stride_row, TILE: tl.constexpr, D: tl.constexpr, LOADS: tl.constexpr,
               MASKED: tl.constexpr):
    """One (TILE, D) tile starting at sequence position `row` of head `b`."""
    if LOADS == 0:      # a scalar base already at `row` (v6 advances it) plus the tile's offsets: cp.async
        ptrs = src + tl.arange(0, TILE)[:, None] * stride_row + tl.arange(0, D)[None, :]
        if MASKED:
            rows_in = row + tl.arange(0, TILE) < N
            t = tl.load(ptrs, mask=rows_in[:, None], other=0.0)
        else:
            t = tl.load(ptrs)
    elif LOADS == 1:    # host descriptor over the flattened (B*N, D) rows
        t = src.load([b * N + row, 0])
    elif LOADS == 2:    # host descriptor over (B, N, D)
        t = src.load([b, row, 0]).reshape(TILE, D)
    else:               # device descriptor over this head's (N, D)
        t = src.load([row, 0])
    return t


@triton.jit
def _key_loop(O_acc, l_acc, m_acc, Q_i, q_pos, K_src, V_src, b, start, stop, N_KEYS, stride_kk, stride_vk,
              qk_scale, D: tl.constexpr, K_TILE: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              LOADS: tl.constexpr, WS: tl.constexpr, LOOP_STAGES: tl.constexpr, PIPELINE_QK: tl.constexpr):
    if LOADS == 2 and not WS and LOOP_STAGES == 0:   # v7_hopper's own key loop
        return _v7_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_src, V_src, b, start, stop, N_KEYS, 0, qk_scale,
                             D=D, K_TILE_SIZE=K_TILE, MASKED=MASKED, is_causal=CAUSAL, HAS_WINDOW=False,
                             PIPELINE_QK=PIPELINE_QK)
    if LOADS == 0:   # v6: scalar bases at `start`, advanced by one tile per iteration
        K_it = K_src + start * stride_kk
        V_it = V_src + start * stride_vk
    else:
        K_it = K_src
        V_it = V_src
    if PIPELINE_QK:
        # Software-pipelined by hand: Q K^T of tile j+1 is issued before the softmax of tile j, whose
        # exp2s do not depend on it; the last tile is peeled off (no redundant product).
        if start < stop:
            last = start + ((stop - start - 1) // K_TILE) * K_TILE
            K_j = _load_tile(K_it, b, start, N_KEYS, stride_kk, K_TILE, D, LOADS, MASKED)
            S_ij = tl.dot(Q_i, tl.trans(K_j))
            for k_start in range(start, last, K_TILE):
                V_j = _load_tile(V_it, b, k_start, N_KEYS, stride_vk, K_TILE, D, LOADS, MASKED)
                if LOADS == 0:
                    K_it = K_it + K_TILE * stride_kk
                    V_it = V_it + K_TILE * stride_vk
                K_n = _load_tile(K_it, b, k_start + K_TILE, N_KEYS, stride_kk, K_TILE, D, LOADS, MASKED)
                S_next = tl.dot(Q_i, tl.trans(K_n))
                O_acc, l_acc, m_acc = _v7_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS, 0,
                                                       qk_scale, K_TILE, MASKED, CAUSAL, False)
                S_ij = S_next
            V_j = _load_tile(V_it, b, last, N_KEYS, stride_vk, K_TILE, D, LOADS, MASKED)
            O_acc, l_acc, m_acc = _v7_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, last, N_KEYS, 0, qk_scale,
                                                   K_TILE, MASKED, CAUSAL, False)
    elif WS:
        for k_start in tl.range(start, stop, K_TILE, warp_specialize=True):
            K_j = _load_tile(K_it, b, k_start, N_KEYS, stride_kk, K_TILE, D, LOADS, MASKED)
            V_j = _load_tile(V_it, b, k_start, N_KEYS, stride_vk, K_TILE, D, LOADS, MASKED)
            S_ij = tl.dot(Q_i, tl.trans(K_j))
            O_acc, l_acc, m_acc = _v7_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS, 0,
                                                   qk_scale, K_TILE, MASKED, CAUSAL, False)
            if LOADS == 0:
                K_it = K_it + K_TILE * stride_kk
                V_it = V_it + K_TILE * stride_vk
    elif LOOP_STAGES > 0:
        for k_start in tl.range(start, stop, K_TILE, num_stages=LOOP_STAGES):
            K_j = _load_tile(K_it, b, k_start, N_KEYS, stride_kk, K_TILE, D, LOADS, MASKED)
            V_j = _load_tile(V_it, b, k_start, N_KEYS, stride_vk, K_TILE, D, LOADS, MASKED)
            S_ij = tl.dot(Q_i, tl.trans(K_j))
            O_acc, l_acc, m_acc = _v7_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS, 0,
                                                   qk_scale, K_TILE, MASKED, CAUSAL, False)
            if LOADS == 0:
                K_it = K_it + K_TILE * stride_kk
                V_it = V_it + K_TILE * stride_vk
    else:
        for k_start in range(start, stop, K_TILE):
            K_j = _load_tile(K_it, b, k_start, N_KEYS, stride_kk, K_TILE, D, LOADS, MASKED)
            V_j = _load_tile(V_it, b, k_start, N_KEYS, stride_vk, K_TILE, D, LOADS, MASKED)
            S_ij = tl.dot(Q_i, tl.trans(K_j))
            O_acc, l_acc, m_acc = _v7_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS, 0,
                                                   qk_scale, K_TILE, MASKED, CAUSAL, False)
            if LOADS == 0:
                K_it = K_it + K_TILE * stride_kk
                V_it = V_it + K_TILE * stride_vk
    return O_acc, l_acc, m_acc


@triton.jit
def _one_tile(Q, K, V, O, L, b, q_tile, stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk,
              stride_ob, stride_oq, N_QUERIES, N_KEYS, qk_scale,
              D: tl.constexpr, Q_TILE: tl.constexpr, K_TILE: tl.constexpr, CAUSAL: tl.constexpr,
              LOADS: tl.constexpr, WS: tl.constexpr, LOOP_STAGES: tl.constexpr, PIPELINE_QK: tl.constexpr):
    q_start = q_tile * Q_TILE
    if LOADS == 0:
        Q_src = Q + b * stride_qb
        K_src = K + b * stride_kb
        V_src = V + b * stride_vb
    elif LOADS == 3:
        Q_src = tl.make_tensor_descriptor(Q + b * stride_qb, shape=[N_QUERIES, D], strides=[stride_qq, 1],
                                          block_shape=[Q_TILE, D])
        K_src = tl.make_tensor_descriptor(K + b * stride_kb, shape=[N_KEYS, D], strides=[stride_kk, 1],
                                          block_shape=[K_TILE, D])
        V_src = tl.make_tensor_descriptor(V + b * stride_vb, shape=[N_KEYS, D], strides=[stride_vk, 1],
                                          block_shape=[K_TILE, D])
    else:
        Q_src = Q
        K_src = K
        V_src = V
    if LOADS == 0:
        Q_src += q_start * stride_qq
    Q_i = _load_tile(Q_src, b, q_start, N_QUERIES, stride_qq, Q_TILE, D, LOADS, True)
    q_pos = (q_start + tl.arange(0, Q_TILE))[:, None]
    O_acc = tl.zeros((Q_TILE, D), dtype=tl.float32)
    l_acc = tl.zeros((Q_TILE, 1), dtype=tl.float32)
    m_acc = tl.full((Q_TILE, 1), float("-inf"), dtype=tl.float32)
    full_stop = (N_KEYS // K_TILE) * K_TILE
    if CAUSAL:
        diag_start = tl.minimum((q_start // K_TILE) * K_TILE, full_stop)
        stop = tl.minimum(q_start + Q_TILE, N_KEYS)
    else:
        diag_start = full_stop
        stop = N_KEYS
    O_acc, l_acc, m_acc = _key_loop(O_acc, l_acc, m_acc, Q_i, q_pos, K_src, V_src, b, 0, diag_start, N_KEYS,
                                    stride_kk, stride_vk, qk_scale, D, K_TILE, False, CAUSAL, LOADS, WS,
                                    LOOP_STAGES, PIPELINE_QK)
    O_acc, l_acc, m_acc = _key_loop(O_acc, l_acc, m_acc, Q_i, q_pos, K_src, V_src, b, diag_start, stop, N_KEYS,
                                    stride_kk, stride_vk, qk_scale, D, K_TILE, True, CAUSAL, LOADS, WS,
                                    LOOP_STAGES, PIPELINE_QK)
    O_i = O_acc / tl.where(l_acc == 0.0, 1.0, l_acc)
    L_i = tl.reshape((m_acc + tl.math.log2(l_acc)) * 0.6931471805599453, (Q_TILE,))
    rows = q_start + tl.arange(0, Q_TILE)
    tl.store(L + b * N_QUERIES + rows, L_i, mask=rows < N_QUERIES)
    if LOADS == 2:
        O.store([b, q_start, 0], O_i.to(O.dtype).reshape(1, Q_TILE, D))
    elif LOADS == 3:
        O_dst = tl.make_tensor_descriptor(O + b * stride_ob, shape=[N_QUERIES, D], strides=[stride_oq, 1],
                                          block_shape=[Q_TILE, D])
        O_dst.store([q_start, 0], O_i.to(O_dst.dtype))
    else:   # the flattened descriptor cannot clip at the head's end: a pointer store with a row mask
        O_ptrs = O + b * stride_ob + rows[:, None] * stride_oq + tl.arange(0, D)[None, :]
        tl.store(O_ptrs, O_i.to(O.dtype.element_ty), mask=rows[:, None] < N_QUERIES)


@triton.jit
def fa_fwd_variant(
    # pointers (LOADS 0, 3), host TensorDescriptors (LOADS 1: Q, K, V; LOADS 2: Q, K, V, O)
    Q, K, V, O, L,
    # strides in elements (the head dimension is contiguous)
    stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_ob, stride_oq,
    # sizes
    N_QUERIES, N_KEYS, BH, scale,
    # compile-time switches (module docstring)
    D: tl.constexpr, Q_TILE: tl.constexpr, K_TILE: tl.constexpr, CAUSAL: tl.constexpr,
    LOADS: tl.constexpr, WS: tl.constexpr, LOOP_STAGES: tl.constexpr, PIPELINE_QK: tl.constexpr,
    PERSISTENT: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
):
    qk_scale = scale * 1.4426950408889634
    n_tiles = tl.cdiv(N_QUERIES, Q_TILE)
    if PERSISTENT:
        # Work item w: query tile n_tiles - 1 - w // BH of head w % BH (every head's longest tiles first).
        for w in range(tl.program_id(0), n_tiles * BH, NUM_PROGRAMS):
            _one_tile(Q, K, V, O, L, w % BH, n_tiles - 1 - w // BH, stride_qb, stride_qq, stride_kb, stride_kk,
                      stride_vb, stride_vk, stride_ob, stride_oq, N_QUERIES, N_KEYS, qk_scale,
                      D, Q_TILE, K_TILE, CAUSAL, LOADS, WS, LOOP_STAGES, PIPELINE_QK)
    else:
        _one_tile(Q, K, V, O, L, tl.program_id(0), n_tiles - 1 - tl.program_id(1), stride_qb, stride_qq,
                  stride_kb, stride_kk, stride_vb, stride_vk, stride_ob, stride_oq, N_QUERIES, N_KEYS, qk_scale,
                  D, Q_TILE, K_TILE, CAUSAL, LOADS, WS, LOOP_STAGES, PIPELINE_QK)


# --------------------------------------------------------------------------- the variants

BASE = dict(LOADS=0, WS=False, LOOP_STAGES=0, PIPELINE_QK=False, PERSISTENT=False)
# name -> (switches, what it tests)
VARIANTS = {
    "pointers": (dict(BASE), "reference: v6's loads (pointers with row masks, cp.async)"),
    "host_desc_2d": (dict(BASE, LOADS=1), "(a) host TensorDescriptor args, (B*N, D) view"),
    "host_desc_3d": (dict(BASE, LOADS=2), "(a) host TensorDescriptor args, (B, N, D) view, (1, tile, D) blocks"),
    "device_desc": (dict(BASE, LOADS=3), "(a) device-side tl.make_tensor_descriptor per head"),
    "desc3d_loop_stages": (dict(BASE, LOADS=2, LOOP_STAGES=3), "(b) tl.range(num_stages=3) on the key loops"),
    "desc3d_warp_spec": (dict(BASE, LOADS=2, WS=True), "(b) tl.range(warp_specialize=True) on the key loops"),
    "pointers_warp_spec": (dict(BASE, WS=True), "(b) warp_specialize with pointer loads"),
    "desc3d_persistent": (dict(BASE, LOADS=2, PERSISTENT=True), "(c) persistent grid, NUM_PROGRAMS = 132"),
    "desc3d_persistent_warp_spec": (dict(BASE, LOADS=2, PERSISTENT=True, WS=True), "(b)+(c)"),
    "desc3d_pipeline_qk": (dict(BASE, LOADS=2, PIPELINE_QK=True),
                           "(d) Q K^T of tile j+1 issued before the softmax of tile j (hand-pipelined loop)"),
    "pointers_pipeline_qk": (dict(BASE, PIPELINE_QK=True), "(d) the same with pointer loads"),
}
NUM_SMS_H200 = 132


def host_args(switches: dict, B: int, N: int, D: int, dtype, q_tile: int, k_tile: int, device="meta"):
    """Kernel arguments for contiguous (B, N, D) tensors: real tensors on `device` ('meta' for an
    offline compile: the binder reads dtypes and, for descriptors, block shapes only)."""
    import torch

    Q, K, V, O = (torch.empty(B, N, D, dtype=dtype, device=device) for _ in range(4))
    L = torch.empty(B, N, dtype=torch.float32, device=device)
    return tensors_to_args(switches, Q, K, V, O, L, q_tile, k_tile)


def tensors_to_args(switches, Q, K, V, O, L, q_tile, k_tile):
    from triton.tools.tensor_descriptor import TensorDescriptor

    B, N, D = Q.shape
    N_k = K.shape[1]
    loads = switches["LOADS"]
    if loads == 1:
        q, k, v, o = (TensorDescriptor.from_tensor(t.view(-1, D), [tile, D])
                      for t, tile in ((Q, q_tile), (K, k_tile), (V, k_tile), (O, q_tile)))
        o = O
    elif loads == 2:
        q, k, v, o = (TensorDescriptor.from_tensor(t, [1, tile, D])
                      for t, tile in ((Q, q_tile), (K, k_tile), (V, k_tile), (O, q_tile)))
    else:
        q, k, v, o = Q, K, V, O
    return (q, k, v, o, L, Q.stride(0), Q.stride(1), K.stride(0), K.stride(1), V.stride(0), V.stride(1),
            O.stride(0), O.stride(1), N, N_k, B, 1.0 / math.sqrt(D))


def compile_variant(name: str, q_tile=128, k_tile=64, num_warps=8, num_stages=3, causal=False, N=4096, D=64,
                    BH=32):
    import torch

    from fa2lab.compile_offline import compile_for_target

    switches, _ = VARIANTS[name]
    args = host_args(switches, BH, N, D, torch.bfloat16, q_tile, k_tile)
    return compile_for_target(fa_fwd_variant, args, arch=90, num_warps=num_warps, num_stages=num_stages,
                              D=D, Q_TILE=q_tile, K_TILE=k_tile, CAUSAL=causal,
                              NUM_PROGRAMS=NUM_SMS_H200, **switches)
