"""A FlashAttention forward for Hopper in Gluon (triton.experimental.gluon, Triton 3.6): the wgmma
waits placed by hand, which Triton's own language cannot do.

Why (issue 6; v7_hopper's docstring and results/nvidia-h200/ncu/): v7's tl kernel waits for every
outstanding warpgroup MMA right after each Q K^T, so the softmax of a tile and the tensor cores take
turns. Nsight Compute at N = 4096 non-causal: v7's MUFU busy 49.5% and tensor pipe 48.0%, cuDNN's
52.8% and 51.1%. Here each iteration issues Q K_j^T and then P_(j-1) V_(j-1) behind it, waits only
for the first (wgmma wait with one group left in flight) and computes tile j's softmax while
P_(j-1) V_(j-1) runs: FlashAttention-3's intra-warpgroup overlap. The rescale of O by tile j's
alpha waits for that product and comes after it.

Shape of the kernel (one program per (query tile, head); 4 or 8 warps = 1 or 2 warpgroups, each
owning 64 rows of the tile per warp group of 4 warps):
- Q, K, V are TMA-loaded through host descriptors over the flattened (heads * N, D) rows; K and V
  go round SLOTS shared-memory slots, each with its own mbarrier, refilled SLOTS - 1 tiles ahead.
  Rows past a head's N belong to the next head (or are zero past the tensor's end): key columns at
  or past N_KEYS are masked to -inf, and query rows past N_QUERIES are never stored.
- P goes to the P V product from registers (wgmma's A operand in registers) or, with P_SMEM, through
  two shared buffers (what keeps ptxas from serialising the softmax behind the in-flight product:
  results/offline-sm_90/v7_feasibility/feasibility.md).
- O and L leave by plain masked stores (O through a coalescing layout): the flattened view cannot
  bound a TMA store at the head's end.
- Scores are masked only in the tiles that need it (a causal diagonal, a ragged last tile), chosen
  by a branch on the tile's start; every other tile runs the mask-free softmax.
- Without a sliding window and with top-left causal alignment every query row sees key 0 in the
  first tile, so m is finite from then on and no -inf guard is needed (v7's tl path keeps windows).

Gluon is not interpreted (Triton 3.6: under TRITON_INTERPRET=1 a Gluon launch asks for a CUDA
driver), so this path runs only on a Hopper GPU; v7 uses its tl TMA path everywhere else and the
tests say which path ran.

Where it stands (session 30): v7 races its candidates per input signature (best_launch), and the winner against its
tl path (with either mask). At D = 64 (V7_BASE) they are the persistent 128-row program whose consumers take turns at
their exponentials (/et1), the one-program-per-tile ping-pong form (N = 512: one wave), both with one copy of the
consumers' code inlined once (/sc2), and 192-row tiles with the split tail (N = 4096); at D = 128 (V7_BASE_WIDE) the
persistent 64-key lookahead form, 192-row 64-key tiles with the split tail, and 128-key tiles in three slots beside one
query-tile buffer (/q1). Every round on the H200, what each option was aimed at and what it measured against cuDNN in
the same rounds, kept or not, is recorded in the Gluon log beside this file (gluon_forward_hopper_log.md);
EXPERIMENT_CONFIGS' comments say the same per configuration.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import torch

from fa2lab.gpu import facts
from fa2lab.hostpath import KeptL, empty_output, run_compiled
from fa2lab.provenance import switch_level, switch_on
from fa2lab.shapes import GLUON_HEAD_DIMS as HEAD_DIMS
from fa2lab.tma import PROMOTIONS, TRITON_DEFAULT
from fa2lab.tma import mark as mark_promotion
from fa2lab.timing import queued_ms

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier, tma,
                                                                  warpgroup_mma, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton import knobs
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - a Triton without Gluon
    HAVE_GLUON = False

LOG2E = 1.4426950408889634
# The loader warp's registers (setmaxnreg). With 40 the offline sm_90 compile of 3 consumers at 160 serialised
# their wgmma for want of registers; at 24 the work-item loop costs 48 bytes of spill stores, in each
# consumer's first tile of an item (4 STL, 4 LDL), none in the key loop.
LOADER_REGS = gl.constexpr(24) if HAVE_GLUON else 24
DTYPES = (torch.bfloat16, torch.float16)

# unsynced_arrive. Triton 3.6's shared-memory analysis puts a bar.sync of the consumer's 4 warps before each elected
# mbarrier arrive and before the next shared-memory access after one (_arrive), and Gluon 3.6 has no arrive it leaves
# alone (upstream: triton-lang/triton#8969, #11573). So the kernel marks the mbarrier operations whose bar.sync only
# orders mbarrier operations (_mark_unsynced, right after each), and a PTX stage added to Triton's pipeline
# (knobs.runtime.add_stages_inspection_hook) removes those bar.syncs before ptxas. Triton's cache key does not see
# the hook, only the kernel's source: a changed rewrite needs a new mark. What the analysis also used them for: a
# barrier clears every shared-memory access before it, and the only ones a consumer makes itself (with P in registers,
# no pin_ex2) are its epilogue's, each still separated from the next item's by the unmarked bar.sync before the Q
# buffer's release (mbarrier.arrive on q_empty), which the kernel keeps.
UNSYNCED_MARK = "fa2-unsynced-v1"
# shared_code's shared memory beyond the inlined form's, by head dimension: offline sm_90 compiles (session 28) of 2
# and 3 consumers, 16624-16656 bytes more at D = 64 and 8464 at D = 128
SHARED_CODE_SCRATCH = {64: 16656, 128: 8480}
# row_sum's ones tile: the narrowest wgmma (n = 8); every one of its columns of P (ones) is the row sum
ROW_SUM_COLS = 8
_ONES_ROWS = gl.constexpr(ROW_SUM_COLS) if HAVE_GLUON else None   # the kernel's copy (the ones tile is K-major)
# _exp2_poly's cubic for 2^f on [-0.5, 0.5], highest power first: float32 values of a minimax fit of the relative
# error (Lawson's reweighted least squares over 4001 Chebyshev points)
POLY_EXP_COEFFS = (0.05522262, 0.24261527, 0.6932516, 0.9999276)
# _mark_unsynced's inline PTX: a register move ptxas drops, carrying the mark as a comment
_MARK_ASM = gl.constexpr(f"mov.b32 $0, $1; // {UNSYNCED_MARK}") if HAVE_GLUON else None
_SKIPPABLE = re.compile(r"\s*(//.*|\{|\.reg .*|\.loc .*|waitLoop:|\$L__\w+:"
                        r"|(add|sub|mul|mad|shl|shr|and|or|xor|mov|selp)(\.\w+)+\s+%\w+,[^;]*;)?\s*$")   # no memory
# a partition's bar.sync: `bar.sync <id>, 128` in an inlined partition, whole-CTA `bar.sync 0` in shared_code's
# non-inlined consumer function (which Triton compiles as a 4-warp kernel of its own; partition_syncs, below)
_PARTITION_SYNC = re.compile(r"\s*(?:bar\.sync\s+\d+,\s*128|(?:bar|barrier)\.sync\s+0);\s*$")
# exp_turn's pass of the turn: ptxas moves register-only work across an mbarrier arrive, and in the offline sm_90 SASS
# the arrive after a tile's row sums went up among its first dozen exp2s, so the next consumer's exponentials started
# beside most of this one's. _pass_exp_turn marks the row sums (TIE_MARK, in two register moves ptxas drops) and
# tie_marked_arrives makes the next mbarrier arrive's predicate read them (l >= 0 or unordered: always true), a
# dependency ptxas keeps: the arrive comes after every exp2 of the tile.
TIE_MARK = "fa2-tie-v3"
_TIE_ASM = gl.constexpr(f"mov.b32 $0, $2;\n\tmov.b32 $1, $3; // {TIE_MARK}") if HAVE_GLUON else None
_TIE_ONE_ASM = gl.constexpr(f"mov.b32 $0, $2;\n\tmov.b32 $1, $3; // {TIE_MARK} one") if HAVE_GLUON else None


_TIE_SOURCE = re.compile(r"\s*mov\.b32\s+%\w+,\s*(%\w+);\s*(//\s*" + TIE_MARK + "( one)?)?")
_ELECTED_ARRIVE = re.compile(r"^(\s*)@(%p\d+)\s+(mbarrier\.arrive[^;]*;)\s*$")
# Q's, K's and V's tensormaps as PTX names them: Triton 3.6 passes a 2-D host descriptor as 5 kernel parameters (the
# 128-byte tensormap, 2 sizes, 2 strides), so they are flash_fwd_gluon_ws's parameters 0, 5 and 10 (a wrong name fails
# ptxas; tests/test_gluon_forward.py checks the offline PTX). _prefetch_descriptors and l2_prefetch name them.
_Q_MAP, _K_MAP, _V_MAP = (f"flash_fwd_gluon_ws_param_{i}" for i in (0, 5, 10))
_PREFETCH_MAPS_ASM = gl.constexpr("{ .reg .pred p; setp.eq.s32 p, $1, 0; mov.b32 $0, $1;\n" + ";\n".join(
    f"@p prefetch.param.tensormap [{m}]" for m in (_Q_MAP, _K_MAP, _V_MAP)) + "; }") if HAVE_GLUON else None


def _l2_asm(*maps: str):
    """PTX for l2_prefetch: lane 0 of the loader warp ($1 == 0) asks L2 for the block at row $2, column 0 of each
    tensormap named (_Q_MAP, _K_MAP, _V_MAP), with cp.async.bulk.prefetch.tensor (PTX 8.0, sm_90), which Gluon 3.6
    does not expose."""
    asks = "".join(f"mov.b64 a, {m};\n\tcvta.param.u64 a, a;\n\t"
                   f"@p cp.async.bulk.prefetch.tensor.2d.L2.global.tile [a, {{z, $2}}];\n\t" for m in maps)
    return gl.constexpr("{ .reg .pred p; .reg .b64 a; .reg .b32 z;\n\tsetp.eq.s32 p, $1, 0;\n\tmov.b32 $0, $1;\n\t"
                        "mov.b32 z, 0;\n\t" + asks + "}")


_L2_Q_ASM = _l2_asm(_Q_MAP) if HAVE_GLUON else None
_L2_KV_ASM = _l2_asm(_K_MAP, _V_MAP) if HAVE_GLUON else None


def drop_marked_syncs(ptx: str) -> tuple[str, int]:
    """The PTX without the bar.sync directly before each mbarrier operation that an UNSYNCED_MARK follows (only
    comments, labels, an inline-asm block's opening and register arithmetic between them), and how many were
    removed."""
    lines = ptx.split("\n")
    drop, sync_before = set(), None
    for i, line in enumerate(lines):
        if "mbarrier." in line and not line.lstrip().startswith("//"):
            k = i - 1
            while k >= 0 and _SKIPPABLE.match(lines[k]):
                k -= 1
            sync_before = k if k >= 0 and _PARTITION_SYNC.match(lines[k]) else None
        elif UNSYNCED_MARK in line and sync_before is not None:
            drop.add(sync_before)
            sync_before = None
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), len(drop)


def tie_marked_arrives(ptx: str) -> tuple[str, int]:
    """The PTX with the first predicated mbarrier arrive after each TIE_MARK predicated also on the two marked registers
    (a thread's two rows; setp.geu: l >= 0 or NaN, true for any row sum), or with the mark's "one" on the second
    alone, and how many arrives were tied."""
    lines = ptx.split("\n")
    sources, tied = None, 0
    for i, line in enumerate(lines):
        m = _TIE_SOURCE.match(line)
        if m and m.group(2):   # the mark's second move; the first, on the line before, moves the other row's sum
            sources = (m.group(1),) if m.group(3) else (_TIE_SOURCE.match(lines[i - 1]).group(1), m.group(1))
            continue
        a = _ELECTED_ARRIVE.match(line) if sources else None
        if a:
            indent, pred, arrive = a.groups()
            tests = "".join(f"setp.geu.and.f32 %fa2tie, {r}, 0f00000000, {p}; "
                            for r, p in zip(sources, (pred, "%fa2tie")))
            lines[i] = f"{indent}{{ .reg .pred %fa2tie; {tests}@%fa2tie {arrive} }}"
            sources, tied = None, tied + 1
    return "\n".join(lines), tied


# shared_code's consumer function (_ws_consumer_call): Triton 3.6 compiles a non-inlined function outside any partition,
# so the consumer's own barriers (in an inlined partition `bar.sync <its id>, 128`) come out as whole-CTA `bar.sync 0`,
# which wait for every warp of the kernel: on the H200 the first form hung (session 28, call 7). partition_syncs turns
# each, within that function's body, into a barrier of the calling partition's 128 threads, id
# PARTITION_BARRIER_BASE + tid.x / 128 (the consumers are threads 128-255, 256-383 and with three 384-511: ids 9, 10
# and 11; Triton's own are 0-3). The function reads tid.x & 127 as its thread index, which holds for partitions
# starting at a multiple of 128, and Triton passes each call site a scratch base of its own (offline PTX, D = 64: 8 KB
# apart).
CONSUMER_CALL = "_ws_consumer_call"
PARTITION_BARRIER_BASE = 8
_WHOLE_CTA_SYNC = re.compile(r"^(\s*)(?:bar|barrier)\.sync\s+0;\s*$")


def partition_syncs(ptx: str) -> tuple[str, int]:
    """The PTX with every whole-CTA bar.sync in the body of the CONSUMER_CALL function made a barrier of the calling
    partition's 128 threads, and how many (run after drop_marked_syncs, which drops those a mark makes needless)."""
    lines, in_func, n = ptx.split("\n"), False, 0
    for i, line in enumerate(lines):
        if line.startswith(".visible .entry") or line.startswith(".entry"):
            in_func = False
        elif line.startswith(".func"):
            in_func = CONSUMER_CALL in line
        m = _WHOLE_CTA_SYNC.match(line) if in_func else None
        if m:
            lines[i] = (f"{m.group(1)}{{ .reg .b32 %fa2bar; mov.u32 %fa2bar, %tid.x; shr.u32 %fa2bar, %fa2bar, 7; "
                        f"add.u32 %fa2bar, %fa2bar, {PARTITION_BARRIER_BASE}; bar.sync %fa2bar, 128; }}")
            n += 1
    return "\n".join(lines), n


# shared_code 2: the same function inlined once by the PTX stage (inline_consumer_call), because ptxas 12.8 (Triton
# 3.6's) serialises every wgmma of a called function (warning C7510, "wgmma pipeline crossing function boundary"):
# offline sm_90 SASS of shared_code 1 waits for each HGMMA (24 WARPGROUP.DEPBAR for 24 HGMMA, against 8 for 48
# inlined), and on the H200 it ran at 80-89% of the inlined form's speed (session 29, call 1). Each call sequence
# becomes moves of its arguments into registers, its return index and a branch into the one copy, whose `ret` branches
# back by that index: one function, so ptxas pipelines its wgmma as in the inlined form. The kernel marks the PTX
# (INLINE_MARK) when it asks for it.
INLINE_MARK = "fa2-inline-once"
_INLINE_ASM = gl.constexpr(f"mov.b32 $0, $1; // {INLINE_MARK}") if HAVE_GLUON else None
_REG_DECL = re.compile(r"^\s*\.reg\s+(\.\w+)\s+%(\w+)<(\d+)>;\s*$")
_PARAM_MOVE = re.compile(r"^(\s*)(ld|st)\.param\.(?:v\d\.)?(b\d+)\s+(.*);\s*$")
_PARAM_AT = re.compile(r"\[[^\]]*?param_?(\d+)(?:\+(\d+))?\]")
_FUNC_END = "// -- End function"                            # LLVM's last line of a function, before its "}"
_DEBUG_LABEL = re.compile(r"^\$L__(?:tmp|func_end)\d+:")   # line info's labels (TRITON_DISABLE_LINE_INFO: none)


def _param_moves(line: str, args: dict) -> list[str]:
    """An ld.param (in the function) or st.param (at a call) as register moves, one per element, from or into the
    register args holds for that parameter and byte offset (added on first sight)."""
    indent, op, typ, operands = _PARAM_MOVE.match(line).groups()
    at = _PARAM_AT.search(operands)
    values = _PARAM_AT.sub("", operands).strip().strip(",").strip()
    values = [v.strip() for v in values.strip("{}").split(",")]
    width = int(typ[1:]) // 8
    moves = []
    for e, v in enumerate(values):
        key = (int(at.group(1)), int(at.group(2) or 0) + e * width)
        reg, t = args.setdefault(key, (f"%fa2a{key[0]}_{key[1]}", typ))
        if t != typ:
            raise ValueError(f"parameter {key} moved as {t} and as {typ}")
        moves.append(f"{indent}mov.{typ} \t{v}, {reg};" if op == "ld" else f"{indent}mov.{typ} \t{reg}, {v};")
    return moves


def inline_consumer_call(ptx: str) -> tuple[str, int]:
    """The PTX with the CONSUMER_CALL function inlined once into the kernel (shared_code 2, above), and how many call
    sites now branch into it. Its registers are renamed (%fa2i...) and declared in the kernel, its parameters become
    registers (%fa2a<index>_<byte>), its prototype and definition are removed."""
    lines = ptx.split("\n")
    head = next(i for i, line in enumerate(lines) if line.startswith(".func") and CONSUMER_CALL in line
                and line.rstrip().endswith("("))
    open_ = lines.index("{", head)
    close = lines.index("}", next(i for i in range(open_, len(lines)) if _FUNC_END in lines[i]))
    body = lines[open_ + 1:close]
    decls = [m.groups() for m in map(_REG_DECL.match, body) if m]
    renamed = re.compile(r"%(" + "|".join(sorted({d[1] for d in decls}, key=len, reverse=True)) + r")(\d+)\b")
    args, inlined = {}, ["$fa2_consumer:"]
    for line in body:
        if _REG_DECL.match(line):
            continue
        line = renamed.sub(r"%fa2i\1\2", line)
        if _PARAM_MOVE.match(line):
            inlined += _param_moves(line, args)
        else:
            inlined.append("\tbra.uni \t$fa2_return;" if line.strip() == "ret;" else line)
    out, sites, i = [], 0, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".func") and CONSUMER_CALL in line:   # the prototype (up to its ';') or the definition
            i = close + 1 if i == head else next(k for k in range(i, len(lines)) if lines[k].strip() == ";") + 1
            continue
        end = next(k for k in range(i, len(lines)) if lines[k].lstrip().startswith("} // callseq")) \
            if line.lstrip().startswith("{ // callseq") else i
        if end > i and any(CONSUMER_CALL in s for s in lines[i:end]):
            for s in lines[i + 1:end]:
                if _PARAM_MOVE.match(s):
                    out += _param_moves(s, args)
                elif not re.match(r"\s*(\.param|call)", s):
                    out.append(s)   # the arguments' arithmetic
            out += [f"\tmov.u32 \t%fa2ret, {sites};", "\tbra.uni \t$fa2_consumer;", f"$fa2_ret{sites}:"]
            sites, i = sites + 1, end + 1
            continue
        out.append(line)
        i += 1
    back = [f"\tsetp.eq.u32 \t%fa2r, %fa2ret, {s};\n\t@%fa2r bra.uni \t$fa2_ret{s};" for s in range(sites - 1)]
    ret = ["$fa2_return:", "\t{ .reg .pred %fa2r;", *back, f"\tbra.uni \t$fa2_ret{sites - 1};", "\t}"]
    end = next(i for i, line in enumerate(out) if _FUNC_END in line)   # the kernel's: the function's is gone
    while _DEBUG_LABEL.match(out[end - 1]):   # the body goes inside the kernel's debug range
        end -= 1
    out[end:end] = inlined + ret
    first = next(i for i, line in enumerate(out) if _REG_DECL.match(line))
    out[first:first] = ([f"\t.reg {t} \t%fa2i{name}<{n}>;" for t, name, n in decls] + ["\t.reg .b32 \t%fa2ret;"]
                        + [f"\t.reg .{t} \t{reg};" for reg, t in args.values()])
    return "\n".join(out), sites


def _with_unsynced_stage(previous):
    """A stages hook that runs `previous` (any hook already installed) and wraps the PTX stage in drop_marked_syncs
    and tie_marked_arrives for kernels that carry their marks, and partition_syncs for shared_code's consumer function
    (every other kernel's PTX is left as it is)."""
    def hook(backend, stages, options, language, capability):
        if previous is not None:
            previous(backend, stages, options, language, capability)
        make_ptx = stages.get("ptx")
        if make_ptx is None:
            return

        def ptx(src, metadata):
            text = make_ptx(src, metadata)
            text = drop_marked_syncs(text)[0] if UNSYNCED_MARK in text else text
            text = partition_syncs(text)[0] if CONSUMER_CALL in text else text
            # tied before inlining, whose renamed predicates (%fa2ip<n>) _ELECTED_ARRIVE would not match (session 29,
            # call 2-3's /sc2 and /sc3 ran with exp_turn's pass untied: in their SASS the arrive came before the exp2s)
            text = tie_marked_arrives(text)[0] if TIE_MARK in text else text
            return inline_consumer_call(text)[0] if INLINE_MARK in text else text
        stages["ptx"] = ptx
    hook.fa2_unsynced = True
    return hook


if HAVE_GLUON and not getattr(knobs.runtime.add_stages_inspection_hook, "fa2_unsynced", False):
    knobs.runtime.add_stages_inspection_hook = _with_unsynced_stage(knobs.runtime.add_stages_inspection_hook)


@dataclass(frozen=True)
class GluonConfig:
    """One launch configuration of the Gluon forward. consumers = 0: flash_fwd_gluon (block_m rows,
    num_warps warps all computing and copying); consumers = 2 or 3: flash_fwd_gluon_ws (a loader warp
    and `consumers` warpgroups of 64 rows, block_m = 64 * consumers, num_warps = 4 per partition)."""
    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    slots: int = 2          # K/V shared-memory slots
    p_smem: bool = False    # P through shared memory (True) or registers (False)
    p_buffers: int = 2      # with p_smem: 2 buffers (P_j written under P_(j-1) V_(j-1)), or 1 (written after it)
    overlap: bool = True    # softmax of tile j under P_(j-1) V_(j-1) (False: wait for everything)
    consumers: int = 0      # warp-specialized: consumer warpgroups (0: not warp-specialized)
    pingpong: bool = False  # warp-specialized: consumers take turns issuing their products
    pin_ex2: bool = False   # warp-specialized: a shared-memory store of l ahead of the P V wait (see _pin)
    split_tail: int = 0     # warp-specialized, non-causal: the last wave's tiles split along the keys (split_plan):
                            # 1 (True) the least modelled time, n >= 2 at least n parts per SM
    persistent: bool = False  # warp-specialized: one program per SM looping over the work items, Q double-buffered
    direct_store: bool = False  # warp-specialized: O stored from the wgmma registers, no shared-memory reshuffle
    thread_arrive: bool = False  # warp-specialized: each consumer thread arrives on the slot and turn barriers itself
                                 # (no bar.sync before each arrive; see _arrive)
    item_overlap: bool = False   # persistent: the next work item's first Q K^T issued before this item's epilogue
    tma_prefetch: bool = False   # warp-specialized: the loader prefetches the three TMA descriptors first (_prefetch)
    tma_store: bool = False      # warp-specialized: O leaves by a TMA store from shared memory (_store_o_tma) where
                                 # every consumer's 64 rows lie in one head (N_QUERIES % 64 == 0), else by plain stores
    v_barrier: bool = False      # warp-specialized: each slot's V completes on a barrier of its own, so that Q K_j^T waits
                                 # for K_j alone (FlashAttention-3's separate K and V pipelines)
    tree_max: bool = False       # warp-specialized: each tile's row maxima by halving the registers (_row_max), not one
                                 # serial chain of max per row
    unsynced_arrive: bool = False  # warp-specialized: the key loop's slot and turn arrivals and its slot wait without the
                                   # bar.sync Triton puts before each (drop_marked_syncs), as CUTLASS's pipelines arrive
    poly_exp: int = 0            # warp-specialized: 1 / poly_exp of each thread's exponentials (4: a quarter, 8: an
                                 # eighth) by a polynomial on the FMA and ALU pipes instead of the MUFU (_exp2_mixed)
    mixed: bool = False          # persistent, 3 consumers, non-causal: whole rounds of 192-row items, then the rest of
                                 # each head in 128-row items whose third consumer only passes the pipeline on
                                 # (mix_plan)
    row_sum: bool = False        # warp-specialized, P in registers: each tile's row sums of P by the tensor cores, a
                                 # product of P with a ones tile (BLOCK_N x 8) issued beside P V, not by adds (_attend)
    stream: bool = False         # persistent, non-causal: the next work item's first scores issued with this item's
                                 # last P V and their softmax run before its epilogue (_stream_loop)
    even_registers: bool = False  # 2 consumers: 240 registers each (consumer_registers), not 248 and 232
    lookahead: bool = False      # warp-specialized, P in registers: S_(j+1) = Q K_(j+1)^T issued beside P_(j-1) V_(j-1)
                                 # before tile j's softmax, so that no consumer waits for its own scores (_attend_ahead)
    exp_turn: int = 0            # warp-specialized, instead of ping-pong: the consumers take turns at their exponentials,
                                 # from after a tile's row maxima (ping-pong's ring of mbarriers), so one consumer's exp2s
                                 # have the MUFU while another's products run (cuDNN's order). 1 (/et): the turn passed
                                 # after both of a thread's row sums (tie_marked_arrives); 2 (/et1): after one of them
    fold_first: bool = False     # warp-specialized: each work item's first key tile runs in the key loop (its S_0 issued
                                 # there, beside a product of zeros) instead of before it, so a consumer's code holds one
                                 # copy of the softmax, not two
    l2_prefetch: bool = False    # warp-specialized: with each key tile's copy the loader asks L2 for the tile SLOTS
                                 # further on (into the next work item; cp.async.bulk.prefetch.tensor), so that
                                 # do_bench's cold inputs arrive ahead of the slots (_l2_ahead)
    q_major: bool = False        # warp-specialized, non-causal, whole tiles: work item t is query tile t // heads of head
                                 # t % heads (every head's first tiles, then their next ones), not tile t % tiles of head
                                 # t // tiles, so that a later round of items finds its keys in L2 (_work_item)
    v_first: bool = False        # warp-specialized: a program's first key tile's V completes on a barrier of its own, so
                                 # that its first Q K^T waits for K_0 alone (v_barrier for that tile only; _wait_v)
    one_q: bool = False          # persistent: one query-tile buffer, not two, so that three 128-key slots fit at
                                 # D = 128; released after each item's last Q K^T, the next item's first key tiles
                                 # loaded before its queries (_load_item's Q_AFTER)
    hold_first: int = 0          # warp-specialized: the loader issues a program's key tiles from hold_first on only once
                                 # its first key tile has arrived, so that on cold inputs the first tile's requests
                                 # do not share DRAM with the next SLOTS - 1 tiles' (_load_keys; 0: off)
    narrow_from: int = 0         # warp-specialized: from the program's key tile narrow_from on the loader keeps
                                 # SLOTS - 1 tiles ahead of the consumers, not SLOTS (_load_keys; 0: off; 4, 8, 16 or
                                 # 32): the whole ring for a cold start, one slot less in the steady state
    shared_code: int = 0         # warp-specialized: the consumers run one copy of their code, a function not inlined
                                 # (_ws_consumer_call), as worker partitions beside a 4-warp loader partition, so that
                                 # an SM's instruction caches hold one copy, not two (Nsight Compute: no_instruction);
                                 # 1: called (ptxas serialises its wgmma), 2: inlined once (inline_consumer_call),
                                 # 3: inlined once, with the inlined form's partitions (consumer 0 the default one,
                                 # a one-warp loader): 2's loader runs its loop, waits included, on 4 warps
    l2_promotion: int = 128      # host only: the L2 fetch size in bytes of Q's, K's and V's TMA descriptors (Triton
                                 # 3.6's 128, or 256: fa2lab.tma), which sets how many DRAM requests fill a cold tile;
                                 # the kernel is the same

    def __post_init__(self):
        if self.consumers:
            if self.consumers not in (2, 3) or self.block_m != 64 * self.consumers or self.num_warps != 4:
                raise ValueError(f"a warp-specialized configuration has 2 or 3 consumers of 64 rows and 4 warps "
                                 f"each: {self}")
            if not self.overlap:
                raise ValueError("the warp-specialized form always overlaps")
            if self.item_overlap and not self.persistent:
                raise ValueError(f"item_overlap needs a persistent grid (a next work item): {self}")
        elif self.pingpong or self.pin_ex2 or self.split_tail or self.persistent or self.direct_store \
                or self.thread_arrive or self.item_overlap or self.tma_prefetch or self.tma_store \
                or self.v_barrier or self.tree_max or self.unsynced_arrive or self.poly_exp or self.mixed \
                or self.row_sum or self.stream or self.lookahead or self.exp_turn or self.fold_first \
                or self.l2_prefetch or self.q_major or self.v_first or self.one_q or self.hold_first \
                or self.narrow_from or self.shared_code or self.p_buffers != 2:
            raise ValueError(f"ping-pong, pin_ex2, split_tail, persistent, direct_store, thread_arrive, item_overlap, "
                             f"tma_prefetch, tma_store, v_barrier, tree_max, unsynced_arrive, poly_exp, mixed, row_sum, "
                             f"stream, lookahead, exp_turn, fold_first, l2_prefetch, q_major, v_first, one_q, "
                             f"hold_first, narrow_from, shared_code and one P buffer need the warp-specialized form "
                             f"(consumers = 2 or 3): {self}")
        if self.tma_store and self.direct_store:
            raise ValueError(f"tma_store and direct_store are two ways out for O: one at most: {self}")
        if self.unsynced_arrive and (self.thread_arrive or self.p_smem or self.pin_ex2):
            raise ValueError(f"unsynced_arrive drops bar.syncs that only order mbarrier operations: not with "
                             f"thread_arrive, P in shared memory or pin_ex2, whose shared-memory writes share them: {self}")
        if self.p_buffers not in (1, 2):
            raise ValueError(f"p_buffers is 1 or 2: {self}")
        if self.mixed and (self.consumers != 3 or not self.persistent or self.split_tail or self.item_overlap):
            raise ValueError(f"mixed is a persistent 3-consumer schedule without split_tail or item_overlap: {self}")
        if self.row_sum and (self.p_smem or self.pin_ex2):
            raise ValueError(f"row_sum takes P from registers and keeps no running sum in the loop: not with P in "
                             f"shared memory or pin_ex2 (whose store is of that sum): {self}")
        if self.stream and (not self.persistent or self.p_smem or self.pin_ex2 or self.split_tail or self.mixed
                            or self.item_overlap or self.tma_store or self.row_sum or self.v_barrier):
            raise ValueError(f"stream is a persistent grid of whole tiles with P in registers and the plain epilogue: "
                             f"not with P in shared memory, pin_ex2, split_tail, mixed, item_overlap, tma_store, "
                             f"row_sum or v_barrier: {self}")
        if self.lookahead and (self.p_smem or self.pin_ex2 or self.row_sum or self.stream or self.item_overlap
                               or self.mixed or self.v_barrier):
            raise ValueError(f"lookahead keeps two score tiles in registers and counts its own turns: P in registers, "
                             f"not with pin_ex2, row_sum, stream, item_overlap, mixed or v_barrier: {self}")
        if self.exp_turn and (self.pingpong or self.lookahead or self.stream or self.mixed or self.pin_ex2
                              or self.row_sum):
            raise ValueError(f"exp_turn is a ring of turns at every key tile's exponentials in place of ping-pong's turns "
                             f"at the products: not with ping-pong, lookahead, stream, mixed (whose idle consumers take "
                             f"no turns), pin_ex2 or row_sum (whose row sums are not ready when the turn passes): {self}")
        if self.fold_first and (self.p_smem or self.pin_ex2 or self.row_sum or self.stream or self.item_overlap
                                or self.lookahead or self.v_barrier or self.mixed):
            raise ValueError(f"fold_first issues each item's S_0 in the key loop, P in registers: not with P in shared "
                             f"memory, pin_ex2, row_sum, stream, item_overlap (which issue or need S_0 before it), "
                             f"lookahead, v_barrier or mixed: {self}")
        if self.one_q and (not self.persistent or self.lookahead or self.stream or self.item_overlap or self.mixed):
            raise ValueError(f"one_q is the persistent grid's choice (one program per tile has one Q buffer), its "
                             f"buffer released after each item's last Q K^T in _attend's key loop: not with lookahead, "
                             f"stream, item_overlap or mixed: {self}")
        if self.v_first and (self.v_barrier or self.lookahead or self.fold_first or self.stream or self.mixed):
            raise ValueError(f"v_first gives the first key tile's V a barrier of its own: not with v_barrier (every "
                             f"tile's), lookahead, fold_first, stream or mixed: {self}")
        if self.q_major and (self.split_tail or self.mixed or self.stream):
            raise ValueError(f"q_major orders whole tiles of one size: not with split_tail, mixed or stream: {self}")
        if self.exp_turn not in (0, 1, 2):
            raise ValueError(f"exp_turn is 0 (off), 1 (the turn passed after both row sums) or 2 (after one): {self}")
        if self.even_registers and self.consumers != 2:
            raise ValueError(f"even_registers splits two consumers' registers evenly: 2 consumers only: {self}")
        if self.hold_first not in (0, 1, 2) or self.hold_first >= self.slots:
            raise ValueError(f"hold_first (0, 1 or 2) waits for the first key tile before issuing tile hold_first, "
                             f"which must come before that slot's reuse (hold_first < slots): {self}")
        if self.shared_code not in (0, 1, 2, 3) or self.shared_code == 3 and self.consumers != 2:
            raise ValueError(f"shared_code is 0 (off), 1 (a called function), 2 or 3 (inlined once; 3: two consumers): "
                             f"{self}")
        if self.shared_code and self.even_registers:
            raise ValueError(f"shared_code gives two consumers 240 registers each already: not with even_registers: "
                             f"{self}")
        if self.shared_code in (1, 2) and self.l2_prefetch:
            # _l2_prefetch asks from a one-warp loader; shared_code 1 and 2 make the loader the 4-warp default
            # partition (offline sm_90 at a0e634b: "Layout has 1 warps per CTA, but the context requires 4")
            raise ValueError(f"l2_prefetch needs the one-warp loader: not with shared_code 1 or 2: {self}")
        if self.narrow_from not in (0, 4, 8, 16, 32) or (self.narrow_from and self.narrow_from < self.slots - 1):
            raise ValueError(f"narrow_from is 0 (off), 4, 8, 16 or 32, and at least slots - 1: {self}")
        if self.l2_promotion not in PROMOTIONS:
            raise ValueError(f"l2_promotion is one of {sorted(PROMOTIONS)} bytes: {self}")
        if self.poly_exp not in (0, 4, 8):
            raise ValueError(f"poly_exp is 0 (none), 4 (a quarter of the exponentials) or 8 (an eighth): {self}")

    @property
    def label(self) -> str:
        p = ("psmem" if self.p_buffers == 2 else "psmem1") if self.p_smem else "preg"
        tail = f"{self.slots}s/{p}{'' if self.overlap else '/serial'}"
        if self.consumers:
            split = f"/split{int(self.split_tail) if self.split_tail > 1 else ''}" if self.split_tail else ""
            return f"ws{self.consumers}x64x{self.block_n}/{tail}{'/pp' if self.pingpong else ''}" \
                   f"{'/pin' if self.pin_ex2 else ''}{split}{'/persist' if self.persistent else ''}" \
                   f"{'/ds' if self.direct_store else ''}{'/ta' if self.thread_arrive else ''}" \
                   f"{'/io' if self.item_overlap else ''}{'/pf' if self.tma_prefetch else ''}" \
                   f"{'/ts' if self.tma_store else ''}{'/vb' if self.v_barrier else ''}{'/tm' if self.tree_max else ''}" \
                   f"{'/ua' if self.unsynced_arrive else ''}{f'/px{self.poly_exp}' if self.poly_exp else ''}" \
                   f"{'/mix' if self.mixed else ''}{'/rs' if self.row_sum else ''}" \
                   f"{'/st' if self.stream else ''}{'/er' if self.even_registers else ''}" \
                   f"{'/la' if self.lookahead else ''}{('', '/et', '/et1')[self.exp_turn]}" \
                   f"{'/ff' if self.fold_first else ''}{'/l2' if self.l2_prefetch else ''}" \
                   f"{'/qm' if self.q_major else ''}{'/v0' if self.v_first else ''}" \
                   f"{'/q1' if self.one_q else ''}{f'/h{self.hold_first}' if self.hold_first else ''}" \
                   f"{f'/n{self.narrow_from}' if self.narrow_from else ''}" \
                   f"{('', '/sc', '/sc2', '/sc3')[self.shared_code]}" \
                   f"{self._promotion_label}"
        return f"{self.block_m}x{self.block_n}/{self.num_warps}w/{tail}{self._promotion_label}"

    @property
    def _promotion_label(self) -> str:
        return "" if self.l2_promotion == TRITON_DEFAULT else f"/l2p{self.l2_promotion}"

    @property
    def q_buffers(self) -> int:
        """Query-tile buffers of the warp-specialized form: 2 with a persistent grid (the next item's
        queries load while this item finishes), else 1."""
        return 2 if self.persistent and not self.one_q else 1

    @property
    def consumer_registers(self) -> int:
        """setmaxnreg for the worker consumers: what 2 or 3 consumers and a 24-register loader leave
        of 64 K registers (2: 232, 3: 160). With 2, Triton 3.6 gives the default partition (consumer 0) what the
        worker's count leaves of 480 (the PTX's setmaxnreg: 248 beside 232); even_registers asks 240 for both."""
        return {2: 240 if self.even_registers or self.shared_code in (1, 2) else 232, 3: 160}.get(self.consumers, 0)

    def smem_bytes(self, D: int, elem: int = 2) -> int:
        """Shared memory the kernel allocates: Q, the K/V slots, P's buffers, the mbarriers, and in the
        warp-specialized form each consumer's epilogue scratch (the plain form reuses freed memory)."""
        b = (self.block_m * D * (self.q_buffers if self.consumers else 1) + 2 * self.slots * self.block_n * D) * elem
        if self.p_smem:
            b += self.p_buffers * self.block_m * self.block_n * elem
        if self.consumers:
            b += 0 if self.direct_store else self.block_m * D * elem   # the epilogue's layout conversion (or TMA staging)
            # a row vector's conversion (64 floats), which the conversion's scratch held (offline sm_90 compile: 272
            # bytes more with tma_store, 256 more with direct_store)
            b += 64 * 4 if self.tma_store or self.direct_store else 0
            b += 64   # the modes buffer and alignment (offline sm_90: 32-48 bytes beyond the rest; session 27)
            b += self.block_m * 4 if self.pin_ex2 else 0   # _pin's row sums
            # shared_code: the call sites' scratch (8 KB each at D = 64, offline sm_90), not overlapped with the rest
            b += SHARED_CODE_SCRATCH[D] if self.shared_code else 0
            b += ROW_SUM_COLS * self.block_n * elem if self.row_sum else 0   # row_sum's ones tile
        turns = self.consumers   # ping-pong's mbarriers: one per consumer, allocated with or without it
        q_bars = 2 * self.q_buffers if self.consumers else 1                         # Q ready (and empty)
        barriers = (3 if self.v_barrier else 2) * self.slots + q_bars + turns + int(self.v_first)
        return b + 8 * barriers

    def fits(self, D: int, smem_per_block: int) -> bool:
        return self.smem_bytes(D) <= smem_per_block


# v7's candidates until session 25 (V7_CANDIDATES, below, sets the env switches on V7_BASE; with_option's rounds vary
# these): 128-row tiles on a persistent grid,
V7_BASE_PINGPONG = (
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True),
    # one program per tile: where the tiles fit in one wave (N = 512: 128 tiles on 132 SMs) the persistent
    # loop only costs, 112% of cuDNN by graph replay against 108% (experiment gluon, commits 5e41ce4, e9eed4c)
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True),
    # 192-row tiles with the split tail (N = 4096)
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True),
)
# since session 25 the persistent one's consumers take turns at their exponentials instead (exp_turn 2, call 2 below;
# FA2_V7_EXP_TURN=0: ping-pong's turns); since session 30 both 128-row ones keep one copy of the consumers' code,
# inlined once (shared_code 2; FA2_V7_SHARED_CODE=0 turns it off). Session 30's call 1 (4 rounds, both masks, 075c6a5),
# medians in % of cuDNN, /sc2 against without: persistent /et1 non-causal 100.6/95.8 at N = 512, 100.5/98.2 at 1024
# (paired differences +0.3..+4.4), 100.0/100.0 at 2048, 101.7/102.8 at 4096 (where the 192-row split one wins, 108.2%),
# causal 96.8/96.7, 111.0/107.9, 107.9/107.7, 105.2/105.0; one program per tile (pp/ua) non-causal 97.7/96.9 at 512,
# causal 101.3/99.3 at 512.
V7_BASE = (replace(V7_BASE_PINGPONG[0], pingpong=False, exp_turn=2, shared_code=2),
           replace(V7_BASE_PINGPONG[1], shared_code=2), V7_BASE_PINGPONG[2])
