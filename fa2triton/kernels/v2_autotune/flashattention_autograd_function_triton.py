"""v2_autotune: v1's kernel wrapped in @triton.autotune.

What the sweep said (Round 1): the best configuration can depend on the shape
(more stages at small N, a narrower key tile for long causal runs), and one
tuned for bf16 at D = 64 can be invalid for fp32 at D = 128.

The change: the kernel is autotuned over this architecture's per-shape sweep
winners (configs.json beside this file), keyed on the lengths, the head
dimension and the mask; the grid is a function of the chosen query tile. The
candidates are fitted to this GPU's shared memory before timing, so none of
them fails with OutOfResources. The kernel body is v1's, unchanged.

Addressing: the article's kernel used block pointers (removed in Triton 3.9); this one computes the same
tiles' addresses directly, with row masks.
"""

import math
from pathlib import Path

import torch
import triton
import triton.language as tl

from fa2triton.inputs import unit_stride, validate_qkv
from fa2triton.configs import load_table, select
from fa2triton.launch import allocate_outputs, autotune_configs, prune_to_fit, smem_limit, strides
from fa2triton.reference import autograd_backward


@triton.jit
def _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_base, V_base, K_offs, V_offs, stride_kk, stride_vk,
                      N_KEYS, scale,
                      K_TILE_SIZE: tl.constexpr, is_causal: tl.constexpr):
    """Fold every key tile into the running (O, l, m) state, masking each one."""
    for k_start in range(0, N_KEYS, K_TILE_SIZE):
        k_in = k_start + tl.arange(0, K_TILE_SIZE) < N_KEYS
        K_j = tl.load(K_base + K_offs, mask=k_in[:, None], other=0.0)
        V_j = tl.load(V_base + V_offs, mask=k_in[:, None], other=0.0)

        S_ij = tl.dot(Q_i, tl.trans(K_j)) * scale                      # (Q_TILE, K_TILE) fp32

        k_pos = (k_start + tl.arange(0, K_TILE_SIZE))[None, :]
        keep = k_pos < N_KEYS
        if is_causal:
            keep = keep & (k_pos <= q_pos)
        S_ij = tl.where(keep, S_ij, -1e6)

        m_new = tl.maximum(m_acc, tl.max(S_ij, axis=1, keep_dims=True))
        P_ij = tl.exp(S_ij - m_new)
        alpha = tl.exp(m_acc - m_new)
        l_acc = alpha * l_acc + tl.sum(P_ij, axis=1, keep_dims=True)
        O_acc = alpha * O_acc
        P_ij = P_ij.to(V_j.dtype)
        O_acc = tl.dot(P_ij, V_j, acc=O_acc)
        m_acc = m_new

        K_base += K_TILE_SIZE * stride_kk
        V_base += K_TILE_SIZE * stride_vk
    return O_acc, l_acc, m_acc


# The per-shape winners of the sweep for this GPU's architecture (configs.json).
CONFIG_TABLE = load_table(Path(__file__).with_name("configs.json"))
ARCH, CANDIDATES = select(CONFIG_TABLE, smem_limit=smem_limit())


# One tuning run per distinct (N_QUERIES, N_KEYS, D, is_causal) and input dtype
# (Triton adds the tensors' dtypes to the key itself).
@triton.autotune(configs=autotune_configs(CANDIDATES), key=["N_QUERIES", "N_KEYS", "D", "is_causal"],
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
    N_QUERIES, N_KEYS,
    scale,
    # compile-time meta-parameters
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    is_causal: tl.constexpr,
):
    query_tile_index = tl.program_id(0)
    batch_index = tl.program_id(1).to(tl.int64)   # 64-bit slice offsets: a tensor may pass 2^31 elements
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

    O_acc = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
    l_acc = tl.zeros((Q_TILE_SIZE, 1), dtype=tl.float32)
    m_acc = tl.full((Q_TILE_SIZE, 1), float("-inf"), dtype=tl.float32)

    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_base, V_base, K_offs, V_offs,
                                            stride_kk, stride_vk, N_KEYS, scale,
                                            K_TILE_SIZE=K_TILE_SIZE, is_causal=is_causal)

    O_i = O_acc / l_acc
    L_i = tl.reshape(m_acc + tl.log(l_acc), (Q_TILE_SIZE,))
    tl.store(O_ptrs, O_i.to(O_ptr.dtype.element_ty), mask=q_in[:, None])
    tl.store(L_ptrs, L_i, mask=q_in)




class FlashAttentionTriton(torch.autograd.Function):

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False):
        validate_qkv(Q, K, V)
        Q, K, V = (unit_stride(t) for t in (Q, K, V))
        B, N_q, D = Q.shape
        O, L = allocate_outputs(Q)
        # The grid depends on the query tile the autotuner picks; the configuration
        # supplies the tiles, warps and stages, so none of them is passed here.
        grid = lambda meta: (triton.cdiv(N_q, meta["Q_TILE_SIZE"]), B)  # noqa: E731
        flash_fwd_kernel[grid](Q, K, V, O, L, *strides(Q, K, V, O, L), N_q, K.shape[1], 1.0 / math.sqrt(D),
                               D=D, is_causal=bool(is_causal))
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.is_causal = bool(is_causal)
        return O

    backward = staticmethod(autograd_backward)
