"""The warp-specialized Gluon kernel of v7's Hopper forward: flash_fwd_gluon_ws and its partitions.

A loader (one warp; with SHARED_CODE a 4-warp default partition) only copies: each work item's query tile, then its K
and V tiles round SLOTS shared-memory slots (hopper.py's ring: wait for the slot's release, copy, its "ready" mbarrier
completes). CONSUMERS (2 or 3) warpgroups of 64 query rows only compute, each releasing a slot (its "empty" barrier
counts one arrival per consumer) once its P V product on it is done. Per key tile a consumer issues Q K_j^T and
P_(j-1) V_(j-1) behind it, waits only for the first and computes tile j's softmax while the second runs, P kept in
registers (FlashAttention-3's producer/consumer split and intra-warpgroup overlap).

Options (compile-time): PINGPONG, the consumers issue their products in turn round a ring of mbarriers (Turn);
EXP_TURN, the same ring taken at the exponentials, the arrive tied to a row sum (gluon_ptx.tie_marked_arrives);
LOOKAHEAD, S_(j+1) issued behind P_(j-1) V_(j-1) (two score tiles live); ONE_Q, one Q buffer released after the
item's last Q K^T; DIRECT_STORE, O stored from the wgmma registers; SHARED_CODE, one copy of the consumers' code,
inlined once by gluon_ptx.inline_consumer_call. Every elected arrive and slot wait is marked (_mark_unsynced) so that
gluon_ptx.drop_marked_syncs drops the bar.sync Triton 3.6 puts before it.

Invariants. Work items (schedule.Schedule): whole tiles first, then the split tail's parts (split_plan); slots, phases
and turns run on over a program's items (g counts its key tiles, it its items, t its turns), so loader and
consumers must walk the same items in the same order. Rows past a head's N belong to the next head: key columns
>= N_KEYS are masked to -inf (only in a causal diagonal or ragged last tile), query rows >= N_QUERIES are never
stored. Top-left causal alignment gives every query row key 0 in its first tile, so m is finite from then on.

State between partitions travels in aggregates: Smem (buffers and barriers), Options, Turn, Schedule, Out and Sizes.
Why: v7's tl kernel cannot place its wgmma waits; measurements in gluon_forward_hopper_log.md. Importing this module
needs Gluon (gluon_forward_hopper guards it).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait
from triton.language.core import _aggregate as aggregate

from fa2triton.triton_compat import reduces_in_trees, splits_wgmma_descriptors, tma_load
from fa2triton.gluon import gluon_ptx as _ptx
from fa2triton.gluon import hopper as _hw
from fa2triton.gluon.schedule import Schedule
LOG2E, LN2, LN2_C = _hw.LOG2E, _hw.LN2, _hw.LN2_C

# The loader warp's registers (setmaxnreg). With 40 the offline sm_90 compile of 3 consumers at 160 serialised their
# wgmma for want of registers; at 24 the work-item loop costs 48 bytes of spill stores, in each consumer's first tile
# of an item (4 STL, 4 LDL), none in the key loop.
LOADER_REGS = 24


_MARK_ASM = gl.constexpr(_ptx.MARK_ASM)
_TIE_ONE_ASM = gl.constexpr(_ptx.TIE_ONE_ASM)
_INLINE_ASM = gl.constexpr(_ptx.INLINE_ASM)
_DESCRIPTOR_ASM = gl.constexpr(_ptx.DESCRIPTOR_ASM)
_DESCRIPTOR_ADDS = gl.constexpr(splits_wgmma_descriptors())
_REDUCE_ASM = gl.constexpr(_ptx.REDUCE_ASM)
_CHAIN_REDUCTIONS = gl.constexpr(reduces_in_trees())
_LOADER_REGS = gl.constexpr(LOADER_REGS)
_LN2 = _hw.LN2_C
wgmma_layout, slot_of, ready_phase, empty_phase = _hw.wgmma_layout, _hw.slot_of, _hw.ready_phase, _hw.empty_phase
Scalar = _hw.Scalar
_mark = _hw.mark

@aggregate
class Smem:
    """The shared memory and mbarriers every partition reads: Q's buffers ([Q_BUFFERS * CONSUMERS, 64, D]),
    the K and V slots ([SLOTS, BLOCK_N, D]), Q's ready and empty barriers ([Q_BUFFERS, 1]) and the slots'
    ([SLOTS, 1])."""
    q: gl.shared_memory_descriptor
    k: gl.shared_memory_descriptor
    v: gl.shared_memory_descriptor
    q_ready: gl.shared_memory_descriptor
    q_empty: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q, k, v, q_ready, q_empty, ready, empty):
        self.q = q
        self.k = k
        self.v = v
        self.q_ready = q_ready
        self.q_empty = q_empty
        self.ready = ready
        self.empty = empty

@aggregate
class Options:
    """The kernel's compile-time choices, as the partitions read them (the module docstring says what each does;
    DIRECT_STORE: O stored from the wgmma registers, without the epilogue's shared-memory layout conversion)."""
    PINGPONG: gl.constexpr
    EXP_TURN: gl.constexpr
    LOOKAHEAD: gl.constexpr
    ONE_Q: gl.constexpr
    DIRECT_STORE: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, PINGPONG, EXP_TURN, LOOKAHEAD, ONE_Q, DIRECT_STORE):
        self.PINGPONG = gl.constexpr(PINGPONG)
        self.EXP_TURN = gl.constexpr(EXP_TURN)
        self.LOOKAHEAD = gl.constexpr(LOOKAHEAD)
        self.ONE_Q = gl.constexpr(ONE_Q)
        self.DIRECT_STORE = gl.constexpr(DIRECT_STORE)

