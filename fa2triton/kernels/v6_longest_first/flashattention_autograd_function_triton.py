"""v6_longest_first: v5 with the longest causal tiles launched first, and an optional sliding window.

What the profile said (article, Round 4 and Future articles): in causal attention the last
query tiles of each head have the most key tiles to visit, and the GPU starts programs in
order of program_id(0) first, so with the query tile on axis 0 the heads are launched one
after another and their longest tiles start last, leaving a tail of busy SMs. Reversing the
tiles within a head gained about 1%; putting the head on axis 0 and reversing the query
tiles on axis 1 (so every head's longest tiles start first) gained 4 to 5% at N = 4096 and
7 to 10% at N = 2048 on Ada. The article found it after its final measurements.

The change: the grid is (batch*heads, query tiles) and the query tile index runs backwards.
LAUNCH_ORDER selects the order for the experiment that compares them ("longest_first", the
default; "reversed", the one-axis reversal; "forward", v5's order).

Also (issue 6, the article's loose ends): an optional causal sliding window
(`window_size`: query i sees keys j with i - window < j <= i), with tile skipping on both
sides of the band, and masks without the -1e6 sentinel: masked scores are -inf, and a row
that sees no key at all gets O = 0 and L = -inf instead of garbage.

For the article's P-cast experiment (`invoke experiment pcast`), P_CAST selects where P is
rounded to the input dtype: 0 sums the fp32 P and rounds it for the multiply (the default,
FlashAttention-2's order), 1 rounds first and sums the rounded values, 2 keeps P in fp32
and multiplies it with an upcast V (TF32).

The host path is v5's (fa2triton.lean_path). The backward is the Triton FlashAttention-2 backward
(fa2triton/flash_backward_triton.py, issue 7) from the saved L, with the same sliding window; where autograd records
it (create_graph) it recomputes in PyTorch. Addressing: the article's kernel used block pointers (removed in Triton
3.9); this one computes the same tiles' addresses directly, with row masks.
"""

import math
from pathlib import Path

import torch
import triton
import triton.language as tl

from fa2triton.inputs import unit_stride, validate_qkv
from fa2triton.configs import load_table, select
from fa2triton.lean_path import LeanApply, Launch, LaunchCache, compiled_or_none
from fa2triton.launch import allocate_outputs, autotune_configs, prune_to_fit, smem_limit, strides
from fa2triton.reference import autograd_backward
from fa2triton import flash_backward_triton as backward_kernels

# name -> (HEAD_MAJOR, REVERSE)
LAUNCH_ORDERS = {"longest_first": (True, True), "reversed": (False, True), "forward": (False, False)}


