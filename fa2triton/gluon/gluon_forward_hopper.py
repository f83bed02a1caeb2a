"""v7's Hopper Gluon forward (triton.experimental.gluon): the entry point of a warp-specialized FlashAttention forward
whose wgmma waits are placed by hand, which Triton's own language cannot do.

This module is the host side: applies (what it can run), the launch (launch_plan: descriptors, the work items and
the split tail; forward), the split tail's combine, the lean repeat GluonLaunch, the race of v7's candidates per
input signature (best_launch) and the offline compile. Beside it: gluon_configs (GluonConfig, its shared-memory
budget, the candidates), gluon_kernel (the kernel and its partitions), hopper (the helpers it shares with the
backwards), gluon_ptx (the PTX passes, installed as a stage of Triton's pipeline on import).

Invariants: Q, K, V are read through their flattened (heads * N, D) rows (flattened: no copy, TMA-legal strides);
O and L leave by plain masked stores (that view cannot bound a TMA store at a head's end); L is the natural-log
log-sum-exp. Gluon is not interpreted, so this path runs only on a Hopper GPU; v7 uses its tl path elsewhere.

Why: the tl kernel waits for every wgmma right after each Q K^T, so softmax and tensor cores take turns; every option
tried and what it measured against cuDNN: gluon_forward_hopper_log.md (its table "Retired options").
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from fa2triton.gpu import facts
from fa2triton.lean_path import KeptL, empty_output, run_compiled, templates
from fa2triton.queued_timing import queued_ms
from fa2triton.triton_compat import ptx_options
from fa2triton.gluon import gluon_configs as _configs

try:   # Gluon's kernel, its helpers (hopper) and PTX passes (gluon_ptx)
    from fa2triton.gluon import gluon_kernel as _kernel
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - a Triton without Gluon (the project asks for 3.6 or later, which has it)
    _kernel, HAVE_GLUON = None, False

GluonConfig = _configs.GluonConfig
V7_CANDIDATES, V7_CANDIDATES_WIDE = _configs.V7_CANDIDATES, _configs.V7_CANDIDATES_WIDE
EXPERIMENT_CONFIGS = _configs.EXPERIMENT_CONFIGS
candidates_for, fitting, configs_named = _configs.candidates_for, _configs.fitting, _configs.configs_named
if HAVE_GLUON:
    from fa2triton.gluon import gluon_ptx as _ptx
    drop_marked_syncs, tie_marked_arrives = _ptx.drop_marked_syncs, _ptx.tie_marked_arrives
    partition_syncs, inline_consumer_call = _ptx.partition_syncs, _ptx.inline_consumer_call
    UNSYNCED_MARK, TIE_MARK, INLINE_MARK, CONSUMER_CALL = (_ptx.UNSYNCED_MARK, _ptx.TIE_MARK, _ptx.INLINE_MARK,
                                                           _ptx.CONSUMER_CALL)
    LOADER_REGS = _kernel.LOADER_REGS
    LOG2E, LN2 = _kernel.LOG2E, _kernel.LN2
    _LN2 = _kernel.LN2_C
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    flash_fwd_gluon_ws = _kernel.flash_fwd_gluon_ws

DTYPES = (torch.bfloat16, torch.float16)
HEAD_DIMS = (64, 128)   # those v7's Gluon path has candidates for
NUM_WARPS = 4   # warps per partition (the kernel's num_warps): one warpgroup, every configuration
MAX_SPLITS = 8  # split_plan's most splits per tail tile, and the combine's unrolled loads


def flattened(t: torch.Tensor) -> torch.Tensor | None:
    """(heads, N, D) as (heads * N, D) rows without a copy, or None where the strides do not allow it
    or TMA's rules (16-byte base and row stride, unit last stride) fail."""
    B, N, D = t.shape
    if t.stride(2) != 1 or (B > 1 and t.stride(0) != N * t.stride(1)):
        return None
    e = t.element_size()
    if t.data_ptr() % 16 or (t.stride(1) * e) % 16:
        return None
    return t.as_strided((B * N, D), (t.stride(1), 1))