@aggregate
class Turn:
    """A consumer's place in the ring of turns (PINGPONG, EXP_TURN): its own mbarrier, waited for before its turn,
    and the next consumer's, arrived on to pass the turn (each its own [1, 1] allocation)."""
    mine: gl.shared_memory_descriptor
    next: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, mine, next):
        self.mine = mine
        self.next = next

@aggregate
class Out:
    """The epilogue's outputs: O and L, and the split tail's workspace (fp32 O parts, log2-sum-exp parts)."""
    O: gl.tensor
    L: gl.tensor
    Op: gl.tensor
    Lp: gl.tensor

    @gluon.constexpr_function
    def __init__(self, O, L, Op, Lp):
        self.O = O
        self.L = L
        self.Op = Op
        self.Lp = Lp

@aggregate
class Sizes:
    """The epilogue's scalars: the softmax scale (times log2 e), O's row stride and L's head stride."""
    qk_scale: Scalar
    stride_o_row: Scalar
    stride_l_head: Scalar

    @gluon.constexpr_function
    def __init__(self, qk_scale, stride_o_row, stride_l_head):
        self.qk_scale = qk_scale if isinstance(qk_scale, gl.tensor) else gl.constexpr(qk_scale)
        self.stride_o_row = stride_o_row if isinstance(stride_o_row, gl.tensor) else gl.constexpr(stride_o_row)
        self.stride_l_head = stride_l_head if isinstance(stride_l_head, gl.tensor) else gl.constexpr(stride_l_head)

@gluon.jit
def _kv_slot(smem, k):
    """Key tile k's K/V slot (slots and phases run on over a program's key tiles)."""
    return slot_of(k, smem.k.shape[0])

@gluon.jit
def _issue_kv(k_desc, v_desc, k_smem, v_smem, bars, row, slot):
    """TMA K and V rows [row, row + BLOCK_N) into one slot, completing on that slot's mbarrier."""
    bar = bars.index(slot)
    mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma_load(k_desc, [row, 0], bar, k_smem.index(slot))
    tma_load(v_desc, [row, 0], bar, v_smem.index(slot))

@gluon.jit
def _softmax_tile(s, m_i, k_start, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                  s_layout: gl.constexpr, BLOCK_N: gl.constexpr, turn=None):
    """Tile j's share of the online softmax: its new row maxima (log2 units of the scaled scores), P (fp32, against
    those maxima) and alpha, the factor for what came before. Key k is visible to query q when k < N_KEYS and
    k <= q + causal_off (0 under the causal mask, N_KEYS without), tested as k <= min(q + causal_off, N_KEYS - 1):
    one compare and select per score, N_KEYS specialised or not (docs/worklogs/gluon_forward_hopper.md). turn
    (EXP_TURN): (this consumer's turn barrier, the turn's index), waited for once the row maxima are known, before the
    exponentials."""
    if k_start >= mask_from:   # a causal diagonal or a ragged last tile
        k_pos = gl.expand_dims(k_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout)), 0)
        last = gl.minimum(q_pos + causal_off, N_KEYS - 1)   # each row's last visible key
        s = gl.where(k_pos <= gl.expand_dims(last, 1), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    if turn is not None:
        mbarrier.wait(turn[0], turn[1] & 1)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    return p, alpha, m_new

@gluon.jit
def _p_operand(p, dtype: gl.constexpr, p_layout: gl.constexpr):
    """P as the register A operand of P V."""
    return gl.convert_layout(p.to(dtype), p_layout)

@gluon.jit
def _store_rows(acc, l_i, m_i, O_ptr, L_ptr, row0, q_pos, head, N_QUERIES, stride_o_row, stride_l_head,
                row_o: gl.constexpr, WARPS: gl.constexpr, DIRECT: gl.constexpr = False):
    """Epilogue: O = acc / l through a coalescing layout (DIRECT: straight from the wgmma registers, two columns
    per thread and store, without the shared-memory round trip and its barrier), L = ln(2) (m + log2 l); rows past
    N_QUERIES (the next head's) are not stored."""
    ROWS: gl.constexpr = acc.shape[0]
    D: gl.constexpr = acc.shape[1]
    o = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
    if DIRECT:
        out_layout: gl.constexpr = row_o.parent
    else:
        out_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[32 * 8 // D, D // 8],
                                                    warps_per_cta=[WARPS, 1], order=[1, 0])
    o = gl.convert_layout(o.to(O_ptr.dtype.element_ty), out_layout)
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, out_layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, out_layout))
    head = head.to(gl.int64)   # the head's base offset in 64 bits: O may pass 2^31 elements
    o_ptrs = O_ptr + head * N_QUERIES * stride_o_row + gl.expand_dims(rows, 1) * stride_o_row + gl.expand_dims(cols, 0)
    gl.store(o_ptrs, o, mask=gl.expand_dims(rows < N_QUERIES, 1))
    L_i = (m_i + gl.log2(l_i)) * _LN2
    gl.store(L_ptr + head * stride_l_head + q_pos, L_i, mask=q_pos < N_QUERIES)

