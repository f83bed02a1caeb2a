"""Every difference between Triton 3.6 and 3.9 that this project meets, one named function (or name) each.

Nothing else in the tree reads triton.__version__: it calls these. Where a feature can be detected (an attribute, a
closure's variables, a signature) that is what is checked; the version itself only bounds what is supported.

- require_supported(): one clear error at import for a Triton outside SUPPORTED.
- install_stages_hook(): knobs.runtime.add_stages_inspection_hook, called by 3.6 with (backend, stages, options,
  language, capability) and by 3.9 also with no argument, for a (key, hash) that goes into the compile cache key.
- tma_load, tma_reduce_add (inside @gluon.jit code): Gluon's TMA copy into shared memory (3.6
  async_copy_global_to_shared, 3.9 async_load) and TMA reduce-add (3.9 async_atomic_add; 3.6 only the builder's op).
- get_ptxas(arch): the ptxas Triton itself runs for sm_<arch> (3.9: ptxas-blackwell, CUDA 13, from sm_90 on).
- PARTITION_SYNC: a partition's bar.sync in PTX (3.9 names the barrier by a register).
- triton_ptxas_flags(), ptx_options(): the options Triton's own ptxas call adds (3.9: --regAllocOptLevel=2), and the
  launch option that puts ptxas's default register allocation back.
- splits_wgmma_descriptors(), wgmma_descriptor_adds(ptx): whether this Triton builds each k-step's wgmma descriptor
  from 32-bit words (3.9), and that PTX rewritten in 3.6's form.
- reduces_in_trees(), chain_reduction_trees(ptx): whether this Triton reduces a thread's share of a row (sum, maximum)
  as a tree of pairs (3.9), and that PTX with each tree written as 3.6's chain.
- direct_launch(run), encode_descriptor(desc, meta): a CompiledKernel's C launch function and its descriptor encoding
  (3.6: a launcher per kernel; 3.9: one generic launch with the arguments as one sequence).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re

import triton

SUPPORTED = ">=3.6,<3.10"
_LOWEST, _BEYOND = (3, 6), (3, 10)


class UnsupportedTriton(ImportError):
    """The installed Triton is outside SUPPORTED."""


def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed Triton (triton.__version__, read on each call)."""
    m = re.match(r"(\d+)\.(\d+)", triton.__version__)
    if not m:
        raise UnsupportedTriton(f"cannot read Triton's version {triton.__version__!r}; this project supports "
                                f"triton{SUPPORTED}")
    return int(m.group(1)), int(m.group(2))


def require_supported() -> None:
    """Raise UnsupportedTriton, one line naming the installed Triton and SUPPORTED, outside [3.6, 3.10)."""
    if not _LOWEST <= triton_version() < _BEYOND:
        raise UnsupportedTriton(f"Triton {triton.__version__} is installed; this project supports triton{SUPPORTED} "
                                f"(pip install 'triton{SUPPORTED}')")


# ------------------------------------------------------------------------------------------------ the stages hook

def install_stages_hook(rewrite, key: str):
    """Install `rewrite(backend, stages, options, language, capability)` as a stages-inspection hook, after any
    hook already installed, and return the hook. Called with no argument (Triton 3.9's compile and JIT paths do, on
    every launch) it returns (key, hash) for the compile cache: the previous hook's key followed by `key`, and a
    sha256 over the previous hash and `key`; so a change of `key` recompiles on 3.9 (3.6's cache never sees hooks).
    Installing the same `key` again is a no-op (the installed hook is returned)."""
    from triton import knobs

    previous = knobs.runtime.add_stages_inspection_hook
    if getattr(previous, "fa2_key", None) == key:
        return previous
    own = (key, hashlib.sha256(key.encode()).hexdigest())

    def hook(*args):
        if not args:
            if previous is None:
                return own
            prev_key, prev_hash = previous()
            return prev_key + key, hashlib.sha256(f"{prev_hash}{key}".encode()).hexdigest()
        if previous is not None:
            previous(*args)
        rewrite(*args)

    hook.fa2_key = key
    knobs.runtime.add_stages_inspection_hook = hook
    return hook


# ------------------------------------------------------------------------------------------------ Gluon TMA