@triton.jit
def _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_base, V_base, K_offs, V_offs, stride_kk, stride_vk,
                      start, stop, N_KEYS, WINDOW, qk_scale,
                      K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
                      HAS_WINDOW: tl.constexpr, P_CAST: tl.constexpr):
    """Fold the key tiles in [start, stop) into the running (O, l, m) state.

    The unmasked copy (MASKED=False) has no compare, select or bounds check. The masked copy
    sets invisible scores to -inf and keeps rows that have seen no key yet (m = -inf) finite.
    """
    K_base += start * stride_kk
    V_base += start * stride_vk
    for k_start in range(start, stop, K_TILE_SIZE):
        if MASKED:
            k_in = k_start + tl.arange(0, K_TILE_SIZE) < N_KEYS
            K_j = tl.load(K_base + K_offs, mask=k_in[:, None], other=0.0)
            V_j = tl.load(V_base + V_offs, mask=k_in[:, None], other=0.0)
        else:
            K_j = tl.load(K_base + K_offs)
            V_j = tl.load(V_base + V_offs)

        S_ij = tl.dot(Q_i, tl.trans(K_j))                              # raw scores, (Q_TILE, K_TILE) fp32

        if MASKED:
            k_pos = (k_start + tl.arange(0, K_TILE_SIZE))[None, :]
            keep = k_pos < N_KEYS
            if is_causal:
                keep = keep & (k_pos <= q_pos)
            if HAS_WINDOW:
                keep = keep & (k_pos > q_pos - WINDOW)
            S_ij = tl.where(keep, S_ij, float("-inf"))

        # m is in log2 units of the scaled scores (v4). A row with no visible key so far has
        # m_new = -inf; subtracting 0 instead keeps exp2 at 0 for it rather than NaN.
        m_new = tl.maximum(m_acc, tl.max(S_ij, axis=1, keep_dims=True) * qk_scale)
        if MASKED:
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_sub = m_new
        P_ij = tl.math.exp2(S_ij * qk_scale - m_sub)
        alpha = tl.math.exp2(m_acc - m_sub)
        O_acc = alpha * O_acc
        # Where P is rounded (the article's "P cast" experiment; 0 is FlashAttention-2's choice).
        if P_CAST == 1:    # round first, so the row sum adds the same values the multiply uses
            P_lo = P_ij.to(V_j.dtype)
            l_acc = alpha * l_acc + tl.sum(P_lo.to(tl.float32), axis=1, keep_dims=True)
            O_acc = tl.dot(P_lo, V_j, acc=O_acc)
        elif P_CAST == 2:  # no cast: fp32 P against an upcast V (a TF32 multiply)
            l_acc = alpha * l_acc + tl.sum(P_ij, axis=1, keep_dims=True)
            O_acc = tl.dot(P_ij, V_j.to(tl.float32), acc=O_acc)
        else:              # sum the fp32 P, round it for the multiply
            l_acc = alpha * l_acc + tl.sum(P_ij, axis=1, keep_dims=True)
            O_acc = tl.dot(P_ij.to(V_j.dtype), V_j, acc=O_acc)
        m_acc = m_new

        K_base += K_TILE_SIZE * stride_kk
        V_base += K_TILE_SIZE * stride_vk
    return O_acc, l_acc, m_acc


# v5's short list for this GPU's architecture (configs.json).
CONFIG_TABLE = load_table(Path(__file__).with_name("configs.json"))
ARCH, CANDIDATES = select(CONFIG_TABLE, smem_limit=smem_limit())


@triton.autotune(configs=autotune_configs(CANDIDATES),
                 key=["N_QUERIES", "N_KEYS", "WINDOW", "D", "is_causal", "HAS_WINDOW", "HEAD_MAJOR", "REVERSE",
                      "P_CAST"],
                 prune_configs_by={"early_config_prune": prune_to_fit})
