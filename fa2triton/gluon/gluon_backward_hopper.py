"""dK and dV of the FlashAttention backward as a Gluon kernel for Hopper (sm_90), one warpgroup per CTA.

Round 1 of backward_hopper_log.md. The math, the units of L, Delta, the scale and the causal convention are those of
flash_backward_kernels.py (`_dkdv_program`): per (batch * head) slice,

    P^T  = exp2(S^T * qk_scale - L * log2(e)),  S^T = K Q^T (unscaled), qk_scale = scale * log2(e)
    dV   = sum over query tiles of P^T dO
    dP^T = V dO^T
    dS^T = P^T * (dP^T - Delta)
    dK   = scale * sum over query tiles of dS^T Q

with L the forward's natural-log log-sum-exp and Delta = rowsum(dO * O) (`_bwd_preprocess_kernel`). Under the causal
mask (top-left aligned) query i sees key j iff j <= i.

One CTA per (tile of BLOCK_N = 64 keys, batch * head), 4 warps (one warpgroup), no warp specialisation. K_j and V_j
come by TMA once; the query tiles (BLOCK_M = 64 rows of Q and dO) by TMA into a ring of two slots, each tile's copy
issued by the same warps one tile ahead of its use. L and Delta rows are plain loads. Each tile's four products are
async wgmma: S^T and dP^T from shared memory (SS), then dV += P^T dO and dK += dS^T Q with P^T and dS^T taken from
registers as the A operand (RS): the S^T accumulator's fragment is the A operand's, so the conversion moves no data.
dP^T's accumulator starts at -Delta, so that the product gives dP^T - Delta and Delta holds no registers past its
issue (registers are the limit at D = 128).

Rows are addressed through the flattened (heads * N, D) view (gluon_forward_hopper.flattened), so a tile's rows past a
head's N belong to the next head, or are zeros past the tensor's end (TMA fills them). In the ragged last query tile
the columns past N_QUERIES get L = +inf, hence P^T = 0 and dS^T = 0 there; key rows past N_KEYS are computed and never
stored (each row of dK and dV depends only on its own key). The query tiles come in three ranges as in the Triton
kernel: the causal diagonal (the causal compare), the tiles wholly below it (no mask), the ragged tail; tiles that
cannot see the key tile are skipped. dQ and Delta are not computed here (`_bwd_dq_kernel`, `_bwd_preprocess_kernel`).
Gluon is not interpreted: this kernel runs only on a Hopper GPU; `offline_plan` is its compile for sm_90 without one.
"""

from __future__ import annotations

import math

import torch

from fa2triton.gluon import gluon_forward_hopper as _fwd
from fa2triton.lean_path import run_compiled, templates
from fa2triton import tile_order

HAVE_GLUON = _fwd.HAVE_GLUON
flattened, row_descriptor = _fwd.flattened, _fwd.row_descriptor

if HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

    from fa2triton.gluon import gluon_ptx as _gluon_ptx
    from fa2triton.gluon import hopper as _hw
    from fa2triton.triton_compat import ptx_options, splits_wgmma_descriptors, tma_load

    LOG2E = _hw.LOG2E
    wgmma_layout, slot_of, ready_phase = _hw.wgmma_layout, _hw.slot_of, _hw.ready_phase
    _DESCRIPTOR_ASM = gl.constexpr(_gluon_ptx.DESCRIPTOR_ASM)
    _DESCRIPTOR_ADDS = gl.constexpr(splits_wgmma_descriptors())

BLOCK_N = 64          # keys per CTA
BLOCK_M = 64          # queries per streamed tile
NUM_WARPS = 4         # one warpgroup
SLOTS = 2             # the Q / dO ring
HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16, torch.float16)


