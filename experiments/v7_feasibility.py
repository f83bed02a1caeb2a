"""Issue 6, v7 feasibility: which Hopper features Triton 3.6 compiles for a FlashAttention forward.

    python experiments/v7_feasibility.py [--check] [--only NAME,...] [--configs Q,K,W,S;...] [--causal 0,1]
                                         [--out results/offline-sm_90/v7_feasibility]

One FlashAttention-2 forward (v6's algorithm) written once with compile-time switches, so that each variant
differs from the pointer reference by one feature:

  LOADS        0 pointers with row masks (v6: cp.async = LDGSTS), 1 host TensorDescriptor over the flattened
               (B*N, D) rows, 2 over (B, N, D) with a (1, tile, D) block, 3 tl.make_tensor_descriptor per head
  WS           tl.range(..., warp_specialize=True) on the key loops
  LOOP_STAGES  tl.range(..., num_stages=LOOP_STAGES) on the key loops (0: only the kernel's num_stages)
  PIPELINE_QK  the key loop software-pipelined by hand: Q K^T of tile j+1 issued before the softmax
               of tile j (the last tile peeled off)
  PERSISTENT   a persistent grid: NUM_PROGRAMS programs loop over (head, query tile) work items,
               longest causal tiles first

beside v6's own kernel (v6_reference), v7_hopper's (v7_hopper_pipelined, v7_hopper_plain), and a minimal Gluon
forward whose wgmma waits are placed by hand (gluon_*).

What the kernels ship is imported, not copied: the online-softmax update and, for LOADS 2 without WS or
LOOP_STAGES, the whole key loop are v7_hopper's; the Gluon sketch's TMA issue and P operand are
gluon_forward_hopper.py's. The other loads, WS, LOOP_STAGES and PERSISTENT exist only here. LOADS 0 used block
pointers until Triton 3.9 removed them: the committed rows (Triton 3.6) name those blockptr*, the port pointers*.

Each row is compiled OFFLINE for sm_90 (GPUTarget("cuda", 90, 32); no GPU) in a child process, so the compiler's
own error text is captured, and read from its TTGIR and SASS: TMA loads, HGMMA, LDGSTS, BAR.SYNC, SYNCS and wgmma
waits per iteration of the first key loop, MUFU.EX2 issued while a wgmma is in flight, registers, spills, shared and
scratch bytes, ptxas's notes. --check also runs each tl variant under the interpreter on ragged shapes against a
float64 reference. Nothing here measures speed. Findings: feasibility.md beside the CSV.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fa2lab.switches import load  # noqa: E402

_V7 = load("v7_hopper")
_v7_softmax_step = _V7._online_softmax_step   # v6's update; HAS_WINDOW = False here
_v7_key_tiles = _V7._attend_key_tiles         # v7's key loop over (B, N, D) descriptors, PIPELINE_QK 0 or 1


# --------------------------------------------------------------------------- the kernel

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


# --------------------------------------------------------------------------- (d) Gluon: wgmma waits by hand

# Triton's own language has no knob for the wgmma waits (tl.dot takes input_precision,
# max_num_imprecise_acc, out_dtype; nothing async), and the pipeliner puts a pendings = 0 wait after
# every Q K^T (the variants above). Gluon (triton.experimental.gluon, shipped with 3.6) exposes the
# Hopper primitives: TMA copies on mbarriers, warpgroup_mma(is_async=True), warpgroup_mma_wait(n).
# The minimal forward below (non-causal, N a multiple of the tiles, BLOCK_N == D, a flattened
# (B*N, D) view, 3 K/V slots) issues Q K_j^T, then P_{j-1} V_{j-1} behind it, waits for one
# outstanding group (Q K_j^T done) and computes tile j's softmax while P_{j-1} V_{j-1} runs:
# FlashAttention-3's intra-warpgroup overlap. Compile evidence only: Gluon is not interpreted, and
# nothing here has run on a GPU.
try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                                  warpgroup_mma, warpgroup_mma_wait)
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - older Triton
    HAVE_GLUON = False

if HAVE_GLUON:
    # The TMA issue is the shared Gluon forward's (fa2triton/gluon/gluon_kernel.py, which grew out of this sketch):
    # one slot's K and V on its mbarrier; P in registers or a shared buffer (below).
    from fa2triton.gluon.gluon_kernel import _issue_kv as _gl_issue_kv

    @gluon.jit
    def _gl_p_operand(p, p_smem, buf_index, p_layout: gl.constexpr, P_SMEM: gl.constexpr):
        """P as the A operand of P V: registers, or shared buffer buf_index (the caller alternates two). The shared
        form is this experiment's own: the Gluon forward keeps P in registers."""
        if P_SMEM:
            buf = p_smem.index(buf_index)
            buf.store(p.to(p_smem.dtype))
            fence_async_shared()
            return buf
        else:
            return gl.convert_layout(p.to(p_smem.dtype), p_layout)

    @gluon.jit
    def fa_fwd_gluon(q_desc, k_desc, v_desc, o_desc, N, qk_scale,
                     OVERLAP: gl.constexpr, P_SMEM: gl.constexpr, num_warps: gl.constexpr):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        D: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        SLOTS: gl.constexpr = 3
        gl.static_assert(BLOCK_N == D)
        dtype: gl.constexpr = q_desc.dtype

        row0 = gl.program_id(1) * N
        q_row = row0 + gl.program_id(0) * BLOCK_M
        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], v_desc.layout)
        p_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N], q_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        bars = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for s in gl.static_range(SLOTS):
            mbarrier.init(bars.index(s), count=1)
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
        n_tiles = N // BLOCK_N
        for s in gl.static_range(SLOTS):
            if s < n_tiles:
                _gl_issue_kv(k_desc, v_desc, k_smem, v_smem, bars, row0 + s * BLOCK_N, s)

        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, BLOCK_N, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        acc = gl.zeros([BLOCK_M, D], gl.float32, mma)

        # tile 0: its scores and P (its P V is issued in the next iteration)
        mbarrier.wait(q_bar, 0)
        mbarrier.wait(bars.index(0), 0)
        s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        m_i = gl.max(s_ij, axis=1) * qk_scale
        p = gl.exp2(s_ij * qk_scale - gl.expand_dims(m_i, 1))
        l_i = gl.sum(p, axis=1)
        p_op = _gl_p_operand(p, p_smem, 0, p_layout, P_SMEM)

        for j in range(1, n_tiles):
            slot = j % SLOTS
            prev = (j - 1) % SLOTS
            mbarrier.wait(bars.index(slot), (j // SLOTS) & 1)
            s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            if OVERLAP:   # P_{j-1} V_{j-1} behind Q K_j^T; wait for Q K_j^T only
                acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
                s_ij = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
            else:         # what tl.dot's pipeliner does: everything done before the softmax
                s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
                acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            m_new = gl.maximum(m_i, gl.max(s_ij, axis=1) * qk_scale)
            alpha = gl.exp2(m_i - m_new)
            p = gl.exp2(s_ij * qk_scale - gl.expand_dims(m_new, 1))
            l_i = l_i * alpha + gl.sum(p, axis=1)
            m_i = m_new
            p_next = _gl_p_operand(p, p_smem, j % 2, p_layout, P_SMEM)
            if OVERLAP:
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            acc = acc * gl.expand_dims(alpha, 1)
            p_op = p_next
            # tile j-1's slot is free now that P_{j-1} V_{j-1} is done: tile j + 2 goes there
            if j + SLOTS - 1 < n_tiles:
                _gl_issue_kv(k_desc, v_desc, k_smem, v_smem, bars, row0 + (j + SLOTS - 1) * BLOCK_N, prev)

        acc = warpgroup_mma(p_op, v_smem.index((n_tiles - 1) % SLOTS), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.invalidate(q_bar)
        for s in gl.static_range(SLOTS):
            mbarrier.invalidate(bars.index(s))
        acc = acc / gl.expand_dims(l_i, 1)
        o_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], o_desc.layout)
        o_smem.store(acc.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [q_row, 0], o_smem)
        tma.store_wait(pendings=0)


GLUON_VARIANTS = {
    "gluon_serial": (dict(OVERLAP=False, P_SMEM=False),
                     "(d) Gluon, waits as tl.dot's pipeliner places them (reference for the two below)"),
    "gluon_overlap_p_regs": (dict(OVERLAP=True, P_SMEM=False),
                             "(d) Gluon, wait(1) after Q K_j^T, softmax, wait(0); P in registers"),
    "gluon_overlap_p_smem": (dict(OVERLAP=True, P_SMEM=True),
                             "(d) Gluon, the same with P through two shared buffers"),
}


def compile_gluon_variant(name: str, q_tile=128, k_tile=64, num_warps=8, num_stages=1, causal=False, N=4096, D=64,
                          BH=32):
    """fa_fwd_gluon compiled offline for sm_90 (fa2lab.compile_offline.compile_for_target takes Gluon
    functions too) over 'meta' tensors: flattened (B*N, D) descriptors, O's block Q's."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    from fa2lab.compile_offline import compile_for_target

    if causal:
        raise NotImplementedError("the minimal Gluon forward is non-causal only")
    flat = torch.empty(BH * N, D, dtype=torch.bfloat16, device="meta")

    def desc(tile):
        layout = gl.NVMMASharedLayout.get_default_for([tile, D], gl.bfloat16)
        return GluonDescriptor(flat, list(flat.shape), list(flat.stride()), [tile, D], layout)

    args = (desc(q_tile), desc(k_tile), desc(k_tile), desc(q_tile), N, 1.4426950408889634 / math.sqrt(D))
    return compile_for_target(fa_fwd_gluon, args, arch=90, num_warps=num_warps, num_stages=num_stages,
                              **GLUON_VARIANTS[name][0])


def ex2_while_wgmma_pending(sass: str, loop: dict) -> int:
    """MUFU.EX2 of one loop iteration issued while a warpgroup MMA is in flight: after an HGMMA and
    before the `WARPGROUP.DEPBAR.LE gsb0, 0x0` that retires it (a wait for N >= 1 groups leaves it in
    flight). The loop is walked twice, so an MMA left running across the back edge counts too. This is
    the softmax work that can overlap a matrix product, whoever scheduled it there (Triton or ptxas)."""
    from profiling import ir

    start, end = int(loop["start"], 16), int(loop["end"], 16)
    body = [i for i in ir.sass_instructions(sass) if start <= i["addr"] <= end]
    inflight, n = False, 0
    for lap in (0, 1):
        for i in body:
            if i["op"].startswith("HGMMA"):
                inflight = True
            elif i["op"].startswith("WARPGROUP.DEPBAR") and i["args"].replace(" ", "").endswith(",0x0"):
                inflight = False
            elif lap and inflight and i["op"] == "MUFU.EX2":
                n += 1
    return n


# --------------------------------------------------------------------------- summaries

def wgmma_waits(ttgir: str) -> list[int]:
    """The `pendings` of every ttng.warp_group_dot_wait in the TTGIR."""
    return [int(m) for m in re.findall(r"ttng\.warp_group_dot_wait[^\n]*?pendings\s*=\s*(\d+)", ttgir)]


def ptxas_warnings(ptx: str) -> str:
    """ptxas's 'Potential Performance Loss' notes (C7515: wgmma serialized, and the like), run with
    the flags Triton uses for sm_90a."""
    import subprocess
    import tempfile

    from fa2lab.compile_offline import tool_path

    exe = tool_path("ptxas", 90)
    if not exe:
        return "ptxas unavailable"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        p = subprocess.run([exe, "-lineinfo", "-v", "--gpu-name=sm_90a", str(src), "-o", str(Path(d) / "k.cubin")],
                           capture_output=True, text=True, timeout=120)
    notes = [ln.split("ptxas info    :")[-1].strip() for ln in (p.stdout + p.stderr).splitlines()
             if "Performance Loss" in ln]
    return " | ".join(notes)


def summarise(compiled) -> dict:
    from profiling import ir
    from profiling.inspect_kernel import disassemble, ptxas_verbose, resource_usage

    ttgir, ptx, cubin = compiled.asm["ttgir"], compiled.asm["ptx"], compiled.asm["cubin"]
    sass, _ = disassemble(cubin)
    res = resource_usage(cubin)
    ptxas = ptxas_verbose(ptx, 90, bool(compiled.metadata.enable_fp_fusion), cubin)
    loops = ir.sass_loops(sass) if sass else []
    inner = [lp for lp in loops if lp["innermost"]]
    tg = ir.summarize_ttgir(ttgir)
    kernel_counts = ir.sass_opcode_counts(sass) if sass else {}
    ops = ir.op_counts(ir.strip_locations(ttgir).splitlines())
    # the key loop that runs most at N = 4096: the first innermost SASS loop (address order) with HGMMA
    # (HMMA for mma.sync configurations), i.e. the unmasked loop (the spin loops of mbarrier try-waits are
    # innermost too, but hold neither)
    hot = next((lp for lp in inner if lp["counts"].get("HGMMA", 0)), None) or \
        next((lp for lp in inner if lp["counts"].get("HMMA", 0)), None)   # fewer than 4 warps: mma.sync
    hc = hot["counts"] if hot else {}
    overlap = ex2_while_wgmma_pending(sass, hot) if (hot and sass) else None
    return {
        "registers": res.get("REG"), "spill_bytes": res.get("LOCAL", 0),
        "ptxas_registers": ptxas.get("registers"), "ptxas_spill_stores": ptxas.get("spill_stores"),
        "ptxas_spill_loads": ptxas.get("spill_loads"), "stack_bytes": res.get("STACK"),
        "shared_bytes": int(compiled.metadata.shared),
        "ptxas_perf_warnings": ptxas_warnings(ptx),
        "global_scratch_bytes": int(getattr(compiled.metadata, "global_scratch_size", 0) or 0),
        "num_warps_total": int(compiled.metadata.num_warps),
        "mma": ",".join(m["instruction"].split(" ")[0] for m in tg["mma_layouts"]),
        "warp_specialize_ops": ops.get("ttg.warp_specialize", 0),
        "ttgir_tma_loads": ops.get("ttng.async_tma_copy_global_to_local", 0),
        "ttgir_cp_async": ops.get("ttg.async_copy_global_to_local", 0),
        "wgmma_wait_pendings": "/".join(map(str, wgmma_waits(ttgir))),
        "sass_loops": len(loops), "sass_inner_loops": len(inner),
        "loop_instructions": hot["instructions"] if hot else None,
        "loop_ex2_while_wgmma_inflight": overlap,
        **{f"loop_{k}": hc.get(k, 0) for k in ("HGMMA", "HMMA", "UTMALDG", "UBLKCP", "LDGSTS", "BAR.SYNC", "SYNCS",
                                               "WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "MUFU.EX2")},
        **{f"kernel_{k}": kernel_counts.get(k, 0) for k in ("HGMMA", "UTMALDG", "UBLKCP", "LDGSTS", "BAR.SYNC",
                                                            "SYNCS", "LDL", "STL")},
        "all_loops": loops,
    }


CSV_FIELDS = ["variant", "feature", "config", "causal", "compiles", "error", "interpreter_check",
              "registers", "spill_bytes", "ptxas_spill_stores", "ptxas_spill_loads", "stack_bytes",
              "ptxas_perf_warnings", "shared_bytes", "global_scratch_bytes",
              "num_warps_total", "mma", "warp_specialize_ops", "ttgir_tma_loads", "ttgir_cp_async",
              "wgmma_wait_pendings", "sass_loops", "sass_inner_loops", "loop_instructions",
              "loop_ex2_while_wgmma_inflight", "loop_HGMMA", "loop_HMMA", "loop_UTMALDG", "loop_UBLKCP", "loop_LDGSTS",
              "loop_BAR.SYNC", "loop_SYNCS", "loop_WARPGROUP.DEPBAR", "loop_WARPGROUP.ARRIVE", "loop_MUFU.EX2",
              "kernel_HGMMA", "kernel_UTMALDG", "kernel_UBLKCP", "kernel_LDGSTS", "kernel_BAR.SYNC", "kernel_SYNCS",
              "kernel_LDL", "kernel_STL", "triton", "ptxas", "git_commit", "date"]


# --------------------------------------------------------------------------- interpreter check

def interpreter_check(name: str) -> str:
    """Run the variant under the interpreter (a child process: TRITON_INTERPRET must precede the import)
    on ragged shapes, against the float64 reference. Returns 'ok', 'wrong: ...' or 'error: ...'."""
    import subprocess

    code = f"""
import os, sys, torch, math
os.environ['TRITON_INTERPRET'] = '1'
sys.path.insert(0, {str(REPO)!r})
from fa2triton.interpret import patch_interpreter
patch_interpreter()
sys.path.insert(0, {str(REPO / 'experiments')!r})
import v7_feasibility as f
from fa2triton.reference import attention, relative_error
sw, _ = f.VARIANTS[{name!r}]
worst = 0.0
for (B, nq, nk, causal) in [(2, 96, 80, False), (2, 80, 80, True), (1, 130, 130, True)]:
    g = torch.Generator().manual_seed(nq + nk)
    Q, K, V = (torch.randn(B, n, 32, generator=g).to(torch.bfloat16) for n in (nq, nk, nk))
    O = torch.empty_like(Q); L = torch.empty(B, nq)
    args = f.tensors_to_args(sw, Q, K, V, O, L, 32, 16)
    grid = (3,) if sw['PERSISTENT'] else (B, math.ceil(nq / 32))
    f.fa_fwd_variant[grid](*args, D=32, Q_TILE=32, K_TILE=16, CAUSAL=causal, NUM_PROGRAMS=3, **sw)
    ref_O, ref_L = attention(Q, K, V, causal)
    worst = max(worst, relative_error(O, ref_O), (L.double() - ref_L).abs().max().item())
print('RESULT', worst)
"""
    env = {k: v for k, v in os.environ.items()}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    m = re.search(r"RESULT (\S+)", p.stdout)
    if not m:
        return "error: " + (p.stderr.strip().splitlines() or ["?"])[-1][:200]
    worst = float(m.group(1))
    return "ok" if worst < 2e-2 else f"wrong: max error {worst:.3g}"


# --------------------------------------------------------------------------- main

def compile_v6_reference(q_tile, k_tile, num_warps, num_stages, causal, N=4096, D=64, BH=32):
    """v6_longest_first's own kernel, compiled the same way: the reference the variants differ from."""
    import torch

    from fa2lab.compile_offline import compile_for_target
    from fa2lab.switches import load

    st3 = (N * D, D, 1)
    args = (torch.bfloat16,) * 4 + (torch.float32,) + st3 * 4 + (N, 1, N, N, 0, 1.0 / math.sqrt(D))
    return compile_for_target(load("v6_longest_first").flash_fwd_kernel, args, arch=90, num_warps=num_warps,
                              num_stages=num_stages, D=D, Q_TILE_SIZE=q_tile, K_TILE_SIZE=k_tile,
                              is_causal=causal, HAS_WINDOW=False, HEAD_MAJOR=True, REVERSE=True, P_CAST=0)


def compile_v7(q_tile, k_tile, num_warps, num_stages, causal, pipeline_qk, N=4096, D=64, BH=32):
    """v7_hopper's own TMA kernel, through the arguments it gives profiling/inspect_kernel.py."""
    from fa2triton.budget import Config
    from fa2lab.compile_offline import compile_for_target
    from fa2lab.switches import load

    module = load("v7_hopper")
    args, extra = module.offline_compile_args(N, D, "bf16", BH, Config(q_tile, k_tile, num_warps, num_stages), causal,
                                              pipeline_qk=pipeline_qk)
    return compile_for_target(module.flash_fwd_kernel, args, arch=90, num_warps=num_warps, num_stages=num_stages,
                              D=D, Q_TILE_SIZE=q_tile, K_TILE_SIZE=k_tile, is_causal=causal, **extra)


V7_ROWS = {"v7_hopper_pipelined": 1, "v7_hopper_plain": 0}


def child(name: str, config: str, causal: int) -> int:
    """Compile one (variant, configuration, mask) and print its summary as JSON (run in a child process,
    so that a compiler abort or an MLIR error written to stderr is captured by the parent)."""
    q, k, w, st = (int(x) for x in config.split(","))
    if name == "v6_reference":
        compiled = compile_v6_reference(q, k, w, st, bool(causal))
    elif name in GLUON_VARIANTS:
        compiled = compile_gluon_variant(name, q, k, w, st, bool(causal))
    elif name in V7_ROWS:
        compiled = compile_v7(q, k, w, st, bool(causal), V7_ROWS[name])
    else:
        compiled = compile_variant(name, q, k, w, st, bool(causal))
    print("JSON" + json.dumps(summarise(compiled), default=str))
    return 0


ERROR_MARKERS = ("error", "unreachable", "assertion", "unsupported", "failed", "not supported")


def compile_in_child(name: str, config: str, causal: int) -> tuple[dict | None, str]:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, __file__, "--child", name, config, str(causal)], capture_output=True,
                       text=True, env=env, timeout=600, cwd=REPO)
    for ln in p.stdout.splitlines():
        if ln.startswith("JSON"):
            return json.loads(ln[4:]), ""
    # the compiler's own words: MLIR diagnostics, LLVM UNREACHABLE/assertion lines, the Python exception
    lines = [ln.strip() for ln in p.stderr.splitlines()
             if any(m in ln.lower() for m in ERROR_MARKERS) and not ln.startswith(("  ", "\t"))]
    lines = [ln.replace(str(REPO) + "/", "") for ln in lines]
    if p.returncode < 0:
        lines.append(f"(child killed by signal {-p.returncode})")
    return None, " | ".join(dict.fromkeys(lines))[:1500] or p.stderr[-800:]


