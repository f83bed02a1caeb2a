"""v7 feasibility's Gluon sketch (experiments/v7_feasibility.py compiles it): a minimal forward whose wgmma waits are
placed by hand.

Triton's own language has no knob for the wgmma waits (tl.dot takes input_precision, max_num_imprecise_acc,
out_dtype; nothing async), and the pipeliner puts a pendings = 0 wait after every Q K^T (feasibility_tl's variants).
Gluon (triton.experimental.gluon, shipped with 3.6) exposes the Hopper primitives: TMA copies on mbarriers,
warpgroup_mma(is_async=True), warpgroup_mma_wait(n). The forward here (non-causal, N a multiple of the tiles,
BLOCK_N == D, a flattened (B*N, D) view, 3 K/V slots) issues Q K_j^T, then P_{j-1} V_{j-1} behind it, waits for one
outstanding group (Q K_j^T done) and computes tile j's softmax while P_{j-1} V_{j-1} runs: FlashAttention-3's
intra-warpgroup overlap. Compile evidence only: Gluon is not interpreted, and nothing here has run on a GPU.
"""

from __future__ import annotations

import math

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