# At head dimension 128 none of those fits a block's shared memory; session 23's calls 3-4 (experiment gluon --D 128,
# 621449f) found 64-key tiles best: the persistent 128-row program at N = 1024/2048 (86.6-87.6% of cuDNN, 88.3%; v7's
# tl path 81 and 78%), 192-row tiles with the split tail at 4096 (95.5%; tl path 73.5%). Session 24 (calls 1-2, ef5c871):
# the 128-row one with lookahead and 4 slots, 89.4/94.5/95.1% at N = 1024/2048/4096 where 3 slots without it made
# 84.8/89.1/90.0% and 4 without it 86.9/88.7/90.4% in the same rounds.
# Session 27 (calls 2-3, experiment gluon --D 128): 128-key tiles in three slots, with one Q buffer and O stored from
# the registers (one_q, direct_store: 229760 bytes), ahead of the lookahead form from N = 2048, non-causal 95.7/98.8%
# of cuDNN at N = 2048/4096 against 93.4/94.2% and causal 107.2/106.0% against 102.3/102.1% in the same rounds (behind
# at 1024: 86.9% against 89.3%); v7 races the three per input signature.
V7_BASE_WIDE = (
    GluonConfig(128, 64, 4, 4, p_smem=False, consumers=2, pingpong=True, persistent=True, lookahead=True),
    GluonConfig(192, 64, 4, 3, p_smem=False, consumers=3, pingpong=True, split_tail=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, direct_store=True,
                one_q=True),
)


def _lookahead(block_n: int, slots: int, **option) -> GluonConfig:
    """Session 24's lookahead forms: 128-row tiles, 2 consumers with ping-pong and unsynced_arrive, P in registers."""
    return GluonConfig(128, block_n, 4, slots, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True,
                       lookahead=True, **option)


def _shared_code_forms(level: int) -> tuple:
    """shared_code's forms (sessions 28-29) at one level: the persistent /et1 candidate with 3 and 4 slots, the
    one-program-per-tile ping-pong candidate and the 192-row split form."""
    return (_exp_turn(128, 3, persistent=True, exp_turn=2, shared_code=level),
            _exp_turn(128, 4, persistent=True, exp_turn=2, shared_code=level),
            GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True,
                        shared_code=level),
            GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True,
                        unsynced_arrive=True, shared_code=level))


def _exp_turn(block_n: int, slots: int, **option) -> GluonConfig:
    """Session 25's exp_turn forms: 128-row tiles, 2 consumers taking turns at their exponentials (tied to both row sums
    unless exp_turn=2 is passed), unsynced_arrive, P in registers."""
    option = {"exp_turn": 1, **option}
    return GluonConfig(128, block_n, 4, slots, p_smem=False, consumers=2, unsynced_arrive=True, **option)


def with_option(**option) -> tuple:
    """v7's candidates of sessions 15-24 (V7_BASE_PINGPONG) with one option set: an option's round in
    EXPERIMENT_CONFIGS."""
    return tuple(replace(c, **option) for c in V7_BASE_PINGPONG)


