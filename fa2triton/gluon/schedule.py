"""The Gluon forward's schedule: which query tile, and which share of its keys, work item i is. Program p takes items
p, p + programs, ... (one each unless the grid is persistent); the loader and the consumers walk the same items in
the same order, since slots, phases and turns run on over a program's items.

The order is chosen at compile time by the mask (Schedule.CAUSAL):
- causal: whole tiles only, keys stopping at the tile's diagonal, in pairs whose key tiles add up to the same count
  (causal_pair), so that a persistent program's items are near-equal work. Each head's tiles longest first, head
  after head, gave the busiest program 12-19% more than the mean at N = 2048-4096; the pairs made the persistent
  causal shapes 4.7-8.5% faster (docs/worklogs/gluon_forward_hopper.md, "Balanced causal items");
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
        if self.CAUSAL:
            head, rank = causal_pair(t, self.N_ITEMS // n_q, n_q, gl.num_programs(0))
            q_start = (n_q - 1 - rank) * BLOCK_M
            kb1 = gl.cdiv(gl.minimum(q_start + BLOCK_M, self.N_KEYS), BLOCK_N)
            mask_from = gl.minimum((q_start // BLOCK_N) * BLOCK_N, full_stop)
            causal_off = 0
        else:
            head = t // n_q
            q_start = (t % n_q) * BLOCK_M
            mask_from = full_stop
            causal_off = self.N_KEYS
        return q_start, head, kb1 - kb0, mask_from, causal_off, kb0 * BLOCK_N, part


@gluon.jit
def causal_pair(i, heads, n_q, programs):
    """Causal item i of heads * n_q -> (head, rank), rank 0 the head's last query tile (the most key tiles). Ranks r
    and n_q - 1 - r of a head form a pair, whose key tiles add up to n_q + 1 at equal tile sizes. Items come in
    double waves of 2 * programs, and a program takes items p, p + programs, ... (p = i % programs):
    - a full double wave gives program p the long member of one pair, then the short one;
    - the last, of R < programs pairs, gives whole pairs to the 2R - programs programs that get two of its items, and
      one item each (the rest's long members, then their short ones) to the others.
    With n_q odd, each head's middle tile comes after all pairs. A bijection onto the items for every programs >= 1
    (tests/test_gluon_forward.py); plain integer arithmetic, so `.fn` runs it on Python ints."""
    half = n_q // 2
    paired = 2 * heads * half
    if i < paired:
        wave2 = i // (2 * programs)
        j = i - wave2 * 2 * programs
        left = heads * half - wave2 * programs   # pairs from this double wave on
        if left > programs:
            left = programs
        whole = 2 * left - programs              # programs taking a whole pair of this double wave
        if whole < 0:
            whole = 0
        if j < whole:
            member = 0
            c = j
        elif j >= programs:
            member = 1
            c = j - programs
        else:   # one item each: the remaining left - whole pairs' long members, then their short ones
            rest = left - whole
            k = j - whole
            member = k // rest
            c = whole + k - member * rest
        c += wave2 * programs
        head = c // half
        r = c - head * half
        rank = r + member * (n_q - 1 - 2 * r)
    else:
        head = i - paired
        rank = half
    return head, rank
