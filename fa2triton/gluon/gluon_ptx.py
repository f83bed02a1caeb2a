"""The PTX passes of v7's Hopper kernels (Gluon, and on 3.9 the Triton backward), run by a stage Triton calls between
its PTX and ptxas (knobs.runtime.add_stages_inspection_hook), on kernels whose PTX carries their marks (every other
kernel's PTX is left as it is).

- drop_marked_syncs (UNSYNCED_MARK): Triton 3.6's shared-memory analysis puts a bar.sync of the consumer's 4 warps
  before each elected mbarrier arrive and before the next shared-memory access after one, and Gluon 3.6 has no arrive
  it leaves alone (upstream: triton-lang/triton#8969, #11573). The kernel marks the mbarrier operations whose bar.sync
  only orders mbarrier operations (right after each), and this pass removes those bar.syncs. What the analysis also
  used them for: a barrier clears every shared-memory access before it, and the only ones a consumer makes itself
  (P in registers) are its epilogue's, each still separated from the next item's by the unmarked bar.sync before the
  Q buffer's release (mbarrier.arrive on q_empty), which the kernel keeps. After a marked slot wait it also drops the
  bar.sync Triton 3.9 puts there in the shared consumer function (sc2), when a wgmma or another mbarrier wait comes
  next: each thread has waited itself, and the slot's next phase needs this consumer's release (docs/port-triton39.md).
- tie_marked_arrives (TIE_MARK): ptxas moves register-only work across an mbarrier arrive, and in the offline sm_90
  SASS the exponential turn's arrive went up among the tile's first dozen exp2s, so the next consumer's exponentials
  started beside most of this one's. The kernel marks a row sum (in two register moves ptxas drops) and this pass makes
  the next mbarrier arrive's predicate read it (l >= 0 or unordered: always true), a dependency ptxas keeps.
- partition_syncs and inline_consumer_call (CONSUMER_CALL, INLINE_MARK): the consumers' one shared copy of their code.
  Triton 3.6 compiles a non-inlined function outside any partition, so its barriers come out as whole-CTA
  `bar.sync 0`, which wait for every warp of the kernel (the first form hung on the H200); partition_syncs makes each
  a barrier of the calling partition's 128 threads. ptxas 12.8 (Triton 3.6's) serialises every wgmma of a called
  function (warning C7510, "wgmma pipeline crossing function boundary"), so inline_consumer_call inlines the function
  once: each call sequence becomes moves of its arguments into registers, its return index and a branch into the one
  copy, whose `ret` branches back by that index.
- wgmma_descriptor_adds (DESCRIPTOR_MARK) and drop_repeated_proxy_fences (FENCE_MARK), both in fa2triton.triton_compat:
  Triton 3.9 builds each k-step's wgmma descriptor from 32-bit words (3.6 adds to the 64-bit one) and fences every
  wgmma of a tl loop; the passes write 3.6's form and drop the fences an earlier one covers. Planted on 3.9 only: the
  descriptors by v7's Gluon kernels (the backwards at D = 64) and both by the Triton backward (docs/port-triton39.md).
Triton 3.6's cache key sees only the kernel's source, 3.9's STAGES_KEY too: a changed rewrite needs a new mark.
"""

import re

from fa2triton.triton_compat import PARTITION_SYNC as _PARTITION_SYNC
from fa2triton.triton_compat import (chain_reduction_trees, drop_repeated_proxy_fences, install_stages_hook,
                                     wgmma_descriptor_adds)
from fa2triton.gluon.hopper import BarrierId as _BarrierId