def applies(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, window: int = 0) -> str | None:
    """None when the Gluon forward can run these inputs, else the reason it cannot."""
    if not HAVE_GLUON:
        return "this Triton has no Gluon"
    if window:
        return "sliding window (tl path only)"
    if Q.dtype not in DTYPES:
        return f"dtype {Q.dtype} (bf16, fp16 only)"
    if Q.shape[2] not in HEAD_DIMS:
        return f"head dimension {Q.shape[2]} (not in {HEAD_DIMS})"
    if Q.device.type != "cuda" or torch.cuda.get_device_capability(Q.device)[0] != 9:
        return "not a Hopper GPU"
    if any(flattened(t) is None for t in (Q, K, V)):
        return "strides TMA cannot address as flattened rows"
    if K.stride() != V.stride():
        return "K and V strides differ"
    return None


def row_descriptor(t: torch.Tensor, rows: int):
    """A host TMA descriptor over t's flattened (heads * N, D) rows (t as `flattened` accepts it), blocks of
    `rows` rows."""
    flat, D = flattened(t), t.shape[2]
    layout = gl.NVMMASharedLayout.get_default_for([rows, D], gl.bfloat16 if t.dtype == torch.bfloat16 else gl.float16)
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [rows, D], layout)


def descriptors(Q, K, V, cfg: GluonConfig):
    """Host TMA descriptors over the flattened rows, blocks of one consumer's 64 rows for Q, (block_n, D) for K, V."""
    return [row_descriptor(t, rows) for t, rows in ((Q, 64), (K, cfg.block_n), (V, cfg.block_n))]


