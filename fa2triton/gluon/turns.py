"""The consumers' ring of turns (ping-pong's at the products, EXP_TURN's at the exponentials) and the unsynced
mbarrier arrives it and the slot releases use (gluon_kernel.py). No `from __future__ import annotations`: @aggregate
checks its fields against the annotations as types.

Turn passes the turn by mbarriers, one per consumer in its own allocation; NamedTurn by hardware named barriers
(flash-attn-4's scheduler barrier, `bar.sync` own id / `bar.arrive` next id over 256 threads). Either has open (a
consumer's first turn), take(t) and give(). Marks (hopper.mark) tell gluon_ptx's passes which bar.sync to drop.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.language.core import _aggregate as aggregate

from fa2triton.gluon import gluon_ptx as _ptx
from fa2triton.gluon import hopper as _hw

_MARK_ASM = gl.constexpr(_ptx.MARK_ASM)
_mark = _hw.mark


@gluon.jit
def mark_unsynced():
    """gluon_ptx.UNSYNCED_MARK right after an mbarrier operation, for drop_marked_syncs to remove the bar.sync
    Triton put before that operation."""
    _mark(_MARK_ASM)

@gluon.jit
def arrive(bar):
    """One consumer's arrival on `bar`: Triton 3.6's elected mbarrier.arrive, marked so that the bar.sync of the
    consumer's 4 warps Triton puts before it is dropped from the PTX (drop_marked_syncs). Thread 0 then arrives
    right after its own warp's wgmma wait, as CUTLASS's consumer_release does from one thread per warpgroup: a
    warpgroup's wgmma is one operation, done for all 4 warps when one warp's wait returns."""
    mbarrier.arrive(bar, count=1)
    mark_unsynced()

@gluon.jit
def new_barrier(count: gl.constexpr):
    """A new mbarrier (its own allocation, [1, 1]) that completes a phase after `count` arrivals."""
    bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bar.index(0), count=count)
    return bar

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

    @gluon.jit
    def open(self):
        """Nothing: consumer 0's first turn is given in the kernel's prologue."""

    @gluon.jit
    def take(self, t):
        """Wait for this consumer's t-th turn (the previous consumer's arrive on its barrier, phase t & 1)."""
        mbarrier.wait(self.mine.index(0), t & 1)

    @gluon.jit
    def give(self):
        """Pass the turn: the next consumer's barrier, one elected and unsynced arrive (arrive)."""
        arrive(self.next.index(0))

@aggregate
class NamedTurn:
    """Turn's ring on hardware named barriers (NAMED_TURNS; flash-attn-4's scheduler barrier): consumer wg's turn is
    barrier TURN_BASE + wg over 256 threads, its 128 waiting at bar.sync and the previous consumer's 128 arriving.
    Consumer 0 arrives on its own first (open), so it goes first. No shared memory; the ids are constants."""
    MINE: gl.constexpr
    NEXT: gl.constexpr
    FIRST: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, wg, consumers):
        self.MINE = gl.constexpr(_hw.BarrierId.TURN_BASE + wg)
        self.NEXT = gl.constexpr(_hw.BarrierId.TURN_BASE + (wg + 1) % consumers)
        self.FIRST = gl.constexpr(wg == 0)

    @gluon.jit
    def open(self):
        """Consumer 0's first turn (flash-attn-4's mma_init)."""
        if self.FIRST:
            _mark(_hw.named_barrier_asm("arrive", self.MINE, 256))

    @gluon.jit
    def take(self, t):
        """Wait for this consumer's turn (the count of turns t is not needed: a hardware barrier has no phase)."""
        _mark(_hw.named_barrier_asm("sync", self.MINE, 256))

    @gluon.jit
    def give(self):
        """Pass the turn to the next consumer."""
        _mark(_hw.named_barrier_asm("arrive", self.NEXT, 256))
