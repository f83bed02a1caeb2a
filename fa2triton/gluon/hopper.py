"""Hopper (sm_90) helpers shared by the Gluon forward (gluon_kernel) and both Gluon backwards (gluon_backward_hopper,
gluon_backward_ws): the constants of the exp2 softmax, the hardware barrier ids the PTX passes use, the wgmma
accumulator layout, a backward program's place in its grid, the slot and phase arithmetic of a ring of
mbarrier-guarded shared-memory slots, and the marks the PTX passes (gluon_ptx) look for.

Ring invariants (every ring here): use i of a ring of SLOTS slots is in slot i % SLOTS; its "ready" mbarrier completes
phase (i // SLOTS) & 1 when use i's data is in; the producer of use i waits on the slot's "empty" mbarrier for phase
((i // SLOTS) & 1) ^ 1, the release of use i - SLOTS (the first SLOTS uses skip that wait: pred i >= SLOTS).
The helpers are small @gluon.jit functions (Triton inlines them, so the code is what the written-out arithmetic
compiled to; offline sm_90 SASS opcode counts identical under Triton 3.6 and 3.9).

Importing this module needs Gluon (triton.experimental.gluon); callers guard the import.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

LOG2E = 1.4426950408889634   # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453     # ln(2): ln(x) = log2(x) * LN2
# the same for @gluon.jit code, which reads a global only as a constexpr
LOG2E_C = gl.constexpr(LOG2E)
LN2_C = gl.constexpr(LN2)


class BarrierId:
    """Hardware named-barrier ids (bar.sync <id>, <threads>) in the kernels' PTX."""
    CTA = 0              # Triton's whole-CTA barrier (Triton's own partition barriers use 1-3)
    PARTITION_BASE = 8   # gluon_ptx.partition_syncs: partition p's barrier is PARTITION_BASE + tid.x / 128


# The type of an aggregate's field holding a runtime scalar argument: Triton passes one it specialised (e.g. 1) as a
# constexpr, which an aggregate's constexpr_function __init__ sees unwrapped (wrap it again: gl.constexpr(x)).
Scalar = gl.tensor | gl.constexpr


@gluon.constexpr_function
def wgmma_layout(warps, n):
    """The register layout of a wgmma accumulator n columns wide over `warps` warps (16 rows each)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, n, 16])


@gluon.jit
def slot_of(i, SLOTS: gl.constexpr):
    """The slot of use i of a ring of SLOTS slots."""
    return i % SLOTS


@gluon.jit
def ready_phase(i, SLOTS: gl.constexpr):
    """The phase of use i's "ready" mbarrier (its consumers' wait)."""
    return (i // SLOTS) & 1


@gluon.jit
def empty_phase(i, SLOTS: gl.constexpr):
    """The phase the producer of use i waits for on the slot's "empty" mbarrier: the release of use i - SLOTS (the
    first round's wait, pred i >= SLOTS false, is skipped)."""
    return ((i // SLOTS) & 1) ^ 1


@gluon.jit
def key_tile_and_head(TILES, CAUSAL: gl.constexpr):
    """A backward program's (key tile, head) on fa2triton.tile_order's grid of TILES key tiles per head (its
    tile_and_head for key tiles: causal, the heads fastest and the first, longest, key tiles first)."""
    if CAUSAL:
        heads = gl.num_programs(0) // TILES
        tile = gl.program_id(0) // heads
        head = gl.program_id(0) - tile * heads
    else:
        tile = gl.program_id(0)
        head = gl.program_id(1)
    return tile, head


@gluon.jit
def mark(ASM: gl.constexpr):
    """A PTX comment for a pass of the PTX stage (gluon_ptx), in a register move ptxas drops (ASM): 4 warps, one per
    thread."""
    lane = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.inline_asm_elementwise(ASM, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