def split_plan(tiles: int, sms: int, key_tiles: int, max_splits: int = MAX_SPLITS) -> tuple[int, int]:
    """split_tail's plan for `tiles` equal programs at one per SM: (whole tiles, splits per tail tile).
    The last wave holds r = tiles mod sms tiles (all of them when tiles < sms) and leaves the other SMs
    idle for a whole tile's time T; split s ways along the keys, those r tiles take ceil(r s / sms)
    waves of T / s instead. The least such time wins (ties: fewer splits), each split keeping at least two
    key tiles; (tiles, 1) when nothing beats T."""
    r = tiles % sms or (tiles if tiles < sms else 0)
    most = min(max_splits, key_tiles // 2)
    best, splits = 1.0, 1
    for s in range(2, most + 1):
        t = math.ceil(r * s / sms) / s
        if t < best - 1e-9:
            best, splits = t, s
    return (tiles - r, splits) if r and splits > 1 else (tiles, 1)


def _combine_tail_kernel():
    """The split tail's combine (a Triton tl kernel, built on first use)."""
    global _COMBINE
    if _COMBINE is None:
        import triton
        import triton.language as tl

        @triton.jit
        def merge(Op_ptr, Lp_ptr, first, cols, SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, D: tl.constexpr):
            """SPLITS parts' max m, weighted sum of O and sum of weights, every part's loads issued before the
            first is used: the first form (a runtime loop, L then O) took 7 to 15 us on the H200 (ncu), as long as
            the last wave it saved."""
            m = tl.load(Lp_ptr + first)
            for s in tl.static_range(1, SPLITS):
                m = tl.maximum(m, tl.load(Lp_ptr + first + s * BLOCK_M))
            acc = tl.zeros([first.shape[0], D], tl.float32)
            w = tl.zeros([first.shape[0]], tl.float32)
            for s in tl.static_range(SPLITS):
                part = first + s * BLOCK_M
                ws = tl.exp2(tl.load(Lp_ptr + part) - m)
                acc += ws[:, None] * tl.load(Op_ptr + part[:, None] * D + cols[None, :])
                w += ws
            return acc, w, m

        global _merge_parts   # a module global: the interpreter's rewrite of combine_tail sees no closure
        _merge_parts = merge

        # SPLITS and the sizes are runtime values, unspecialised, so that a new length reuses the compiled combine
        @triton.jit(do_not_specialize=("FULL", "N_QUERIES", "stride_l_head", "SPLITS"))
        def combine_tail(Op_ptr, Lp_ptr, O_ptr, L_ptr, FULL, N_QUERIES, stride_o_row, stride_l_head, SPLITS,
                         MAX: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, D: tl.constexpr):
            """Program (i, c): rows [c CHUNK, (c + 1) CHUNK) of tail tile FULL + i from its SPLITS (2 to MAX) parts:
            O = sum_s 2^(L_s - m) O_s / sum_s 2^(L_s - m), L = ln 2 (m + log2 sum_s 2^(L_s - m)). One branch per
            split count (a uniform branch), each merge unrolled for its count."""
            i = tl.program_id(0)
            c = tl.program_id(1)
            n_q = tl.cdiv(N_QUERIES, BLOCK_M)
            t = FULL + i
            rows = tl.arange(0, CHUNK)
            cols = tl.arange(0, D)
            first = i * SPLITS * BLOCK_M + c * CHUNK + rows
            acc = tl.zeros([CHUNK, D], tl.float32)
            w = tl.zeros([CHUNK], tl.float32)
            m = tl.zeros([CHUNK], tl.float32)
            for n in tl.static_range(2, MAX + 1):
                if SPLITS == n:
                    acc, w, m = _merge_parts(Op_ptr, Lp_ptr, first, cols, n, BLOCK_M, D)
            q = (t % n_q) * BLOCK_M + c * CHUNK + rows
            head = (t // n_q).to(tl.int64)   # the head's base offset in 64 bits: O may pass 2^31 elements
            keep = q < N_QUERIES
            tl.store(O_ptr + head * N_QUERIES * stride_o_row + q[:, None] * stride_o_row + cols[None, :],
                     (acc / w[:, None]).to(O_ptr.dtype.element_ty), mask=keep[:, None])
            tl.store(L_ptr + head * stride_l_head + q, (m + tl.log2(w)) * _LN2, mask=keep)

        _COMBINE = combine_tail
    return _COMBINE


_COMBINE = None


class SplitTail(NamedTuple):
    """The split tail's workspace and plan, for the combine: O parts (fp32), L parts (log2), whole tiles, splits."""
    Op: torch.Tensor
    Lp: torch.Tensor
    full: int
    splits: int


class LaunchPlan(NamedTuple):
    """Everything one launch needs (launch_plan); tail is None unless the tail is split."""
    kernel: object
    grid: tuple
    args: tuple
    num_warps: int
    flags: dict
    tail: SplitTail | None


def launch_plan(cfg: GluonConfig, Q, K, V, O, L, is_causal: bool, sms: int) -> LaunchPlan:
    """Everything one launch needs: the kernel, grid, positional args, num_warps, constexprs and the split tail."""
    BH, N_q, D = Q.shape
    N_k = K.shape[1]
    args = (*descriptors(Q, K, V, cfg), O, L, O.stride(1), L.stride(0), N_q, N_k, LOG2E / math.sqrt(D))
    flags = dict(CAUSAL=bool(is_causal), SLOTS=cfg.slots, CONSUMERS=cfg.consumers,
                 CONSUMER_REGS=cfg.consumer_registers, PINGPONG=cfg.pingpong, Q_BUFFERS=cfg.q_buffers,
                 DIRECT_STORE=cfg.direct_store, LOOKAHEAD=cfg.lookahead, EXP_TURN=cfg.exp_turn, ONE_Q=cfg.one_q,
                 SHARED_CODE=cfg.shared_code)
    tiles = math.ceil(N_q / cfg.block_m)
    full, splits = tiles * BH, 1
    if cfg.split_tail and not is_causal:
        full, splits = split_plan(tiles * BH, sms, math.ceil(N_k / cfg.block_n))
    parts = (tiles * BH - full) * splits if splits > 1 else 0
    items = full + parts
    if parts:
        Op = torch.empty((parts * cfg.block_m, D), dtype=torch.float32, device=Q.device)
        Lp = torch.empty((Op.shape[0],), dtype=torch.float32, device=Q.device)
        tail = SplitTail(Op, Lp, full, splits)
    else:   # nothing is split: the workspace pointers are never written
        Op, Lp, tail = L, L, None
    grid = (min(items, sms),) if cfg.persistent else (items,)
    splits_arg = max(splits, 2) if cfg.split_tail else splits   # unsplit, no item reads it; 1 would specialise
    return LaunchPlan(flash_fwd_gluon_ws, grid, (*args, full, splits_arg, items, Op, Lp), NUM_WARPS, flags, tail)


def forward(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool, cfg: GluonConfig,
            O: torch.Tensor | None = None, L: torch.Tensor | None = None):
    """O (like Q), L ((heads, N_q) float32, natural log) and the GluonLaunch that repeats this call, for inputs
    `applies` accepted."""
    BH, N_q, D = Q.shape
    if O is None:
        O = empty_output(Q)
    if L is None:
        L = torch.empty((BH, N_q), dtype=torch.float32, device=Q.device)
    kernel, grid, args, num_warps, flags, tail = launch_plan(cfg, Q, K, V, O, L, is_causal,
                                                             facts(Q.device.index).sm_count)
    compiled = kernel[grid](*args, num_warps=num_warps, ptx_options=ptx_options(), **flags)
    combined = combine_tail(*tail, O, L, cfg.block_m) if tail is not None else None
    constexprs = tuple(flags[n] for n in kernel.arg_names if n in flags)   # in signature order
    return O, L, GluonLaunch(compiled, grid, args, constexprs, tail, combined, cfg.label)


def combine_tail(Op: torch.Tensor, Lp: torch.Tensor, full: int, splits: int, O: torch.Tensor, L: torch.Tensor,
                 block_m: int):
    """Write O and L of the tail tiles (tiles full, full + 1, ... in the 1-D order) from their splits'
    parts: Op ((tail tiles * splits * block_m, D) float32, each split's O normalised by its own sum) and
    Lp (log2 of each split's sum of exponentials, in the scaled log2 units of the kernel's scores).
    Returns (the compiled combine, its grid, its constexprs) for a lean repeat."""
    chunk = 32
    grid = (Op.shape[0] // (block_m * splits), block_m // chunk)
    constexprs = dict(MAX=MAX_SPLITS, BLOCK_M=block_m, CHUNK=chunk, D=O.shape[2])
    compiled = _combine_tail_kernel()[grid](Op, Lp, O, L, full, O.shape[1], O.stride(1), L.stride(0), splits,
                                            num_warps=4, **constexprs)
    return compiled, grid, tuple(constexprs.values())


class GluonLaunch(KeptL):
    """A recorded launch of the Gluon forward (fa2triton.lean_path's lean repeat): later calls with the same
    shapes and strides reuse its compiled kernels and descriptors (lean_path.templates), giving only the descriptors'
    bases (the launcher reads base.data_ptr(), the shape and the strides, so the (heads, N, D) tensor
    serves as the base of its flattened view), and allocate O, L and the split tail's workspace. The
    normal path costs 60 to 300 us of host time per call (experiment gluon: do_bench against graph replay)."""

    def __init__(self, compiled, grid, args, constexprs: tuple, tail, combined, label: str):
        self.kernel, self.grid, self.constexprs = compiled, (*grid, *([1] * (3 - len(grid)))), constexprs
        self.label = label                          # the GluonConfig it runs
        self.descs = templates(args[:3])
        self.l_shape = args[4].shape                # O needs no record: every call allocates it by empty_output(Q)
        self.scalars = tuple(args[5:13])            # O's row and L's head strides, sizes, scale, FULL, SPLITS, items
        tail = None if tail is None else SplitTail(*tail)
        self.work_shape = None if tail is None else tail.Op.shape
        self.combine = None
        if combined is not None:
            self.combine, cgrid, self.combine_constexprs = combined
            self.combine_grid = (*cgrid, 1)
            self.combine_sizes = (tail.full, args[7], args[5], args[6], tail.splits)   # FULL, N_QUERIES, .., SPLITS

    def __call__(self, Q, K, V, need_l=True):   # the per-call hot path: no checks here
        O = empty_output(Q)   # as forward allocated it: Q's shape, (heads, N_q, D)
        L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device) if need_l else self.scratch_l(Q)
        return self.run(Q, K, V, O, L)

    def run(self, Q, K, V, O, L):
        """The launch (and the split tail's combine) into O and L already allocated."""
        if self.work_shape is None:
            Op = Lp = L
        else:
            Op = torch.empty(self.work_shape, dtype=torch.float32, device=Q.device)
            Lp = torch.empty(self.work_shape[:1], dtype=torch.float32, device=Q.device)
        run_compiled(self.kernel, self.grid, (*self.descs, O, L, *self.scalars, Op, Lp, *self.constexprs),
                     Q.device.index, None, (Q, K, V))
        if self.combine is not None:
            run_compiled(self.combine, self.combine_grid, (Op, Lp, O, L, *self.combine_sizes, *self.combine_constexprs),
                         Q.device.index)
        return O, L


def best_launch(Q, K, V, is_causal: bool, candidates=None, repeats: int = 20):
    """The fastest of `candidates` (default: candidates_for the head dimension) that fit on these inputs: each
    launched once (compiling), then timed by fa2triton.queued_timing.queued_ms over `repeats` lean repeats (GPU time
    with the host queued ahead: at N = 512 timing host-paced repeats picked the slower candidate, 87% of cuDNN by
    graph replay where the other made 109%). Returns (O, L, the winner's GluonLaunch, {label: (ms per call, its GluonLaunch)}):
    v7 races those within its SHORTLIST_MARGIN again, in alternating order."""
    timed = {}
    candidates = candidates_for(Q.shape[2]) if candidates is None else candidates
    for cfg in fitting(candidates, Q.shape[2], Q.device.index):
        launch = forward(Q, K, V, is_causal, cfg)[2]
        timed[cfg.label] = (queued_ms(lambda launch=launch: launch(Q, K, V), repeats), launch)
    if not timed:
        raise ValueError(f"no Gluon candidate fits a block's shared memory at head dimension {Q.shape[2]}")
    label = min(timed, key=lambda k: timed[k][0])
    O, L = timed[label][1](Q, K, V)
    return O, L, timed[label][1], timed


def offline_plan(cfg: GluonConfig, N: int = 4096, D: int = 64, is_causal: bool = False, heads: int = 32):
    """One configuration's offline compile on meta tensors (fa2triton.offline.OfflinePlan; fa2lab.compile_offline.
    compile_plan compiles it for sm_90 without a GPU, with Triton's bundled ptxas)."""
    from fa2triton.offline import OfflinePlan

    Q = torch.empty(heads, N, D, dtype=torch.bfloat16, device="meta")
    O = torch.empty_like(Q)
    L = torch.empty(heads, N, dtype=torch.float32, device="meta")
    # sms=1: the split plan's numbers are runtime arguments, so any SM count compiles the same code
    kernel, _, args, num_warps, flags, _ = launch_plan(cfg, Q, Q, Q, O, L, is_causal, sms=1)
    return OfflinePlan(kernel, args, dict(num_warps=num_warps, num_stages=1, ptx_options=ptx_options(), **flags))