# ----------------------------------------------------------------------------------------------- the loader

@gluon.jit
def _ws_loader(descs, smem, schedule, opts):
    """The loader: for each of this program's work items, its query tile (into Q buffer it % Q_BUFFERS, once the
    consumers released that buffer's previous tile) and its K, V tiles round the SLOTS slots. g counts key tiles
    over the items, so slots and phases run on across them. ONE_Q: the next item's first SLOTS - 1 key tiles go
    before its query tile, so that with one Q buffer the wait for its release does not hold back the key tiles
    that free slots could take."""
    Q_BUFFERS: gl.constexpr = smem.q_ready.shape[0]
    ROWS: gl.constexpr = smem.q.shape[1] * (smem.q.shape[0] // Q_BUFFERS)   # a query tile's, all consumers'
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    Q_AFTER: gl.constexpr = smem.k.shape[0] - 1 if opts.ONE_Q else 0
    N_QUERIES = schedule.N_QUERIES
    g = 0
    it = 0
    for item in range(gl.program_id(0), schedule.N_ITEMS, gl.num_programs(0)):
        q_start, head, n_tiles, _, _, k_base, _ = schedule.item(item, ROWS, BLOCK_N)
        k_row0 = head * schedule.N_KEYS + k_base
        if Q_AFTER == 0:
            _load_query(descs, smem, N_QUERIES, q_start, head, it)
            _load_keys(descs, smem, k_row0, 0, n_tiles, g)
        else:
            first = gl.minimum(n_tiles, Q_AFTER)
            _load_keys(descs, smem, k_row0, 0, first, g)
            _load_query(descs, smem, N_QUERIES, q_start, head, it)
            _load_keys(descs, smem, k_row0, first, n_tiles, g)
        g += n_tiles
        it += 1

@gluon.jit
def _load_query(descs, smem, N_QUERIES, q_start, head, it):
    """The query tile of the program's it-th work item (every consumer's rows) into Q buffer it % Q_BUFFERS, once
    the consumers released that buffer's previous tile."""
    q_desc = descs[0]
    Q_BUFFERS: gl.constexpr = smem.q_ready.shape[0]
    CONSUMERS: gl.constexpr = smem.q.shape[0] // Q_BUFFERS
    ROWS: gl.constexpr = smem.q.shape[1]
    b = slot_of(it, Q_BUFFERS)
    mbarrier.wait(smem.q_empty.index(b), empty_phase(it, Q_BUFFERS), pred=it >= Q_BUFFERS)
    mbarrier.expect(smem.q_ready.index(b), CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(CONSUMERS):
        tma_load(q_desc, [head * N_QUERIES + q_start + c * ROWS, 0], smem.q_ready.index(b),
                                        smem.q.index(b * CONSUMERS + c))

@gluon.jit
def _load_keys(descs, smem, k_row0, j0, j1, g):
    """Key tiles j0 .. j1 - 1 of a work item whose key tiles start at row k_row0, tile j into slot (g + j) % SLOTS
    once the consumers released it."""
    _, k_desc, v_desc = descs
    SLOTS: gl.constexpr = smem.k.shape[0]
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    for j in range(j0, j1):
        slot = slot_of(g + j, SLOTS)
        # use u of this slot waits for the u-th release of its previous contents
        mbarrier.wait(smem.empty.index(slot), empty_phase(g + j, SLOTS), pred=g + j >= SLOTS)
        _issue_kv(k_desc, v_desc, smem.k, smem.v, smem.ready, k_row0 + j * BLOCK_N, slot)

# ------------------------------------------------------------------------------- barriers, turns and marks

@gluon.jit
def _mark_unsynced():
    """gluon_ptx.UNSYNCED_MARK right after an mbarrier operation, for drop_marked_syncs to remove the bar.sync
    Triton put before that operation."""
    _mark(_MARK_ASM)

@gluon.jit
def _arrive(bar):
    """One consumer's arrival on `bar`: Triton 3.6's elected mbarrier.arrive, marked so that the bar.sync of the
    consumer's 4 warps Triton puts before it is dropped from the PTX (drop_marked_syncs). Thread 0 then arrives
    right after its own warp's wgmma wait, as CUTLASS's consumer_release does from one thread per warpgroup: a
    warpgroup's wgmma is one operation, done for all 4 warps when one warp's wait returns."""
    mbarrier.arrive(bar, count=1)
    _mark_unsynced()

@gluon.jit
def _pass_exp_turn(l_i, turn):
    """EXP_TURN: the next consumer's turn at the exponentials, passed once this tile's exp2s are issued: l_i (the
    row sums, two per thread) is marked for tie_marked_arrives, which makes the arrive wait for the second."""
    gl.inline_asm_elementwise(_TIE_ONE_ASM, "=r,=r,r,r", [l_i], dtype=gl.float32, is_pure=False, pack=2)
    _arrive(turn.next.index(0))

@gluon.jit
def _barrier(count: gl.constexpr):
    """A new mbarrier (its own allocation, [1, 1]) that completes a phase after `count` arrivals."""
    bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bar.index(0), count=count)
    return bar

@gluon.jit
def _take_turn(turn, t, PINGPONG: gl.constexpr):
    """Ping-pong: wait until this consumer may issue its t-th group of products, i.e. until the consumer before it
    in the ring has issued its own. turn = (this consumer's barrier, the next one's), separate allocations."""
    if PINGPONG:
        mbarrier.wait(turn.mine.index(0), t & 1)

@gluon.jit
def _pass_turn(turn, PINGPONG: gl.constexpr):
    """Ping-pong: this consumer has issued its products; the next consumer in the ring may issue."""
    if PINGPONG:
        _arrive(turn.next.index(0))

@gluon.jit
def _query_tile(smem, wg, it):
    """Consumer wg's rows of the query tile of this program's it-th work item (Q buffer it % Q_BUFFERS), once
    they are in."""
    Q_BUFFERS: gl.constexpr = smem.q_ready.shape[0]
    b = slot_of(it, Q_BUFFERS)
    q_tile = smem.q.index(b * (smem.q.shape[0] // Q_BUFFERS) + wg)
    mbarrier.wait(smem.q_ready.index(b), ready_phase(it, Q_BUFFERS))
    return q_tile

@gluon.jit
def _wait_slot(smem, k):
    """Wait until key tile k's slot is ready (slot k % SLOTS; slots and phases run on over a program's key tiles),
    marked so that each warp waits for the slot by itself (drop_marked_syncs)."""
    mbarrier.wait(smem.ready.index(_kv_slot(smem, k)), ready_phase(k, smem.k.shape[0]))
    _mark_unsynced()

# ----------------------------------------------------------------------------------------------- consumers

@gluon.jit
def _first_scores(smem, turn, opts, wg, it, g, t):
    """S_0 = Q K_0^T of this program's it-th work item issued (not waited for), consumer wg's rows: once its query
    tile is in (Q buffer it % Q_BUFFERS) and key tile g's slot is ready, at ping-pong turn t (the program's turns
    so far: each item's S_0 is one turn more than its key tiles' products, and lookahead's S_1 one more). Returns
    the product's token and the query tile."""
    ROWS: gl.constexpr = smem.q.shape[1]
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    s_layout: gl.constexpr = wgmma_layout(4, BLOCK_N)
    q_tile = _query_tile(smem, wg, it)
    mbarrier.wait(smem.ready.index(_kv_slot(smem, g)), ready_phase(g, smem.k.shape[0]))
    _take_turn(turn, t, opts.PINGPONG)
    s_tok = warpgroup_mma(q_tile, smem.k.index(_kv_slot(smem, g)).permute((1, 0)),
                          gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    _pass_turn(turn, opts.PINGPONG)
    return s_tok, q_tile

@gluon.jit
def _issue_tile(smem, turn, opts, q_tile, p_op, acc, zero_s, g, j, slot, prev, t):
    """Key tile k = g + j's group of products at ping-pong turn t + j, not waited for: once its slot is ready,
    S_k = Q K_k^T and P_(k-1) V_(k-1) (into acc; slot and prev: tiles k's and k - 1's slots). Returns S_k's token
    and acc's. The caller passes the turn on."""
    _wait_slot(smem, g + j)
    _take_turn(turn, t + j, opts.PINGPONG)
    s_tok = warpgroup_mma(q_tile, smem.k.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    acc = warpgroup_mma(p_op, smem.v.index(prev), acc, is_async=True)
    return s_tok, acc

@gluon.jit
def _attend(start, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from, causal_off, q_pos, N_KEYS,
            qk_scale):
    """Consumer rows of one work item, from its first scores S_0 (start: their token, issued by _first_scores):
    its n_tiles key tiles from slot index g on (slots and phases run on over the items) and, with ping-pong, turns
    t .. t + n_tiles (EXP_TURN: t .. t + n_tiles - 1, one per tile at its exponentials); every slot read is
    released. Returns the unnormalised O, l and m (log2 units). Each group of products issued (S_0; then S_j with
    P_(j-1) V_(j-1); then the last P V) is one ping-pong turn, taken after the previous consumer's."""
    PINGPONG: gl.constexpr = opts.PINGPONG
    EXP_TURN: gl.constexpr = opts.EXP_TURN
    if EXP_TURN:   # tile 0's turn at the exponentials (tile j's: t + j)
        my_turn = (turn.mine.index(0), t)
    else:
        my_turn = None
    ROWS: gl.constexpr = q_tile.shape[0]
    D: gl.constexpr = q_tile.shape[1]
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    s_layout: gl.constexpr = wgmma_layout(4, BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(4, D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([ROWS, D], gl.float32, o_layout)

    s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(start,))
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
    p, alpha, m_i = _softmax_tile(s_ij, m_i, k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                                  s_layout, BLOCK_N, my_turn)
    l_i = gl.sum(p, axis=1)
    if EXP_TURN:   # the next consumer's turn, once every exp2 of this tile is issued (a row sum reads them)
        _pass_exp_turn(l_i, turn)
    p_op = _p_operand(p, q_tile.dtype, p_layout)
    for j in range(1, n_tiles):
        slot = _kv_slot(smem, g + j)
        prev = _kv_slot(smem, g + j - 1)
        s_tok, acc = _issue_tile(smem, turn, opts, q_tile, p_op, acc, zero_s, g, j, slot, prev, t)
        _pass_turn(turn, PINGPONG)
        s_ij = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
        if EXP_TURN:
            my_turn = (turn.mine.index(0), t + j)
        p, alpha, m_i = _softmax_tile(s_ij, m_i, k_base + j * BLOCK_N, mask_from, q_pos, N_KEYS, causal_off,
                                      qk_scale, s_layout, BLOCK_N, my_turn)
        l_i = l_i * alpha + gl.sum(p, axis=1)
        if EXP_TURN:
            _pass_exp_turn(l_i, turn)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        _arrive(smem.empty.index(prev))       # K_(j-1), V_(j-1) no longer read here
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p_op = _p_operand(p, q_tile.dtype, p_layout)   # P_j's registers written once P_(j-1) V_(j-1) is done
    last = _kv_slot(smem, g + n_tiles - 1)
    if opts.ONE_Q:   # the last Q K^T is done, so the loader may bring the next item's queries in under this
        mbarrier.arrive(smem.q_empty.index(0), count=1)   # last P V and the epilogue
    _take_turn(turn, t + n_tiles, PINGPONG)
    acc = warpgroup_mma(p_op, smem.v.index(last), acc, is_async=True)
    _pass_turn(turn, PINGPONG)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _arrive(smem.empty.index(last))
    return acc, l_i, m_i

@gluon.jit
def _issue_scores(smem, turn, opts, q_tile, zero_s, k, t):
    """S_k = Q K_k^T alone at ping-pong turn t, not waited for (lookahead's S_1): once key tile k's slot is ready.
    Returns its token."""
    _wait_slot(smem, k)
    _take_turn(turn, t, opts.PINGPONG)
    s_tok = warpgroup_mma(q_tile, smem.k.index(_kv_slot(smem, k)).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)
    _pass_turn(turn, opts.PINGPONG)
    return s_tok

@gluon.jit
def _ahead_step(s_cur, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, j, k_base, mask_from, q_pos, N_KEYS,
                causal_off, qk_scale, AHEAD: gl.constexpr):
    """lookahead's key tile j, its scores S_j in flight (s_cur): P_(j-1) V_(j-1) issued and, with AHEAD, S_(j+1)
    behind it (turn t + 1 + j), then tile j's softmax while they run; wgmma groups complete in order, so S_j is
    done once at most AHEAD + 1 groups are left. Returns (S_(j+1) in flight, without AHEAD S_j's values, unused;
    P_j as the A operand; O rescaled by tile j's alpha; m; l)."""
    PINGPONG: gl.constexpr = opts.PINGPONG
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    ROWS: gl.constexpr = acc.shape[0]
    s_layout: gl.constexpr = wgmma_layout(4, BLOCK_N)
    o_layout: gl.constexpr = acc.type.layout      # P V's accumulator and A operand as the caller made them
    p_layout: gl.constexpr = p_op.type.layout
    prev = _kv_slot(smem, g + j - 1)
    if AHEAD:
        # _wait_slot written out: through it ptxas allocates the masked tiles' registers otherwise (46 SASS
        # lines), and this binary was timed
        k = g + j + 1
        mbarrier.wait(smem.ready.index(_kv_slot(smem, k)), ready_phase(k, smem.k.shape[0]))
        _mark_unsynced()
    _take_turn(turn, t + 1 + j, PINGPONG)
    acc = warpgroup_mma(p_op, smem.v.index(prev), acc, is_async=True)
    if AHEAD:
        s_new = warpgroup_mma(q_tile, smem.k.index(_kv_slot(smem, k)).permute((1, 0)),
                              gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False,
                              is_async=True)
    _pass_turn(turn, PINGPONG)
    s_ij = warpgroup_mma_wait(num_outstanding=2 if AHEAD else 1, deps=(s_cur,))
    p, alpha, m_i = _softmax_tile(s_ij, m_i, k_base + j * BLOCK_N, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                                  s_layout, BLOCK_N)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    acc = warpgroup_mma_wait(num_outstanding=1 if AHEAD else 0, deps=(acc,))
    _arrive(smem.empty.index(prev))           # K_(j-1), V_(j-1) no longer read here
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    if not AHEAD:   # (the last tile: no next scores; its own stand in, unused)
        s_new = s_ij
    return s_new, _p_operand(p, q_tile.dtype, p_layout), acc, m_i, l_i

@gluon.jit
def _ahead_end(s_last, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from, q_pos,
               N_KEYS, causal_off, qk_scale):
    """lookahead's last key tile (its scores s_last in flight) and the last P V (turn t + n_tiles + 1). Returns O
    (unnormalised), l and m."""
    _, p_op, acc, m_i, l_i = _ahead_step(s_last, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, n_tiles - 1,
                                         k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale, False)
    last = _kv_slot(smem, g + n_tiles - 1)
    _take_turn(turn, t + n_tiles + 1, opts.PINGPONG)
    acc = warpgroup_mma(p_op, smem.v.index(last), acc, is_async=True)
    _pass_turn(turn, opts.PINGPONG)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _arrive(smem.empty.index(last))
    return acc, l_i, m_i

@gluon.jit
def _attend_ahead(start, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from, causal_off, q_pos, N_KEYS,
                  qk_scale):
    """lookahead: _attend's work item (n_tiles >= 2) with the scores one key tile further ahead. _attend issues S_j
    with P_(j-1) V_(j-1) and waits for S_j at once, so each turn's Q K^T runs with nothing of this consumer's
    beside it. Here S_1 follows S_0 (turn t + 1); each later turn issues P_(j-1) V_(j-1) and then S_(j+1), and tile
    j's softmax, whose scores were issued a turn before, runs while both products do. The price: two score tiles
    live at once and a slot more in use (key tile j + 1 while j - 1 is read). The loop takes two tiles per pass so
    that the two score tiles keep their registers: carried from one pass to the next, an in-flight tile would be
    copied at the loop's end, a read of a running wgmma's accumulator that makes ptxas serialise every wgmma
    (C7514, Triton 3.6's ptxas). Turns t .. t + n_tiles + 1: one more than _attend's. Returns the unnormalised O,
    l and m (log2 units)."""
    ROWS: gl.constexpr = q_tile.shape[0]
    D: gl.constexpr = q_tile.shape[1]
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    s_layout: gl.constexpr = wgmma_layout(4, BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(4, D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    acc = gl.zeros([ROWS, D], gl.float32, o_layout)
    s_a = _issue_scores(smem, turn, opts, q_tile, gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), g + 1, t + 1)
    s_ij = warpgroup_mma_wait(num_outstanding=1, deps=(start,))
    p, alpha, m_i = _softmax_tile(s_ij, gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout)),
                                  k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale, s_layout, BLOCK_N)
    l_i = gl.sum(p, axis=1)
    p_op = _p_operand(p, q_tile.dtype, p_layout)
    for i in range((n_tiles - 2) // 2):   # tiles 1 + 2i (scores in s_a) and 2 + 2i (in s_b)
        s_b, p_op, acc, m_i, l_i = _ahead_step(s_a, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, 1 + 2 * i,
                                               k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale, True)
        s_a, p_op, acc, m_i, l_i = _ahead_step(s_b, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, 2 + 2 * i,
                                               k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale, True)
    if n_tiles % 2 == 1:   # tile n_tiles - 2 (in s_a), then the last (in s_b)
        s_b, p_op, acc, m_i, l_i = _ahead_step(s_a, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t,
                                               n_tiles - 2, k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                                               True)
        result = _ahead_end(s_b, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from,
                            q_pos, N_KEYS, causal_off, qk_scale)
    else:                  # the last tile's scores are in s_a
        result = _ahead_end(s_a, p_op, acc, m_i, l_i, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from,
                            q_pos, N_KEYS, causal_off, qk_scale)
    return result

@gluon.jit(noinline=True)
def _ws_consumer_call(smem, turn, opts, out, wg, schedule, sizes):
    """SHARED_CODE: _ws_consumer as a function of its own, which every consumer partition calls with wg a runtime
    value (a constexpr wg would specialise it), so that the kernel holds one copy of the consumer's code. Its
    barriers become its partition's in the PTX (partition_syncs) and the PTX stage inlines it once."""
    _ws_consumer(smem, turn, opts, out, wg, schedule, sizes)

@gluon.jit
def _ws_consumer(smem, turn, opts, out, wg, schedule, sizes):
    """Consumer wg: for each of this program's work items, rows [q_start + 64 wg, q_start + 64 (wg + 1)) of its
    query tile (_attend, or with LOOKAHEAD _attend_ahead), then its epilogue: O and L, or for a split of a tail
    tile its normalised O (fp32) and log2-sum-exp into the workspace. The Q buffer is released once the item's
    products are done (ONE_Q: after its last Q K^T, in _attend)."""
    qk_scale = sizes.qk_scale
    N_KEYS = schedule.N_KEYS
    Q_BUFFERS: gl.constexpr = smem.q_ready.shape[0]
    CONSUMERS: gl.constexpr = smem.q.shape[0] // Q_BUFFERS
    ROWS: gl.constexpr = smem.q.shape[1]
    D: gl.constexpr = smem.q.shape[2]
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    s_layout: gl.constexpr = wgmma_layout(4, BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(4, D)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    g = 0
    it = 0
    t = 0   # ping-pong turns so far: n_tiles + 1 per item (lookahead's items of 2 or more key tiles: n_tiles + 2;
            # exp_turn's: n_tiles)
    for item in range(gl.program_id(0), schedule.N_ITEMS, gl.num_programs(0)):
        q_start, head, n_tiles, mask_from, causal_off, k_base, part = schedule.item(item, ROWS * CONSUMERS, BLOCK_N)
        row0 = q_start + wg * ROWS
        q_pos = row0 + gl.arange(0, ROWS, layout=row_s)
        s_tok, q_tile = _first_scores(smem, turn, opts, wg, it, g, t)
        # (_attend has two call sites: a flag set under `if LOOKAHEAD` becomes a runtime value in Triton 3.6, which
        # would carry _attend_ahead into every other kernel's PTX)
        if opts.LOOKAHEAD:
            if n_tiles > 1:
                acc, l_i, m_i = _attend_ahead(s_tok, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from,
                                              causal_off, q_pos, N_KEYS, qk_scale)
                turns = n_tiles + 2
            else:
                acc, l_i, m_i = _attend(s_tok, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from,
                                        causal_off, q_pos, N_KEYS, qk_scale)
                turns = n_tiles + 1
        else:
            acc, l_i, m_i = _attend(s_tok, q_tile, smem, turn, opts, g, t, n_tiles, k_base, mask_from, causal_off,
                                    q_pos, N_KEYS, qk_scale)
            turns = n_tiles + 1
            if opts.EXP_TURN:   # one turn per key tile, at its exponentials
                turns = n_tiles
        if not opts.ONE_Q:
            mbarrier.arrive(smem.q_empty.index(slot_of(it, Q_BUFFERS)), count=1)
        g += n_tiles
        it += 1
        t += turns
        if part >= 0:
            rows = part * (ROWS * CONSUMERS) + wg * ROWS + gl.arange(0, ROWS, layout=row_o)
            cols = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
            o = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
            gl.store(out.Op + gl.expand_dims(rows, 1) * D + gl.expand_dims(cols, 0), o)
            gl.store(out.Lp + rows, gl.convert_layout(m_i + gl.log2(l_i), row_o))
        else:
            _store_rows(acc, l_i, m_i, out.O, out.L, row0, q_pos, head, schedule.N_QUERIES, sizes.stride_o_row,
                        sizes.stride_l_head, row_o, 4, opts.DIRECT_STORE)

# Length-like ints unspecialised on 16-divisibility: a new length reuses its class's kernel (issue 49's cold start;
# _softmax_tile's one key bound keeps the masked tile's code as short as a specialised N_KEYS gave: docs/worklogs/
# gluon_forward_hopper.md). A split configuration's launch passes SPLITS >= 2, so that SPLITS == 1 never specialises
# it (tests/test_gluon_forward.py)
@gluon.jit(do_not_specialize_on_alignment=("N_QUERIES", "N_KEYS", "stride_l_head", "FULL", "N_ITEMS"))
def flash_fwd_gluon_ws(
    # TMA descriptors over the flattened (heads * N, D) rows, Q's block 64 rows (one consumer's);
    # O and L are plain pointers
    q_desc, k_desc, v_desc, O_ptr, L_ptr,
    # strides: O's row (its head stride is N_QUERIES rows), L's head
    stride_o_row, stride_l_head,
    # sizes
    N_QUERIES, N_KEYS, qk_scale,
    # work items (schedule.Schedule): whole tiles, splits per tail tile, items; the split tail's workspace (fp32 O
    # parts, log2-sum-exp parts). Program p takes items p, p + programs, ... (one each unless persistent)
    FULL, SPLITS, N_ITEMS, Op_ptr, Lp_ptr,
    # compile-time choices: consumer warpgroups (2 or 3), registers per consumer thread, Q buffers (2 for a
    # persistent grid: the next item's queries load while this one's finish), then Options' and SHARED_CODE
    CAUSAL: gl.constexpr, SLOTS: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    PINGPONG: gl.constexpr, Q_BUFFERS: gl.constexpr, DIRECT_STORE: gl.constexpr, LOOKAHEAD: gl.constexpr,
    EXP_TURN: gl.constexpr, ONE_Q: gl.constexpr, SHARED_CODE: gl.constexpr,
):
    ROWS: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    if _DESCRIPTOR_ADDS:   # the PTX stage's wgmma_descriptor_adds
        _mark(_DESCRIPTOR_ASM)
    if _CHAIN_REDUCTIONS:  # the PTX stage's chain_reduction_trees
        _mark(_REDUCE_ASM)

    q_smem = gl.allocate_shared_memory(dtype, [Q_BUFFERS * CONSUMERS, ROWS, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(Q_BUFFERS):
        mbarrier.init(q_bar.index(b), count=1)
        mbarrier.init(q_empty.index(b), count=CONSUMERS)
    for s in gl.static_range(SLOTS):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=CONSUMERS)
    # The turns: one mbarrier per consumer, each its own allocation, consumer 0's first turn given here.
    turn0 = _barrier(1)
    turn1 = _barrier(1)
    if PINGPONG or EXP_TURN:
        mbarrier.arrive(turn0.index(0), count=1)

    # Each consumer's arguments: the shared memory and barriers, its own turn and the next consumer's, the
    # options, the outputs, its index wg, the work items' description, the sizes of the epilogue.
    smem = Smem(q_smem, k_smem, v_smem, q_bar, q_empty, ready, empty)
    opts = Options(PINGPONG, EXP_TURN, LOOKAHEAD, ONE_Q, DIRECT_STORE)
    schedule = Schedule(N_QUERIES, N_KEYS, FULL, SPLITS, CAUSAL, N_ITEMS)
    loader_args = ((q_desc, k_desc, v_desc), smem, schedule, opts)
    out = Out(O_ptr, L_ptr, Op_ptr, Lp_ptr)
    sizes = Sizes(qk_scale, stride_o_row, stride_l_head)
    if SHARED_CODE:   # the loader is the default partition (4 warps, one issuing), the consumers workers calling
        wg0 = gl.program_id(0) * 0   # one function, consumer 0's index a runtime value like the others'
        _mark(_INLINE_ASM)           # the PTX stage inlines the function once (inline_consumer_call)
        if CONSUMERS == 2:
            gl.warp_specialize([(_ws_loader, loader_args),
                                (_ws_consumer_call, (smem, Turn(turn0, turn1), opts, out, wg0, schedule, sizes)),
                                (_ws_consumer_call, (smem, Turn(turn1, turn0), opts, out, wg0 + 1, schedule, sizes))],
                               [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
        else:
            turn2 = _barrier(1)
            gl.warp_specialize([(_ws_loader, loader_args),
                                (_ws_consumer_call, (smem, Turn(turn0, turn1), opts, out, wg0, schedule, sizes)),
                                (_ws_consumer_call, (smem, Turn(turn1, turn2), opts, out, wg0 + 1, schedule, sizes)),
                                (_ws_consumer_call, (smem, Turn(turn2, turn0), opts, out, wg0 + 2, schedule, sizes))],
                               [4, 4, 4], [CONSUMER_REGS, CONSUMER_REGS, CONSUMER_REGS])
    elif CONSUMERS == 2:   # the default partition (this program's 4 warps) is consumer 0, the loader one warp
        gl.warp_specialize([(_ws_consumer, (smem, Turn(turn0, turn1), opts, out, 0, schedule, sizes)),
                            (_ws_consumer, (smem, Turn(turn1, turn0), opts, out, 1, schedule, sizes)),
                            (_ws_loader, loader_args)], [4, 1], [CONSUMER_REGS, _LOADER_REGS])
    else:
        turn2 = _barrier(1)
        gl.warp_specialize([(_ws_consumer, (smem, Turn(turn0, turn1), opts, out, 0, schedule, sizes)),
                            (_ws_consumer, (smem, Turn(turn1, turn2), opts, out, 1, schedule, sizes)),
                            (_ws_consumer, (smem, Turn(turn2, turn0), opts, out, 2, schedule, sizes)),
                            (_ws_loader, loader_args)], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, _LOADER_REGS])
