"""The whole FlashAttention backward's main pass as a warp-specialized Gluon kernel for Hopper (sm_90): dK, dV and
every dQ partial in one pass, five products per (key tile, query tile) pair.

Round 3 of the backward's log (docs/worklogs/backward_hopper.md), in flash-attn-4's sm90 shape (flash_bwd_sm90.py):
one CTA per (BLOCK_N = 128 keys, batch * head), a loader warp and two consumer warpgroups of 64 keys each. The math
(L's units, Delta, the scale, the top-left causal mask) is gluon_backward_hopper's (round 1):

    P^T  = exp2(S^T * qk_scale - L * log2(e)),  S^T = K Q^T
    dP^T = V dO^T - Delta,  dS^T = P^T * dP^T
    dV  += P^T dO,  dK += dS^T Q   (RS wgmma: P^T and dS^T from registers)
    dQ  += scale * dS K            (SS wgmma: dS from shared memory; fp32, cast by the caller)

The loader copies K and V once, then per query tile Q and dO by TMA into a ring of SLOTS slots, with the tile's L
(times log2 e) and Delta in the slot's row buffers before its expect; a slot is refilled once both consumers released
it. Consumer w owns keys [k_start + 64 w, k_start + 64 (w + 1)): per query tile it computes S^T, dP^T, P^T and dS^T,
issues dV and dK, writes dS^T into its half of a shared dS tile (two buffers, each written again only after both
consumers passed the next tile's mbarrier); once both halves are in, it computes its share of the tile's dQ partial
over all 128 keys and reduce-adds it (TMA, fp32) into the caller's (heads, N_q, D) accumulator, whose bounds stop
the ragged tile at its head's end. The share: split by columns (64-query tiles), columns [w D / 2, (w + 1) D / 2)
of the tile's queries; split by rows (ROW_SPLIT_HEAD_DIMS, 128-query tiles), queries [64 w, 64 (w + 1)), all of D,
with L read after S^T's wait so the larger tile does not spill, and its tail masked by the loader, off that wait's
path. The reduce-adds land in any order: dQ is not bitwise reproducible (dq_mode "separate" is). dq_mode "auto" takes
this kernel where `preferred` says, except under torch.use_deterministic_algorithms(True).

Rows past a head's N in the K and V tiles are the next head's (or TMA's zeros): their dK, dV rows are not stored, and
where N is not a multiple of BLOCK_N (even_keys) their dS^T rows are zeroed before dS leaves the registers. Query
columns past N_q get L = +inf, hence P^T = dS^T = 0 there.
"""

import math

import torch

from fa2triton.gluon import gluon_backward_hopper as _r1
from fa2triton.lean_path import run_compiled, templates
from fa2triton import tile_order

HAVE_GLUON = _r1.HAVE_GLUON
validate_inputs = _r1.validate
HEAD_DIMS, DTYPES = _r1.HEAD_DIMS, _r1.DTYPES

if HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.language.core import _aggregate as aggregate

    from fa2triton.gluon import gluon_ptx as _gluon_ptx, hopper as _hw
    from fa2triton.triton_compat import ptx_options, tma_load, tma_reduce_add

    LOG2E = _hw.LOG2E
    wgmma_layout, slot_of, ready_phase, empty_phase = _hw.wgmma_layout, _hw.slot_of, _hw.ready_phase, _hw.empty_phase

