"""Scratch that recorded launches keep between calls, within one process-wide budget.

A recorded launch keeps its scratch so that a repeat allocates none: the backward's fp32 dQ accumulator and Delta
(fa2triton.flash_backward_triton.BackwardLaunch), the forward's unread L (fa2triton.lean_path.KeptL). Their
allocation cost a repeat more than its launches on the H200 (docs/worklogs/backward_hopper.md, "The backward's host
path"). Each launch stands for one input signature, and a model can meet many: every sequence length of a
variable-length batch. Kept without a bound, they would hold GPU memory for the life of the process.

So KEPT accounts for every kept buffer. Keeping one more past its budget drops the longest-kept first, and their
owners allocate again on their next repeat, as though nothing had been kept. A hit costs nothing here; only a call
that allocates does. Set `KEPT.budget` to change the bound, or call `release()` to drop everything kept.
Invariant: an owner has `drop_scratch(key)`, and keeps under `key` only what keep() accepted.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

BUDGET = 256 << 20   # four of the largest the backward keeps one at a time (flash_backward_triton.SCRATCH_KEPT_BYTES)


class Kept:
    """The kept scratch's owners, oldest first, with their bytes; at most `budget` bytes in all."""

    def __init__(self, budget: int = BUDGET):
        self.budget, self.used = budget, 0
        self.entries: OrderedDict[int, tuple] = OrderedDict()   # id(ref) -> (weak ref to the owner, key, bytes)
        self.lock = threading.RLock()   # reentrant: a weak reference's callback may run inside keep() (the GC)

    def keep(self, owner, key, nbytes: int) -> bool:
        """Whether `owner` may keep `nbytes` of scratch under `key`: then they are counted, and the longest-kept
        scratch of any owner is dropped first (owner.drop_scratch(key)) until they fit. False where they alone pass
        the budget (the caller keeps nothing)."""
        if nbytes > self.budget:
            return False
        with self.lock:
            while self.entries and self.used + nbytes > self.budget:
                self._drop_oldest()
            ref = weakref.ref(owner, self._forget)
            self.entries[id(ref)] = (ref, key, nbytes)
            self.used += nbytes
        return True

    def _drop_oldest(self) -> None:
        ref, key, nbytes = self.entries.popitem(last=False)[1]
        self.used -= nbytes
        owner = ref()
        if owner is not None:
            owner.drop_scratch(key)

    def _forget(self, ref) -> None:
        """An owner is gone, and with it what it kept."""
        with self.lock:
            entry = self.entries.pop(id(ref), None)
            if entry is not None:
                self.used -= entry[2]

    def release(self) -> None:
        """Drop every kept buffer (each owner allocates again on its next call)."""
        with self.lock:
            while self.entries:
                self._drop_oldest()


KEPT = Kept()


def release() -> None:
    """Drop the scratch every recorded launch keeps, as before torch.cuda.empty_cache()."""
    KEPT.release()
