"""The Gluon forward's schedule: which query tile, and which share of its keys, work item i is. Program p takes items
p, p + programs, ... (one each unless the grid is persistent); the loader and the consumers walk the same items in
the same order, since slots, phases and turns run on over a program's items.

The order is chosen at compile time by the mask (Schedule.CAUSAL):
- causal: whole tiles only, tile t of head t // query tiles, each head's query tiles reversed (v6's order: the
  longest first), keys stopping at the tile's diagonal;
- otherwise: tiles in order, the FULL whole tiles first, then the split tail's parts (the host's split_plan): item
  FULL + q is split q % SPLITS (a contiguous share of the key tiles) of tile FULL + q // SPLITS, written as
  workspace part q.
Importing this module needs Gluon (gluon_forward_hopper guards it).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from fa2triton.gluon.hopper import Scalar


@aggregate
class Schedule:
    """The work items: the head's queries and keys, the whole tiles, the splits per tail tile, the mask and the
    items in all (a runtime scalar that Triton specialised arrives unwrapped: hopper.Scalar)."""
    N_QUERIES: Scalar
    N_KEYS: Scalar
    FULL: Scalar
    SPLITS: Scalar
    CAUSAL: gl.constexpr
    N_ITEMS: Scalar

    @gluon.constexpr_function
    def __init__(self, N_QUERIES, N_KEYS, FULL, SPLITS, CAUSAL, N_ITEMS):
        self.N_QUERIES = N_QUERIES if isinstance(N_QUERIES, gl.tensor) else gl.constexpr(N_QUERIES)
        self.N_KEYS = N_KEYS if isinstance(N_KEYS, gl.tensor) else gl.constexpr(N_KEYS)
        self.FULL = FULL if isinstance(FULL, gl.tensor) else gl.constexpr(FULL)
        self.SPLITS = SPLITS if isinstance(SPLITS, gl.tensor) else gl.constexpr(SPLITS)
        self.CAUSAL = gl.constexpr(CAUSAL)
        self.N_ITEMS = N_ITEMS if isinstance(N_ITEMS, gl.tensor) else gl.constexpr(N_ITEMS)

    @gluon.jit
    def item(self, item, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
        """Work item -> (q_start, head, key tiles, mask_from, causal_off, first key, part): keys from mask_from on
        are masked (a causal diagonal or a ragged last tile), causal_off 0 under the causal mask (else N_KEYS), and
        part the workspace part of a split (-1: a whole tile)."""
        n_q = gl.cdiv(self.N_QUERIES, BLOCK_M)
        n_kb = gl.cdiv(self.N_KEYS, BLOCK_N)
        full_stop = (self.N_KEYS // BLOCK_N) * BLOCK_N
        if item < self.FULL:
            t = item
            part = -1
            kb0 = 0
            kb1 = n_kb
        else:
            part = item - self.FULL
            t = self.FULL + part // self.SPLITS
            kb0 = (part % self.SPLITS) * n_kb // self.SPLITS
            kb1 = (part % self.SPLITS + 1) * n_kb // self.SPLITS
        q_tile = t % n_q
        if self.CAUSAL:
            q_start = (n_q - 1 - q_tile) * BLOCK_M
            kb1 = gl.cdiv(gl.minimum(q_start + BLOCK_M, self.N_KEYS), BLOCK_N)
            mask_from = gl.minimum((q_start // BLOCK_N) * BLOCK_N, full_stop)
            causal_off = 0
        else:
            q_start = q_tile * BLOCK_M
            mask_from = full_stop
            causal_off = self.N_KEYS
        head = t // n_q
        return q_start, head, kb1 - kb0, mask_from, causal_off, kb0 * BLOCK_N, part