UNSYNCED_MARK = "fa2-unsynced-v2"
# the kernel's inline PTX for the marks: register moves ptxas drops, carrying the mark as a comment
MARK_ASM = f"mov.b32 $0, $1; // {UNSYNCED_MARK}"
TIE_MARK = "fa2-tie-v3"
TIE_ONE_ASM = f"mov.b32 $0, $2;\n\tmov.b32 $1, $3; // {TIE_MARK} one"   # the second move's register is the tie
INLINE_MARK = "fa2-inline-once"
INLINE_ASM = f"mov.b32 $0, $1; // {INLINE_MARK}"
DESCRIPTOR_MARK = "fa2-descriptor-adds-v1"
DESCRIPTOR_ASM = f"mov.b32 $0, $1; // {DESCRIPTOR_MARK}"
FENCE_MARK = "fa2-proxy-fences-v1"
FENCE_ASM = f"mov.b32 $0, $1; // {FENCE_MARK}"
REDUCE_MARK = "fa2-chained-reductions-v2"
REDUCE_ASM = f"mov.b32 $0, $1; // {REDUCE_MARK}"
CONSUMER_CALL = "_ws_consumer_call"   # the kernel's consumer function (gluon_kernel._ws_consumer_call)
PARTITION_BARRIER_BASE = _BarrierId.PARTITION_BASE   # partition_syncs' ids: this + tid.x / 128

_SKIPPABLE = re.compile(r"\s*(//.*|\{|\.reg\s.*|\.loc\s.*|waitLoop:|\$L__\w+:"
                        r"|(add|sub|mul|mad|shl|shr|and|or|xor|mov|selp)(\.\w+)+\s+%\w+,[^;]*;)?\s*$")   # no memory
# between a marked wait and the bar.sync after it, and from that to the next instruction: no memory, no control flow
# (line info's $L__tmp labels only); the wgmma's k-step descriptor (bfe, cvt) may come between
_NO_EFFECT = re.compile(r"\s*(//.*|\{|\.reg\s.*|\.loc\s.*|waitLoop:|\$L__tmp\d+:"
                        r"|(add|sub|mul|mad|shl|shr|and|or|xor|mov|selp|bfe|cvt)(\.\w+)+\s+%\w+,[^;\[]*;)?\s*$")
_AFTER_WAIT = re.compile(r"\s*(wgmma\.fence\.|mbarrier\.try_wait)")   # what may follow a dropped post-wait sync
_TIE_SOURCE = re.compile(r"\s*mov\.b32\s+%\w+,\s*(%\w+);\s*//\s*" + TIE_MARK + " one")
_ELECTED_ARRIVE = re.compile(r"^(\s*)@(%p\d+)\s+(mbarrier\.arrive[^;]*;)\s*$")
_WHOLE_CTA_SYNC = re.compile(r"^(\s*)(?:bar|barrier)\.sync\s+0;\s*$")
_REG_DECL = re.compile(r"^\s*\.reg\s+(\.\w+)\s+%(\w+)<(\d+)>;\s*$")
_PARAM_MOVE = re.compile(r"^(\s*)(ld|st)\.param\.(?:v\d\.)?(b\d+)\s+(.*);\s*$")
_PARAM_AT = re.compile(r"\[[^\]]*?param_?(\d+)(?:\+(\d+))?\]")
_FUNC_END = "// -- End function"                            # LLVM's last line of a function, before its "}"
_DEBUG_LABEL = re.compile(r"^\$L__(?:tmp|func_end)\d+:")   # line info's labels (TRITON_DISABLE_LINE_INFO: none)


def drop_marked_syncs(ptx: str) -> tuple[str, int]:
    """The PTX without the bar.sync directly before each mbarrier operation that an UNSYNCED_MARK follows (only
    comments, labels, an inline-asm block's opening and register arithmetic between them), and how many were
    removed. After a marked wait, also the partition's bar.sync that follows its mark (_post_wait_sync)."""
    lines = ptx.split("\n")
    drop, sync_before, wait = set(), None, False
    for i, line in enumerate(lines):
        if "mbarrier." in line and not line.lstrip().startswith("//"):
            k = i - 1
            while k >= 0 and _SKIPPABLE.match(lines[k]):
                k -= 1
            sync_before = k if k >= 0 and _PARTITION_SYNC.match(lines[k]) else None
            wait = "mbarrier.try_wait" in line
        elif UNSYNCED_MARK in line and (sync_before is not None or wait):
            if sync_before is not None:
                drop.add(sync_before)
            after = _post_wait_sync(lines, i) if wait else None
            if after is not None:
                drop.add(after)
            sync_before, wait = None, False
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), len(drop)