@triton.jit
def flash_fwd_kernel(
    # pointers
    Q_ptr, K_ptr, V_ptr, O_ptr, L_ptr,
    # strides (batch, sequence, head dim)
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_ob, stride_oq, stride_od,
    stride_lb, stride_lq,
    # sizes
    N_QUERIES, N_KEYS, WINDOW,
    scale,
    # compile-time meta-parameters
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    is_causal: tl.constexpr,
    HAS_WINDOW: tl.constexpr,   # WINDOW is used (causal band)
    HEAD_MAJOR: tl.constexpr,   # grid is (batch*heads, query tiles) instead of (query tiles, batch*heads)
    REVERSE: tl.constexpr,      # query tiles run backwards: the longest causal tiles start first
    P_CAST: tl.constexpr,       # where P is rounded: 0 sum then cast (default), 1 cast then sum, 2 no cast (TF32)
):
    if HEAD_MAJOR:
        batch_index = tl.program_id(0)
        query_tile_index = tl.program_id(1)
        n_tiles = tl.num_programs(1)
    else:
        query_tile_index = tl.program_id(0)
        batch_index = tl.program_id(1)
        n_tiles = tl.num_programs(0)
    if REVERSE:
        query_tile_index = n_tiles - 1 - query_tile_index
    batch_index = batch_index.to(tl.int64)   # 64-bit slice offsets: a tensor may pass 2^31 elements
    q_start = query_tile_index * Q_TILE_SIZE

    # Tile addresses: base + row * row stride + column * column stride. Only rows can pass the
    # tensor's end (the column block is exactly D), so only rows are masked. K and V: a scalar
    # base that the key loop advances by a tile, plus per-thread offsets computed once.
    q_rows = q_start + tl.arange(0, Q_TILE_SIZE)
    q_in = q_rows < N_QUERIES
    k_rows = tl.arange(0, K_TILE_SIZE)
    cols = tl.arange(0, D)
    Q_ptrs = Q_ptr + batch_index * stride_qb + q_rows[:, None] * stride_qq + cols[None, :] * stride_qd
    K_base = K_ptr + batch_index * stride_kb
    V_base = V_ptr + batch_index * stride_vb
    K_offs = k_rows[:, None] * stride_kk + cols[None, :] * stride_kd
    V_offs = k_rows[:, None] * stride_vk + cols[None, :] * stride_vd
    O_ptrs = O_ptr + batch_index * stride_ob + q_rows[:, None] * stride_oq + cols[None, :] * stride_od
    L_ptrs = L_ptr + batch_index * stride_lb + q_rows * stride_lq

    Q_i = tl.load(Q_ptrs, mask=q_in[:, None], other=0.0)
    q_pos = q_rows[:, None]

    qk_scale = scale * 1.4426950408889634
    O_acc = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
    l_acc = tl.zeros((Q_TILE_SIZE, 1), dtype=tl.float32)
    m_acc = tl.full((Q_TILE_SIZE, 1), float("-inf"), dtype=tl.float32)

    # Three ranges of key tiles: [band_start, full_start) masked (the lower edge of a sliding
    # window), [full_start, diag_start) visible to every row (no mask), [diag_start, stop)
    # masked (the diagonal, or a ragged last tile). Nothing outside them is visited.
    full_stop = (N_KEYS // K_TILE_SIZE) * K_TILE_SIZE
    if is_causal:
        diag_start = tl.minimum((q_start // K_TILE_SIZE) * K_TILE_SIZE, full_stop)
        stop = tl.minimum(q_start + Q_TILE_SIZE, N_KEYS)
    else:
        diag_start = full_stop
        stop = N_KEYS
    if HAS_WINDOW:
        # Row i sees keys above i - WINDOW: the first row from q_start - WINDOW + 1 on, and
        # every row from (last row) - WINDOW + 1 = q_start + Q_TILE_SIZE - WINDOW on.
        band_start = tl.minimum((tl.maximum(q_start - WINDOW + 1, 0) // K_TILE_SIZE) * K_TILE_SIZE, diag_start)
        full_start = tl.maximum(q_start + Q_TILE_SIZE - WINDOW, 0)
        full_start = tl.minimum(tl.maximum(tl.cdiv(full_start, K_TILE_SIZE) * K_TILE_SIZE, band_start), diag_start)
    else:
        band_start = 0
        full_start = 0

    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_base, V_base, K_offs, V_offs,
                                            stride_kk, stride_vk, band_start, full_start, N_KEYS, WINDOW, qk_scale,
                                            K_TILE_SIZE=K_TILE_SIZE, MASKED=True, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, P_CAST=P_CAST)
    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_base, V_base, K_offs, V_offs,
                                            stride_kk, stride_vk, full_start, diag_start, N_KEYS, WINDOW, qk_scale,
                                            K_TILE_SIZE=K_TILE_SIZE, MASKED=False, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, P_CAST=P_CAST)
    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_base, V_base, K_offs, V_offs,
                                            stride_kk, stride_vk, diag_start, stop, N_KEYS, WINDOW, qk_scale,
                                            K_TILE_SIZE=K_TILE_SIZE, MASKED=True, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, P_CAST=P_CAST)

    # A row that saw no key has l = 0: its output is 0 and its L is -inf (m = -inf, log2 0 = -inf).
    O_i = O_acc / tl.where(l_acc == 0.0, 1.0, l_acc)
    L_i = tl.reshape((m_acc + tl.math.log2(l_acc)) * 0.6931471805599453, (Q_TILE_SIZE,))
    tl.store(O_ptrs, O_i.to(O_ptr.dtype.element_ty), mask=q_in[:, None])
    tl.store(L_ptrs, L_i, mask=q_in)


def _checked_launch(Q, K, V, mode):
    """The normal path: check, allocate, autotune (first time per key), launch. Returns O, L and
    the Launch that repeats it (see fa2triton.lean_path)."""
    is_causal, window, order, p_cast = mode
    validate_qkv(Q, K, V)
    Q, K, V = (unit_stride(t) for t in (Q, K, V))
    B, N_q, D = Q.shape
    O, L = allocate_outputs(Q)
    head_major, reverse = LAUNCH_ORDERS[order]

    def grid(meta):
        tiles = triton.cdiv(N_q, meta["Q_TILE_SIZE"])
        return (B, tiles) if head_major else (tiles, B)

    tail = (*strides(Q, K, V, O, L), N_q, K.shape[1], window, 1.0 / math.sqrt(D))
    flags = dict(is_causal=is_causal, HAS_WINDOW=window > 0, HEAD_MAJOR=head_major, REVERSE=reverse, P_CAST=p_cast)
    compiled = flash_fwd_kernel[grid](Q, K, V, O, L, *tail, D=D, **flags)
    if compiled_or_none(compiled) is None:  # the interpreter launches no binary
        return O, L, None
    meta = flash_fwd_kernel.best_config.kwargs
    launch = Launch(compiled, (*grid(meta), 1),
                    (*tail, D, meta["Q_TILE_SIZE"], meta["K_TILE_SIZE"], *flags.values()), L.shape)
    return O, L, launch


class FlashAttentionTriton(LeanApply, torch.autograd.Function):
    LAUNCH_ORDER = "longest_first"   # see LAUNCH_ORDERS; the launch-order experiment changes it
    P_CAST = 0                       # the P-cast experiment's variants (0 is the kernel's choice)
    BACKWARD_DQ_MODE = "auto"        # flash_backward_triton.DQ_CHOICES: "auto" fuses the small problems
    BACKWARD_CONFIG = None           # a fa2triton.backward_config.BackwardConfig, or None: its per-GPU default
    # Input signature -> the launch the normal path made for it (see fa2triton.lean_path).
    launches = LaunchCache()

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False, window_size=None):
        window = 0 if window_size is None else int(window_size)
        if window_size is not None and (window < 1 or not is_causal):
            raise ValueError(f"window_size={window_size!r}: a sliding window is a causal band of at least one "
                             "key (query i sees keys i - window < j <= i); pass is_causal=True and window_size >= 1")
        if FlashAttentionTriton.LAUNCH_ORDER not in LAUNCH_ORDERS:
            raise ValueError(f"LAUNCH_ORDER must be one of {', '.join(LAUNCH_ORDERS)}")
        if FlashAttentionTriton.P_CAST not in (0, 1, 2):
            raise ValueError("P_CAST must be 0 (sum then cast), 1 (cast then sum) or 2 (no cast)")
        mode = (bool(is_causal), window, FlashAttentionTriton.LAUNCH_ORDER, FlashAttentionTriton.P_CAST)
        O, L = FlashAttentionTriton.launches(Q, K, V, mode, _checked_launch, ctx)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.is_causal = bool(is_causal)
        ctx.window = window
        return O

    @staticmethod
    def backward(ctx, dO):
        if torch.is_grad_enabled():   # create_graph: the kernels make no graph; the recompute does
            return autograd_backward(ctx, dO)
        Q, K, V, O, L = ctx.saved_tensors
        dQ, dK, dV = backward_kernels.backward_after_forward(
            ctx.forward_launch, Q, K, V, O, L, dO, ctx.is_causal, FlashAttentionTriton.BACKWARD_CONFIG,
            FlashAttentionTriton.BACKWARD_DQ_MODE, all(ctx.needs_input_grad[:3]), window=ctx.window)
        return dQ, dK, dV, None, None


def offline_compile_args(N: int, D: int, dtype: str, batch: int, cfg, causal: bool):
    """For profiling/inspect_kernel.py: v5's positional arguments plus WINDOW (0: none) before the scale,
    and the constexprs this version adds, as its default launch sets them."""
    from fa2triton.offline import forward_args

    args = forward_args(N, D, dtype, batch)
    head_major, reverse = LAUNCH_ORDERS[FlashAttentionTriton.LAUNCH_ORDER]
    return (*args[:-1], 0, args[-1]), {"HAS_WINDOW": False, "HEAD_MAJOR": head_major, "REVERSE": reverse,
                                       "P_CAST": FlashAttentionTriton.P_CAST}