def _tma_ops() -> dict:
    """tma_load and tma_reduce_add for this Triton's Gluon (builtins, callable inside @gluon.jit code)."""
    from triton.experimental.gluon.language.nvidia.hopper import tma

    ops = {"tma_load": getattr(tma, "async_load", None) or tma.async_copy_global_to_shared}
    if hasattr(tma, "async_atomic_add"):
        ops["tma_reduce_add"] = tma.async_atomic_add
    else:   # Triton 3.6 has the operation (cp.reduce.async.bulk) but Gluon does not name it
        from triton._C.libtriton import ir
        from triton.experimental.gluon.language._core import builtin

        @builtin
        def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
            """TMA reduce-add of shared memory `src` into the tile of `tensor_desc` at `coord`."""
            coord = _semantic._convert_to_ir_values(coord, require_i64=False)
            _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                      src.handle)

        ops["tma_reduce_add"] = tma_reduce_add
    return ops


def __getattr__(name):   # tma_load, tma_reduce_add: Gluon is imported on first use only
    if name in ("tma_load", "tma_reduce_add"):
        ops = _tma_ops()
        globals().update(ops)
        return ops[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------------ ptxas

def get_ptxas(arch: int):
    """The ptxas Triton's own compile runs for sm_<arch> (a knobs NvidiaTool: .path, .version): 3.6 ptxas
    (CUDA 12.8) below sm_100, 3.9 ptxas-blackwell (CUDA 13) from sm_90 on."""
    from triton.backends.nvidia import compiler

    return compiler.get_ptxas(int(arch))


@functools.cache
def triton_ptxas_flags() -> tuple[str, ...]:
    """The options Triton's make_cubin gives every ptxas run besides line info, -v, --fmad, --opt-level, the extra
    ptx_options and --gpu-name, read from its source: 3.9 adds `--regAllocOptLevel=2` ("to work around ptxas 13.x
    bug"), 3.6 nothing."""
    from triton.backends.nvidia.compiler import CUDABackend

    return tuple(dict.fromkeys(re.findall(r"['\"](--regAllocOptLevel=\d+)['\"]",
                                          inspect.getsource(CUDABackend.make_cubin))))


# ptxas's own register allocation, as if no --regAllocOptLevel were given (offline sm_90 under ptxas 13: the same
# cubin; levels 1-3 allocate as 2 does)
PTXAS_DEFAULT_REGALLOC = "--regAllocOptLevel=4"


def ptx_options() -> str | None:
    """`ptx_options` for a launch of v7's Gluon kernels: None where Triton runs ptxas with its defaults (3.6), else
    PTXAS_DEFAULT_REGALLOC, which follows Triton's --regAllocOptLevel=2 on the command line (the last one wins).
    Why: offline, level 2 spills more in these kernels ("Why v7 is slower on 3.9", docs/port-triton39.md)."""
    return PTXAS_DEFAULT_REGALLOC if any(f.startswith("--regAllocOptLevel") for f in triton_ptxas_flags()) else None


# ------------------------------------------------------------------------------------------------ PTX patterns

# one partition's bar.sync: `bar.sync <id>, 128` (3.6, a constant id; 3.9, a register holding it) in an inlined
# partition, whole-CTA `bar.sync 0` in the non-inlined consumer function (3.6)
PARTITION_SYNC = re.compile(r"\s*(?:bar\.sync\s+(?:\d+|%r\d+),\s*128|(?:bar|barrier)\.sync\s+0);\s*$")


# ------------------------------------------------------------------------------------------------ the launcher

def encode_descriptor(desc, meta) -> list:
    """[CUtensorMap, *shape, *strides] for a host TensorDescriptor, as Triton's launcher expands it (3.9's
    make_tensordesc_arg takes a third argument, the launch's base arguments, which it ignores). It runs on every
    launch whose descriptor's base moved, so the form is read from the function's code object, not by
    inspect.signature, which costs more than the rest of a decomposing encode (docs/worklogs/v7_hopper.md, "The tl
    path's host cost since the port")."""
    from triton.backends.nvidia import driver as nv

    make = nv.make_tensordesc_arg
    code = getattr(make, "__code__", None)
    takes = code.co_argcount if code is not None else len(inspect.signature(make).parameters)
    return make(desc, meta, None) if takes == 3 else make(desc, meta)


def direct_launch(run):
    """(call, expand) for a CompiledKernel's launcher `run` (kernel.run): call(grid, stream, function, packed, args)
    calls the C launch function with hooks, metadata and scratch None; expand is ((position, TMA metadata), ...),
    from the back, of the host descriptors in `args` that the caller replaces by encode_descriptor's list first.
    3.6's C function takes the arguments spread; 3.9's generic one takes them as one sequence with the annotations
    and packed signature it was built with. ValueError for any other layout, scratch, clusters or GSan."""
    if run.global_scratch_size or run.profile_scratch_size or getattr(run, "num_ctas", 1) != 1:
        raise ValueError("the kernel needs scratch or clusters: Triton's launcher allocates them")
    if getattr(run, "gsan_enabled", False):
        raise ValueError("GSan adds arguments: Triton's launcher passes them")
    wrapped, coop, pdl = run.launch, run.launch_cooperative_grid, run.launch_pdl
    if getattr(wrapped, "__closure__", None) is None:   # no descriptor argument: the C function itself
        c_launch, expand = wrapped, ()
    else:
        names = inspect.getclosurevars(wrapped).nonlocals
        metas = list(names["tensordesc_meta"] or ())
        if "tensordesc_indices" in names:   # 3.6: wrap_handle_tensordesc's indices
            positions = sorted(names["tensordesc_indices"])
        else:                               # 3.9: wrap_handle_tensordesc_impl's paths, top-level only
            if any(names["relevant_paths"].values()):
                raise ValueError("a descriptor inside a tuple argument")
            positions = sorted(names["relevant_paths"])
        if not metas or len(metas) != len(positions) or any(m is None for m in metas):
            raise ValueError("a descriptor without TMA metadata")
        c_launch, expand = names["launcher"], tuple(reversed(tuple(zip(positions, metas))))
    if "arg_annotations" in type(run).__call__.__code__.co_names:   # 3.9: Triton's own call passes them
        annotations, signature = run.arg_annotations, run.kernel_signature

        def call(grid, stream, function, packed, args):
            c_launch(*grid, stream, function, coop, pdl, packed, None, None, None, None, None, annotations,
                     signature, args)
    else:
        def call(grid, stream, function, packed, args):
            c_launch(*grid, stream, function, coop, pdl, None, None, packed, None, None, None, *args)
    return call, expand


# ------------------------------------------------------------------------------------------------ wgmma descriptors

_INSTR = re.compile(r"^(\s*)(@!?%\w+\s+)?([a-z][\w.:]*)\s+(%\w+),\s*([^;]*);\s*$")
_BLOCK_END = re.compile(r"^\s*(?:(?!\$L__tmp)[$\w]+:|(?:@!?%\w+\s+)?(?:bra|ret|exit|call|trap)\b)")   # not .loc labels


def splits_wgmma_descriptors() -> bool:
    """Whether Triton lowers each k-step's wgmma shared-memory descriptor as `zext(base + k) | C` (3.9) rather than
    `zext(base) + (C + k)` (3.6): where it does, v7's Gluon kernels, and its tl forward and the Triton backward's
    wgmma kernels through fa2triton.ptx_marks, plant gluon_ptx.DESCRIPTOR_MARK for wgmma_descriptor_adds (elsewhere
    they plant nothing, so their PTX is as before). A lowering detail no attribute shows: the version decides (3.7 and
    3.8 were not examined: False)."""
    return triton_version() >= (3, 9)


def wgmma_descriptor_adds(ptx: str) -> tuple[str, int]:
    """The PTX with each wgmma shared-memory descriptor that Triton 3.9 builds per k-step as
    `zext(base + k) | C` (add.s32, cvt.u64.u32, or.b64 in one basic block) computed as 3.6 does, `zext(base) + (C + k)`,
    and how many. Exact where it applies: every definition of base is a bfe.u32 of at most 16 bits, k < 2^16 and C's
    low word is 0 (so no carry and `|` is `+`). 3.6's PTX has no such sequence (n = 0, the PTX unchanged). Why: ptxas
    rebuilds 3.9's descriptors with more uniform moves per wgmma ("Why v7 is slower on 3.9", port-triton39.md)."""
    lines = ptx.split("\n")
    parsed = [_INSTR.match(line) for line in lines]
    bounded: dict[str, set] = {}   # register -> {whether each of its definitions is a bfe.u32 of <= 16 bits}
    for m in filter(None, parsed):
        _, pred, op, dst, operands = m.groups()
        width = operands.rsplit(",", 1)[-1].strip()
        bounded.setdefault(dst, set()).add(not pred and op == "bfe.u32" and width.isdigit() and int(width) <= 16)
    block, defs, n = 0, {}, 0   # defs[register] = (line, block, op, operands, the definition its operand read)
    for i, line in enumerate(lines):
        block += bool(_BLOCK_END.match(line))
        if not parsed[i]:
            continue
        indent, pred, op, dst, operands = parsed[i].groups()
        op = f"{pred}{op}" if pred else op   # a predicated definition matches no step
        args = [a.strip() for a in operands.split(",")]
        cvt = defs.get(args[0]) if op == "or.b64" and len(args) == 2 and args[1].isdigit() else None
        add = cvt[4] if cvt and cvt[2] == "cvt.u64.u32" and cvt[1] == block else None
        if add and add[2] == "add.s32" and add[1] == block and len(add[3]) == 2 and add[3][1].isdigit():
            base, k, c = add[3][0], int(add[3][1]), int(args[1])
            if bounded.get(base) == {True} and k < 1 << 16 and not c & 0xFFFFFFFF \
                    and defs.get(base, (-1,))[0] < add[0]:
                lines[i] = (f"{indent}{{ .reg .b64 %fa2desc; cvt.u64.u32 %fa2desc, {base}; "
                            f"add.s64 {dst}, %fa2desc, {c + k}; }}")
                n += 1
        defs[dst] = (i, block, op, args, defs.get(args[0]))
    return "\n".join(lines), n


def adds_loop_proxy_fences() -> bool:
    """Whether Triton puts a `fence.proxy.async` before every wgmma of a tl kernel's loop rather than once after
    the loop's cp.async wait (3.9 does, 3.6 does not): where it does, the Triton backward's wgmma kernels (dK/dV, dQ,
    fused) plant gluon_ptx.FENCE_MARK for drop_repeated_proxy_fences (elsewhere nothing, so their PTX is as before)."""
    return triton_version() >= (3, 9)


# What leaves shared memory as a proxy fence left it: register arithmetic, wgmma (the async proxy's own reads),
# global and parameter loads, the fence itself; anything else (a label, branch, shared or generic store, cp.async,
# barrier, mbarrier, atomic, call, a shared load) ends the stretch in which a second fence would be redundant.
_FENCE_NEUTRAL = re.compile(
    r"^\s*(?:$|//|\.loc\s|\$L__tmp\d+:|[{}]\s*$|(?:@!?%\w+\s+)?(?:"
    r"(?:add|sub|mul|mad|fma|div|rcp|sqrt|rsqrt|ex2|lg2|max|min|neg|abs|cvt|mov|selp|setp|and|or|xor|not|shl|shr"
    r"|bfe|bfi|prmt|shf|lop3|popc|clz|brev|copysign|mul24|mad24|testp)(?:\.[\w:]+)*\s"
    r"|wgmma\.|ld\.(?:global|param|const)[.\s]|fence\.proxy\.async\b))")
_PROXY_FENCE = re.compile(r"^\s*fence\.proxy\.async(?:\.shared::cta)?;\s*$")


def drop_repeated_proxy_fences(ptx: str) -> tuple[str, int]:
    """The PTX without each `fence.proxy.async` that an earlier one precedes with only _FENCE_NEUTRAL instructions
    between them (one basic block, no shared-memory write or synchronisation: nothing the second fence could order),
    and how many were dropped. Exact: a proxy fence orders this thread's earlier generic-proxy accesses against its
    later async-proxy ones, and between the two fences there are none. Why: 3.9 fences each wgmma of the Triton
    backward's loops, each fence a FENCE.VIEW.ASYNC.S and a MEMBAR.ALL.CTA in SASS (port-triton39.md)."""
    lines, drop, fenced = ptx.split("\n"), set(), False
    for i, line in enumerate(lines):
        if _PROXY_FENCE.match(line):
            if fenced:
                drop.add(i)
            fenced = True
        elif not _FENCE_NEUTRAL.match(line):
            fenced = False
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), len(drop)