BLOCK_N = 128         # keys per CTA, 64 per consumer
BLOCK_M = 64          # queries per streamed tile
CONSUMERS = 2
DS_BUFFERS = 2
# The Q / dO / L / Delta ring. Three slots were measured and retired: docs/experiments.md, row bwd-gluon-ws-slots.
SLOTS = 2
CONSUMER_REGS = 240
LOADER_REGS = 24
NUM_WARPS = 4         # the default partition: consumer 0
# Head dimensions whose consumers release their slot and wait for dS without the bar.sync of their 4 warps that
# Triton puts before each (the forward's marked arrives). Graph replay against the synced form, experiment
# bwd-gluon-ws at 17b5ce8: 1.1-3.2% faster at D = 128 non-causal N >= 2048, 3.5-6.4% slower at D = 64 non-causal
# (docs/worklogs/backward_hopper.md, "Round 5").
UNSYNCED_HEAD_DIMS = (128,)
# Head dimensions that stream 128 queries per tile with dQ split by rows (flash-attn-4's shape at D = 64: each
# consumer computes its 64 queries' dQ over all 128 keys, one reduce-add of 64 x D), where the others stream 64 with
# dQ split by columns (at D = 128 the 128-query ring does not fit in shared memory). Graph replay in the same process
# (experiment bwd-gluon-ws, N = 2048 and 4096, both masks; docs/worklogs/backward_hopper.md, "Round 12" and "Round
# 14"): the row split takes 0.93-0.95 of the column split's time under Triton 3.6 (the /cs rows at a8192a4) and
# 0.95-0.99 under 3.9 (the /rs rows at ed6d9aa).
ROW_SPLIT_HEAD_DIMS = (64,)