if HAVE_GLUON:
    _LOG2E = _hw.LOG2E_C
    _SLOTS = gl.constexpr(SLOTS)
    NO_MASK, TAIL, DIAGONAL = gl.constexpr(0), gl.constexpr(1), gl.constexpr(2)   # _query_tile's masks

    # ------------------------------------------------------------------------------------------ layouts and helpers

    @gluon.constexpr_function
    def _store_layout(d):
        """A coalescing layout for (rows, d) 16-bit tiles: 8 contiguous elements (16 bytes) per thread."""
        return gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[32 * 8 // d, d // 8], warps_per_cta=[4, 1],
                                order=[1, 0])

    @gluon.jit
    def _issue_query_tile(q_desc, do_desc, q_smem, do_smem, ready, row, slot, pred):
        """TMA rows [row, row + BLOCK_M) of Q and dO into a slot, completing on the slot's mbarrier (pred: whether
        there is such a tile; a false pred issues nothing)."""
        bar = ready.index(slot)
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes, pred=pred)
        tma_load(q_desc, [row, 0], bar, q_smem.index(slot), pred=pred)
        tma_load(do_desc, [row, 0], bar, do_smem.index(slot), pred=pred)

    @gluon.jit
    def _row_values(ptr, cols, left, MASKED: gl.constexpr):
        """One fp32 value per query of the tile (L or Delta of this head, ptr at the tile's first query; cols the
        tile's query offsets). In a masked tile only the first `left` are the tile's: the others repeat the last
        one's value, so the loads need no predicate, and the caller masks their columns."""
        if MASKED:
            vals = gl.load(ptr + gl.minimum(cols, left - 1))
        else:
            vals = gl.load(ptr + cols)
        return vals

    @gluon.jit
    def _own_registers(x):
        """x with every element in a register of its own, written here. A broadcast (-Delta along the keys) holds
        each value once for two rows of the accumulator; as a wgmma's accumulator input each copy would then be made
        after the wgmma fence, with the S^T product in flight, and ptxas waits for that product before the copies
        (serialising S^T and dP^T). One register move per element, issued here, is the copy."""
        return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=False, pack=1)

    @gluon.jit
    def _store_tile(acc, ptr, row0, N_KEYS, stride_row):
        """Rows [row0, row0 + BLOCK_N) of this head's dK or dV, in the output dtype, through the coalescing layout;
        rows past N_KEYS are not stored."""
        ROWS: gl.constexpr = acc.shape[0]
        D: gl.constexpr = acc.shape[1]
        layout: gl.constexpr = _store_layout(D)
        out = gl.convert_layout(acc.to(ptr.dtype.element_ty), layout)
        rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
        gl.store(ptr + gl.expand_dims(rows, 1) * stride_row + gl.expand_dims(cols, 0), out,
                 mask=gl.expand_dims(rows < N_KEYS, 1))

    @gluon.jit
    def _query_ranges(k_start, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, N_QUERIES, CAUSAL: gl.constexpr):
        """(lo, diag_stop, full_stop, tail_start) of the BLOCK_N keys from k_start: the first query tile they see (0
        without the causal mask), the end of the tiles straddling the diagonal, of the whole tiles, and the start of
        the ragged tail (_dkdv_kernel's comment says how the three ranges cover [lo, N_QUERIES))."""
        full_stop = (N_QUERIES // BLOCK_M) * BLOCK_M
        if CAUSAL:
            lo = (k_start // BLOCK_M) * BLOCK_M
            diag_stop = gl.minimum(gl.cdiv(k_start + BLOCK_N, BLOCK_M) * BLOCK_M, N_QUERIES)
        else:
            lo = k_start * 0
            diag_stop = lo
        return lo, diag_stop, full_stop, gl.maximum(diag_stop, full_stop)

    # ------------------------------------------------------------------------------------------ one query tile

    @gluon.jit
    def _issue_scores(k_tile, v_tile, q_tile, do_tile, zero, dp_init):
        """S^T = K Q^T and dP^T = V dO^T - Delta issued (dp_init: -Delta broadcast); their tokens."""
        s_tok = warpgroup_mma(k_tile, q_tile.permute((1, 0)), zero, use_acc=False, is_async=True)    # S^T = K Q^T
        dp_tok = warpgroup_mma(v_tile, do_tile.permute((1, 0)), dp_init, is_async=True)              # V dO^T - Delta
        return s_tok, dp_tok

    @gluon.jit
    def _probs_and_dv(sT, dp_tok, do_tile, l2, dv, qk_scale, cols, key_off, MASK: gl.constexpr):
        """Once S^T is in: P^T = exp2(S^T * qk_scale - l2) (in a DIAGONAL tile key row r sees query column c iff
        r <= c + key_off) and dV += P^T dO issued. Returns P^T (fp32), dP^T once it is in (dV still in flight) and
        dV's token."""
        dtype: gl.constexpr = do_tile.dtype
        s_layout: gl.constexpr = sT.type.layout
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=wgmma_layout(4, do_tile.shape[1]),
                                                     k_width=2)
        pT = gl.exp2(sT * qk_scale - gl.expand_dims(l2, 0))
        if MASK == DIAGONAL:
            rows = gl.arange(0, sT.shape[0], layout=gl.SliceLayout(1, s_layout))
            pT = gl.where(gl.expand_dims(rows, 1) <= gl.expand_dims(cols + key_off, 0), pT, 0.0)
        p_op = gl.convert_layout(pT.to(dtype), a_layout)
        dv_tok = warpgroup_mma(p_op, do_tile, dv, is_async=True)                                     # dV += P^T dO
        dpT = warpgroup_mma_wait(num_outstanding=1, deps=(dp_tok,))                                 # (dV in flight)
        return pT, dpT, dv_tok

    @gluon.jit
    def _scores_and_dv(k_tile, v_tile, q_tile, do_tile, zero, dp_init, l2, dv, qk_scale, cols, key_off,
                       MASK: gl.constexpr):
        """The first half of a tile's products for the keys of k_tile and v_tile: _issue_scores, then once S^T is in
        _probs_and_dv. Returns P^T (fp32), dP^T once it is in (dV still in flight) and dV's token."""
        s_tok, dp_tok = _issue_scores(k_tile, v_tile, q_tile, do_tile, zero, dp_init)
        sT = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
        return _probs_and_dv(sT, dp_tok, do_tile, l2, dv, qk_scale, cols, key_off, MASK)

    @gluon.jit
    def _query_tile(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, q_desc, do_desc, L_ptr, Delta_ptr,
                    q_start, lo, q_row0, k_start, N_QUERIES, qk_scale, MASK: gl.constexpr):
        """Fold query tile [q_start, q_start + BLOCK_M) into dK and dV. It is tile t = (q_start - lo) / BLOCK_M of this
        CTA (slot t % SLOTS, phase (t / SLOTS) & 1); the next tile's copy is issued first, into the slot the previous
        tile read, whose products were all waited for at its end. MASK: NO_MASK, TAIL (queries past N_QUERIES get
        L = +inf, so P^T = 0 in their columns without a compare per score) or DIAGONAL (TAIL and the causal compare)."""
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        D: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[0]
        SLOTS: gl.constexpr = q_smem.shape[0]
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = wgmma_layout(4, BLOCK_M)
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=wgmma_layout(4, D), k_width=2)
        col_s: gl.constexpr = gl.SliceLayout(0, s_layout)

        t = (q_start - lo) // BLOCK_M
        slot = slot_of(t, SLOTS)
        nxt = q_start + BLOCK_M
        _issue_query_tile(q_desc, do_desc, q_smem, do_smem, ready, q_row0 + nxt, slot_of(t + 1, SLOTS), nxt < N_QUERIES)

        # The tile's query offsets: the masks compare 32-bit tile-local values against one bound per tile.
        cols = gl.arange(0, BLOCK_M, layout=col_s)
        left = N_QUERIES - q_start
        l2 = _row_values(L_ptr + q_start, cols, left, MASK != NO_MASK) * _LOG2E
        delta = _row_values(Delta_ptr + q_start, cols, left, MASK != NO_MASK)
        if MASK != NO_MASK:
            l2 = gl.where(cols < left, l2, float("inf"))

        # dP^T - Delta in one product: the accumulator starts at -Delta, so Delta holds no registers past the issue.
        zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
        dp_init = _own_registers(zero - gl.expand_dims(delta, 0))

        mbarrier.wait(ready.index(slot), ready_phase(t, SLOTS))
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        # (key k_start + r sees query q_start + c iff r <= c + (q_start - k_start))
        pT, dpT, dv_tok = _scores_and_dv(k_smem, v_smem, q_tile, do_tile, zero, dp_init, l2, dv, qk_scale, cols,
                                         q_start - k_start, MASK)
        ds_op = gl.convert_layout((pT * dpT).to(dtype), a_layout)                                    # dS^T
        dk_tok = warpgroup_mma(ds_op, q_tile, dk, is_async=True)                                     # dK += dS^T Q
        dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok))
        return dk, dv

    @gluon.jit
    def _query_range(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, q_desc, do_desc, L_ptr, Delta_ptr,
                     start, stop, lo, q_row0, k_start, N_QUERIES, qk_scale, MASK: gl.constexpr):
        """The query tiles [start, stop) (multiples of BLOCK_M from lo), all with one MASK."""
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        for q_start in range(start, stop, BLOCK_M):
            dk, dv = _query_tile(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, q_desc, do_desc, L_ptr, Delta_ptr,
                                 q_start, lo, q_row0, k_start, N_QUERIES, qk_scale, MASK)
        return dk, dv

    # ------------------------------------------------------------------------------------------ the kernel

    @gluon.jit
    def _dkdv_kernel(
        # TMA descriptors over the flattened (heads * N, D) rows: Q and dO blocks of BLOCK_M rows, K and V of BLOCK_N
        q_desc, k_desc, v_desc, do_desc,
        # L (natural log) and Delta, fp32 (heads, N_QUERIES) with unit last stride; dK, dV (heads * N_KEYS, D) rows
        L_ptr, Delta_ptr, dK_ptr, dV_ptr,
        stride_l_head, stride_delta_head, stride_dk_row, stride_dv_row,
        N_QUERIES, N_KEYS, qk_scale, scale,
        CAUSAL: gl.constexpr,
    ):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        D: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        o_layout: gl.constexpr = wgmma_layout(4, D)
        if _DESCRIPTOR_ADDS and D == 64:   # the PTX stage's wgmma_descriptor_adds (at D = 128 3.6's form spills)
            _hw.mark(_DESCRIPTOR_ASM)

        tile, head = _hw.key_tile_and_head(gl.cdiv(N_KEYS, BLOCK_N), CAUSAL)
        k_start = tile * BLOCK_N
        q_row0 = head * N_QUERIES
        L_ptr = L_ptr + head.to(gl.int64) * stride_l_head   # base offsets in 64 bits: a tensor may pass 2^31
        Delta_ptr = Delta_ptr + head.to(gl.int64) * stride_delta_head   # elements

        k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D], v_desc.layout)
        q_smem = gl.allocate_shared_memory(dtype, [_SLOTS, BLOCK_M, D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(dtype, [_SLOTS, BLOCK_M, D], do_desc.layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [_SLOTS, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar.index(0), count=1)
        for s in gl.static_range(_SLOTS):
            mbarrier.init(ready.index(s), count=1)

        # The query tiles, each range a multiple of BLOCK_M from 0 (flash_backward_kernels' three ranges):
        #   [lo, diag_stop)            DIAGONAL: the tiles straddling the causal diagonal (none without the mask);
        #   [diag_stop, full_stop)     NO_MASK: whole tiles wholly below it (every whole tile without the mask);
        #   [tail_start, N_QUERIES)    TAIL: the ragged last tile, if it is not a diagonal one.
        # Tiles wholly above the diagonal (every query < k_start) are skipped. Together the ranges are [lo, N_QUERIES),
        # in order, which the ring's slot and phase arithmetic and the refill of the next tile rely on.
        lo, diag_stop, full_stop, tail_start = _query_ranges(k_start, BLOCK_N, BLOCK_M, N_QUERIES, CAUSAL)

        # K_j and V_j once; the first query tile into slot 0.
        mbarrier.expect(kv_bar.index(0), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma_load(k_desc, [head * N_KEYS + k_start, 0], kv_bar.index(0), k_smem)
        tma_load(v_desc, [head * N_KEYS + k_start, 0], kv_bar.index(0), v_smem)
        _issue_query_tile(q_desc, do_desc, q_smem, do_smem, ready, q_row0 + lo, 0, lo < N_QUERIES)
        dk = gl.zeros([BLOCK_N, D], gl.float32, o_layout)
        dv = gl.zeros([BLOCK_N, D], gl.float32, o_layout)
        mbarrier.wait(kv_bar.index(0), 0)

        dk, dv = _query_range(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, q_desc, do_desc, L_ptr, Delta_ptr,
                              lo, diag_stop, lo, q_row0, k_start, N_QUERIES, qk_scale, DIAGONAL)
        dk, dv = _query_range(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, q_desc, do_desc, L_ptr, Delta_ptr,
                              diag_stop, full_stop, lo, q_row0, k_start, N_QUERIES, qk_scale, NO_MASK)
        dk, dv = _query_range(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, q_desc, do_desc, L_ptr, Delta_ptr,
                              tail_start, N_QUERIES, lo, q_row0, k_start, N_QUERIES, qk_scale, TAIL)

        mbarrier.invalidate(kv_bar.index(0))
        for s in gl.static_range(_SLOTS):
            mbarrier.invalidate(ready.index(s))
        # The softmax scale, once per element of dK instead of once per score.
        _store_tile(dk * scale, dK_ptr + head.to(gl.int64) * N_KEYS * stride_dk_row, k_start, N_KEYS, stride_dk_row)
        _store_tile(dv, dV_ptr + head.to(gl.int64) * N_KEYS * stride_dv_row, k_start, N_KEYS, stride_dv_row)


# ---------------------------------------------------------------------------------------------- host entry points

def validate(q, k, v, do, lse, delta, scale) -> None:
    """Raise ValueError naming what `dkdv` cannot take."""
    named = (("q", q), ("k", k), ("v", v), ("do", do), ("lse", lse), ("delta", delta))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in named[:4]:
        if t.dim() != 3:
            raise ValueError(f"{name} must be (batch * heads, N, D), got shape {tuple(t.shape)}")
    BH, N_q, D = q.shape
    if tuple(do.shape) != (BH, N_q, D):
        raise ValueError(f"do must have q's shape {(BH, N_q, D)}, got {tuple(do.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if k.shape[0] != BH or k.shape[2] != D:
        raise ValueError(f"k must be (batch * heads, N_k, D) = ({BH}, N_k, {D}) like q, got {tuple(k.shape)}")
    if min(N_q, k.shape[1]) < 1:
        raise ValueError(f"empty sequence: q {tuple(q.shape)}, k {tuple(k.shape)}")
    for name, t in named[4:]:
        if tuple(t.shape) != (BH, N_q):
            raise ValueError(f"{name} must have shape (batch * heads, N_q) = {(BH, N_q)}, got {tuple(t.shape)}")
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {t.dtype}")
        if N_q > 1 and t.stride(1) != 1:
            raise ValueError(f"{name} must have a unit stride along the queries, got strides {t.stride()}")
    for name, t in named[:4]:
        if t.dtype not in DTYPES:
            raise ValueError(f"{name} has dtype {t.dtype}; the Gluon dK/dV kernel takes bfloat16 or float16")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but q is {q.dtype}")
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension {D} is not supported (the Gluon dK/dV kernel takes {HEAD_DIMS})")
    if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    for name, t in named:
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}: the Gluon dK/dV kernel runs on a CUDA (Hopper) GPU")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    for name, t in named[:4]:
        if flattened(t) is None:
            raise ValueError(f"{name} has strides {t.stride()}: TMA needs each head's rows contiguous "
                             "(unit last stride, heads N rows apart, 16-byte aligned base and rows)")
    if not HAVE_GLUON:
        raise ValueError("this Triton has no Gluon")
    if torch.cuda.get_device_capability(q.device)[0] != 9:
        raise ValueError(f"{torch.cuda.get_device_name(q.device)} is not a Hopper GPU (sm_90)")


def launch_args(q, k, v, do, lse, delta, dk, dv, scale: float, causal: bool):
    """(grid, positional arguments) of _dkdv_kernel for validated inputs and the outputs dk, dv (k's shape,
    contiguous); the grid is fa2triton.tile_order's."""
    BH, N_q, D = q.shape
    N_k = k.shape[1]
    descs = [row_descriptor(t, rows) for t, rows in ((q, BLOCK_M), (k, BLOCK_N), (v, BLOCK_N), (do, BLOCK_M))]
    args = (*descs, lse, delta, dk, dv, lse.stride(0), delta.stride(0), dk.stride(1), dv.stride(1), N_q, N_k,
            float(scale) * LOG2E, float(scale))
    return tile_order.grid(math.ceil(N_k / BLOCK_N), BH, causal), args


def unsupported(q, k, v, do, lse, delta, scale) -> str | None:
    """None where `dkdv` can take these inputs, else why not (validate's message)."""
    try:
        validate(q, k, v, do, lse, delta, scale)
    except ValueError as e:
        return str(e)
    return None


class DkdvLaunch:
    """A recorded launch of _dkdv_kernel (fa2triton.lean_path's lean repeat, as gluon_forward_hopper.GluonLaunch): later
    calls with the same shapes and strides reuse the compiled kernel and its four descriptors (lean_path.templates),
    giving only their bases (the launcher reads base.data_ptr() and the descriptor's own shape and strides)."""

    def __init__(self, compiled, grid, args, causal: bool):
        self.kernel, self.grid = compiled, (*grid, 1)
        self.descs = templates(args[:4])
        self.scalars = (*args[8:], bool(causal))    # strides, sizes, the two scales, then CAUSAL

    def __call__(self, q, k, v, do, lse, delta, dk, dv, stream=None) -> None:   # the hot path: no checks here
        """Launch on `stream` (default: q's device's current one); lse, delta, dk, dv as tensors or addresses."""
        run_compiled(self.kernel, self.grid, (*self.descs, lse, delta, dk, dv, *self.scalars),
                     q.device.index if stream is None else None, stream, (q, k, v, do))


def launch(q, k, v, do, lse, delta, dk, dv, causal: bool, scale: float) -> DkdvLaunch:
    """Launch the kernel into dk and dv (k's shape and dtype, contiguous heads) for inputs that `validate` (or
    `unsupported`) accepted, and return the launch recorded for repeats."""
    grid, args = launch_args(q, k, v, do, lse, delta, dk, dv, scale, causal)
    compiled = _dkdv_kernel[grid](*args, CAUSAL=bool(causal), num_warps=NUM_WARPS, ptx_options=ptx_options())
    return DkdvLaunch(compiled, grid, args, causal)


def dkdv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
         delta: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """dK and dV (k's shape and dtype) of attention with softmax scale `scale` (SDPA's top-left causal mask if
    `causal`). q, do (B * H, N_q, D) and k, v (B * H, N_k, D) on a Hopper GPU, bf16 or fp16, each head's rows
    contiguous, D 64 or 128; lse (the forward's natural-log log-sum-exp of the scaled scores) and delta
    (rowsum(dO * O), `_bwd_preprocess_kernel`'s) float32 (B * H, N_q). Raises ValueError for anything else."""
    validate(q, k, v, do, lse, delta, scale)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    launch(q, k, v, do, lse, delta, dk, dv, causal, scale)
    return dk, dv


def offline_tensors(D: int, N: int, dtype: str, heads: int):
    """Meta tensors standing in for an offline compile's inputs: (heads, N, D) in `dtype` ('bf16' or 'fp16') and
    (heads, N) float32 rows; ValueError for a dtype or head dimension the Gluon kernels do not take."""
    from fa2triton.offline import torch_dtype

    if dtype not in ("bf16", "fp16"):
        raise ValueError(f"dtype must be 'bf16' or 'fp16', got {dtype!r}")
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension {D} is not supported, only {HEAD_DIMS}")
    return (torch.empty(heads, N, D, dtype=torch_dtype(dtype), device="meta"),
            torch.empty(heads, N, dtype=torch.float32, device="meta"))


def offline_plan(D: int, causal: bool, N: int, dtype: str = "bf16", heads: int = 32):
    """The kernel's offline compile for N queries and N keys per head on meta tensors (fa2triton.offline.OfflinePlan;
    fa2lab.compile_offline.compile_plan compiles it for sm_90 without a GPU)."""
    from fa2triton.offline import OfflinePlan

    t, rows = offline_tensors(D, N, dtype, heads)
    _, args = launch_args(t, t, t, t, rows, rows, t, t, 1.0 / math.sqrt(D), causal)
    return OfflinePlan(_dkdv_kernel, args, dict(num_warps=NUM_WARPS, num_stages=1, CAUSAL=bool(causal),
                                                ptx_options=ptx_options()))