# ------------------------------------------------------------------------------------------------ row reductions

def reduces_in_trees() -> bool:
    """Whether Triton lowers a thread's share of a reduction (gl.sum, gl.max over the values one thread holds) as a
    tree of pairs (3.9's treeReduce) rather than one chain (3.6): where it does, v7's Gluon forward, and its tl
    forward through fa2triton.ptx_marks, plant gluon_ptx.REDUCE_MARK for chain_reduction_trees (elsewhere nothing,
    so their PTX is as before). A lowering detail no attribute shows: the version decides (3.7 and 3.8 were not
    examined: False)."""
    return triton_version() >= (3, 9)


_REDUCE_F32 = re.compile(r"^\s*(add|max)\.f32\s+(%\w+),\s*(%\w+),\s*(%\w+);\s*$")   # a row sum's or maximum's step
_ORDERED = re.compile(r"wgmma|mbarrier|\bbar\.|barrier\.|\bcall\b|inline asm")   # what a live-in leaf may not cross
_REGISTER = re.compile(r"%\w+")
_FUNCTION = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\b")
MIN_TREE_LEAVES = 8   # a row's 32 values per thread; smaller reductions are left as Triton wrote them


def chain_reduction_trees(ptx: str) -> tuple[str, int]:
    """The PTX with each tree of `add.f32` or of `max.f32` (MIN_TREE_LEAVES or more leaves, one op) written as one
    chain, leaves in the order they are written, and how many trees. A tree: steps in one basic block whose inner
    results are written once and read once in their function, by the tree. Each chain step goes right after the write
    of the leaf it takes (a leaf from an earlier block: where the tree began), so the reduction follows the values'
    production as 3.6's does; the inner registers are reused and the root keeps its own. Left alone: a chain already
    (3.6's PTX: n = 0), a tree with a wgmma, barrier, call or inline asm among its steps, a root read or written
    between its new and old place. Exact for max; a sum rounds as 3.6's order does. Why: under 3.9's trees v7's
    forward at D = 64 is slower than under 3.6, most at the split form, whose maxima cost it most (the rounds:
    "The forward at D = 64", docs/port-triton39.md)."""
    lines = ptx.split("\n")
    starts = [i for i, line in enumerate(lines) if _FUNCTION.match(line)] + [len(lines)]
    out, n = lines[:starts[0]], 0
    for a, b in zip(starts, starts[1:]):
        body, k = _chain_function(lines[a:b])
        out += body
        n += k
    return "\n".join(out), n