# What `invoke experiment gluon` measures. Call 1 (3fcda8b, logs/s14_call1_gluon_3fcda8b.log) timed
# the plain form: correct everywhere, at best 0.352 ms at N = 4096 non-causal (128x64/8w/3s/psmem,
# 86% of cuDNN, v7's tl path 96%); more slots helped every tile shape, since its copies are issued
# only after each wait. The warp-specialized form takes the copies off the computing warps.
EXPERIMENT_CONFIGS = (
    GluonConfig(128, 64, 8, 3, p_smem=True),
    GluonConfig(128, 128, 8, 3, p_smem=False),
    GluonConfig(128, 128, 4, 2, p_smem=True, consumers=2),
    GluonConfig(128, 128, 4, 3, p_smem=True, consumers=2),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2),
    GluonConfig(128, 64, 4, 4, p_smem=True, consumers=2),
    GluonConfig(192, 128, 4, 2, p_smem=True, consumers=3),
    GluonConfig(192, 64, 4, 4, p_smem=True, consumers=3),
    GluonConfig(192, 128, 4, 2, p_smem=False, consumers=3),
    # call 2 (6885885): the warp-specialized form with P in registers and 3 slots is the best
    # (0.317 ms at N = 4096 non-causal, v7's tl path 0.320, cuDNN 0.305), and slots matter most:
    GluonConfig(128, 128, 4, 4, p_smem=False, consumers=2),
    GluonConfig(128, 128, 4, 5, p_smem=False, consumers=2),
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3),
    GluonConfig(192, 64, 4, 6, p_smem=False, consumers=3),
    # call 3 (2aa5f3d): ws3x64x128/3s/preg 0.307 ms (cuDNN 0.303, v7's tl path 0.317), level with cuDNN
    # but not ahead; in its SASS each consumer waits for both products before its softmax, so only
    # another consumer's products can fill that time: the consumers take turns (ping-pong).
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True),
    GluonConfig(128, 128, 4, 4, p_smem=False, consumers=2, pingpong=True),
    GluonConfig(128, 128, 4, 3, p_smem=True, consumers=2, pingpong=True),
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, pingpong=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True),
    # call 1 of session 15 (5e41ce4): ping-pong alone 0.294-0.298 ms against cuDNN's 0.294 (ws3, N = 4096
    # non-causal), 0.300 without it: no gain beyond the spread. Each consumer still waited for its P V
    # before its first exp2 (offline SASS), which a store of l ahead of that wait prevents (_pin).
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, pin_ex2=True),
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, pingpong=True, pin_ex2=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, pin_ex2=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, pin_ex2=True),
    GluonConfig(128, 128, 4, 4, p_smem=False, consumers=2, pingpong=True, pin_ex2=True),
    # call 2 (3cb663a): the pin brought no gain either (0.306 against 0.300 ms). Nsight Compute at
    # N = 4096 non-causal (call 3, fed8c95: ncu/v7_hopper_gluon_N4096_noncausal.csv): ws3x64x128/4s/preg/pp
    # keeps the tensor pipe busier than cuDNN while its SMs are active (56.9% against 51.1%) but its SMs are
    # active less of the time (XU 58.7% of active cycles, 51.7% of elapsed; cuDNN 52.8% and 50.6%): 704
    # tiles of 192 rows on 132 SMs are 5.33 waves, the last a third full. split_tail fills that wave.
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, split_tail=True),
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, pingpong=True, split_tail=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True),
    # call 4 (4b22a95): split 0.295 ms at N = 4096 (cuDNN 0.308, same rounds), but it saves 12 us of the 34
    # the wave model promises, and at N = 2048 it costs 7 us. Smaller parts, more of them:
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=2),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=3),
    # calls 5-6 (9d212fb, c88f55c): smaller parts are slower, and at N = 2048 even the split's main kernel
    # gains 2 us of the 10 the wave model promised: each new program fills its pipeline again (about
    # 4 us a part). A persistent grid loads the next item's queries and keys while this one finishes.
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, persistent=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True),
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True),
    GluonConfig(128, 128, 4, 4, p_smem=False, consumers=2, pingpong=True, persistent=True),
    # session 17: at N = 1024 and 2048 v7's kernel alone (torch.profiler) ran 0.3-0.6 us behind cuDNN's after a
    # spin, after the flush and in graph replay (experiment coldstart, 6a04e3d); ncu there showed more barrier
    # and MIO-throttle stalls than cuDNN's. The epilogue's layout conversion is a shared-memory round trip
    # behind a barrier, per consumer and work item: store O from the wgmma registers instead (slower: see above).
    *with_option(direct_store=True),
    # session 18: each of the 3 bar.syncs per key tile and consumer (session 17's ncu: barrier stalls 2.6-2.9 cycles
    # per instruction against cuDNN's 0.8-1.0) comes from Triton's elected-thread mbarrier.arrive (_arrive); with
    # every thread arriving itself the offline PTX keeps 1, before the slot's ready wait (two waits on one
    # allocation without a barrier between them are a hazard to Triton's analysis).
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, thread_arrive=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, thread_arrive=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, persistent=True, thread_arrive=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True,
                thread_arrive=True),
    # call 1 (a2fc7ad): slower everywhere, ws2x64x128/3s/preg/pp/persist from 98.8/99.0/101.1% of cuDNN at N = 1024/
    # 2048/4096 to 93.0/94.3/96.7% (do_bench, 5 rounds), its kernel alone (coldstart) 77.6 -> 82.0 us at 2048: 128
    # arrivals on one barrier cost more than the bar.sync they replace. What a persistent program still does
    # serially per work item: the next item's S_0 waits for this item's epilogue. Issue it first (item_overlap):
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, item_overlap=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True,
                item_overlap=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, tma_prefetch=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, tma_prefetch=True),
    # session 19: O leaves each work item by plain stores after a round trip through shared memory (the layout
    # conversion) behind a barrier, and the consumer starts its next item only when its stores have issued; session
    # 17's ncu had v7's MIO throttle at 0.29-0.31 cycles per instruction against cuDNN's 0.04. A TMA store from a
    # staging buffer leaves the writing to the copy engine.
    *with_option(tma_store=True),
    # call 1 (f154041): within the spread (kernel alone at N = 1024 23.4 -> 23.6 us, 2048 78.0 -> 78.5). What a program
    # waits for before its first product: Q and all of slot 0, V_0 included, though Q K_0^T reads K_0 only. With 132
    # programs loading at once, V_0's 16 KB is a share of the start. V on a barrier of its own:
    *with_option(v_barrier=True),
    # call 2 (baacd40): slower (persist 100.2/99.6% -> 99.0/97.1% at N = 1024/2048; kernel alone at 2048 77.5 -> 80.1
    # us): the extra wait per key tile costs more than the first product gains.
    # session 20: in the offline SASS each consumer's softmax waits, before its first exponential, for a chain of 32
    # dependent max instructions per row (gl.max folds a thread's values one after another): fold by halves (_row_max).
    *with_option(tree_max=True),
    # call 1 (f5cb556): slower (persist 98.0/98.9/102.6% -> 95.7/96.1/98.1% of cuDNN at N = 1024/2048/4096; kernel alone
    # at 2048 78.1 -> 80.9 us after a spin): a softmax that starts sooner does not finish the tile sooner. What else sets
    # each consumer's pace per key tile: the ping-pong turn (a wait and an arrive, with its bar.sync) and, before the
    # first exponential, the wait for P_(j-1) V_(j-1), which pin_ex2 moves below the exponentials. Neither was measured
    # on the persistent grid:
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, persistent=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, pin_ex2=True, persistent=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pin_ex2=True, persistent=True),
    # call 2 (28cf1ec): none faster (N = 1024/2048 do_bench: default 97.9/98.4% of cuDNN, no ping-pong 98.0/98.8, pin
    # 96.2/96.4, pin without ping-pong 95.1/95.5, 4 slots 99.5/98.4). Call 3's ncu at N = 2048 (3b7b459) still has v7's
    # warps stalled at barriers 2.62 cycles per issued instruction against cuDNN's 0.83: the 3 bar.syncs per key tile
    # and consumer that Triton puts before the elected arrives and the slot's wait. Without them (unsynced_arrive):
    *with_option(unsynced_arrive=True),
    # call 4 (c2d6761): 98.5/99.1/101.4% -> 100.9/99.3/102.3% at N = 1024/2048/4096, v7's kernel alone 0.2-1.0 us shorter
    # at 1024 and 2048: kept (V7_CANDIDATES).
    # session 21: ncu at N = 2048 (2eb9943, ncu/v7_hopper_N2048_noncausal.csv and its source page): the tensor pipe
    # active 47.5% of the cycles and the MUFU (XU) 49%, cuDNN's 48.7% and 50.3%, with the FMA pipe at 17%: the products
    # and the exponentials take turns rather than overlap. A quarter or an eighth of the exponentials on the FMA pipe
    # (poly_exp):
    *with_option(unsynced_arrive=True, poly_exp=4),
    *with_option(unsynced_arrive=True, poly_exp=8),
    # call 2 (2c9d9a3): slower wherever a candidate is used (do_bench, 5 rounds; without -> px4 / px8): the persistent
    # ws2 at N = 1024/2048/4096 98.3/99.3/100.9% of cuDNN -> 91.1/94.7/96.1% / 97.4/98.9/99.4%, the split ws3 at 4096
    # 107.7% -> 96.9% / 102.4%; by graph replay the one-program-per-tile ws2 at 512 110.9% -> 100.9% / 105.9%. Each
    # exponential moved costs 8 FMA-pipe and ALU instructions (offline SASS: about 170 more per tile and thread with
    # px4, beside the loop's ~350): the consumers' instruction issue, not the MUFU's throughput, sets the pace.
    # Not timed: P_j packed into registers of its own before the wait for P_(j-1) V_(j-1) (both register sets passed
    # through that wait as its deps, 32 moves more per tile) leaves ptxas's wait where it was, before the tile's first
    # max (offline sm_90 SASS of the three candidates): its scheduler hoists the wait over register-only work whatever
    # registers the product reads, which only a shared-memory access kept below it (pin_ex2) has moved.
    # Call 4's ncu at N = 4096 (7921954): with 3 consumers the tensor pipe and the MUFU overlap (57.8% and 59.7% of
    # cycles), with 2 at 2048 they take turns (47.5%, 49.1%). A third consumer at N = 2048 needs 192-row items, 2.59
    # rounds of them per SM: whole rounds of those, then the rest of each head in 128-row items (mixed):
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, persistent=True, unsynced_arrive=True,
                mixed=True),
    GluonConfig(192, 128, 4, 3, p_smem=False, consumers=3, pingpong=True, persistent=True, unsynced_arrive=True,
                mixed=True),
    # call 5 (42412d5): at N = 2048 97.3% (4 slots) and 97.8% (3) of cuDNN, graph replay 100.0% and 100.3%, against the
    # split ws3's 93.3% (94.7%) and the persistent ws2's 99.1% (101.1%) in the same rounds: a third of the split's loss
    # is left, and ws2 still leads (at 1024 80-81% against 100%, at 4096 96-97% against the split's 108.5%). Not kept.
    # session 22: the consumers' instruction issue sets the pace (poly_exp), and of the ~590 instructions per key tile
    # and thread in the offline sm_90 SASS of the persistent ws2, 68 are the FADDs and 4 the shuffles of the row sums.
    # The tensor cores can take them: P times a tile of ones (n = 8, 1/8 of P V's work) beside each P V (row_sum).
    *with_option(unsynced_arrive=True, row_sum=True),
    # call 1 (ba125be): slower wherever a candidate is used (do_bench, one round; graph replay in brackets): the persistent
    # ws2 at N = 1024/2048/4096 96.5/98.7/101.4% (103.2/101.9/102.0) of cuDNN -> 95.8/95.2/96.5% (99.9/98.1/98.5); the split
    # ws3 at 4096 105.2 -> 108.2% (109.4 -> 109.5), within the spread. v7's kernel alone at 2048 (experiment coldstart with
    # FA2_V7_ROW_SUM=1 and without) 82.0/82.3/80.6 us after a spin / the flush / in graph replay against 78.8/79.0/77.6: the
    # eight m64n8k16 per tile cost the tensor pipe, which P V shares, more than the 66 adds cost the consumers.
    # Key tiles of 64 (half the softmax per turn, twice the turns; more slots in the same shared memory):
    GluonConfig(128, 64, 4, 4, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True),
    GluonConfig(128, 64, 4, 6, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True),
    # call 2 (332342c): slower (88.3/88.1% of cuDNN at N = 1024, 82.3/83.0% at 2048, against 100.6 and 98.8%). Call 5
    # (080f364, experiment items): the same work in 1, 2, 4 or 8 rounds of items per SM costs the persistent ws2 1.30 us
    # more per round, SDPA 1.12, with the key tiles' own time equal (73.8 and 73.9 us): each item's first softmax has
    # no product under it and its last P V no softmax beside it. The next item's S_0 beside this one's last P V (stream;
    # calls 6-7 timed a first form, one loop over all of a program's key tiles: slower, see the Gluon log):
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True,
                stream=True),
    # session 23, head dimension 128: none of V7_CANDIDATES fits a block's shared memory there (3 K/V slots of 128 x 128
    # take 192 KB), so v7 runs its tl path at 75-77% of cuDNN (experiment other-shapes). What fits at D = 128: 2 slots
    # of 128 keys (persistent: 224 KB with Q double-buffered) or 3 of 64; without ping-pong for want of registers
    # (offline sm_90 SASS at D = 128: ping-pong 5 STL / 10 LDL, without it none; 64-key tiles none):
    GluonConfig(128, 128, 4, 2, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True),
    GluonConfig(128, 128, 4, 2, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True),
    GluonConfig(128, 128, 4, 2, p_smem=False, consumers=2, persistent=True, unsynced_arrive=True),
    GluonConfig(128, 64, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True),
    GluonConfig(128, 64, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True),
    # call 3 (30ce6d5, D = 128, do_bench, 5 rounds): 64-key tiles on the persistent grid lead at every N, 86.8/87.6/89.2%
    # of cuDNN at N = 1024/2048/4096 against v7's tl path's 81.2/77.9/77.7%; 128-key tiles 75-86%. More slots for
    # them, O stored from the registers (ds) to free the epilogue's 32 KB, and three consumers (160 registers: no spill
    # with 64-key tiles in the offline SASS, 193 STL with 128-key ones), persistent only with ds (Q double-buffered);
    # with session 22's ws2x64x64/4s above:
    GluonConfig(128, 64, 4, 4, p_smem=False, consumers=2, pingpong=True, persistent=True, direct_store=True,
                unsynced_arrive=True),
    GluonConfig(192, 64, 4, 3, p_smem=False, consumers=3, pingpong=True, unsynced_arrive=True),
    GluonConfig(192, 64, 4, 3, p_smem=False, consumers=3, pingpong=True, split_tail=True, unsynced_arrive=True),
    GluonConfig(192, 64, 4, 3, p_smem=False, consumers=3, pingpong=True, persistent=True, direct_store=True,
                unsynced_arrive=True),
    GluonConfig(192, 64, 4, 3, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True,
                direct_store=True, unsynced_arrive=True),
    # call 4 (621449f): 64-key tiles stay ahead at N = 1024 and 2048 (86.6-88.3%), 192-row tiles with the split tail at
    # 4096 (95.5%); 4 slots or ds no better. The 128-key ping-pong form's spills (5 STL, 10 LDL) are the worker
    # consumer's: with 232 registers it gets 232 and the default partition 248 (PTX setmaxnreg); asking 240 gives both
    # 240 and the offline SASS has no spill (FlashAttention-3's 128 x 128 tiles at D = 128 use 240 per consumer):
    GluonConfig(128, 128, 4, 2, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True,
                even_registers=True),
    GluonConfig(128, 128, 4, 2, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, even_registers=True),
    GluonConfig(128, 64, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True,
                even_registers=True),
    # call 7 (322afd5, D = 128, do_bench, 5 rounds): no faster. The 128-key forms without spills 76.2/77.1/86.5% of cuDNN
    # at N = 1024/2048/4096 (persistent; graph replay 93.9/83.1/86.6%), 70.7/74.2/86.3% (one program per tile); the
    # 64-key persistent form with /er 84.3/87.7/88.8% against 87.1/88.8/89.7% without, in the same rounds.
    # session 24: in the offline SASS of every candidate each consumer waits for its S_j right after issuing it, and (ptxas's
    # placement) for P_(j-1) V_(j-1) before the tile's first exp2, so its exponentials never run beside a product of its own:
    # only the other consumer's products can fill that time, and v7's ncu at N = 2048 had the tensor pipe and the MUFU
    # busy 47.5% and 49% of the cycles, by turns. With a head dimension of 64 O takes 32 registers per thread, so a second
    # score tile fits: S_(j+1) issued behind P_(j-1) V_(j-1) before tile j's softmax (lookahead, _attend_ahead). Offline
    # sm_90 SASS (persistent, 4 slots): the exponentials run with S_(j+1) in flight (waits D2, D1, then 66 MUFU.EX2 per
    # tile), no spill in the key loop (spills per work item outside it: 65 STL with 240 registers per consumer).
    _lookahead(128, 4, persistent=True),
    _lookahead(128, 3, persistent=True),
    _lookahead(128, 4, persistent=True, even_registers=True),
    _lookahead(128, 4),
    # and at head dimension 128 the 64-key form (a score tile there is 32 registers):
    _lookahead(64, 3, persistent=True),
    _lookahead(64, 4, persistent=True),
    # calls 1-2 (ef5c871): slower at D = 64 (75.7-95.9% of cuDNN against 98.4-102.2%), faster at D = 128 (the 4-slot
    # 64-key form 89.4/94.5/95.1% against 86.9/88.7/90.4% without lookahead), v7's D = 128 candidate since. At D = 128
    # and N = 4096 its 1024 work items are 7.76 rounds on 132 SMs; the same form with the split tail (offline sm_90: no
    # spill, no serialised wgmma, 213 KB of shared memory) made 94.9% of cuDNN there against 95.8% without the split
    # (session 25, call 2):
    _lookahead(64, 4, persistent=True, split_tail=True),
    # session 25: Nsight Compute's source page of cuDNN's kernel at N = 2048 (ncu/source/, session 21's run) has one
    # named barrier wait per key tile after the row maxima and before the first exp2, and its arrive among the last
    # exp2s: its consumers take turns at the exponentials, so the MUFU of each SM sub-partition serves one consumer's
    # warp at a time while the other's products run. v7's ping-pong turns order the issue of the products instead,
    # and both consumers' exponentials can meet on the MUFU. exp_turn moves the ring of turns to the exponentials
    # (offline sm_90 SASS: the turn's wait before the tile's first MUFU.EX2, its arrive after the 66th):
    _exp_turn(128, 3, persistent=True),
    _exp_turn(128, 3),
    _exp_turn(128, 4, persistent=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, split_tail=True, persistent=True, unsynced_arrive=True,
                exp_turn=1),
    _exp_turn(64, 4, persistent=True),   # head dimension 128
    # call 1 (b435f60, one round): correct, and slower by do_bench: 97.6/97.1/101.8% of cuDNN at N = 1024/2048/4096
    # against ping-pong's 99.5/99.2/102.0% (graph replay level: 101.4/101.1/100.5 against 101.6/101.2/98.6), the
    # 192-row split form 101.7% at 4096 against 109.2%. In the offline SASS the tied arrive comes 20 instructions and
    # two shuffle rounds after the tile's last MUFU.EX2, the row sums' tail, which the next consumer waits for (untied,
    # ptxas put it after the 10th of 66). Tied to one of a thread's two rows (/et1) it comes before the last 6, where
    # cuDNN's is:
    _exp_turn(128, 3, persistent=True, exp_turn=2),
    _exp_turn(128, 4, persistent=True, exp_turn=2),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, split_tail=True, persistent=True, unsynced_arrive=True,
                exp_turn=2),
    # call 2 (7bee9bc): the persistent 128-row form with /et1 made 98.6/100.5/102.9% of cuDNN at N = 1024/2048/4096
    # against ping-pong's 98.0/98.5/100.8% in the same rounds (graph replay 104.9/104.7/105.0 against 101.1/102.4/102.7),
    # 4 slots 99.3/100.8/102.4; the 192-row split form slower (104.0% at 4096 against 106.3). The persistent 128-row
    # candidate takes /et1 since; the one-program-per-tile form with it (N = 512's candidate):
    _exp_turn(128, 3, exp_turn=2),
    # call 3 (36f55d8): 99.2% of cuDNN at N = 512 against the ping-pong form's 103.8% (graph 112.3 against 111.6), and
    # level with it beyond (92.6/92.2% against 92.1/91.1% at 1024/2048): N = 512's candidate keeps ping-pong.
    # After call 5: experiment coldstart put v7's remaining gap at N = 1024 in the cost of do_bench's flush, most of it
    # for the kernel's code (evicted from L2 with the inputs): ncu's source page at N = 2048 (36f55d8) has v7 executing
    # 2846 distinct instructions (45.5 KB of code) where cuDNN executes 1023 (16.4 KB), 1470 of v7's once per work item
    # (cuDNN's: 192), chief among them a second copy of the softmax in each consumer, for each item's first key tile.
    # fold_first runs that tile in the key loop (offline sm_90 SASS: 2968 instructions against 4136, 132 MUFU.EX2
    # against 260, no spill, no serialised wgmma):
    _exp_turn(128, 3, persistent=True, exp_turn=2, fold_first=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, fold_first=True),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True,
                unsynced_arrive=True, fold_first=True),
    # Session 26, call 1 (36ae844): /ff is slower at every N, each form against itself without it in the same rounds
    # (persistent /et1: 96.7/96.2/96.1/101.5% of cuDNN at N = 512-4096 against 94.5/97.6/100.3/104.1; ping-pong and
    # the 192-row form 1-7 points down from 1024 on): its product of zeros is one more P V per item, and the code it
    # saves was not the gap. That reading was wrong: experiment coldstart's flush_code is the code warm and the data
    # cold. At 36f55d8 warming the inputs took v7's flush cost from 2.6 to 0.6 us (cuDNN's: 2.0 to 0.6) and warming
    # the code took it to 2.4 (cuDNN's: 1.4); and v7's time after the flush stayed at 27.7-28.0 us in every clean
    # coldstart run at N = 1024 from a81f69f to 36f55d8 while its warm time fell from 25.9 to 25.2: with cold inputs
    # the key loop waits for them, and what /et1 gained does not show. l2_prefetch asks L2 for them ahead of the slots:
    _exp_turn(128, 3, persistent=True, exp_turn=2, l2_prefetch=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, l2_prefetch=True),
    _exp_turn(128, 4, persistent=True, exp_turn=2),
    # call 2 (572b0be) asked for all of an item's tiles at once: 99.0/101.2/93.6/91.7% at N = 512-4096 against /et1's
    # 97.2/99.8/100.3/103.2, graph replay down as much, and v7's time after the flush at N = 1024 the same with and
    # without it (kernel alone 24.4 us, cuDNN 24.0): the burst held the loader's copies back. The same labels since ask
    # for one tile per copy (_l2_ahead). 4 slots: 98.6/99.9/101.2/104.0%.
    _exp_turn(128, 4, persistent=True, exp_turn=2, l2_prefetch=True),
    # call 3 (c11a509), one tile per copy: 95.0/98.5/99.8/101.1% against /et1's 99.5/97.2/100.1/103.3, graph replay 1-3
    # points down at every N, and again no change after the flush at N = 1024 (kernel alone 24.5 us, cuDNN 24.0): what
    # the flush costs v7 beyond cuDNN is not its key tiles arriving late. 4 slots: 98.8/97.3/100.6/101.9%. The order of
    # the work items decides which of them start on cold inputs: q_major makes each later round of items reuse the
    # keys of the first one:
    _exp_turn(128, 3, persistent=True, exp_turn=2, q_major=True),
    # call 5 (38a85a2, experiment items): /et1 pays 1.25-1.27 us per round of work items where cuDNN pays 1.04-1.08, and
    # its key tiles are 3% faster. item_overlap (the next item's S_0 issued before this item's epilogue) was slower with
    # ping-pong's turns (a81f69f); with the turns at the exponentials:
    _exp_turn(128, 3, persistent=True, exp_turn=2, item_overlap=True),
    # call 7 (5653254): 96.8/95.5/97.5/101.8% against 96.3/97.2/100.0/103.6, graph replay 2-6 points down: negative
    # again. Call 8 (641f881), experiment items with do_bench's flush: the flush adds 1.5 us to /et1's line at no rounds
    # (71.6 -> 73.1) and nothing per round (1.23 -> 1.13 us), cuDNN's 0.5 (73.3 -> 73.8; 1.13 -> 1.02): v7's extra
    # cost after the flush is paid once, at the start, on cold inputs. Two starts that might be shorter: the TMA
    # descriptors prefetched first, and K_0 waited for without V_0:
    _exp_turn(128, 3, persistent=True, exp_turn=2, tma_prefetch=True),
    _exp_turn(128, 3, persistent=True, exp_turn=2, v_barrier=True),
    # call 9 (0b248ea), experiment items: the flush adds 1.7 us to /et1's line at no rounds, 1.6 with the prefetch, 1.0
    # with V on its own barriers (whose warm line is 2 us higher), cuDNN's 0.8: on cold inputs the first Q K^T waits
    # for V_0 as well. v_first gives that one tile's V a barrier of its own:
    _exp_turn(128, 3, persistent=True, exp_turn=2, v_first=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, v_first=True),
    # call 10 (a9575e4), its first form (the wait beside every P V's issue): the flush added 1.0 us at no rounds
    # against /et1's 1.8, but its warm line rose 1.6 us (72.9 against 71.3), and experiment gluon had it level or
    # slower (98.9/99.6/103.6% at 1024-4096 against 99.2/100.6/104.3). Since, the wait follows S_0's issue, once per
    # consumer and item, and offline the two consumers' key loops are the same SASS as without v_first. Session 27
    # (calls 1-2, 7f514ec): level, 101.6/100.2/104.0% against 101.5/100.7/103.4% and 73.0 us after the flush at no
    # rounds against 73.1: a negative result.
    # At D = 128, ncu (call 5, N = 2048) has cuDNN's kernel at 64x128x128 tiles in 232448 bytes of shared memory (one
    # 128-row query tile and three slots of 128 keys, by the sizes) and 113.3 us against v7's 131.5 (64-key tiles). v7's
    # 128-key forms fitted two slots there (71-86% of cuDNN, sessions 23-24). With one Q buffer and O stored from the
    # registers, three fit (offline sm_90: 229760 bytes, no spill). Session 27: ahead of the lookahead candidate from
    # N = 2048 (86.9/95.7/98.8% of cuDNN at 1024/2048/4096 against 89.3/93.4/94.2%, call 3), v7's third D = 128
    # candidate since (V7_BASE_WIDE); the one-program-per-tile form 81.7/90.8/98.8% (call 2):
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True,
                direct_store=True, one_q=True),
    _exp_turn(128, 3, persistent=True, exp_turn=2, direct_store=True, one_q=True),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, direct_store=True),
    # Session 28: Triton 3.6 encodes every host TMA descriptor with 128 bytes of L2 promotion, where CUTLASS-style
    # Hopper kernels often ask for 256; at N = 1024 v7 loses its 0.6% to cuDNN at the start, on the inputs do_bench's
    # flush left in DRAM. v7's six candidates with 256 (the kernels unchanged, fa2lab.tma):
    _exp_turn(128, 3, persistent=True, exp_turn=2, l2_promotion=256),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, l2_promotion=256),
    GluonConfig(192, 128, 4, 4, p_smem=False, consumers=3, pingpong=True, split_tail=True, persistent=True,
                unsynced_arrive=True, l2_promotion=256),
    _lookahead(64, 4, persistent=True, l2_promotion=256),
    GluonConfig(192, 64, 4, 3, p_smem=False, consumers=3, pingpong=True, split_tail=True, unsynced_arrive=True,
                l2_promotion=256),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True,
                direct_store=True, one_q=True, l2_promotion=256),
    # Session 28 call 1 (6ba7bb7): level. 99.3% of cuDNN at N = 1024 against 99.4% without, the kernel alone after the
    # flush 24.4 us against 24.2 (cuDNN 24.0), experiment items' flush line at no rounds 73.0 against 73.1 us: the
    # fetch size is not what the cold start waits for. A negative result (FA2_V7_L2_256=1).
    # Is it the number of requests in flight when the inputs are cold? The persistent candidate with 2 and 4 slots
    # beside its 3, and with the loader holding its second (or third) key tile back until the first has arrived:
    _exp_turn(128, 2, persistent=True, exp_turn=2),
    _exp_turn(128, 3, persistent=True, exp_turn=2, hold_first=1),
    _exp_turn(128, 3, persistent=True, exp_turn=2, hold_first=2),
    # Call 2 (6c1b28a), experiment items (5 rounds), the flush's cost at no rounds (after the flush less after the
    # spin): 3 slots 1.6 us (71.5 -> 73.1), 4 slots 0.8 (72.5 -> 73.3), hold_first 1 1.9 and 2 1.6, cuDNN 0.8; 2 slots
    # runs at 122 us (the loader a tile short of the ring of turns). Fewer requests in flight make the cold start no
    # shorter; 4 slots pay it back by a warm line 1 us higher. experiment gluon at N = 1024 (two runs): 3 slots
    # 100.7/99.3% of cuDNN, 4 slots 99.5/99.4, hold_first 1 99.2/97.3, hold_first 2 100.7/97.2. Negative results.
    # Does the warm line rise with the loader's lead (4 tiles ahead) or with the 4-slot kernel itself? 4 slots whose
    # loader keeps 3 ahead after the program's first 4 or 8 key tiles:
    _exp_turn(128, 4, persistent=True, exp_turn=2, narrow_from=4),
    _exp_turn(128, 4, persistent=True, exp_turn=2, narrow_from=8),
    # Call 4 (5764ea0), experiment items, warm -> after the flush at no rounds: 3 slots 71.6 -> 73.4 us, 4 slots 72.6 ->
    # 73.2, /n4 72.2 -> 74.5, /n8 72.3 -> 74.4, cuDNN 73.3 -> 74.0. With the lead narrowed the warm line stays up and
    # the cold start is longer than with 3 slots: the 4-slot kernel's warm cost is not its lead, and its shorter cold
    # start comes from the lead all along the item, not from its first tiles. experiment gluon at N = 1024 (three
    # runs): 3 slots 101.4/96.6/96.4%, 4 slots 99.5/97.4/99.5, /n4 99.7/97.4/95.2, /n8 100.8/96.6/96.3. Negative.
    # Is it the shared memory the fourth slot takes from L1 (180352 bytes against 147584)? 4 slots in less, one query
    # buffer (/q1, 163968 bytes) or O stored from the registers (/ds, 164224), beside 3 slots with one query buffer:
    _exp_turn(128, 4, persistent=True, exp_turn=2, one_q=True),
    _exp_turn(128, 3, persistent=True, exp_turn=2, one_q=True),
    _exp_turn(128, 4, persistent=True, exp_turn=2, direct_store=True),
    # Call 5 (a1f597d), experiment items, warm -> after the flush at no rounds: 3 slots 71.5 -> 73.0 us, 4 slots 72.2 ->
    # 72.8, 4 slots /q1 72.5 -> 72.7, 3 slots /q1 71.6 -> 72.3, 4 slots /ds 74.9 -> 75.2 (cuDNN 73.4 -> 73.8); one query
    # buffer costs 1.4-1.5 us per round of items. In less shared memory 4 slots keep their warm line: it is the fourth
    # slot, not what it takes from L1. experiment gluon at N = 1024 (three runs): 3 slots 99.6/98.7/98.9%, 4 slots
    # 99.9/99.5/99.5, 4/q1 95.8/99.1/94.8, 3/q1 98.7/100.2/97.9, 4/ds 93.6/95.4/93.2. Nothing changed in V7_BASE.
    # Call 6 (624048c), Nsight Compute at N = 1024 (its cache flush): warps stalled for an instruction 0.42-0.48 cycles
    # per issued instruction against cuDNN's 0.13-0.19 (at 2048 0.21 against 0.08), and on constant-cache misses 0.15
    # against 0.02. Each consumer partition inlines its own copy of the consumer's code (4136 instructions in all);
    # CUTLASS's consumers share one. shared_code: one copy, called by both (offline sm_90: 2240 instructions, no spill;
    # with three consumers, v7's 192-row candidate at N = 4096: 2304 instructions against 6520, 3 spill stores against
    # 12, 221608 bytes of shared memory):
    *_shared_code_forms(1),
    # Call 7 (58d0bff): that first form hung on the H200 at experiment gluon's check (every step cut at its deadline,
    # the run's device time spent). Offline, the function's barriers were whole-CTA bar.syncs (Triton compiles it
    # outside any partition), which wait for all 12 warps; partition_syncs makes them its partition's (after call 7).
    # Session 29, call 1 (5bb6cd4): it runs (smoke and check pass) but is slower everywhere, % of cuDNN at N = 512 /
    # 1024 / 2048 / 4096 in the same rounds: /et1 93.8/101.5/99.9/103.3 against /et1/sc 94.9/88.2/82.5/83.0 (4 slots
    # the same), /pp/ua 98.8/90.4/90.6/97.2 against /pp/ua/sc 93.2/80.1/76.6/80.2, the 192-row one 84.5/81.0/92.9/108.6
    # against /sc 75.1/71.6/76.2/81.9. Its per-round cost of work items fell (experiment items, do_bench: 0.70 us
    # against 1.13), its time with none rose (92.1 us against 73.7). The cause, offline: ptxas serialises the wgmma of a
    # called function (C7510; 24 WARPGROUP.DEPBAR for its 24 HGMMA). shared_code 2 inlines the function once in the
    # PTX (inline_consumer_call): offline sm_90, 2200 instructions, 4 DEPBAR for 24 HGMMA as inlined, no spill:
    *_shared_code_forms(2),
    # Calls 2-3 (be6f60d, 5233d06) timed /et1/sc2 2-5 points behind /et1, with exp_turn's pass untied (fixed in
    # b70db4d: tie_marked_arrives now runs before the inlining); the 192-row /sc2 (ping-pong) level with its base at
    # N = 4096 (108.1 and 109.7% against 106.9 and 109.5). Calls 6-7 (b70db4d), /et1/sc2 minus /et1 in paired rounds,
    # median points of cuDNN (5 rounds non-causal, 4 causal): N = 512 +4.1 / +1.0, 1024 +2.4 / +2.5 (every round
    # +2.3 or more), 2048 -0.6 / +0.6, 4096 -0.8 / -0.7. In V7_BASE since session 30 (the /et1 and /pp/ua forms;
    # call 1, 4 rounds, and 31 harness runs: V7_BASE's comment and the Gluon log). shared_code 3, an idle default
    # partition beside worker consumers and a one-warp loader: slower than both at every N (call 3; 95.5% at 1024
    # tied, call 6), a negative.
    _exp_turn(128, 3, persistent=True, exp_turn=2, shared_code=3),
    GluonConfig(128, 128, 4, 3, p_smem=False, consumers=2, pingpong=True, unsynced_arrive=True, shared_code=3),
    # Offline sm_90 (after call 8), the key loop's 66 exp2s issued after the tied arrive and the P V wait: /et1 7,
    # /et1/sc2 22 (ptxas schedules the shared copy's second row later), /et and /et/sc2 0. Session 30, call 1
    # (075c6a5, 4 rounds, medians): /et/sc2 behind /et1/sc2 at every shape, non-causal 95.4/97.8/95.1/98.5 against
    # 100.6/100.5/100.0/101.7 at N = 512/1024/2048/4096, causal 94.6/106.9/105.2/102.8 against 96.8/111.0/107.9/105.2:
    # the later exp2s are not what costs /sc2; a negative.
    _exp_turn(128, 3, persistent=True, shared_code=2),
)