DEFAULT_PLAN = [
    # (variant, configurations)
    ("v6_reference", "128,64,8,3;128,64,8,4;64,64,4,3;128,128,4,3"),
    ("pointers", "128,64,8,3;128,64,8,4;64,64,4,3"),
    ("host_desc_2d", "128,64,8,3"),
    ("host_desc_3d", "128,64,8,3;128,64,8,4;64,64,4,3;128,128,8,2;128,128,4,3"),
    ("device_desc", "128,64,8,3"),
    ("desc3d_loop_stages", "128,64,8,3"),
    ("desc3d_warp_spec", "128,64,8,3;128,64,4,3;64,64,4,3"),
    ("pointers_warp_spec", "128,64,8,3;128,64,4,3;64,64,4,3"),
    ("desc3d_persistent", "128,64,8,3;64,64,4,3"),
    ("desc3d_persistent_warp_spec", "128,64,8,3;64,64,4,3"),
    ("desc3d_pipeline_qk", "128,64,8,3;128,64,8,4;64,64,4,3;64,64,4,2;128,128,8,2"),
    ("pointers_pipeline_qk", "128,64,8,3;64,64,4,3"),
    ("v7_hopper_pipelined", "128,64,8,4;64,64,4,3"),
    ("v7_hopper_plain", "128,64,8,4;64,64,4,3"),
    ("gluon_serial", "128,64,8,1"),
    ("gluon_overlap_p_regs", "128,64,8,1"),
    ("gluon_overlap_p_smem", "128,64,8,1"),
]
GLUON_NOT_INTERPRETED = ("n/a: Gluon kernels are not interpreted (under TRITON_INTERPRET=1 the launch still asks "
                         "for the CUDA driver: RuntimeError: 0 active drivers ([]). There should only be one.)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated variant names (default: the plan, all)")
    ap.add_argument("--configs", default="",
                    help="semicolon-separated Q,K,WARPS,STAGES (default: each variant's configurations in the plan)")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--check", action="store_true", help="also run each variant under the interpreter")
    ap.add_argument("--out", default=str(REPO / "results" / "offline-sm_90" / "v7_feasibility"))
    ap.add_argument("--v7-candidates", action="store_true",
                    help="instead of the plan: v7_hopper's own kernel for every sm_90 candidate of its configs.json "
                         "(both PIPELINE_QK values, both masks), into v7_candidates.csv")
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "CONFIG", "CAUSAL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))

    from fa2lab.provenance import environment, now
    from profiling.inspect_kernel import _tool_version

    only = [n for n in args.only.split(",") if n]
    plan = [(n, args.configs or c) for n, c in DEFAULT_PLAN if not only or n in only]
    csv_name = "feasibility.csv"
    if args.v7_candidates:
        from fa2triton.configs import load_table
        from fa2triton.versions import get

        table = load_table(get("v7_hopper").folder / "configs.json")
        configs = ";".join(",".join(map(str, c)) for c in table["arches"]["sm_90"]["configs"])
        plan, csv_name = [(n, configs) for n in V7_ROWS], "v7_candidates.csv"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    rows, details = [], {}
    for name, configs in plan:
        if name == "v6_reference":
            feature, check = "reference: v6_longest_first's own kernel", ""
        elif name in V7_ROWS:
            feature = (f"v7_hopper's own kernel, PIPELINE_QK={V7_ROWS[name]} "
                       "(interpreter: tests/test_v7.py and the harness)")
            check = ""
        elif name in GLUON_VARIANTS:
            feature, check = GLUON_VARIANTS[name][1], GLUON_NOT_INTERPRETED if args.check else ""
        else:
            feature, check = VARIANTS[name][1], interpreter_check(name) if args.check else ""
        masks = [int(c) for c in args.causal.split(",")]
        if name in GLUON_VARIANTS:
            masks = [m for m in masks if m == 0]   # written non-causal only
        for config in (c for c in configs.split(";") if c):
            for causal in masks:
                row = {"variant": name, "feature": feature, "config": config, "causal": causal,
                       "interpreter_check": check, "triton": triton.__version__, "ptxas": _tool_version("ptxas", 90),
                       "git_commit": env.get("git_commit"), "date": now()}
                summ, error = compile_in_child(name, config, causal)
                if summ is not None:
                    details[f"{name} {config} causal={causal}"] = summ.pop("all_loops")
                    row.update(compiles="yes", error="", **summ)
                else:
                    row.update(compiles="no", error=error)
                rows.append(row)
                print(f"{name:28s} {config:12s} c={causal} {row['compiles']:3s} "
                      f"loop HGMMA/UTMALDG/LDGSTS/BAR/SYNCS/DEPBAR = {row.get('loop_HGMMA')}/"
                      f"{row.get('loop_UTMALDG')}/{row.get('loop_LDGSTS')}/{row.get('loop_BAR.SYNC')}/"
                      f"{row.get('loop_SYNCS')}/{row.get('loop_WARPGROUP.DEPBAR')} "
                      f"waits={row.get('wgmma_wait_pendings')} "
                      f"ex2-overlap={row.get('loop_ex2_while_wgmma_inflight')} "
                      f"ws={row.get('warp_specialize_ops')} regs={row.get('registers')} smem={row.get('shared_bytes')} "
                      f"{row.get('ptxas_perf_warnings', '')[:40]} {check} {row['error'][:300]}", flush=True)
    path = out / csv_name
    with path.open("w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
    loops_path = out / csv_name.replace(".csv", "_sass_loops.json").replace("feasibility_", "")
    loops_path.write_text(json.dumps(details, indent=1, default=str) + "\n")
    print(f"wrote {path} and {loops_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