def _post_wait_sync(lines: list[str], mark: int) -> int | None:
    """The line of the partition bar.sync after a marked wait's mark (line `mark`), where one comes with nothing but
    register arithmetic and line info around it before a wgmma or another mbarrier wait; else None. Triton 3.9 puts it
    in the shared consumer function (its barriers are arguments there, which its analysis cannot tell apart), 3.6 and
    the inlined partitions have none. Why it is not needed: each thread waited for the slot itself (its TMA data is
    visible to it), the consumer writes no slot, and the slot's next phase needs this consumer's release, which
    follows a wgmma that its 4 warps issued after their own waits (so no thread can miss the phase it waits for)."""
    k = mark + 1
    while k < len(lines) and _NO_EFFECT.match(lines[k]):
        k += 1
    if k == len(lines) or not _PARTITION_SYNC.match(lines[k]):
        return None
    n = k + 1
    while n < len(lines) and _NO_EFFECT.match(lines[n]):
        n += 1
    return k if n < len(lines) and _AFTER_WAIT.match(lines[n]) else None


def tie_marked_arrives(ptx: str) -> tuple[str, int]:
    """The PTX with the first predicated mbarrier arrive after each TIE_MARK predicated also on the marked register
    (a row sum; setp.geu: l >= 0 or NaN, true for any row sum), and how many arrives were tied."""
    lines = ptx.split("\n")
    source, tied = None, 0
    for i, line in enumerate(lines):
        m = _TIE_SOURCE.match(line)
        if m:   # the mark's second move (the first, on the line before, moves the other row's sum)
            source = m.group(1)
            continue
        a = _ELECTED_ARRIVE.match(line) if source else None
        if a:
            indent, pred, arrive = a.groups()
            lines[i] = (f"{indent}{{ .reg .pred %fa2tie; setp.geu.and.f32 %fa2tie, {source}, 0f00000000, {pred}; "
                        f"@%fa2tie {arrive} }}")
            source, tied = None, tied + 1
    return "\n".join(lines), tied


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
    """The PTX with the CONSUMER_CALL function inlined once into the kernel (the module docstring), and how many call
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


STAGES_KEY = (f"fa2-ptx-passes:{UNSYNCED_MARK},{TIE_MARK},{INLINE_MARK},{CONSUMER_CALL},{PARTITION_BARRIER_BASE},"
              f"{DESCRIPTOR_MARK},{FENCE_MARK},{REDUCE_MARK}")


def passes(text: str) -> str:
    """The PTX after the passes whose marks it carries (every other kernel's PTX is returned as it is)."""
    # fences before descriptors: drop_repeated_proxy_fences reads the rewritten descriptors' braced blocks as barriers
    text = drop_repeated_proxy_fences(text)[0] if FENCE_MARK in text else text
    text = wgmma_descriptor_adds(text)[0] if DESCRIPTOR_MARK in text else text
    text = chain_reduction_trees(text)[0] if REDUCE_MARK in text else text
    text = drop_marked_syncs(text)[0] if UNSYNCED_MARK in text else text
    text = partition_syncs(text)[0] if CONSUMER_CALL in text else text
    # tied before inlining, whose renamed predicates (%fa2ip<n>) _ELECTED_ARRIVE would not match (untied, the
    # arrive came before the exp2s in the SASS)
    text = tie_marked_arrives(text)[0] if TIE_MARK in text else text
    return inline_consumer_call(text)[0] if INLINE_MARK in text else text


def _ptx_stage(backend, stages, options, language, capability):
    """The stages hook's rewrite: the PTX stage followed by `passes`."""
    make_ptx = stages.get("ptx")
    if make_ptx is not None:
        stages["ptx"] = lambda src, metadata: passes(make_ptx(src, metadata))


install_stages_hook(_ptx_stage, STAGES_KEY)