if HAVE_GLUON:
    _LOG2E = _hw.LOG2E_C
    _DS_BUFFERS, _CONSUMERS, _SLOTS = gl.constexpr(DS_BUFFERS), gl.constexpr(CONSUMERS), gl.constexpr(SLOTS)
    _CONSUMER_REGS, _LOADER_REGS = gl.constexpr(CONSUMER_REGS), gl.constexpr(LOADER_REGS)
    _DESCRIPTOR_ASM, _DESCRIPTOR_ADDS = _r1._DESCRIPTOR_ASM, _r1._DESCRIPTOR_ADDS
    _MARK_ASM = gl.constexpr(_gluon_ptx.MARK_ASM)
    NO_MASK, TAIL, DIAGONAL = _r1.NO_MASK, _r1.TAIL, _r1.DIAGONAL
    _own_registers, _store_tile = _r1._own_registers, _r1._store_tile
    _issue_scores, _probs_and_dv, _query_ranges = _r1._issue_scores, _r1._probs_and_dv, _r1._query_ranges

    @aggregate
    class Flags:
        """The kernel's compile-time choices, as the partitions see them (compile_time's, and BY_ROWS from the dQ
        descriptor's block): in an aggregate they stay constexprs, where inside a tuple Triton 3.6 passes them as int1
        values, so that an `if` on one would emit both branches (and the shared-memory analysis a bar.sync for the one
        never taken)."""
        CAUSAL: gl.constexpr
        UNSYNCED: gl.constexpr
        EVEN_KEYS: gl.constexpr
        BY_ROWS: gl.constexpr   # dQ split by rows (ROW_SPLIT_HEAD_DIMS), read from the dQ descriptor's block

        @gluon.constexpr_function
        def __init__(self, CAUSAL, UNSYNCED, EVEN_KEYS, BY_ROWS):
            self.CAUSAL = gl.constexpr(CAUSAL)
            self.UNSYNCED = gl.constexpr(UNSYNCED)
            self.EVEN_KEYS = gl.constexpr(EVEN_KEYS)
            self.BY_ROWS = gl.constexpr(BY_ROWS)

    # ------------------------------------------------------------------------------------------ the loader

    @gluon.jit
    def _loader(descs, smem, bars, rows, sizes, flags):
        """K and V once, then the CTA's query tiles round the ring: Q and dO by TMA, and the tile's L (times
        log2(e)) and Delta by plain loads into the slot's row buffers, stored before the slot's expect so that its
        completion also publishes them."""
        q_desc, k_desc, v_desc, do_desc = descs
        k_smem, v_smem, q_smem, do_smem, l_smem, delta_smem = smem
        kv_bar, ready, empty = bars
        L_ptr, Delta_ptr, stride_l_head, stride_delta_head = rows
        N_QUERIES, N_KEYS = sizes
        SLOTS: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        tile, head = _hw.key_tile_and_head(gl.cdiv(N_KEYS, k_smem.shape[0]), flags.CAUSAL)
        k_start = tile * k_smem.shape[0]
        k_row = head * N_KEYS + k_start
        mbarrier.expect(kv_bar.index(0), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma_load(k_desc, [k_row, 0], kv_bar.index(0), k_smem)
        tma_load(v_desc, [k_row, 0], kv_bar.index(0), v_smem)
        lo = _query_ranges(k_start, k_smem.shape[0], BLOCK_M, N_QUERIES, flags.CAUSAL)[0]
        offs = gl.arange(0, BLOCK_M, layout=gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0]))
        L_ptr = L_ptr + head.to(gl.int64) * stride_l_head   # base offsets in 64 bits: a tensor may pass 2^31
        Delta_ptr = Delta_ptr + head.to(gl.int64) * stride_delta_head   # elements
        for t in range(gl.cdiv(N_QUERIES - lo, BLOCK_M)):
            slot = slot_of(t, SLOTS)
            q_start = lo + t * BLOCK_M
            cols = gl.minimum(q_start + offs, N_QUERIES - 1)   # past N_QUERIES: the last query's, L masked below
            l2 = gl.load(L_ptr + cols) * _LOG2E
            if flags.BY_ROWS:   # +inf past N_QUERIES here, off the consumers' path (by columns they mask it)
                l2 = gl.where(q_start + offs < N_QUERIES, l2, float("inf"))
            delta = gl.load(Delta_ptr + cols)
            mbarrier.wait(empty.index(slot), empty_phase(t, SLOTS), pred=t >= SLOTS)
            l_smem.index(slot).store(l2)
            delta_smem.index(slot).store(delta)
            bar = ready.index(slot)
            row = head * N_QUERIES + q_start
            mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
            tma_load(q_desc, [row, 0], bar, q_smem.index(slot))
            tma_load(do_desc, [row, 0], bar, do_smem.index(slot))

    # ------------------------------------------------------------------------------------------ one query tile

    @gluon.jit
    def _unsynced(UNSYNCED: gl.constexpr):
        """With UNSYNCED, gluon_ptx.UNSYNCED_MARK right after the mbarrier operation before it, so that
        drop_marked_syncs removes the bar.sync of the consumer's 4 warps Triton put before that operation."""
        if UNSYNCED:
            _hw.mark(_MARK_ASM)

    @gluon.jit
    def _release_slot(t, q_smem, empty, UNSYNCED: gl.constexpr):
        """Query tile t's slot released, once every product that reads it is waited for."""
        mbarrier.arrive(empty.index(slot_of(t, q_smem.shape[0])), count=1)
        _unsynced(UNSYNCED)   # after the wgmma wait: every read of the slot is done (one operation)

    @gluon.jit
    def _send_dq(dq, q_start, wg, dq_smem, dq_desc, head, scale, flags):
        """This consumer's share of a tile's dQ partial (its columns, or split by rows its queries) scaled and
        reduce-added (TMA) from the consumer's fp32 buffer."""
        ROWS: gl.constexpr = dq_smem.shape[2]   # the tile's queries, or (split by rows) this consumer's half of them
        COLS: gl.constexpr = dq_smem.shape[3]   # D / 2 (split by columns) or D
        tma.store_wait(0)                       # this consumer's previous reduce-add has read its buffer
        dq_buf = dq_smem.index(wg)
        dq_buf.reshape([ROWS, COLS]).store(dq * scale)
        fence_async_shared()
        if flags.BY_ROWS:
            tma_reduce_add(dq_desc, [head, q_start + wg * ROWS, 0], dq_buf)
        else:
            tma_reduce_add(dq_desc, [head, q_start, wg * COLS], dq_buf)

    @gluon.jit
    def _exchange_and_dq(dsT, t, wg, smem, bars, flags):
        """This consumer's dS^T into its rows of the shared tile (buffer t % DS_BUFFERS); once both halves are in,
        its share of the tile's dQ = dS K issued over all 128 keys (split by rows: its 64 queries, all of D; by
        columns: its D / 2 columns, all the tile's queries). Returns dQ's token."""
        k_smem, ds_smem, dq_smem = smem[0], smem[4], smem[5]
        ds_bar = bars[3]
        ROWS: gl.constexpr = ds_smem.shape[1] // 2     # one consumer's keys
        DQ_ROWS: gl.constexpr = dq_smem.shape[2]
        DQ_COLS: gl.constexpr = dq_smem.shape[3]
        b = slot_of(t, _DS_BUFFERS)
        ds_smem.index(b).slice(wg * ROWS, ROWS, dim=0).store(dsT)
        fence_async_shared()
        mbarrier.arrive(ds_bar.index(b), count=1)
        mbarrier.wait(ds_bar.index(b), ready_phase(t, _DS_BUFFERS))
        _unsynced(flags.UNSYNCED)   # each thread waits for both halves itself
        zero = gl.zeros([DQ_ROWS, DQ_COLS], gl.float32, wgmma_layout(4, DQ_COLS))
        if flags.BY_ROWS:
            dq_tok = warpgroup_mma(ds_smem.index(b).permute((1, 0)).slice(wg * DQ_ROWS, DQ_ROWS, dim=0), k_smem,
                                   zero, use_acc=False, is_async=True)
        else:
            dq_tok = warpgroup_mma(ds_smem.index(b).permute((1, 0)), k_smem.slice(wg * DQ_COLS, DQ_COLS, dim=1),
                                   zero, use_acc=False, is_async=True)
        return dq_tok

    @gluon.jit
    def _query_tile(dk, dv, t, q_start, wg, smem, bars, dq_desc, head, k_start, N_QUERIES, N_KEYS, qk_scale, scale,
                    MASK: gl.constexpr, flags):
        """Consumer wg's share of query tile t ([q_start, q_start + BLOCK_M)): dK, dV folded in, its share of the
        tile's dQ partial reduce-added. MASK as in gluon_backward_hopper._query_tile; flags.EVEN_KEYS: N_KEYS is a
        multiple of the CTA's keys, so no key row needs zeroing; flags.BY_ROWS: dQ split by rows."""
        k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, l_smem, delta_smem = smem
        ready, empty = bars[1], bars[2]
        SLOTS: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        D: gl.constexpr = q_smem.shape[2]
        ROWS: gl.constexpr = ds_smem.shape[1] // 2     # one consumer's keys
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = wgmma_layout(4, BLOCK_M)
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=wgmma_layout(4, D), k_width=2)
        col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        my_k = k_smem.slice(wg * ROWS, ROWS, dim=0)
        my_v = v_smem.slice(wg * ROWS, ROWS, dim=0)
        key0 = k_start + wg * ROWS

        slot = slot_of(t, SLOTS)
        cols = gl.arange(0, BLOCK_M, layout=col_s)
        mbarrier.wait(ready.index(slot), ready_phase(t, SLOTS))
        if not flags.BY_ROWS:   # L now, +inf past N_QUERIES; split by rows after S^T's wait, as the loader masked it
            l2 = l_smem.index(slot).load(col_s)
            if MASK != NO_MASK:
                l2 = gl.where(cols < N_QUERIES - q_start, l2, float("inf"))
        zero = gl.zeros([ROWS, BLOCK_M], gl.float32, s_layout)
        dp_init = _own_registers(zero - gl.expand_dims(delta_smem.index(slot).load(col_s), 0))
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        # S^T, dP^T, P^T and dV issued, round 1's (key key0 + r sees query q_start + c iff r <= c + (q_start - key0))
        s_tok, dp_tok = _issue_scores(my_k, my_v, q_tile, do_tile, zero, dp_init)
        sT = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
        if flags.BY_ROWS:   # (128 queries' L in registers across the wait spill)
            l2 = l_smem.index(slot).load(col_s)
        pT, dpT, dv_tok = _probs_and_dv(sT, dp_tok, do_tile, l2, dv, qk_scale, cols, q_start - key0, MASK)

        # dS^T, its rows of keys past N_KEYS zeroed where a key tile can be ragged (they must add nothing to dQ; their
        # dK rows are not stored)
        if flags.EVEN_KEYS:
            dsT = (pT * dpT).to(dtype)
        else:
            rows = gl.arange(0, ROWS, layout=row_s)
            dsT = gl.where(gl.expand_dims(rows < N_KEYS - key0, 1), pT * dpT, 0.0).to(dtype)
        dk_tok = warpgroup_mma(gl.convert_layout(dsT, a_layout), q_tile, dk, is_async=True)         # dK += dS^T Q
        dq_tok = _exchange_and_dq(dsT, t, wg, smem, bars, flags)
        dv, dk, dq = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, dq_tok))
        _release_slot(t, q_smem, empty, flags.UNSYNCED)
        _send_dq(dq, q_start, wg, dq_smem, dq_desc, head, scale, flags)
        return dk, dv

    @gluon.jit
    def _query_range(dk, dv, start, stop, lo, wg, smem, bars, dq_desc, head, k_start, N_QUERIES, N_KEYS, qk_scale,
                     scale, MASK: gl.constexpr, flags):
        """The query tiles [start, stop) (multiples of BLOCK_M from lo), all with one MASK."""
        BLOCK_M: gl.constexpr = smem[2].shape[1]
        for q_start in range(start, stop, BLOCK_M):
            dk, dv = _query_tile(dk, dv, (q_start - lo) // BLOCK_M, q_start, wg, smem, bars, dq_desc, head, k_start,
                                 N_QUERIES, N_KEYS, qk_scale, scale, MASK, flags)
        return dk, dv

    @gluon.jit
    def _consumer(wg, smem, bars, dq_desc, out, sizes, scales, flags):
        """Consumer wg: its 64 keys' dK and dV over the CTA's query tiles (the three ranges of round 1), then their
        stores."""
        k_smem = smem[0]
        q_smem = smem[2]
        kv_bar = bars[0]
        dK_ptr, dV_ptr, stride_dk_row, stride_dv_row = out
        N_QUERIES, N_KEYS = sizes
        qk_scale, scale = scales
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        D: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[0]
        ROWS: gl.constexpr = BLOCK_N // 2
        o_layout: gl.constexpr = wgmma_layout(4, D)
        tile, head = _hw.key_tile_and_head(gl.cdiv(N_KEYS, BLOCK_N), flags.CAUSAL)
        k_start = tile * BLOCK_N

        lo, diag_stop, full_stop, tail_start = _query_ranges(k_start, BLOCK_N, BLOCK_M, N_QUERIES, flags.CAUSAL)

        dk = gl.zeros([ROWS, D], gl.float32, o_layout)
        dv = gl.zeros([ROWS, D], gl.float32, o_layout)
        mbarrier.wait(kv_bar.index(0), 0)
        dk, dv = _query_range(dk, dv, lo, diag_stop, lo, wg, smem, bars, dq_desc, head, k_start, N_QUERIES, N_KEYS,
                              qk_scale, scale, DIAGONAL, flags)
        dk, dv = _query_range(dk, dv, diag_stop, full_stop, lo, wg, smem, bars, dq_desc, head, k_start, N_QUERIES,
                              N_KEYS, qk_scale, scale, NO_MASK, flags)
        dk, dv = _query_range(dk, dv, tail_start, N_QUERIES, lo, wg, smem, bars, dq_desc, head, k_start, N_QUERIES,
                              N_KEYS, qk_scale, scale, TAIL, flags)
        tma.store_wait(0)
        key0 = k_start + wg * ROWS
        _store_tile(dk * scale, dK_ptr + head.to(gl.int64) * N_KEYS * stride_dk_row, key0, N_KEYS, stride_dk_row)
        _store_tile(dv, dV_ptr + head.to(gl.int64) * N_KEYS * stride_dv_row, key0, N_KEYS, stride_dv_row)

    # ------------------------------------------------------------------------------------------ the kernel

    @gluon.jit
    def _bwd_ws_kernel(
        # TMA descriptors: Q, dO blocks of query_tile(D) rows, K and V of BLOCK_N, over the flattened
        # (heads * N, D) rows; dQ's fp32 accumulator (heads, N_QUERIES, D), blocks (1, BLOCK_M, D / 2 or D)
        q_desc, k_desc, v_desc, do_desc, dq_desc,
        # L (natural log) and Delta, fp32 (heads, N_QUERIES), unit last stride; dK, dV (heads * N_KEYS, D) rows
        L_ptr, Delta_ptr, dK_ptr, dV_ptr,
        stride_l_head, stride_delta_head, stride_dk_row, stride_dv_row,
        N_QUERIES, N_KEYS, qk_scale, scale,
        # compile-time choices: the mask; the consumers' slot release and dS wait without their 4 warps' bar.sync
        # (UNSYNCED_HEAD_DIMS); N_KEYS a multiple of BLOCK_N (no key row to zero: even_keys)
        CAUSAL: gl.constexpr, UNSYNCED: gl.constexpr, EVEN_KEYS: gl.constexpr,
    ):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        D: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)

        k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D], v_desc.layout)
        q_smem = gl.allocate_shared_memory(dtype, [_SLOTS, BLOCK_M, D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(dtype, [_SLOTS, BLOCK_M, D], do_desc.layout)
        ds_smem = gl.allocate_shared_memory(dtype, [_DS_BUFFERS, BLOCK_N, BLOCK_M], ds_layout)
        dq_block: gl.constexpr = dq_desc.block_type.shape
        dq_smem = gl.allocate_shared_memory(gl.float32, [_CONSUMERS, 1, dq_block[1], dq_block[2]], dq_desc.layout)
        row_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        l_smem = gl.allocate_shared_memory(gl.float32, [_SLOTS, BLOCK_M], row_layout)
        delta_smem = gl.allocate_shared_memory(gl.float32, [_SLOTS, BLOCK_M], row_layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [_SLOTS, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [_SLOTS, 1], mbarrier.MBarrierLayout())
        ds_bar = gl.allocate_shared_memory(gl.int64, [_DS_BUFFERS, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar.index(0), count=1)
        for s in gl.static_range(_SLOTS):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=_CONSUMERS)
        for s in gl.static_range(_DS_BUFFERS):
            mbarrier.init(ds_bar.index(s), count=_CONSUMERS)

        if _DESCRIPTOR_ADDS and D == 64:   # the PTX stage's wgmma_descriptor_adds (at D = 128 3.6's form spills more)
            _hw.mark(_DESCRIPTOR_ASM)
        sizes = (N_QUERIES, N_KEYS)
        flags = Flags(CAUSAL, UNSYNCED, EVEN_KEYS, dq_block[2] == D)
        loader_args = ((q_desc, k_desc, v_desc, do_desc), (k_smem, v_smem, q_smem, do_smem, l_smem, delta_smem),
                       (kv_bar, ready, empty), (L_ptr, Delta_ptr, stride_l_head, stride_delta_head), sizes, flags)
        smem = (k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, l_smem, delta_smem)
        bars = (kv_bar, ready, empty, ds_bar)
        out = (dK_ptr, dV_ptr, stride_dk_row, stride_dv_row)
        scales = (qk_scale, scale)
        gl.warp_specialize([(_consumer, (0, smem, bars, dq_desc, out, sizes, scales, flags)),
                            (_consumer, (1, smem, bars, dq_desc, out, sizes, scales, flags)),
                            (_loader, loader_args)], [4, 1], [_CONSUMER_REGS, _LOADER_REGS])


# ---------------------------------------------------------------------------------------------- where it runs

def preferred(N_q: int, N_k: int, D: int, causal: bool) -> bool:
    """Whether the backward's dq_mode "auto" takes this kernel (where it takes the inputs): from N = 1024 on. Graph
    replay of whole backwards against v7's previous path (separate dQ, the Gluon dK/dV; fused at N = 1024), B * H =
    32, bf16, experiment bwd-gluon-ws, N = 1024-4096: 1.09-1.41x as fast without the mask and at D = 128; at D = 64
    causal 1.06-1.35x since the causal grids launch their longest tiles first (fa2triton.tile_order; rows of
    da7e2e5), where before it was 0.91-1.00x. Below N = 1024 it was not measured. auto_dq_mode asks only past its
    fused threshold: below it the host, not the GPU, sets the time, and the fused kernel is one launch."""
    return min(N_q, N_k) >= 1024


# ---------------------------------------------------------------------------------------------- host entry points

def row_split(D: int) -> bool:
    """Whether dQ is split by rows at head dimension D (ROW_SPLIT_HEAD_DIMS), else by columns."""
    return D in ROW_SPLIT_HEAD_DIMS


def query_tile(D: int) -> int:
    """Queries per streamed tile: 128 where dQ is split by rows, else BLOCK_M."""
    return 2 * BLOCK_M if row_split(D) else BLOCK_M


def label(D: int) -> str:
    """The kernel at head dimension D as the harness's bwd_config column names it (committed rows key on it):
    keys x queries per tile, consumers, slots, and /rows where dQ is split by rows."""
    return f"ws {BLOCK_N}x{query_tile(D)}/2wg/s{SLOTS}" + ("/rows" if row_split(D) else "")


def _dq_descriptor(dq_accum: torch.Tensor):
    """The fp32 (heads, N_q, D) accumulator, blocks (1, BLOCK_M, D / 2), or (1, BLOCK_M, D) for one consumer's rows
    where dQ is split by rows: TMA's bounds end a tile at its head's N_q."""
    D = dq_accum.shape[2]
    block = [1, BLOCK_M, D if row_split(D) else D // 2]
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.float32)
    return TensorDescriptor(dq_accum, list(dq_accum.shape), list(dq_accum.stride()), block, layout)


def validate(q, k, v, do, lse, delta, scale, dq_accum) -> None:
    """Raise ValueError naming what `backward` cannot take (round 1's checks, and the dQ accumulator's)."""
    if isinstance(q, torch.Tensor) and not (isinstance(dq_accum, torch.Tensor) and dq_accum.dtype == torch.float32
                                            and dq_accum.shape == q.shape and dq_accum.is_contiguous()):
        raise ValueError(f"the dQ accumulator must be a contiguous float32 tensor of q's shape {tuple(q.shape)}")
    validate_inputs(q, k, v, do, lse, delta, scale)
    if dq_accum.device != q.device:
        raise ValueError(f"the dQ accumulator is on {dq_accum.device} but q is on {q.device}")


def unsupported(q, k, v, do, lse, delta, scale, dq_accum) -> str | None:
    """None where the kernel can take these inputs, else why not (validate's message)."""
    try:
        validate(q, k, v, do, lse, delta, scale, dq_accum)
    except ValueError as e:
        return str(e)
    return None


def launch_args(q, k, v, do, lse, delta, dk, dv, dq_accum, scale: float, causal: bool):
    """(grid, positional arguments) of _bwd_ws_kernel for validated inputs and outputs; the grid is
    fa2triton.tile_order's."""
    BH, N_q, D = q.shape
    N_k = k.shape[1]
    row = _r1.row_descriptor
    bm = query_tile(D)
    descs = (row(q, bm), row(k, BLOCK_N), row(v, BLOCK_N), row(do, bm), _dq_descriptor(dq_accum))
    args = (*descs, lse, delta, dk, dv, lse.stride(0), delta.stride(0), dk.stride(1), dv.stride(1), N_q, N_k,
            float(scale) * LOG2E, float(scale))
    return tile_order.grid(math.ceil(N_k / BLOCK_N), BH, causal), args


class WsLaunch:
    """A recorded launch of _bwd_ws_kernel: later calls with the same shapes and strides give the descriptors'
    bases only (gluon_backward_hopper.DkdvLaunch's lean repeat)."""

    def __init__(self, compiled, grid, args, constexprs: dict):
        self.kernel, self.grid = compiled, (*grid, 1)
        self.descs = templates(args[:5])
        self.scalars = (*args[9:], *constexprs.values())   # the compile-time arguments last, in order

    def __call__(self, q, k, v, do, lse, delta, dk, dv, dq_accum, stream=None) -> None:
        """Launch on `stream` (default: q's device's current one); lse, delta, dk, dv as tensors or addresses."""
        run_compiled(self.kernel, self.grid, (*self.descs, lse, delta, dk, dv, *self.scalars),
                     q.device.index if stream is None else None, stream, (q, k, v, do, dq_accum))


def launch(q, k, v, do, lse, delta, dk, dv, dq_accum, causal: bool, scale: float) -> WsLaunch:
    """Launch into dk, dv (k's shape, contiguous heads) and add dQ's partials into dq_accum (zeros, fp32, q's
    shape) for inputs `validate` accepted; return the recorded launch."""
    grid, args = launch_args(q, k, v, do, lse, delta, dk, dv, dq_accum, scale, causal)
    constexprs = compile_time(q.shape[2], k.shape[1], causal)
    compiled = _bwd_ws_kernel[grid](*args, **constexprs, num_warps=NUM_WARPS, ptx_options=ptx_options())
    return WsLaunch(compiled, grid, args, constexprs)


def even_keys(N_k: int) -> bool:
    """Whether every CTA's key tile is whole (N_k a multiple of BLOCK_N): no dS^T row needs zeroing. Where one is
    ragged the zeroing costs a select per score, which LLVM does after the bf16 cast: in the offline sm_90 SASS at
    D = 64, 64 of a key loop's 400 instructions per warp, between dP^T's wait and dK's issue. Skipping it made whole
    backwards 3.2-6.2% faster at N = 2048 and 4096, D = 64 and 128, both masks (experiment bwd-gluon-ws, the /zk
    rows at 69218cd; docs/worklogs/backward_hopper.md, "Round 11")."""
    return N_k % BLOCK_N == 0


def compile_time(D: int, N_k: int, causal: bool, unsynced: bool | None = None) -> dict:
    """_bwd_ws_kernel's constexprs, in its order: CAUSAL, UNSYNCED (D in UNSYNCED_HEAD_DIMS unless given),
    EVEN_KEYS."""
    return dict(CAUSAL=bool(causal), UNSYNCED=D in UNSYNCED_HEAD_DIMS if unsynced is None else bool(unsynced),
                EVEN_KEYS=even_keys(N_k))


def backward(q, k, v, do, lse, delta, causal: bool, scale: float):
    """dQ, dK, dV (the inputs' dtype) for gluon_backward_hopper.dkdv's inputs; ValueError for anything else."""
    dq_accum = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    validate(q, k, v, do, lse, delta, scale, dq_accum)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    launch(q, k, v, do, lse, delta, dk, dv, dq_accum, causal, scale)
    return dq_accum.to(q.dtype), dk, dv


def offline_plan(D: int, causal: bool, N: int, dtype: str = "bf16", heads: int = 32, unsynced: bool | None = None):
    """The kernel's offline compile on meta tensors (as gluon_backward_hopper.offline_plan)."""
    from fa2triton.offline import OfflinePlan

    t, rows = _r1.offline_tensors(D, N, dtype, heads)
    acc = torch.empty(heads, N, D, dtype=torch.float32, device="meta")
    _, args = launch_args(t, t, t, t, rows, rows, t, t, acc, 1.0 / math.sqrt(D), causal)
    return OfflinePlan(_bwd_ws_kernel, args, dict(num_warps=NUM_WARPS, num_stages=1,
                                                  **compile_time(D, N, causal, unsynced), ptx_options=ptx_options()))