def _chain_function(lines: list[str]) -> tuple[list[str], int]:
    """chain_reduction_trees over one function's lines."""
    writes: dict[str, list[int]] = {}
    reads: dict[str, list[int]] = {}
    block, blocks, steps = 0, [], {}
    for i, line in enumerate(lines):
        block += bool(_BLOCK_END.match(line))
        blocks.append(block)
        m = _REDUCE_F32.match(line)
        if m:
            steps[m.group(2)] = (i, m.group(3), m.group(4), m.group(1))
        ins = _INSTR.match(line)   # its first operand is what it writes; any other form counts as reads only
        regs = _REGISTER.findall(line.split("//", 1)[0])
        if ins:
            writes.setdefault(ins.group(4), []).append(i)
            regs.remove(ins.group(4))
        for r in regs:
            reads.setdefault(r, []).append(i)

    def inner(reg: str, parent: int, op: str) -> bool:   # a step of `op` written and read once, by `parent`
        return (reg in steps and steps[reg][3] == op and writes.get(reg) == [steps[reg][0]]
                and reads.get(reg) == [parent] and blocks[steps[reg][0]] == blocks[parent])

    inners = {c for i, x, y, op in steps.values() for c in (x, y) if inner(c, i, op)}
    after: dict[int, list[str]] = {}   # line -> the chain steps that follow it
    drop, n = set(), 0
    for root, (i, _, _, op) in steps.items():
        if root in inners:
            continue
        tree, leaves, stack, chain = [], [], [root], True
        while stack:
            reg = stack.pop()
            j, x, y, _ = steps[reg]
            tree.append(reg)
            below = [c for c in (x, y) if inner(c, j, op)]
            chain &= len(below) <= 1
            stack += below
            leaves += [(c, j) for c in (x, y) if c not in below]
        if chain or len(leaves) < MIN_TREE_LEAVES:
            continue   # a chain already (3.6's form), or a small reduction
        tree_lines = {steps[r][0] for r in tree}
        start = min(tree_lines) - 1   # a leaf from an earlier block is taken where the tree began
        if any(_ORDERED.search(lines[k]) for k in range(start + 1, i)):
            continue
        placed = []   # (the leaf's last write before its read in that block, else start; the leaf)
        for c, j in leaves:
            w = [k for k in writes.get(c, []) if k < j and blocks[k] == blocks[j]]
            placed.append((w[-1] if w else start, c))
        placed.sort()
        last = placed[-1][0]   # where the root is now written: nothing else may touch it up to its old line
        if any(last < k < i for k in reads.get(root, []) + writes.get(root, [])):
            continue
        acc = placed[0][1]
        for (at, leaf), dst in zip(placed[1:], sorted(set(tree) - {root}, key=lambda r: steps[r][0]) + [root]):
            after.setdefault(at, []).append(f"\t{op}.f32 \t{dst}, {acc}, {leaf};")
            acc = dst
        drop |= tree_lines
        n += 1
    out = []
    for k, line in enumerate(lines):
        if k not in drop:
            out.append(line)
        out += after.get(k, [])
    return out, n