if HAVE_GLUON:
    @gluon.constexpr_function
    def _wgmma_layout(warps, n):
        """The register layout of a wgmma accumulator n columns wide over `warps` warps (16 rows each)."""
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, n, 16])

    @gluon.jit
    def _issue_kv(k_desc, v_desc, k_smem, v_smem, bars, row, slot, v_bars=None):
        """TMA K and V rows [row, row + BLOCK_N) into one slot, completing on that slot's mbarrier (with v_bars,
        V on that slot's barrier there, K alone on bars')."""
        bar = bars.index(slot)
        if v_bars is None:
            mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row, 0], bar, k_smem.index(slot))
            tma.async_copy_global_to_shared(v_desc, [row, 0], bar, v_smem.index(slot))
        else:
            v_bar = v_bars.index(slot)
            mbarrier.expect(bar, k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row, 0], bar, k_smem.index(slot))
            mbarrier.expect(v_bar, v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [row, 0], v_bar, v_smem.index(slot))

    @gluon.jit
    def _row_max(s, TREE: gl.constexpr):
        """The row maxima of a wgmma accumulator tile s. gl.max folds each thread's 2 x BLOCK_N / 4 values of a row
        one after another: a chain of dependent max instructions (32 for 128 keys) before the first exponential of
        the tile can start. TREE: fold by halves instead. In the accumulator layout a thread holds, per row, columns
        8i + 2t and 8i + 2t + 1 (t: its lane in the quad), so the column bits above 2 and bit 0 are registers: each
        round splits one of those bits off as the last axis (a reshape and permute that only rename registers;
        offline sm_90 compile: no shared memory, no shuffle more) and takes the elementwise max of the two halves.
        The same number of max instructions, 5 deep instead of 32; gl.max then reduces the quad by shuffles."""
        if TREE:
            ROWS: gl.constexpr = s.shape[0]
            x = s
            for r in gl.static_range(s.shape[1].bit_length() - 4):   # the register bits above 2, top one first
                x = gl.maximum(*_halves(x))
            x = gl.maximum(*x.reshape([ROWS, 4, 2]).split())              # bit 0; 4 columns left: the quad's lanes
            return gl.convert_layout(gl.max(x, axis=1), gl.SliceLayout(1, s.type.layout))
        else:
            return gl.max(s, axis=1)

    @gluon.jit
    def _exp2_poly(x):
        """2^x on the FMA and ALU pipes, not the MUFU (FlashAttention-4's software exponential): x = j + f with j the
        nearest integer (the magic-number rounding: x + 1.5 * 2^23 holds j in its low mantissa bits) and f in
        [-0.5, 0.5], 2^f by a cubic (POLY_EXP_COEFFS, relative error 7.6e-5 in exact arithmetic and 1.2e-4 in
        float32, far under bf16's 2^-9 rounding of P), and 2^j added to its exponent field as an integer. x is
        clamped at -126 first (below it the exponent field would underflow into the sign), so a masked score (-inf)
        gives about 1e-38 instead of 0."""
        x = gl.maximum(x, -126.0)
        t = x + 12582912.0
        f = x - (t - 12582912.0)
        p = f * 0.05522262 + 0.24261527   # POLY_EXP_COEFFS, highest first (a test checks that the two agree)
        p = p * f + 0.6932516
        p = p * f + 0.9999276
        bits = p.to(gl.int32, bitcast=True) + (t.to(gl.int32, bitcast=True) << 23)
        return bits.to(gl.float32, bitcast=True)

    @gluon.jit
    def _halves(x):
        """x's columns split on their top bit, ([:, :N/2], [:, N/2:]): in a wgmma accumulator's layout the column bits
        above 2 are registers, so this renames registers (as _row_max's folds do)."""
        ROWS: gl.constexpr = x.shape[0]
        return x.reshape([ROWS, 2, x.shape[1] // 2]).permute(0, 2, 1).split()

    @gluon.jit
    def _joined(lo, hi):
        """_halves undone: [lo | hi] along the columns. hi may come back from _joined in an equivalent layout spelt
        differently (a linear layout against split's slice): renamed to lo's, which costs no instruction."""
        ROWS: gl.constexpr = lo.shape[0]
        return gl.join(lo, gl.convert_layout(hi, lo.type.layout)).permute(0, 2, 1).reshape([ROWS, 2 * lo.shape[1]])

    @gluon.jit
    def _exp2_mixed(x, POLY: gl.constexpr):
        """2^x of a score tile, POLY = 1 (all on the MUFU), 4 or 8: the last quarter or eighth of the columns by
        _exp2_poly. For head dimension 64 a tile's products and its exponentials cost the SM about the same time
        (4 * 64 flops per score at 4096 flops per clock, 1 exponential at 16 per clock), and v7's ncu at N = 2048
        had the tensor pipe active 47.5% and the MUFU (XU) 49% of the cycles: the two barely overlap, so each
        exponential moved to the FMA pipe (17% busy) may shorten the tile."""
        if POLY == 1:
            return gl.exp2(x)
        lo, hi = _halves(x)
        hi_lo, hi_hi = _halves(hi)
        if POLY == 8:
            a, b = _halves(hi_hi)
            hi_hi = _joined(gl.exp2(a), _exp2_poly(b))
        else:
            hi_hi = _exp2_poly(hi_hi)
        return gl.convert_layout(_joined(gl.exp2(lo), _joined(gl.exp2(hi_lo), hi_hi)), x.type.layout)

    @gluon.jit
    def _softmax_tile(s, m_i, k_start, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                      s_layout: gl.constexpr, BLOCK_N: gl.constexpr, TREE: gl.constexpr = False,
                      POLY: gl.constexpr = 1, turn=None):
        """Tile j's share of the online softmax: its new row maxima (log2 units of the scaled
        scores), P (fp32, against those maxima) and alpha, the factor for what came before.
        Key k is visible to query q when k < N_KEYS and k <= q + causal_off (0 under the causal
        mask, N_KEYS without): a runtime value, since a warp-specialized partition receives its
        arguments as values, constexprs included. turn (exp_turn): (this consumer's turn barrier, the turn's index),
        waited for once the row maxima are known, before the exponentials."""
        if k_start >= mask_from:   # a causal diagonal or a ragged last tile
            k_pos = gl.expand_dims(k_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout)), 0)
            keep = (k_pos < N_KEYS) & (k_pos <= gl.expand_dims(q_pos + causal_off, 1))
            s = gl.where(keep, s, float("-inf"))
        m_new = gl.maximum(m_i, _row_max(s, TREE) * qk_scale)
        if turn is not None:
            mbarrier.wait(turn[0], turn[1] & 1)
        p = _exp2_mixed(s * qk_scale - gl.expand_dims(m_new, 1), POLY)
        alpha = gl.exp2(m_i - m_new)
        return p, alpha, m_new

    @gluon.jit
    def _p_operand(p, p_smem, buf_index, p_layout: gl.constexpr, P_SMEM: gl.constexpr):
        """P as the A operand of P V: registers, or shared buffer buf_index (the caller alternates two)."""
        if P_SMEM:
            buf = p_smem.index(buf_index)
            buf.store(p.to(p_smem.dtype))
            fence_async_shared()
            return buf
        else:
            return gl.convert_layout(p.to(p_smem.dtype), p_layout)

    @gluon.jit
    def _tile_range(N_QUERIES, N_KEYS, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """This program's query tile (longest causal tiles first, v6's order: query tiles reversed on
        axis 0, the head on axis 1) and its key tiles: [0, mask_from) need no mask, [mask_from,
        n_tiles * BLOCK_N) do; causal_off as _softmax_tile takes it."""
        q_start = (gl.cdiv(N_QUERIES, BLOCK_M) - 1 - gl.program_id(0)) * BLOCK_M
        full_stop = (N_KEYS // BLOCK_N) * BLOCK_N
        if CAUSAL:
            stop = gl.minimum(q_start + BLOCK_M, N_KEYS)
            mask_from = gl.minimum((q_start // BLOCK_N) * BLOCK_N, full_stop)
            causal_off = 0
        else:
            stop = N_KEYS
            mask_from = full_stop
            causal_off = N_KEYS
        return q_start, gl.program_id(1), gl.cdiv(stop, BLOCK_N), mask_from, causal_off

    @gluon.jit
    def _store_rows(acc, l_i, m_i, O_ptr, L_ptr, row0, q_pos, head, N_QUERIES, stride_o_row, stride_l_head,
                    row_o: gl.constexpr, WARPS: gl.constexpr, DIRECT: gl.constexpr = False):
        """Epilogue: O = acc / l through a coalescing layout (DIRECT: straight from the wgmma registers,
        two columns per thread and store, without the shared-memory round trip and its barrier), L = ln(2)
        (m + log2 l); rows past N_QUERIES (the next head's) are not stored."""
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
        o_ptrs = O_ptr + (head * N_QUERIES + gl.expand_dims(rows, 1)) * stride_o_row + gl.expand_dims(cols, 0)
        gl.store(o_ptrs, o, mask=gl.expand_dims(rows < N_QUERIES, 1))
        _store_l(l_i, m_i, L_ptr, q_pos, head, N_QUERIES, stride_l_head)

    @gluon.jit
    def _store_l(l_i, m_i, L_ptr, q_pos, head, N_QUERIES, stride_l_head):
        """L = ln(2) (m + log2 l) of the rows q_pos below N_QUERIES."""
        L_i = (m_i + gl.log2(l_i)) * 0.6931471805599453
        gl.store(L_ptr + head * stride_l_head + q_pos, L_i, mask=q_pos < N_QUERIES)

    @gluon.jit
    def _store_o_tma(acc, l_i, o_desc, o_buf, row, row_o: gl.constexpr):
        """tma_store's epilogue for O: acc / l into this consumer's staging buffer o_buf, out by one TMA store to
        rows [row, row + 64) of the flattened O (all in one head: the host turns tma_store on only when
        N_QUERIES % 64 == 0). The store is left in flight: the wait before the buffer is written again is the
        next item's (or the one after the consumer's last item), so this consumer goes on to its next item while
        the copy engine writes O, as CUTLASS's and FlashAttention-3's epilogues do."""
        o = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
        tma.store_wait(0)        # the previous item's store has read o_buf
        o_buf.store(o.to(o_buf.dtype))
        fence_async_shared()     # the generic-proxy writes before the async proxy's read
        tma.async_copy_shared_to_global(o_desc, [row, 0], o_buf)

    @gluon.jit
    def flash_fwd_gluon(
        # TMA descriptors over the flattened (heads * N, D) rows; O and L are plain pointers
        q_desc, k_desc, v_desc, O_ptr, L_ptr,
        # strides: O's row (its head stride is N_QUERIES rows), L's head
        stride_o_row, stride_l_head,
        # sizes
        N_QUERIES, N_KEYS, qk_scale,
        # compile-time meta-parameters
        CAUSAL: gl.constexpr, SLOTS: gl.constexpr, P_SMEM: gl.constexpr, OVERLAP: gl.constexpr,
        num_warps: gl.constexpr,
    ):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        D: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        dtype: gl.constexpr = q_desc.dtype

        q_start, head, n_tiles, mask_from, causal_off = _tile_range(N_QUERIES, N_KEYS, BLOCK_M, BLOCK_N, CAUSAL)
        k_row0 = head * N_KEYS

        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], v_desc.layout)
        p_layout_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)
        p_smem = gl.allocate_shared_memory(dtype, [2 if P_SMEM else 1, BLOCK_M, BLOCK_N], p_layout_smem)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        bars = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for s in gl.static_range(SLOTS):
            mbarrier.init(bars.index(s), count=1)
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [head * N_QUERIES + q_start, 0], q_bar, q_smem)
        for s in gl.static_range(SLOTS):
            if s < n_tiles:
                _issue_kv(k_desc, v_desc, k_smem, v_smem, bars, k_row0 + s * BLOCK_N, s)

        # Register layouts: the wgmma accumulators of S (BLOCK_N wide) and O (D wide), P as wgmma's
        # register A operand. Both accumulators give each thread the same rows.
        s_layout: gl.constexpr = _wgmma_layout(num_warps, BLOCK_N)
        o_layout: gl.constexpr = _wgmma_layout(num_warps, D)
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
        q_pos = q_start + gl.arange(0, BLOCK_M, layout=row_s)
        zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
        acc = gl.zeros([BLOCK_M, D], gl.float32, o_layout)

        # Tile 0: its scores and P; its P V is issued in the next iteration (or after the loop).
        mbarrier.wait(q_bar, 0)
        mbarrier.wait(bars.index(0), 0)
        s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_s)
        p, alpha, m_i = _softmax_tile(s_ij, m_i, 0, mask_from, q_pos, N_KEYS, causal_off, qk_scale, s_layout, BLOCK_N)
        l_i = gl.sum(p, axis=1)
        p_op = _p_operand(p, p_smem, 0, p_layout, P_SMEM)

        for j in range(1, n_tiles):
            slot = j % SLOTS
            prev = (j - 1) % SLOTS
            mbarrier.wait(bars.index(slot), (j // SLOTS) & 1)
            s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            if OVERLAP:   # P_(j-1) V_(j-1) queued behind Q K_j^T; wait for Q K_j^T only
                acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
                s_ij = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
            else:         # tl.dot's order: both products done before the softmax
                s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
                acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            p, alpha, m_i = _softmax_tile(s_ij, m_i, j * BLOCK_N, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                                          s_layout, BLOCK_N)
            l_i = l_i * alpha + gl.sum(p, axis=1)
            if P_SMEM:   # the other buffer: written while P_(j-1) V_(j-1) reads this one
                p_next = _p_operand(p, p_smem, j % 2, p_layout, P_SMEM)
            if OVERLAP:
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            if P_SMEM:
                p_op = p_next
            else:        # P_j's registers written only once P_(j-1) V_(j-1) is done (see _ws_consumer)
                p_op = _p_operand(p, p_smem, 0, p_layout, P_SMEM)
            # Tile j-1's slot is free once P_(j-1) V_(j-1) is done: tile j + SLOTS - 1 goes there.
            if j + SLOTS - 1 < n_tiles:
                _issue_kv(k_desc, v_desc, k_smem, v_smem, bars, k_row0 + (j + SLOTS - 1) * BLOCK_N, prev)

        acc = warpgroup_mma(p_op, v_smem.index((n_tiles - 1) % SLOTS), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.invalidate(q_bar)
        for s in gl.static_range(SLOTS):
            mbarrier.invalidate(bars.index(s))

        _store_rows(acc, l_i, m_i, O_ptr, L_ptr, q_start, q_pos, head, N_QUERIES, stride_o_row, stride_l_head,
                    row_o, num_warps)

    # ----------------------------------------------------------------------- warp-specialized form
    #
    # The form above issues its TMA copies from the same warps that compute, after each wait, and
    # keeps a CTA-wide barrier around every copy (the other warpgroup may still read the slot). Here
    # one loader warp only copies (K, V round SLOTS slots: wait until the slot is empty, copy, the
    # slot's "ready" barrier completes), and CONSUMERS warpgroups of 64 query rows each only compute,
    # each releasing a slot (its "empty" barrier counts one arrival per consumer) once its
    # P V product on it is done. Without ping-pong the consumers share nothing else, and one's softmax
    # runs beside another's products only when the warp schedulers happen to interleave them:
    # FlashAttention-3's producer/consumer split alone. With ping-pong (PINGPONG) the consumers also
    # pass a turn round a ring of mbarriers: each issues its products only after the previous one
    # issued its own, so while one waits for its products and runs its softmax the next one's keep
    # the tensor cores busy (FlashAttention-3's scheduler barrier, which uses named barriers; Gluon in
    # Triton 3.6 exposes mbarriers only, whose arrive it precedes with a partition-wide bar.sync).

    @gluon.jit
    def _work_item(item, work, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, MIXED: gl.constexpr = False,
                   Q_MAJOR: gl.constexpr = False):
        """Work item -> (q_start, head, key tiles, mask_from, causal_off, first key, part, rows). Items [0, FULL)
        are whole tiles: tile t has head t // query tiles and query tile t % query tiles, reversed under the
        causal mask (v6's order: every head's longest tiles first). Item FULL + q is split q % SPLITS (a
        contiguous share of the key tiles) of tile FULL + q // SPLITS, written as workspace part q; a whole
        tile's part is -1. Under the causal mask a tile's keys stop at its diagonal; there is no split.
        MIXED (the mixed schedule, compiled in only there) with BIG > 0 (non-causal): items [0, BIG * heads) are each
        head's first BIG tiles of BLOCK_M rows, the others the rest of each head in tiles of BLOCK_M - 64 rows
        (rows: the item's query rows). Q_MAJOR (q_major: whole tiles only), non-causal: tile t is query tile t // heads
        of head t % heads."""
        N_QUERIES, N_KEYS, FULL, SPLITS, causal, n_items, BIG = work
        n_q = gl.cdiv(N_QUERIES, BLOCK_M)
        n_kb = gl.cdiv(N_KEYS, BLOCK_N)
        full_stop = (N_KEYS // BLOCK_N) * BLOCK_N
        if MIXED and BIG > 0:
            n_small = gl.cdiv(N_QUERIES - BIG * BLOCK_M, BLOCK_M - 64)
            big_items = BIG * (n_items // (BIG + n_small))
            if item < big_items:
                head = item // BIG
                q_start = (item % BIG) * BLOCK_M
                rows = BLOCK_M
            else:
                head = (item - big_items) // n_small
                q_start = BIG * BLOCK_M + ((item - big_items) % n_small) * (BLOCK_M - 64)
                rows = BLOCK_M - 64
            return q_start, head, n_kb, full_stop, N_KEYS, 0, -1, rows
        if item < FULL:
            t = item
            part = -1
            kb0 = 0
            kb1 = n_kb
        else:
            part = item - FULL
            t = FULL + part // SPLITS
            kb0 = (part % SPLITS) * n_kb // SPLITS
            kb1 = (part % SPLITS + 1) * n_kb // SPLITS
        q_tile = t % n_q
        if causal:
            q_start = (n_q - 1 - q_tile) * BLOCK_M
            kb1 = gl.cdiv(gl.minimum(q_start + BLOCK_M, N_KEYS), BLOCK_N)
            mask_from = gl.minimum((q_start // BLOCK_N) * BLOCK_N, full_stop)
            causal_off = 0
        else:
            q_start = q_tile * BLOCK_M
            mask_from = full_stop
            causal_off = N_KEYS
        head = t // n_q
        if Q_MAJOR and not causal:
            heads = FULL // n_q
            head = t % heads
            q_start = (t // heads) * BLOCK_M
        return q_start, head, kb1 - kb0, mask_from, causal_off, kb0 * BLOCK_N, part, BLOCK_M

    @gluon.jit
    def _ws_loader(descs, smem, bars, work, modes):
        """The loader warp: for each of this program's work items, its query tile (into Q buffer it %
        Q_BUFFERS, once the consumers released that buffer's previous tile) and its K, V tiles round the
        SLOTS slots. g counts key tiles over the items, so slots and phases run on across them. With
        item_overlap the consumers' last early Q K^T reads one more query tile and key tile (the last item's
        again, never used), which are loaded after the items."""
        Q_BUFFERS: gl.constexpr = bars[0].shape[0]
        ROWS: gl.constexpr = smem[0].shape[1] * (smem[0].shape[0] // Q_BUFFERS)   # a query tile's, all consumers'
        BLOCK_N: gl.constexpr = smem[1].shape[1]
        MIXED: gl.constexpr = modes.shape[6] > 1
        QM: gl.constexpr = modes.shape[13] > 1
        # one_q: the next item's first SLOTS - 1 key tiles go before its query tile (_load_item)
        Q_AFTER: gl.constexpr = smem[1].shape[0] - 1 if modes.shape[14] > 1 else 0
        HOLD: gl.constexpr = modes.shape[15] // 2   # hold_first: 0 (off), 1 or 2
        NARROW: gl.constexpr = modes.shape[16] if modes.shape[16] > 1 else 0   # narrow_from
        g = 0
        it = 0
        for item in range(gl.program_id(0), work[5], gl.num_programs(0)):
            q_start, head, n_tiles, _, _, k_base, _, _ = _work_item(item, work, ROWS, BLOCK_N, MIXED, QM)
            if modes.shape[12] > 1:   # l2_prefetch: the next item's first rows (none after the last: skip = 1)
                nxt = item + gl.num_programs(0)
                nq, nh, nn, _, _, nk, _, _ = _work_item(gl.minimum(nxt, work[5] - 1), work, ROWS, BLOCK_N, MIXED,
                                                      QM)
                ahead = (nh * work[0] + nq, nh * work[1] + nk, nn, (nxt >= work[5]).to(gl.int32))
                _load_item(descs, smem, bars, work, q_start, head, k_base, n_tiles, g, it, ahead, Q_AFTER, HOLD,
                           NARROW)
            else:
                _load_item(descs, smem, bars, work, q_start, head, k_base, n_tiles, g, it, None, Q_AFTER, HOLD,
                           NARROW)
            g += n_tiles
            it += 1
        if modes.shape[3] > 1:   # item_overlap
            q_start, head, _, _, _, k_base, _, _ = _work_item(work[5] - 1, work, ROWS, BLOCK_N, False, QM)
            _load_item(descs, smem, bars, work, q_start, head, k_base, 1, g, it)

    @gluon.jit
    def _prefetch_descriptors(WARPS: gl.constexpr):
        """prefetch.param.tensormap of Q's, K's and V's descriptors, so that the first copies need not fetch them
        (what CUTLASS's producers do first). Gluon 3.6 has no prefetch, so this is PTX naming the kernel's
        parameters (_PREFETCH_MAPS_ASM: _Q_MAP, _K_MAP, _V_MAP). Thread 0 of the program issues it, before the
        shared memory and its barriers are set up."""
        lane = gl.arange(0, 32 * WARPS, layout=gl.BlockedLayout([1], [32], [WARPS], [0]))
        gl.inline_asm_elementwise(_PREFETCH_MAPS_ASM, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _load_item(descs, smem, bars, work, q_start, head, k_base, n_tiles, g, it, ahead=None,
                   Q_AFTER: gl.constexpr = 0, HOLD: gl.constexpr = 0, NARROW: gl.constexpr = 0):
        """The loader's share of one work item: its query tile into Q buffer it % Q_BUFFERS and n_tiles key
        tiles from k_base on into the slots from g on, each after the consumers released what was there. ahead
        (l2_prefetch: the next item's first query row, first key row, key tiles, and 1 if there is none): with each
        key tile's copy, _l2_ahead. Q_AFTER (one_q): the query tile goes after the item's first Q_AFTER key tiles
        (fewer if it has fewer), so that with one Q buffer the wait for its release does not hold back the key tiles
        that free slots could take. HOLD, NARROW: hold_first, narrow_from (_load_keys)."""
        k_row0 = head * work[1] + k_base
        if Q_AFTER == 0:
            _load_query(descs, smem, bars, work, q_start, head, it)
            _load_keys(descs, smem, bars, k_row0, n_tiles, 0, n_tiles, g, ahead, HOLD, NARROW)
        else:
            first = gl.minimum(n_tiles, Q_AFTER)
            _load_keys(descs, smem, bars, k_row0, n_tiles, 0, first, g, ahead, HOLD, NARROW)
            _load_query(descs, smem, bars, work, q_start, head, it)
            _load_keys(descs, smem, bars, k_row0, n_tiles, first, n_tiles, g, ahead, HOLD, NARROW)

    @gluon.jit
    def _load_query(descs, smem, bars, work, q_start, head, it):
        """The query tile of the program's it-th work item (every consumer's rows) into Q buffer it % Q_BUFFERS, once
        the consumers released that buffer's previous tile."""
        q_desc, q_smem = descs[0], smem[0]
        q_bar, q_empty = bars[0], bars[1]
        Q_BUFFERS: gl.constexpr = q_bar.shape[0]
        CONSUMERS: gl.constexpr = q_smem.shape[0] // Q_BUFFERS
        ROWS: gl.constexpr = q_smem.shape[1]
        b = it % Q_BUFFERS
        mbarrier.wait(q_empty.index(b), ((it // Q_BUFFERS) & 1) ^ 1, pred=it >= Q_BUFFERS)
        mbarrier.expect(q_bar.index(b), CONSUMERS * q_desc.block_type.nbytes)
        for c in gl.static_range(CONSUMERS):
            tma.async_copy_global_to_shared(q_desc, [head * work[0] + q_start + c * ROWS, 0], q_bar.index(b),
                                            q_smem.index(b * CONSUMERS + c))

    @gluon.jit
    def _load_keys(descs, smem, bars, k_row0, n_tiles, j0, j1, g, ahead, HOLD: gl.constexpr = 0,
                   NARROW: gl.constexpr = 0):
        """Key tiles j0 .. j1 - 1 of a work item whose n_tiles key tiles start at row k_row0, tile j into slot
        (g + j) % SLOTS once the consumers released it (with v_barrier or v_first, V on a barrier of its own).
        HOLD > 0 (hold_first): the program's key tile HOLD (g + j, counted over its items) waits until its first one
        has arrived (slot 0's ready barrier, phase 0; HOLD < SLOTS, so that phase is still the first tile's).
        NARROW > 0 (narrow_from): from the program's key tile NARROW on, tile t also waits for tile t - (SLOTS - 1)'s
        release (the empty barrier of its slot completes phase u // SLOTS when tile u is released; tile t + 1 is not
        issued yet, so that barrier cannot be two phases on)."""
        _, k_desc, v_desc = descs
        _, k_smem, v_smem = smem
        ready, empty = bars[2], bars[3]      # with v_barrier, bars[4]: the slots' V barriers
        SLOTS: gl.constexpr = k_smem.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        ROWS: gl.constexpr = smem[0].shape[1]
        CONSUMERS: gl.constexpr = smem[0].shape[0] // bars[0].shape[0]
        for j in range(j0, j1):
            slot = (g + j) % SLOTS
            if HOLD > 0:
                mbarrier.wait(ready.index(0), 0, pred=g + j == HOLD)
            if NARROW > 0:
                u = gl.maximum(g + j - (SLOTS - 1), 0)
                mbarrier.wait(empty.index(u % SLOTS), (u // SLOTS) & 1, pred=g + j >= NARROW)
            # use u of this slot waits for the u-th release of its previous contents
            mbarrier.wait(empty.index(slot), (((g + j) // SLOTS) & 1) ^ 1, pred=g + j >= SLOTS)
            if len(bars) > 4:
                if bars[4].shape[0] == 1:   # v_first: the program's first tile's V on its own barrier
                    if g + j == 0:
                        _issue_kv(k_desc, v_desc, k_smem, v_smem, ready, k_row0, slot, bars[4])
                    else:
                        _issue_kv(k_desc, v_desc, k_smem, v_smem, ready, k_row0 + j * BLOCK_N, slot)
                else:
                    _issue_kv(k_desc, v_desc, k_smem, v_smem, ready, k_row0 + j * BLOCK_N, slot, bars[4])
            else:
                _issue_kv(k_desc, v_desc, k_smem, v_smem, ready, k_row0 + j * BLOCK_N, slot)
            if ahead is not None:
                _l2_ahead(k_row0, j, n_tiles, ahead, SLOTS, BLOCK_N, ROWS, CONSUMERS)

    @gluon.jit
    def _l2_ahead(k_row0, j, n_tiles, ahead, SLOTS: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr,
                  CONSUMERS: gl.constexpr):
        """l2_prefetch's asks beside key tile j's copy (ahead: see _load_item): the key tile SLOTS further on (K and
        V), past this item's last the next item's, and with tile 0 the next item's query blocks; so that a tile is in
        L2, not in HBM, by the time the slots let its copy go. One pair per copy: session 26's call 2 asked for all of
        an item's tiles at once, and that burst held the copies back (experiment gluon at 572b0be: 93.6% of cuDNN at
        N = 2048 and 91.7% at 4096 against 100.3 and 103.2% without it, graph replay too)."""
        q_next, k_next, n_next, skip = ahead
        if j == 0:
            for c in gl.static_range(CONSUMERS):
                _l2_prefetch(q_next + c * ROWS, skip, _L2_Q_ASM)
        t = j + SLOTS
        if t < n_tiles:
            _l2_prefetch(k_row0 + t * BLOCK_N, 0, _L2_KV_ASM)
        else:
            _l2_prefetch(k_next + (t - n_tiles) * BLOCK_N, skip + (t - n_tiles >= n_next).to(gl.int32), _L2_KV_ASM)

    @gluon.jit
    def _l2_prefetch(row, skip, ASM: gl.constexpr):
        """One ask of _l2_ahead (ASM: _L2_Q_ASM or _L2_KV_ASM) for the block at this row, by the loader warp's lane 0
        unless skip is 1."""
        lane = gl.arange(0, 32, layout=gl.BlockedLayout([1], [32], [1], [0]))
        gl.inline_asm_elementwise(ASM, "=r,r,r", [lane + skip, lane * 0 + row], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _mark(ASM: gl.constexpr):
        """A PTX comment for a stage of the PTX hook, in a register move ptxas drops (ASM): 4 warps, one per thread."""
        lane = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
        gl.inline_asm_elementwise(ASM, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _mark_unsynced():
        """UNSYNCED_MARK right after an mbarrier operation, for drop_marked_syncs to remove the bar.sync Triton put
        before that operation (_mark)."""
        _mark(_MARK_ASM)

    @gluon.jit
    def _pass_exp_turn(l_i, turn, ONE: gl.constexpr, ARRIVE: gl.constexpr):
        """exp_turn: the next consumer's turn at the exponentials, passed once this tile's exp2s are issued: l_i (the
        row sums, two per thread) is marked for tie_marked_arrives, which makes the arrive wait for both of a thread's
        sums (ONE: for its second)."""
        if ONE:
            gl.inline_asm_elementwise(_TIE_ONE_ASM, "=r,=r,r,r", [l_i], dtype=gl.float32, is_pure=False, pack=2)
        else:
            gl.inline_asm_elementwise(_TIE_ASM, "=r,=r,r,r", [l_i], dtype=gl.float32, is_pure=False, pack=2)
        _arrive(turn[1].index(0), ARRIVE)

    @gluon.jit
    def _arrive(bar, ARRIVE: gl.constexpr):
        """One consumer's arrival on `bar`. Triton 3.6 lowers mbarrier.arrive to one elected thread and its
        shared-memory barrier analysis treats that arrive as reading and writing all of shared memory, so a
        bar.sync of the consumer's 4 warps comes before it and before the next shared-memory access after it
        (upstream, per-warp arrivals: triton-lang/triton#8969, #11573). PER_THREAD (thread_arrive): every
        thread arrives itself through cp.async.mbarrier.arrive.noinc (no cp.async is outstanding, so the
        arrival is immediate), which the analysis sees as a write of this barrier only; the barrier then
        counts 128 arrivals per consumer. Each thread arrives after its own wgmma wait, so the last
        arrival still follows every warp's reads of the slot, as CUTLASS's consumer_release does.
        ARRIVE (the consumer's modes): 1 the elected arrive, 2 thread_arrive's, 4 unsynced_arrive's: the elected
        arrive marked so that its bar.sync is dropped from the PTX (drop_marked_syncs). Thread 0 then arrives right
        after its own warp's wgmma wait, as CUTLASS's consumer_release does from one thread per warpgroup: a
        warpgroup's wgmma is one operation, done for all 4 warps when one warp's wait returns."""
        if ARRIVE == 2:
            async_copy.mbarrier_arrive(bar, increment_count=False)
        else:
            mbarrier.arrive(bar, count=1)
            if ARRIVE == 4:
                _mark_unsynced()

    @gluon.jit
    def _barrier(count: gl.constexpr):
        """A new mbarrier (its own allocation, [1, 1]) that completes a phase after `count` arrivals."""
        bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        mbarrier.init(bar.index(0), count=count)
        return bar

    @gluon.jit
    def _take_turn(turn, t, PINGPONG: gl.constexpr):
        """Ping-pong: wait until this consumer may issue its t-th group of products, i.e. until the consumer
        before it in the ring has issued its own. turn = (this consumer's barrier, the next one's): separate
        allocations, so that with thread_arrive the shared-memory analysis sees no hazard between waiting
        on one and arriving on the other."""
        if PINGPONG:
            mbarrier.wait(turn[0].index(0), t & 1)

    @gluon.jit
    def _pass_turn(turn, PINGPONG: gl.constexpr, ARRIVE: gl.constexpr):
        """Ping-pong: this consumer has issued its products; the next consumer in the ring may issue."""
        if PINGPONG:
            _arrive(turn[1].index(0), ARRIVE)

    @gluon.jit
    def _pin(l_i, l_smem, wg):
        """With pin_ex2 (l_smem holding a row of 64 floats per consumer): store l, which depends on every
        exponential of the tile, to shared memory. ptxas keeps shared-memory accesses on their side of a
        wgmma wait but moves register-only work freely: without this store it places the wait for
        P_(j-1) V_(j-1) before the first exp2 (offline sm_90 SASS, Triton 3.6's ptxas), with it every
        exp2 of the tile is issued while that product runs."""
        if l_smem.shape[0] > 1:
            l_smem.index(wg).store(l_i)

    @gluon.jit
    def _query_tile(mem, wg, it):
        """Consumer wg's rows of the query tile of this program's it-th work item (Q buffer it % Q_BUFFERS), once
        they are in."""
        q_smem, q_bar = mem[0][0], mem[0][5]
        Q_BUFFERS: gl.constexpr = q_bar.shape[0]
        b = it % Q_BUFFERS
        q_tile = q_smem.index(b * (q_smem.shape[0] // Q_BUFFERS) + wg)
        mbarrier.wait(q_bar.index(b), (it // Q_BUFFERS) & 1)
        return q_tile

    @gluon.jit
    def _first_scores(mem, wg, it, g, t):
        """S_0 = Q K_0^T of this program's it-th work item issued (not waited for), consumer wg's rows: once
        its query tile is in (Q buffer it % Q_BUFFERS) and key tile g's slot is ready, at ping-pong turn t (the
        program's turns so far: each item's S_0 is one turn more than its key tiles' products, and lookahead's S_1
        one more). Returns the product's token and the query tile."""
        shared, turn, modes = mem[0], mem[1], mem[2]   # mem[3]: row_sum's ones tile
        q_smem, k_smem, ready = shared[0], shared[1], shared[7]
        SLOTS: gl.constexpr = k_smem.shape[0]
        ROWS: gl.constexpr = q_smem.shape[1]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        PINGPONG: gl.constexpr = modes.shape[1] > 1
        ARRIVE: gl.constexpr = modes.shape[2]
        s_layout: gl.constexpr = _wgmma_layout(4, BLOCK_N)
        q_tile = _query_tile(mem, wg, it)
        mbarrier.wait(ready.index(g % SLOTS), (g // SLOTS) & 1)
        _take_turn(turn, t, PINGPONG)
        s_tok = warpgroup_mma(q_tile, k_smem.index(g % SLOTS).permute((1, 0)),
                              gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        _pass_turn(turn, PINGPONG, ARRIVE)
        _wait_v_first(shared, g)
        return s_tok, q_tile

    @gluon.jit
    def _wait_v(shared, k):
        """With v_barrier (shared[9]: the slots' V barriers), wait until key tile k's V is in its slot; without it V
        completes with K on the slot's ready barrier, which the caller has waited for (v_first: see _wait_v_first)."""
        if len(shared) > 9:
            if shared[9].shape[0] > 1:
                SLOTS: gl.constexpr = shared[1].shape[0]
                mbarrier.wait(shared[9].index(k % SLOTS), (k // SLOTS) & 1)

    @gluon.jit
    def _wait_v_first(shared, g):
        """v_first (shared[9]: one barrier): in the program's first work item (g = 0), once its S_0 is issued, wait for
        its first key tile's V, which its first P V reads: while S_0 runs, and before the softmax, so that the code
        ptxas schedules around the exponentials stays as it is without v_first. Call 10 (a9575e4) waited in _wait_v,
        beside every P V's issue, and the warm kernel lost 1.4 us at N = 1024 (experiment items); waited for before the
        key loop, the second consumer's key loop came out of ptxas in another order."""
        if len(shared) > 9:
            if shared[9].shape[0] == 1:
                if g == 0:
                    mbarrier.wait(shared[9].index(0), 0)

    @gluon.jit
    def _wait_slot(mem, k):
        """Wait until key tile k's slot is ready (slot k % SLOTS; slots and phases run on over a program's key tiles);
        with unsynced_arrive the wait is marked, so that each warp waits for the slot by itself (drop_marked_syncs)."""
        shared, modes = mem[0], mem[2]
        SLOTS: gl.constexpr = shared[1].shape[0]
        mbarrier.wait(shared[7].index(k % SLOTS), (k // SLOTS) & 1)
        if modes.shape[2] == 4:
            _mark_unsynced()

    @gluon.jit
    def _issue_tile(mem, q_tile, p_op, acc, zero_s, g, j, slot, prev, t):
        """Key tile k = g + j's group of products at ping-pong turn t + j, not waited for: once its slot is ready (and
        with v_barrier tile k - 1's V), S_k = Q K_k^T and P_(k-1) V_(k-1) (into acc; slot and prev: tiles k's and
        k - 1's slots). Returns S_k's token and acc's. The caller passes the turn on (row_sum issues its P ones
        first)."""
        shared, turn, modes = mem[0], mem[1], mem[2]
        k_smem, v_smem = shared[1], shared[2]
        _wait_slot(mem, g + j)
        _wait_v(shared, g + j - 1)
        _take_turn(turn, t + j, modes.shape[1] > 1)
        s_tok = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        return s_tok, acc

    @gluon.jit
    def _attend(start, q_tile, mem, wg, g, t, n_tiles, k_base, mask_from, causal_off, q_pos, N_KEYS, qk_scale,
                next_item=None, RESUME: gl.constexpr = False):
        """Consumer wg's rows of one work item, from its first scores S_0 (start: their token, issued by _first_scores;
        RESUME: (P_0, l, m), S_0's softmax run at the previous item's end): its n_tiles key tiles from slot
        index g on (slots and phases run on over the items) and, with ping-pong, turns t .. t + n_tiles; every slot
        read is released. Returns the unnormalised O, l and m (log2 units). Each group of products issued (S_0; then
        S_j with P_(j-1) V_(j-1); then the last P V) is one turn, taken after the previous consumer's. next_item (stream,
        non-causal: the program's index of the next work item): once this item's key tiles are issued and the next
        item's queries are in, the last P V goes with the next item's S_0, whose softmax runs before this item's O is
        returned, followed by the next item's (P_0, l, m)."""
        shared, turn, modes = mem[0], mem[1], mem[2]   # mem[3]: row_sum's ones tile
        q_smem, k_smem, v_smem, p_smem, l_smem, q_bar, q_empty, ready, empty = shared[:9]
        PINGPONG: gl.constexpr = modes.shape[1] > 1        # the switches: see flash_fwd_gluon_ws's modes
        ARRIVE: gl.constexpr = modes.shape[2]               # 1 elected, 2 per thread, 4 elected without bar.sync
        TREE: gl.constexpr = modes.shape[4] > 1
        POLY: gl.constexpr = 2 * modes.shape[5] if modes.shape[5] > 1 else 1   # _exp2_mixed's: 1, 4 or 8
        ROW_SUM: gl.constexpr = modes.shape[7] > 1
        EXP_TURN: gl.constexpr = modes.shape[10] > 1
        TIE_ONE: gl.constexpr = modes.shape[10] == 4         # exp_turn 2: the pass waits for one row sum, not both
        FOLD: gl.constexpr = modes.shape[11] > 1             # fold_first: start is None, S_0 is issued in the loop
        SLOTS: gl.constexpr = k_smem.shape[0]
        CONSUMERS: gl.constexpr = q_smem.shape[0] // q_bar.shape[0]
        P_BUFFERS: gl.constexpr = p_smem.shape[0] // CONSUMERS   # shared P buffers per consumer (0: registers)
        if EXP_TURN:   # tile 0's turn at the exponentials (tile j's: t + j)
            my_turn = (turn[0].index(0), t)
        else:
            my_turn = None
        P_SMEM: gl.constexpr = P_BUFFERS > 0
        p_base = P_BUFFERS * wg
        ROWS: gl.constexpr = q_tile.shape[0]
        D: gl.constexpr = q_tile.shape[1]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        s_layout: gl.constexpr = _wgmma_layout(4, BLOCK_N)
        o_layout: gl.constexpr = _wgmma_layout(4, D)
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
        zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        acc = gl.zeros([ROWS, D], gl.float32, o_layout)
        # ROW_SUM: l accumulates on the tensor cores as acc_l = P ones (mem[3]: a BLOCK_N x 8 tile of ones, K-major),
        # issued after each P V and rescaled with O; otherwise l_i sums each tile's P by adds (64 per tile and thread
        # for 128 keys, with their shuffles)
        if ROW_SUM:
            l_layout: gl.constexpr = _wgmma_layout(4, _ONES_ROWS)
            pl_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l_layout, k_width=2)
            ones = mem[3].permute((1, 0))
            acc_l = gl.zeros([ROWS, _ONES_ROWS], gl.float32, l_layout)
        IN_FLIGHT: gl.constexpr = 2 if ROW_SUM else 1   # the groups issued behind S_j: P V (and P ones)

        if FOLD:   # tile 0 in the loop, from an empty O (alpha is 0 there: m starts at -inf), its S_0 issued beside a
            # product of zeros (P_(-1) V_0: what keeps the loop's group of products and its wait the same for every tile)
            m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
            l_i = gl.zeros([ROWS], gl.float32, row_s)
            p_op = gl.zeros([ROWS, BLOCK_N], p_smem.dtype, p_layout)
        elif RESUME:
            p, l_i, m_i = start
            p_op = _p_operand(p, p_smem, p_base, p_layout, P_SMEM)
        else:
            s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(start,))
            m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
            p, alpha, m_i = _softmax_tile(s_ij, m_i, k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                                          s_layout, BLOCK_N, TREE, POLY, my_turn)
            if not ROW_SUM:
                l_i = gl.sum(p, axis=1)
            if EXP_TURN:   # the next consumer's turn (tied: once every exp2 of this tile is issued; the row sums read them)
                _pass_exp_turn(l_i, turn, TIE_ONE, ARRIVE)
            p_op = _p_operand(p, p_smem, p_base, p_layout, P_SMEM)
        for j in range(0 if FOLD else 1, n_tiles):
            slot = (g + j) % SLOTS
            if FOLD:   # tile 0's product of zeros reads its own slot
                prev = (g + j - 1 + (j == 0).to(gl.int32)) % SLOTS
            else:
                prev = (g + j - 1) % SLOTS
            s_tok, acc = _issue_tile(mem, q_tile, p_op, acc, zero_s, g, j, slot, prev, t)
            if ROW_SUM:
                acc_l = warpgroup_mma(gl.convert_layout(p_op, pl_layout), ones, acc_l, is_async=True)
            _pass_turn(turn, PINGPONG, ARRIVE)
            s_ij = warpgroup_mma_wait(num_outstanding=IN_FLIGHT, deps=(s_tok,))
            if EXP_TURN:
                my_turn = (turn[0].index(0), t + j)
            p, alpha, m_i = _softmax_tile(s_ij, m_i, k_base + j * BLOCK_N, mask_from, q_pos, N_KEYS, causal_off,
                                          qk_scale, s_layout, BLOCK_N, TREE, POLY, my_turn)
            if not ROW_SUM:
                l_i = l_i * alpha + gl.sum(p, axis=1)
                _pin(l_i, l_smem, wg)
            if EXP_TURN:   # the next consumer's turn (tied: once every exp2 of this tile is issued; the row sums read them)
                _pass_exp_turn(l_i, turn, TIE_ONE, ARRIVE)
            if P_BUFFERS == 2:   # the other buffer: written while P_(j-1) V_(j-1) reads this one
                p_next = _p_operand(p, p_smem, p_base + j % 2, p_layout, P_SMEM)
            if ROW_SUM:
                acc, acc_l = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_l))
            else:
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            if FOLD:
                if j > 0:   # (tile 0's slot is released after tile 1)
                    _arrive(empty.index(prev), ARRIVE)
            else:
                _arrive(empty.index(prev), ARRIVE)       # K_(j-1), V_(j-1) no longer read here
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            if ROW_SUM:
                acc_l = acc_l * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, l_layout)), 1)
            if P_BUFFERS == 2:
                p_op = p_next
            else:   # P_j's registers, or its one buffer, written once P_(j-1) V_(j-1) is done
                p_op = _p_operand(p, p_smem, p_base, p_layout, P_SMEM)
        last = (g + n_tiles - 1) % SLOTS
        if next_item is not None:   # stream: the next item's S_0 with this item's last P V, and its softmax
            s_tok, acc = _issue_tile(mem, _query_tile(mem, wg, next_item), p_op, acc, zero_s, g, n_tiles,
                                     (g + n_tiles) % SLOTS, last, t)
            _pass_turn(turn, PINGPONG, ARRIVE)
            s_ij = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
            p, alpha, m_next = _softmax_tile(s_ij, gl.full([ROWS], float("-inf"), gl.float32, row_s), k_base,
                                             mask_from, q_pos, N_KEYS, causal_off, qk_scale, s_layout, BLOCK_N, TREE,
                                             POLY)
            l_next = gl.sum(p, axis=1)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            _arrive(empty.index(last), ARRIVE)
            result = (acc, l_i, m_i, p, l_next, m_next)
        else:   # (one return statement: Triton 3.6 checks every return of a function against the others)
            if modes.shape[14] > 1:   # one_q: the last Q K^T is done, so the loader may bring the next item's
                mbarrier.arrive(q_empty.index(0), count=1)   # queries in under this last P V and the epilogue
            _wait_v(shared, g + n_tiles - 1)
            _take_turn(turn, t + n_tiles, PINGPONG)
            acc = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
            if ROW_SUM:
                acc_l = warpgroup_mma(gl.convert_layout(p_op, pl_layout), ones, acc_l, is_async=True)
                _pass_turn(turn, PINGPONG, ARRIVE)
                acc, acc_l = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_l))
                l_i = gl.convert_layout(gl.max(acc_l, axis=1), row_s)   # every column holds the row sum
            else:
                _pass_turn(turn, PINGPONG, ARRIVE)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            _arrive(empty.index(last), ARRIVE)
            result = (acc, l_i, m_i)
        return result

    @gluon.jit
    def _issue_scores(mem, q_tile, zero_s, k, t):
        """S_k = Q K_k^T alone at ping-pong turn t, not waited for (lookahead's S_1): once key tile k's slot is ready.
        Returns its token."""
        shared, turn, modes = mem[0], mem[1], mem[2]
        k_smem = shared[1]
        SLOTS: gl.constexpr = k_smem.shape[0]
        _wait_slot(mem, k)
        _take_turn(turn, t, modes.shape[1] > 1)
        s_tok = warpgroup_mma(q_tile, k_smem.index(k % SLOTS).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        _pass_turn(turn, modes.shape[1] > 1, modes.shape[2])
        return s_tok

    @gluon.jit
    def _ahead_step(s_cur, p_op, acc, m_i, l_i, q_tile, mem, g, t, j, k_base, mask_from, q_pos, N_KEYS, causal_off,
                    qk_scale, AHEAD: gl.constexpr):
        """lookahead's key tile j, its scores S_j in flight (s_cur): P_(j-1) V_(j-1) issued and, with AHEAD, S_(j+1)
        behind it (turn t + 1 + j), then tile j's softmax while they run; wgmma groups complete in order, so S_j is
        done once at most AHEAD + 1 groups are left. Returns (S_(j+1) in flight, without AHEAD S_j's values, unused;
        P_j as the A operand; O rescaled by tile j's alpha; m; l)."""
        shared, turn, modes = mem[0], mem[1], mem[2]
        k_smem, v_smem, p_smem, empty = shared[1], shared[2], shared[3], shared[8]
        PINGPONG: gl.constexpr = modes.shape[1] > 1
        ARRIVE: gl.constexpr = modes.shape[2]
        TREE: gl.constexpr = modes.shape[4] > 1
        POLY: gl.constexpr = 2 * modes.shape[5] if modes.shape[5] > 1 else 1
        SLOTS: gl.constexpr = k_smem.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        ROWS: gl.constexpr = acc.shape[0]
        s_layout: gl.constexpr = _wgmma_layout(4, BLOCK_N)
        o_layout: gl.constexpr = acc.type.layout      # P V's accumulator and A operand as the caller made them
        p_layout: gl.constexpr = p_op.type.layout
        prev = (g + j - 1) % SLOTS
        if AHEAD:
            k = g + j + 1   # _wait_slot written out: through it ptxas allocates the masked tiles' registers otherwise
            mbarrier.wait(shared[7].index(k % SLOTS), (k // SLOTS) & 1)   # (46 SASS lines), and this binary was timed
            if ARRIVE == 4:
                _mark_unsynced()
        _take_turn(turn, t + 1 + j, PINGPONG)
        acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        if AHEAD:
            s_new = warpgroup_mma(q_tile, k_smem.index(k % SLOTS).permute((1, 0)),
                                  gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False,
                                  is_async=True)
        _pass_turn(turn, PINGPONG, ARRIVE)
        s_ij = warpgroup_mma_wait(num_outstanding=2 if AHEAD else 1, deps=(s_cur,))
        p, alpha, m_i = _softmax_tile(s_ij, m_i, k_base + j * BLOCK_N, mask_from, q_pos, N_KEYS, causal_off, qk_scale,
                                      s_layout, BLOCK_N, TREE, POLY)
        l_i = l_i * alpha + gl.sum(p, axis=1)
        acc = warpgroup_mma_wait(num_outstanding=1 if AHEAD else 0, deps=(acc,))
        _arrive(empty.index(prev), ARRIVE)           # K_(j-1), V_(j-1) no longer read here
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        if not AHEAD:   # (the last tile: no next scores; its own stand in, unused)
            s_new = s_ij
        return s_new, _p_operand(p, p_smem, 0, p_layout, False), acc, m_i, l_i

    @gluon.jit
    def _ahead_end(s_last, p_op, acc, m_i, l_i, q_tile, mem, g, t, n_tiles, k_base, mask_from, q_pos, N_KEYS,
                   causal_off, qk_scale):
        """lookahead's last key tile (its scores s_last in flight) and the last P V (turn t + n_tiles + 1). Returns O
        (unnormalised), l and m."""
        shared, turn, modes = mem[0], mem[1], mem[2]
        v_smem, empty = shared[2], shared[8]
        _, p_op, acc, m_i, l_i = _ahead_step(s_last, p_op, acc, m_i, l_i, q_tile, mem, g, t, n_tiles - 1, k_base,
                                             mask_from, q_pos, N_KEYS, causal_off, qk_scale, False)
        last = (g + n_tiles - 1) % v_smem.shape[0]
        _take_turn(turn, t + n_tiles + 1, modes.shape[1] > 1)
        acc = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
        _pass_turn(turn, modes.shape[1] > 1, modes.shape[2])
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        _arrive(empty.index(last), modes.shape[2])
        return acc, l_i, m_i

    @gluon.jit
    def _attend_ahead(start, q_tile, mem, g, t, n_tiles, k_base, mask_from, causal_off, q_pos, N_KEYS, qk_scale):
        """lookahead: _attend's work item (n_tiles >= 2, P in registers) with the scores one key tile further ahead.
        _attend issues S_j with P_(j-1) V_(j-1) and waits for S_j at once, so each turn's Q K^T runs with nothing of
        this consumer's beside it. Here S_1 follows S_0 (turn t + 1); each later turn issues P_(j-1) V_(j-1) and then
        S_(j+1), and tile j's softmax, whose scores were issued a turn before, runs while both products do. The
        price: two score tiles live at once (64 more registers per thread with 128 keys) and a slot more in use (key
        tile j + 1 while j - 1 is read). The loop takes two tiles per pass so that the two score tiles keep their
        registers: carried from one pass to the next, an in-flight tile would be copied at the loop's end, a read of
        a running wgmma's accumulator that makes ptxas serialise every wgmma (C7514, Triton 3.6's ptxas).
        Turns t .. t + n_tiles + 1: one more than _attend's. Returns the unnormalised O, l and m (log2 units)."""
        shared, modes = mem[0], mem[2]
        ROWS: gl.constexpr = q_tile.shape[0]
        D: gl.constexpr = q_tile.shape[1]
        BLOCK_N: gl.constexpr = shared[1].shape[1]
        s_layout: gl.constexpr = _wgmma_layout(4, BLOCK_N)
        o_layout: gl.constexpr = _wgmma_layout(4, D)
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        acc = gl.zeros([ROWS, D], gl.float32, o_layout)
        s_a = _issue_scores(mem, q_tile, gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), g + 1, t + 1)
        s_ij = warpgroup_mma_wait(num_outstanding=1, deps=(start,))
        p, alpha, m_i = _softmax_tile(s_ij, gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout)),
                                      k_base, mask_from, q_pos, N_KEYS, causal_off, qk_scale, s_layout, BLOCK_N,
                                      modes.shape[4] > 1, 2 * modes.shape[5] if modes.shape[5] > 1 else 1)
        l_i = gl.sum(p, axis=1)
        p_op = _p_operand(p, shared[3], 0, p_layout, False)
        for i in range((n_tiles - 2) // 2):   # tiles 1 + 2i (scores in s_a) and 2 + 2i (in s_b)
            s_b, p_op, acc, m_i, l_i = _ahead_step(s_a, p_op, acc, m_i, l_i, q_tile, mem, g, t, 1 + 2 * i, k_base,
                                                   mask_from, q_pos, N_KEYS, causal_off, qk_scale, True)
            s_a, p_op, acc, m_i, l_i = _ahead_step(s_b, p_op, acc, m_i, l_i, q_tile, mem, g, t, 2 + 2 * i, k_base,
                                                   mask_from, q_pos, N_KEYS, causal_off, qk_scale, True)
        if n_tiles % 2 == 1:   # tile n_tiles - 2 (in s_a), then the last (in s_b)
            s_b, p_op, acc, m_i, l_i = _ahead_step(s_a, p_op, acc, m_i, l_i, q_tile, mem, g, t, n_tiles - 2, k_base,
                                                   mask_from, q_pos, N_KEYS, causal_off, qk_scale, True)
            result = _ahead_end(s_b, p_op, acc, m_i, l_i, q_tile, mem, g, t, n_tiles, k_base, mask_from, q_pos,
                                N_KEYS, causal_off, qk_scale)
        else:                  # the last tile's scores are in s_a
            result = _ahead_end(s_a, p_op, acc, m_i, l_i, q_tile, mem, g, t, n_tiles, k_base, mask_from, q_pos,
                                N_KEYS, causal_off, qk_scale)
        return result

    @gluon.jit
    def _pass_item(mem, g, t, n_tiles):
        """A consumer with no rows in a work item (mixed's smaller items) keeps the pipeline's counts: for each of
        the item's key tiles it waits for the slot (so that its release cannot count towards the slot's previous
        use) and releases it, and it takes and passes each of the item's n_tiles + 1 ping-pong turns."""
        shared, turn, modes = mem[0], mem[1], mem[2]   # mem[3]: row_sum's ones tile
        k_smem, ready, empty = shared[1], shared[7], shared[8]
        SLOTS: gl.constexpr = k_smem.shape[0]
        PINGPONG: gl.constexpr = modes.shape[1] > 1
        ARRIVE: gl.constexpr = modes.shape[2]
        for j in range(n_tiles):
            mbarrier.wait(ready.index((g + j) % SLOTS), ((g + j) // SLOTS) & 1)
            _take_turn(turn, t + j, PINGPONG)
            _pass_turn(turn, PINGPONG, ARRIVE)
            _arrive(empty.index((g + j) % SLOTS), ARRIVE)
        _take_turn(turn, t + n_tiles, PINGPONG)
        _pass_turn(turn, PINGPONG, ARRIVE)

    @gluon.jit
    def _ws_idle():
        """shared_code 3's default partition: nothing (the consumers and the loader are workers)."""
        pass

    @gluon.jit(noinline=True)
    def _ws_consumer_call(mem, out, wg, work, sizes):
        """shared_code: _ws_consumer as a function of its own, which both consumer partitions call with wg a runtime
        value (a constexpr wg would specialise it twice), so that the kernel holds one copy of the consumer's code. Its
        barriers become its partition's in the PTX (partition_syncs; the PTX stage the module installs)."""
        _ws_consumer(mem, out, wg, work, sizes)

    @gluon.jit
    def _ws_consumer(mem, out, wg, work, sizes):
        """Consumer wg's partition: its program's work items one after another (_item_loop) or, with stream, each next
        item's first scores issued beside this item's last P V (_stream_loop)."""
        if mem[2].shape[8] > 1:
            _stream_loop(mem, out, wg, work, sizes)
        else:
            _item_loop(mem, out, wg, work, sizes)

    @gluon.jit
    def _stream_store(acc, l_i, m_i, out, idx, work, sizes, wg, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      DIRECT: gl.constexpr):
        """stream's epilogue of this program's idx-th work item (item program_id + idx * programs): consumer wg's rows
        of O and L."""
        ROWS: gl.constexpr = acc.shape[0]
        row_s: gl.constexpr = l_i.type.layout
        row_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
        q_start, head, _, _, _, _, _, _ = _work_item(gl.program_id(0) + idx * gl.num_programs(0), work, BLOCK_M,
                                                     BLOCK_N)
        row0 = q_start + wg * ROWS
        q_pos = row0 + gl.arange(0, ROWS, layout=row_s)
        _store_rows(acc, l_i, m_i, out[0], out[1], row0, q_pos, head, work[0], sizes[1], sizes[2], row_o, 4, DIRECT)

    @gluon.jit
    def _stream_loop(mem, out, wg, work, sizes):
        """stream (persistent, non-causal): consumer wg's rows of its program's work items, each item's key tiles by
        _attend's loop (its query tile fixed), but the last P V of one item issued with the next item's S_0 and that
        S_0's softmax run before the item's O leaves (_attend with next_item), so that the next item resumes from it.
        Against _item_loop an item saves a softmax with no product under it and a product with no softmax beside it.
        Slots and phases run on as in _item_loop, which the loader serves unchanged; the turns are one per key tile and
        one more in all (S_0; S_x with P_(x-1) V_(x-1); the last P V), so item it's first is it * KT.
        The form measured at 2da5fb7 and 7b3f931 ran all of a program's key tiles in one loop, the epilogue behind a
        branch in it, and recomputed the query tile's descriptor per tile (the Gluon log, session 22)."""
        shared, modes = mem[0], mem[2]
        q_smem, k_smem, q_bar, q_empty = shared[0], shared[1], shared[5], shared[6]
        TREE: gl.constexpr = modes.shape[4] > 1
        POLY: gl.constexpr = 2 * modes.shape[5] if modes.shape[5] > 1 else 1
        Q_BUFFERS: gl.constexpr = q_bar.shape[0]
        CONSUMERS: gl.constexpr = q_smem.shape[0] // Q_BUFFERS
        ROWS: gl.constexpr = q_smem.shape[1]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        s_layout: gl.constexpr = _wgmma_layout(4, BLOCK_N)
        qk_scale = sizes[0]
        N_KEYS = work[1]
        KT = gl.cdiv(N_KEYS, BLOCK_N)                  # key tiles per item (non-causal: every item's)
        full_stop = (N_KEYS // BLOCK_N) * BLOCK_N      # the tiles from here on are masked (a ragged last tile)
        n_items = gl.cdiv(work[5] - gl.program_id(0), gl.num_programs(0))
        q_any = gl.zeros([ROWS], gl.int32, gl.SliceLayout(1, s_layout))   # non-causal: the mask tests k < N_KEYS only
        DIRECT: gl.constexpr = modes.shape[0] > 1
        s_tok, _ = _first_scores(mem, wg, 0, 0, 0)
        s_ij = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        p, _, m_i = _softmax_tile(s_ij, gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout)),
                                      0, full_stop, q_any, N_KEYS, N_KEYS, qk_scale, s_layout, BLOCK_N, TREE, POLY)
        l_i = gl.sum(p, axis=1)
        for it in range(n_items - 1):   # (item it's queries were waited for at item it - 1's end, or by _first_scores)
            q_tile = q_smem.index((it % Q_BUFFERS) * CONSUMERS + wg)
            acc, l_done, m_done, p, l_i, m_i = _attend((p, l_i, m_i), q_tile, mem, wg, it * KT, it * KT, KT, 0,
                                                       full_stop, N_KEYS, q_any, N_KEYS, qk_scale, it + 1, True)
            mbarrier.arrive(q_empty.index(it % Q_BUFFERS), count=1)
            _stream_store(acc, l_done, m_done, out, it, work, sizes, wg, ROWS * CONSUMERS, BLOCK_N, DIRECT)
        it = n_items - 1
        q_tile = q_smem.index((it % Q_BUFFERS) * CONSUMERS + wg)
        acc, l_i, m_i = _attend((p, l_i, m_i), q_tile, mem, wg, it * KT, it * KT, KT, 0, full_stop, N_KEYS, q_any,
                                N_KEYS, qk_scale, None, True)
        mbarrier.arrive(q_empty.index(it % Q_BUFFERS), count=1)
        _stream_store(acc, l_i, m_i, out, it, work, sizes, wg, ROWS * CONSUMERS, BLOCK_N, DIRECT)

    @gluon.jit
    def _item_loop(mem, out, wg, work, sizes):
        """Consumer wg: for each of this program's work items, rows [q_start + 64 wg, q_start + 64 (wg + 1))
        of its query tile (_attend), then its epilogue: O and L, or for a split of a tail tile its
        normalised O (fp32) and log2-sum-exp into the workspace. The Q buffer is released once the
        item's products are done. out: O, L, the workspace's two pointers and, with tma_store, O's
        descriptor and the consumers' staging buffers."""
        shared, modes = mem[0], mem[2]
        q_smem, k_smem, v_smem, p_smem, l_smem, q_bar, q_empty, ready, empty = shared[:9]
        O_ptr, L_ptr, Op_ptr, Lp_ptr = out[0], out[1], out[2], out[3]
        TMA_STORE: gl.constexpr = len(out) > 4
        DIRECT: gl.constexpr = modes.shape[0] > 1
        qk_scale, stride_o_row, stride_l_head = sizes
        N_QUERIES = work[0]
        N_KEYS = work[1]
        Q_BUFFERS: gl.constexpr = q_bar.shape[0]
        CONSUMERS: gl.constexpr = q_smem.shape[0] // Q_BUFFERS
        ROWS: gl.constexpr = q_smem.shape[1]
        D: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        s_layout: gl.constexpr = _wgmma_layout(4, BLOCK_N)
        o_layout: gl.constexpr = _wgmma_layout(4, D)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
        ITEM_OVERLAP: gl.constexpr = modes.shape[3] > 1
        MIXED: gl.constexpr = modes.shape[6] > 1
        LOOKAHEAD: gl.constexpr = modes.shape[9] > 1
        EXP_TURN: gl.constexpr = modes.shape[10] > 1
        FOLD: gl.constexpr = modes.shape[11] > 1
        QM: gl.constexpr = modes.shape[13] > 1
        ONE_Q: gl.constexpr = modes.shape[14] > 1
        g = 0
        it = 0
        t = 0   # ping-pong turns so far: n_tiles + 1 per item (lookahead's items of 2 or more key tiles: n_tiles + 2;
                # exp_turn's: n_tiles)
        if ITEM_OVERLAP:   # the first item's S_0; each later one's is issued under the previous item's epilogue
            s_next, q_next = _first_scores(mem, wg, 0, 0, 0)
        for item in range(gl.program_id(0), work[5], gl.num_programs(0)):
            q_start, head, n_tiles, mask_from, causal_off, k_base, part, item_rows = _work_item(
                item, work, ROWS * CONSUMERS, BLOCK_N, MIXED, QM)
            row0 = q_start + wg * ROWS
            q_pos = row0 + gl.arange(0, ROWS, layout=row_s)
            if MIXED:
                idle = wg * ROWS >= item_rows
            else:
                idle = False
            if idle:   # a mixed schedule's smaller item: no rows here, the pipeline passed on
                _pass_item(mem, g, t, n_tiles)
                mbarrier.arrive(q_empty.index(it % Q_BUFFERS), count=1)
                g += n_tiles
                it += 1
                t += n_tiles + 1
            else:
                if ITEM_OVERLAP:
                    s_tok, q_tile = s_next, q_next
                elif FOLD:   # S_0 is issued in _attend's key loop
                    s_tok, q_tile = None, _query_tile(mem, wg, it)
                else:
                    s_tok, q_tile = _first_scores(mem, wg, it, g, t)
                # (_attend has two call sites: a flag set under `if LOOKAHEAD` becomes a runtime value in Triton 3.6, which
                # would carry _attend_ahead into every other kernel's PTX)
                if LOOKAHEAD:
                    if n_tiles > 1:
                        acc, l_i, m_i = _attend_ahead(s_tok, q_tile, mem, g, t, n_tiles, k_base, mask_from, causal_off,
                                                      q_pos, N_KEYS, qk_scale)
                        turns = n_tiles + 2
                    else:
                        acc, l_i, m_i = _attend(s_tok, q_tile, mem, wg, g, t, n_tiles, k_base, mask_from, causal_off,
                                                q_pos, N_KEYS, qk_scale)
                        turns = n_tiles + 1
                else:
                    acc, l_i, m_i = _attend(s_tok, q_tile, mem, wg, g, t, n_tiles, k_base, mask_from, causal_off,
                                            q_pos, N_KEYS, qk_scale)
                    turns = n_tiles + 1
                    if EXP_TURN:   # one turn per key tile, at its exponentials
                        turns = n_tiles
                if not ONE_Q:   # (one_q: released in _attend, before the last P V)
                    mbarrier.arrive(q_empty.index(it % Q_BUFFERS), count=1)
                g += n_tiles
                it += 1
                t += turns
                if ITEM_OVERLAP:   # the next item's S_0 (after the last item, the loader's spare tiles') runs under
                    s_next, q_next = _first_scores(mem, wg, it, g, t)   # this epilogue
                if part >= 0:
                    rows = part * (ROWS * CONSUMERS) + wg * ROWS + gl.arange(0, ROWS, layout=row_o)
                    cols = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
                    o = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
                    gl.store(Op_ptr + gl.expand_dims(rows, 1) * D + gl.expand_dims(cols, 0), o)
                    gl.store(Lp_ptr + rows, gl.convert_layout(m_i + gl.log2(l_i), row_o))
                elif TMA_STORE:
                    _store_o_tma(acc, l_i, out[4], out[5].index(wg), head * N_QUERIES + row0, row_o)
                    _store_l(l_i, m_i, L_ptr, q_pos, head, N_QUERIES, stride_l_head)
                else:
                    _store_rows(acc, l_i, m_i, O_ptr, L_ptr, row0, q_pos, head, N_QUERIES, stride_o_row,
                                stride_l_head, row_o, 4, DIRECT)
        if ITEM_OVERLAP:   # the spare S_0: nothing reads it, but it must be done before the program ends
            warpgroup_mma_wait(num_outstanding=0, deps=(s_next,))
        if TMA_STORE:      # the last O store has read its staging buffer before the program's shared memory goes
            tma.store_wait(0)

    @gluon.jit
    def flash_fwd_gluon_ws(
        # TMA descriptors over the flattened (heads * N, D) rows, Q's block 64 rows (one consumer's);
        # O and L are plain pointers
        q_desc, k_desc, v_desc, O_ptr, L_ptr,
        # strides: O's row (its head stride is N_QUERIES rows), L's head
        stride_o_row, stride_l_head,
        # sizes
        N_QUERIES, N_KEYS, qk_scale,
        # work items (_work_item): whole tiles, splits per tail tile, items; the split tail's workspace (fp32 O
        # parts, log2-sum-exp parts). Program p takes items p, p + programs, ... (one each unless persistent)
        FULL, SPLITS, N_ITEMS, Op_ptr, Lp_ptr,
        # mixed: each head's items of BLOCK_M rows, before the rest in items of BLOCK_M - 64 (0: one size, BLOCK_M)
        BIG,
        # tma_store: O's descriptor over the flattened rows, blocks of 64 rows (None: plain stores)
        o_desc,
        # compile-time meta-parameters: consumer warpgroups (2 or 3), registers per consumer thread, Q buffers
        # (2 for a persistent grid: the next item's queries load while this one's finish)
        CAUSAL: gl.constexpr, SLOTS: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
        P_BUFFERS: gl.constexpr, PINGPONG: gl.constexpr, PIN_EX2: gl.constexpr, Q_BUFFERS: gl.constexpr,
        DIRECT_STORE: gl.constexpr, THREAD_ARRIVE: gl.constexpr, ITEM_OVERLAP: gl.constexpr,
        TMA_PREFETCH: gl.constexpr, TMA_STORE: gl.constexpr, V_BARRIER: gl.constexpr, TREE_MAX: gl.constexpr,
        UNSYNCED_ARRIVE: gl.constexpr, POLY_EXP: gl.constexpr, MIXED: gl.constexpr, ROW_SUM: gl.constexpr,
        STREAM: gl.constexpr, LOOKAHEAD: gl.constexpr, EXP_TURN: gl.constexpr, FOLD_FIRST: gl.constexpr,
        L2_PREFETCH: gl.constexpr, Q_MAJOR: gl.constexpr, V_FIRST: gl.constexpr, ONE_Q: gl.constexpr,
        HOLD_FIRST: gl.constexpr, NARROW_FROM: gl.constexpr, SHARED_CODE: gl.constexpr,
    ):
        ROWS: gl.constexpr = q_desc.block_type.shape[0]
        D: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        if TMA_PREFETCH:
            _prefetch_descriptors(4)

        q_smem = gl.allocate_shared_memory(dtype, [Q_BUFFERS * CONSUMERS, ROWS, D], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [SLOTS, BLOCK_N, D], v_desc.layout)
        p_layout_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_N], dtype)
        p_smem = gl.allocate_shared_memory(dtype, [P_BUFFERS * CONSUMERS if P_BUFFERS else 1, ROWS, BLOCK_N],
                                           p_layout_smem)
        q_bar = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        l_smem = gl.allocate_shared_memory(gl.float32, [CONSUMERS if PIN_EX2 else 1, ROWS],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        # Arrivals a consumer makes on a slot's empty barrier or a turn: one, or with THREAD_ARRIVE one per thread
        ARRIVALS: gl.constexpr = 4 * 32 if THREAD_ARRIVE else 1
        for b in gl.static_range(Q_BUFFERS):
            mbarrier.init(q_bar.index(b), count=1)
            mbarrier.init(q_empty.index(b), count=CONSUMERS)
        for s in gl.static_range(SLOTS):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=CONSUMERS * ARRIVALS)
        # Ping-pong's turns: one mbarrier per consumer, each its own allocation (_take_turn says why), consumer
        # 0's first turn given here. The switches DIRECT_STORE, PINGPONG, THREAD_ARRIVE or UNSYNCED_ARRIVE (the arrive
        # mode, 1, 2 or 4), ITEM_OVERLAP, TREE_MAX, POLY_EXP (as 1, 2 or 4), MIXED, ROW_SUM, STREAM, LOOKAHEAD,
        # EXP_TURN (as 1, 2 or 4), FOLD_FIRST, L2_PREFETCH, Q_MAJOR, ONE_Q, HOLD_FIRST (as 1, 2 or 4) and NARROW_FROM
        # reach the workers as the shape of a never-used buffer, modes, since a worker's constexpr arguments arrive as
        # values.
        turn0 = _barrier(ARRIVALS)
        turn1 = _barrier(ARRIVALS)
        if PINGPONG or EXP_TURN:
            mbarrier.arrive(turn0.index(0), count=ARRIVALS)
        modes = gl.allocate_shared_memory(gl.int8, [2 if DIRECT_STORE else 1, 2 if PINGPONG else 1,
                                                    2 if THREAD_ARRIVE else (4 if UNSYNCED_ARRIVE else 1),
                                                    2 if ITEM_OVERLAP else 1,
                                                    2 if TREE_MAX else 1, POLY_EXP // 2 if POLY_EXP else 1,
                                                    2 if MIXED else 1, 2 if ROW_SUM else 1, 2 if STREAM else 1,
                                                    2 if LOOKAHEAD else 1, 4 if EXP_TURN == 2 else (2 if EXP_TURN else 1),
                                                    2 if FOLD_FIRST else 1, 2 if L2_PREFETCH else 1,
                                                    2 if Q_MAJOR else 1, 2 if ONE_Q else 1,
                                                    2 * HOLD_FIRST if HOLD_FIRST else 1,
                                                    NARROW_FROM if NARROW_FROM else 1],
                                          gl.SwizzledSharedLayout(1, 1, 1, order=list(range(16, -1, -1))))

        # The default partition (this program's 4 warps) is consumer 0; the workers are the other
        # consumers and the loader. Each consumer's arguments: the shared memory and barriers (with its own
        # turn and the next consumer's), the outputs, its index wg, the work items' description, the sizes of
        # the epilogue.
        work = (N_QUERIES, N_KEYS, FULL, SPLITS, CAUSAL, N_ITEMS, BIG)
        bars = (q_bar, q_empty, ready, empty)
        shared = (q_smem, k_smem, v_smem, p_smem, l_smem, q_bar, q_empty, ready, empty)
        if V_BARRIER:   # the slots' V barriers, last in both tuples (_issue_kv, _wait_v)
            v_ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
            for s in gl.static_range(SLOTS):
                mbarrier.init(v_ready.index(s), count=1)
            bars = bars + (v_ready,)
            shared = shared + (v_ready,)
        elif V_FIRST:   # one barrier, for the program's first key tile's V
            v_first = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
            mbarrier.init(v_first.index(0), count=1)
            bars = bars + (v_first,)
            shared = shared + (v_first,)
        loader_args = ((q_desc, k_desc, v_desc), (q_smem, k_smem, v_smem), bars, work, modes)
        if TMA_STORE:   # one staging buffer per consumer, in the layout of O's descriptor (_store_o_tma)
            o_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, ROWS, D], o_desc.layout)
            out = (O_ptr, L_ptr, Op_ptr, Lp_ptr, o_desc, o_smem)
        else:
            out = (O_ptr, L_ptr, Op_ptr, Lp_ptr)
        sizes = (qk_scale, stride_o_row, stride_l_head)
        if ROW_SUM:   # row_sum's ones tile, K-major (the B operand of P ones, as K is of Q K^T), shared by the consumers
            ones_rows: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
            ones = gl.allocate_shared_memory(dtype, [_ONES_ROWS, BLOCK_N],
                                             gl.NVMMASharedLayout.get_default_for([_ONES_ROWS, BLOCK_N], dtype),
                                             gl.full([_ONES_ROWS, BLOCK_N], 1.0, dtype, ones_rows))
            fence_async_shared()
            tools = (modes, ones)
        else:
            tools = (modes,)
        wg0 = gl.program_id(0) * 0   # shared_code: consumer 0's index, a runtime value like the others'
        if SHARED_CODE > 1:   # the PTX stage inlines the function once (inline_consumer_call)
            _mark(_INLINE_ASM)
        if SHARED_CODE == 3:   # an idle default partition, the consumers and a one-warp loader workers
            if CONSUMERS == 2:
                gl.warp_specialize([(_ws_idle, ()),
                                    (_ws_consumer_call, ((shared, (turn0, turn1)) + tools, out, wg0, work, sizes)),
                                    (_ws_consumer_call, ((shared, (turn1, turn0)) + tools, out, wg0 + 1, work, sizes)),
                                    (_ws_loader, loader_args)], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])
        elif SHARED_CODE:   # the loader is the default partition (4 warps, one issuing), the consumers workers
            if CONSUMERS == 2:
                gl.warp_specialize([(_ws_loader, loader_args),
                                    (_ws_consumer_call, ((shared, (turn0, turn1)) + tools, out, wg0, work, sizes)),
                                    (_ws_consumer_call, ((shared, (turn1, turn0)) + tools, out, wg0 + 1, work, sizes))],
                                   [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
            else:
                turn2 = _barrier(ARRIVALS)
                gl.warp_specialize([(_ws_loader, loader_args),
                                    (_ws_consumer_call, ((shared, (turn0, turn1)) + tools, out, wg0, work, sizes)),
                                    (_ws_consumer_call, ((shared, (turn1, turn2)) + tools, out, wg0 + 1, work, sizes)),
                                    (_ws_consumer_call, ((shared, (turn2, turn0)) + tools, out, wg0 + 2, work, sizes))],
                                   [4, 4, 4], [CONSUMER_REGS, CONSUMER_REGS, CONSUMER_REGS])
        elif CONSUMERS == 2:
            gl.warp_specialize([(_ws_consumer, ((shared, (turn0, turn1)) + tools, out, 0, work, sizes)),
                                (_ws_consumer, ((shared, (turn1, turn0)) + tools, out, 1, work, sizes)),
                                (_ws_loader, loader_args)], [4, 1], [CONSUMER_REGS, LOADER_REGS])
        else:
            turn2 = _barrier(ARRIVALS)
            gl.warp_specialize([(_ws_consumer, ((shared, (turn0, turn1)) + tools, out, 0, work, sizes)),
                                (_ws_consumer, ((shared, (turn1, turn2)) + tools, out, 1, work, sizes)),
                                (_ws_consumer, ((shared, (turn2, turn0)) + tools, out, 2, work, sizes)),
                                (_ws_loader, loader_args)], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])


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


def row_descriptor(t: torch.Tensor, rows: int, l2_promotion: int = TRITON_DEFAULT):
    """A host TMA descriptor over t's flattened (heads * N, D) rows (t as `flattened` accepts it), blocks of
    `rows` rows, its L2 promotion `l2_promotion` bytes (fa2lab.tma)."""
    flat, D = flattened(t), t.shape[2]
    layout = gl.NVMMASharedLayout.get_default_for([rows, D], gl.bfloat16 if t.dtype == torch.bfloat16 else gl.float16)
    return mark_promotion(TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [rows, D], layout),
                          l2_promotion)


def descriptors(Q, K, V, cfg: GluonConfig):
    """Host TMA descriptors over the flattened rows, blocks (block_m, D) for Q, (block_n, D) for K, V."""
    return [row_descriptor(t, rows, cfg.l2_promotion)
            for t, rows in ((Q, 64 if cfg.consumers else cfg.block_m), (K, cfg.block_n), (V, cfg.block_n))]


def o_descriptor(O: torch.Tensor, cfg: GluonConfig):
    """tma_store's descriptor over O's flattened rows, blocks of one consumer's 64 rows; None (plain stores)
    without tma_store, or where a block could cross a head's end (N_QUERIES % 64) or TMA cannot address O."""
    if not cfg.tma_store or O.shape[1] % 64 or flattened(O) is None:
        return None
    return row_descriptor(O, 64)


def split_plan(tiles: int, sms: int, key_tiles: int, max_splits: int = 8, parts_per_sm: int = 0) -> tuple[int, int]:
    """split_tail's plan for `tiles` equal programs at one per SM: (whole tiles, splits per tail tile).
    The last wave holds r = tiles mod sms tiles (all of them when tiles < sms) and leaves the other SMs
    idle for a whole tile's time T; split s ways along the keys, those r tiles take ceil(r s / sms)
    waves of T / s instead. The least such time wins (ties: fewer splits), each split keeping at least two
    key tiles; (tiles, 1) when nothing beats T. With parts_per_sm = n, the splits are instead the fewest
    that give at least n parts per SM (smaller parts even out SMs that finish their whole tiles at
    different times), within the same limits."""
    r = tiles % sms or (tiles if tiles < sms else 0)
    most = min(max_splits, key_tiles // 2)
    best, splits = 1.0, 1
    if parts_per_sm:
        splits = max(1, min(most, math.ceil(parts_per_sm * sms / r))) if r else 1
    else:
        for s in range(2, most + 1):
            t = math.ceil(r * s / sms) / s
            if t < best - 1e-9:
                best, splits = t, s
    return (tiles - r, splits) if r and splits > 1 else (tiles, 1)


def mix_plan(rows: int, heads: int, sms: int, block_m: int) -> int:
    """mixed's 192-row (block_m) items per head: as many whole rounds of them over the SMs as the heads' rows
    hold (k = rows * heads // (block_m * sms)), spread evenly over the heads; the rest of each head goes in items
    of block_m - 64 rows, at most one more round of them. N = 2048 with 32 heads on 132 SMs: k = 2, 8 per head
    (1536 rows) and 4 of 128 rows, so each SM runs two 192-row items and at most one of 128 rows (2.67 whole
    192-row items without it). 0 where not even one round fits (the schedule is then one size)."""
    return rows * heads // (block_m * sms) * sms // heads   # at most rows // block_m: the rounds hold no more


def _combine_tail_kernel():
    """The split tail's combine (a Triton tl kernel, built on first use)."""
    global _COMBINE
    if _COMBINE is None:
        import triton
        import triton.language as tl

        @triton.jit
        def combine_tail(Op_ptr, Lp_ptr, O_ptr, L_ptr, FULL, N_QUERIES, stride_o_row, stride_l_head,
                         SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, D: tl.constexpr):
            """Program (i, c): rows [c CHUNK, (c + 1) CHUNK) of tail tile FULL + i from its SPLITS parts:
            O = sum_s 2^(L_s - m) O_s / sum_s 2^(L_s - m), L = ln 2 (m + log2 sum_s 2^(L_s - m)).
            SPLITS is a constexpr so that every part's loads are issued before the first is used: the
            first form (a runtime loop, L then O) took 7 to 15 us on the H200 (ncu, call 5 of session 15),
            as long as the last wave it saved."""
            i = tl.program_id(0)
            c = tl.program_id(1)
            n_q = tl.cdiv(N_QUERIES, BLOCK_M)
            t = FULL + i
            rows = tl.arange(0, CHUNK)
            cols = tl.arange(0, D)
            first = i * SPLITS * BLOCK_M + c * CHUNK + rows
            m = tl.load(Lp_ptr + first)
            for s in tl.static_range(1, SPLITS):
                m = tl.maximum(m, tl.load(Lp_ptr + first + s * BLOCK_M))
            acc = tl.zeros([CHUNK, D], tl.float32)
            w = tl.zeros([CHUNK], tl.float32)
            for s in tl.static_range(SPLITS):
                part = first + s * BLOCK_M
                ws = tl.exp2(tl.load(Lp_ptr + part) - m)
                acc += ws[:, None] * tl.load(Op_ptr + part[:, None] * D + cols[None, :])
                w += ws
            q = (t % n_q) * BLOCK_M + c * CHUNK + rows
            head = t // n_q
            keep = q < N_QUERIES
            tl.store(O_ptr + (head * N_QUERIES + q)[:, None] * stride_o_row + cols[None, :],
                     (acc / w[:, None]).to(O_ptr.dtype.element_ty), mask=keep[:, None])
            tl.store(L_ptr + head * stride_l_head + q, (m + tl.log2(w)) * 0.6931471805599453, mask=keep)

        _COMBINE = combine_tail
    return _COMBINE


_COMBINE = None


def launch_plan(cfg: GluonConfig, Q, K, V, O, L, is_causal: bool, sms: int):
    """Everything one launch needs: (kernel, grid, positional args, num_warps, constexprs, tail), where
    tail is None or the split tail's (workspace O parts, L parts, whole tiles, splits) for the combine."""
    BH, N_q, D = Q.shape
    N_k = K.shape[1]
    if cfg.stream and is_causal:
        raise ValueError(f"stream runs every work item over all the keys: non-causal only ({cfg.label})")
    args = (*descriptors(Q, K, V, cfg), O, L, O.stride(1), L.stride(0), N_q, N_k, LOG2E / math.sqrt(D))
    flags = dict(CAUSAL=bool(is_causal), SLOTS=cfg.slots)
    tiles = math.ceil(N_q / cfg.block_m)
    if not cfg.consumers:
        return (flash_fwd_gluon, (tiles, BH), args, cfg.num_warps, dict(flags, P_SMEM=cfg.p_smem, OVERLAP=cfg.overlap),
                None)
    o_desc = o_descriptor(O, cfg)
    flags.update(CONSUMERS=cfg.consumers, CONSUMER_REGS=cfg.consumer_registers, PINGPONG=cfg.pingpong,
                 PIN_EX2=cfg.pin_ex2, P_BUFFERS=cfg.p_buffers if cfg.p_smem else 0, Q_BUFFERS=cfg.q_buffers,
                 DIRECT_STORE=cfg.direct_store, THREAD_ARRIVE=cfg.thread_arrive,
                 ITEM_OVERLAP=cfg.item_overlap, TMA_PREFETCH=cfg.tma_prefetch, TMA_STORE=o_desc is not None,
                 V_BARRIER=cfg.v_barrier, TREE_MAX=cfg.tree_max, UNSYNCED_ARRIVE=cfg.unsynced_arrive,
                 POLY_EXP=cfg.poly_exp, MIXED=cfg.mixed, ROW_SUM=cfg.row_sum, STREAM=cfg.stream,
                 LOOKAHEAD=cfg.lookahead, EXP_TURN=cfg.exp_turn, FOLD_FIRST=cfg.fold_first,
                 L2_PREFETCH=cfg.l2_prefetch, Q_MAJOR=cfg.q_major, V_FIRST=cfg.v_first,
                 ONE_Q=cfg.one_q, HOLD_FIRST=cfg.hold_first, NARROW_FROM=cfg.narrow_from,
                 SHARED_CODE=cfg.shared_code)
    full, splits, big = tiles * BH, 1, 0
    if cfg.mixed and not is_causal:
        big = mix_plan(N_q, BH, sms, cfg.block_m)
        if big:
            full = BH * (big + math.ceil((N_q - big * cfg.block_m) / (cfg.block_m - 64)))
    if cfg.split_tail and not is_causal:
        full, splits = split_plan(tiles * BH, sms, math.ceil(N_k / cfg.block_n),
                                  parts_per_sm=cfg.split_tail if cfg.split_tail > 1 else 0)
    parts = (tiles * BH - full) * splits if splits > 1 else 0   # the split tail's (mixed: full counts both sizes)
    items = full + parts
    if parts:
        Op = torch.empty((parts * cfg.block_m, D), dtype=torch.float32, device=Q.device)
        Lp = torch.empty((Op.shape[0],), dtype=torch.float32, device=Q.device)
        tail = (Op, Lp, full, splits)
    else:   # nothing is split: the workspace pointers are never written
        Op, Lp, tail = L, L, None
    grid = (min(items, sms),) if cfg.persistent else (items,)
    return flash_fwd_gluon_ws, grid, (*args, full, splits, items, Op, Lp, big, o_desc), 4, flags, tail


def forward(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool, cfg: GluonConfig,
            O: torch.Tensor | None = None, L: torch.Tensor | None = None):
    """O (like Q), L ((heads, N_q) float32, natural log) and, for the warp-specialized form, the
    GluonLaunch that repeats this call (None for the plain form), for inputs `applies` accepted."""
    BH, N_q, D = Q.shape
    if O is None:
        O = empty_output(Q)
    if L is None:
        L = torch.empty((BH, N_q), dtype=torch.float32, device=Q.device)
    kernel, grid, args, num_warps, flags, tail = launch_plan(cfg, Q, K, V, O, L, is_causal,
                                                             facts(Q.device.index).sm_count)
    compiled = kernel[grid](*args, num_warps=num_warps, **flags)
    combined = combine_tail(*tail, O, L, cfg.block_m) if tail is not None else None
    if not cfg.consumers:
        return O, L, None
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
    constexprs = dict(SPLITS=splits, BLOCK_M=block_m, CHUNK=chunk, D=O.shape[2])
    compiled = _combine_tail_kernel()[grid](Op, Lp, O, L, full, O.shape[1], O.stride(1), L.stride(0), num_warps=4,
                                            **constexprs)
    return compiled, grid, tuple(constexprs.values())


class GluonLaunch(KeptL):
    """A recorded launch of the Gluon forward (fa2lab.hostpath's lean repeat): later calls with the same
    shapes and strides reuse its compiled kernels and descriptors, changing only the descriptors' bases
    (Triton 3.6's launcher reads base.data_ptr(), the shape and the strides, so the (heads, N, D) tensor
    serves as the base of its flattened view), and allocate O, L and the split tail's workspace. The
    normal path costs 60 to 300 us of host time per call (experiment gluon: do_bench against graph replay)."""

    def __init__(self, compiled, grid, args, constexprs: tuple, tail, combined, label: str):
        self.kernel, self.grid, self.constexprs = compiled, (*grid, *([1] * (3 - len(grid)))), constexprs
        self.label = label                          # the GluonConfig it runs
        self.descs = list(args[:3])
        self.l_shape = args[4].shape                # O needs no record: every call allocates it by empty_output(Q)
        self.scalars = tuple(args[5:13])            # O's row and L's head strides, sizes, scale, FULL, SPLITS, items
        self.big = args[15]                         # mixed's BIG (0: one item size)
        self.o_desc = args[16]                      # tma_store's descriptor of O (its base set per call) or None
        self.work_shape = None if tail is None else tail[0].shape
        self.combine = None
        if combined is not None:
            self.combine, cgrid, self.combine_constexprs = combined
            self.combine_grid = (*cgrid, 1)
            self.combine_sizes = (tail[2], args[7], args[5], args[6])   # FULL, N_QUERIES, the two strides

    def __call__(self, Q, K, V, need_l=True):   # the per-call hot path: no checks here
        O = empty_output(Q)   # as forward allocated it: Q's shape, (heads, N_q, D)
        L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device) if need_l else self.scratch_l(Q)
        return self.run(Q, K, V, O, L)

    def run(self, Q, K, V, O, L):
        """The launch (and the split tail's combine) into O and L already allocated."""
        d = self.descs
        d[0].base, d[1].base, d[2].base = Q, K, V
        if self.work_shape is None:
            Op = Lp = L
        else:
            Op = torch.empty(self.work_shape, dtype=torch.float32, device=Q.device)
            Lp = torch.empty(self.work_shape[:1], dtype=torch.float32, device=Q.device)
        if self.o_desc is not None:
            self.o_desc.base = O
        run_compiled(self.kernel, self.grid, (*d, O, L, *self.scalars, Op, Lp, self.big, self.o_desc,
                                              *self.constexprs), Q.device.index)
        if self.combine is not None:
            run_compiled(self.combine, self.combine_grid, (Op, Lp, O, L, *self.combine_sizes, *self.combine_constexprs),
                         Q.device.index)
        return O, L


# What v7's Gluon path (FlashAttentionTriton.GLUON) chooses from: the best of session 15's calls 8-9 on the
# H200 by graph replay against cuDNN in the same rounds, non-causal: 128-row tiles at N <= 2048 (101-109%),
# 192-row tiles with the split tail at N = 4096 (107-108%). For a process, FA2_V7_THREAD_ARRIVE=1 or 0 sets their
# thread_arrive, FA2_V7_ITEM_OVERLAP=1 or 0 the persistent ones' item_overlap, FA2_V7_TMA_PREFETCH, FA2_V7_TMA_STORE,
# FA2_V7_V_BARRIER, FA2_V7_TREE_MAX and FA2_V7_ROW_SUM those options, FA2_V7_STREAM=1 the persistent 128-row
# candidate's stream, FA2_V7_UNSYNCED_ARRIVE=0 turns unsynced_arrive off, FA2_V7_LOOKAHEAD=0 the D = 128 candidate's
# lookahead and FA2_V7_EXP_TURN=0 the persistent D = 64 candidate's exp_turn; FA2_V7_FOLD_FIRST=1 runs each work item's
# first key tile in the key loop, FA2_V7_L2_PREFETCH=1 asks L2 for the inputs ahead of the slots, FA2_V7_Q_MAJOR=1
# orders the non-causal work items query tile first, FA2_V7_V_FIRST=1 gives the first key tile's V a barrier of its own
# and FA2_V7_L2_256=1 encodes the descriptors with 256 bytes of L2 promotion; FA2_V7_SHARED_CODE gives every candidate
# one shared copy of the consumers' code, called (=1) or inlined once (=2), or none (=0); unset, each keeps its own
# (V7_BASE) (rows record any of them: switches).
THREAD_ARRIVE = switch_on("THREAD_ARRIVE")
ITEM_OVERLAP = switch_on("ITEM_OVERLAP")
TMA_PREFETCH = switch_on("TMA_PREFETCH")
TMA_STORE = switch_on("TMA_STORE")
V_BARRIER = switch_on("V_BARRIER")
TREE_MAX = switch_on("TREE_MAX")
ROW_SUM = switch_on("ROW_SUM")
STREAM = switch_on("STREAM")
UNSYNCED_ARRIVE = switch_on("UNSYNCED_ARRIVE")   # on by default since session 20 (call 4); thread_arrive excludes it
LOOKAHEAD = switch_on("LOOKAHEAD")               # on by default since session 24, where a base candidate asks for it
EXP_TURN = switch_on("EXP_TURN")                 # on by default since session 25, where a base candidate asks for it
FOLD_FIRST = switch_on("FOLD_FIRST")
L2_PREFETCH = switch_on("L2_PREFETCH")
Q_MAJOR = switch_on("Q_MAJOR")
V_FIRST = switch_on("V_FIRST")
L2_256 = switch_on("L2_256")
SHARED_CODE = switch_level("SHARED_CODE")


def _shared_code(c) -> int:
    """A base candidate's shared_code under this process's switches: FA2_V7_SHARED_CODE's level where set, else its
    own; none with even_registers, nor (unless asked for) at levels 1-2 with FA2_V7_L2_PREFETCH=1, which needs the
    one-warp loader those levels replace."""
    level = c.shared_code if SHARED_CODE is None else SHARED_CODE
    if c.even_registers or (SHARED_CODE is None and L2_PREFETCH and level in (1, 2)):
        return 0
    return level


def _switched(base) -> tuple:
    """The base configurations with this process's switches set (above). exp_turn, where a base candidate has it, gives
    way to ping-pong's turns when switched off or when an option that excludes it is switched on."""
    def derived(c):   # the options whose value depends on the candidate and on other switches
        stream = STREAM and c.persistent and not (c.split_tail or c.one_q)
        et = c.exp_turn if EXP_TURN and not (ROW_SUM or stream) else 0
        lookahead = c.lookahead and LOOKAHEAD and not (ITEM_OVERLAP or V_BARRIER or ROW_SUM or STREAM)
        fold = FOLD_FIRST and not (ITEM_OVERLAP or V_BARRIER or ROW_SUM or stream or lookahead)
        return dict(exp_turn=et, pingpong=c.pingpong or bool(c.exp_turn and not et), lookahead=lookahead,
                    fold_first=fold, stream=stream, q_major=Q_MAJOR and not (c.split_tail or c.mixed or stream),
                    v_first=V_FIRST and not (V_BARRIER or lookahead or fold or stream or c.mixed))
    return tuple(replace(c, **derived(c), thread_arrive=THREAD_ARRIVE,
                         item_overlap=ITEM_OVERLAP and c.persistent and not c.one_q, tma_prefetch=TMA_PREFETCH,
                         tma_store=TMA_STORE and not c.direct_store, v_barrier=V_BARRIER, tree_max=TREE_MAX,
                         row_sum=ROW_SUM, l2_prefetch=L2_PREFETCH,
                         unsynced_arrive=UNSYNCED_ARRIVE and not THREAD_ARRIVE,
                         l2_promotion=256 if L2_256 else c.l2_promotion,
                         shared_code=_shared_code(c))
            for c in base)


V7_CANDIDATES = _switched(V7_BASE)             # head dimension 64
V7_CANDIDATES_WIDE = _switched(V7_BASE_WIDE)   # head dimension 128


def candidates_for(D: int) -> tuple:
    """v7's candidates at head dimension D (HEAD_DIMS)."""
    return V7_CANDIDATES_WIDE if D > 64 else V7_CANDIDATES


def fitting(candidates, D: int, device: int = 0) -> list:
    """The candidates whose shared memory fits a block of this GPU (fa2lab.gpu.facts) at head dimension D."""
    smem = facts(device).smem_per_block
    return [c for c in candidates if c.fits(D, smem)]


def configs_named(labels) -> list:
    """EXPERIMENT_CONFIGS by label, in the order asked for; an unknown label is an error naming the known ones."""
    known = {c.label: c for c in EXPERIMENT_CONFIGS}
    unknown = [w for w in labels if w not in known]
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[w] for w in labels]


def for_mask(candidates, is_causal: bool) -> list:
    """The candidates as they run on inputs with or without the causal mask: stream is non-causal only, so a causal
    input runs a stream candidate's item-by-item form."""
    return [replace(c, stream=c.stream and not is_causal) for c in candidates]


def best_launch(Q, K, V, is_causal: bool, candidates=None, repeats: int = 20):
    """The fastest of `candidates` (default: candidates_for the head dimension) that fit on these inputs: each
    launched once (compiling), then timed by
    fa2lab.timing.queued_ms over `repeats` lean repeats (GPU time with the host queued ahead: at N = 512
    timing host-paced repeats picked the slower candidate, 87% of cuDNN by graph replay where the other
    made 109%, commit 18ea471). Returns (O, L, the winner's GluonLaunch, {label: (ms per call, its GluonLaunch)}):
    v7 races those within its SHORTLIST_MARGIN again, in alternating order."""
    timed = {}
    candidates = candidates_for(Q.shape[2]) if candidates is None else candidates
    for cfg in fitting(for_mask(candidates, is_causal), Q.shape[2], Q.device.index):
        launch = forward(Q, K, V, is_causal, cfg)[2]
        timed[cfg.label] = (queued_ms(lambda launch=launch: launch(Q, K, V), repeats), launch)
    if not timed:
        raise ValueError(f"no Gluon candidate fits a block's shared memory at head dimension {Q.shape[2]}")
    label = min(timed, key=lambda k: timed[k][0])
    O, L = timed[label][1](Q, K, V)
    return O, L, timed[label][1], timed


def compile_offline(cfg: GluonConfig, N: int = 4096, D: int = 64, is_causal: bool = False, heads: int = 32,
                    arch: int = 90):
    """Compile one configuration for sm_<arch> without a GPU (fa2lab.compile_offline: meta tensors,
    Triton's bundled ptxas); returns the never-loaded CompiledKernel (asm: ttgir, ptx, cubin)."""
    from fa2lab.compile_offline import compile_for_target

    Q = torch.empty(heads, N, D, dtype=torch.bfloat16, device="meta")
    O = torch.empty_like(Q)
    L = torch.empty(heads, N, dtype=torch.float32, device="meta")
    # sms=1: the split plan's numbers are runtime arguments, so any SM count compiles the same code
    kernel, _, args, num_warps, flags, _ = launch_plan(cfg, Q, Q, Q, O, L, is_causal, sms=1)
    return compile_for_target(kernel, args, arch=arch, num_warps=num_warps, num_stages=1, **flags)
