"""The backward kernels' launch order (issue 48): with the causal mask, every head's longest tiles start first.

The Hopper launches a grid's programs roughly in the order of their linear id, axis 0 fastest. The backward's
kernels run one program per (tile, head). Under the causal mask their tiles' work differs: a key tile's dK/dV program
streams every query from the tile's own on, so the first key tile has the most work; a query tile's dQ program reads
every key up to its own, so the last query tile has the most. With the tiles on axis 0 the heads start one after
another and the last heads' longest tiles start last, leaving a tail of busy SMs: v6's finding in the forward
(kernels/v6_longest_first). So, causal, the grid is one axis of tiles * heads programs, the heads fastest and the
tiles in order of falling work. (One axis, not the heads on axis 0 and the tiles on axis 1: LLVM knows that axis 1
holds fewer than 65,536 programs, and from that proved the Gluon dK/dV kernel's diagonal range one iteration long,
unrolled it, and ptxas then serialised every wgmma for want of registers.) Without the mask every tile has the same
work, and the tiles stay on axis 0: one head's programs run side by side. The Gluon kernels read their place with
gluon.hopper.key_tile_and_head, the same mapping.
"""

from __future__ import annotations

import triton
import triton.language as tl


def grid(tiles: int, heads: int, causal: bool) -> tuple[int, int]:
    """The 2-D grid of a kernel with one program per (tile, head), as tile_and_head reads it."""
    return (tiles * heads, 1) if causal else (tiles, heads)


@triton.jit
def tile_and_head(TILES, CAUSAL: tl.constexpr, LONGEST_LAST: tl.constexpr):
    """This program's (tile, head) on `grid`'s grid of TILES tiles per head; with CAUSAL the tiles start at the last
    if LONGEST_LAST (dQ's query tiles), else at the first (dK/dV's key tiles)."""
    if CAUSAL:
        heads = tl.num_programs(0) // TILES
        tile = tl.program_id(0) // heads
        head = tl.program_id(0) - tile * heads
        if LONGEST_LAST:
            tile = TILES - 1 - tile
    else:
        tile = tl.program_id(0)
        head = tl.program_id(1)
    return tile, head
