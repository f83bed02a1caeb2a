"""The configurations of v7's Hopper Gluon forward: GluonConfig (one launch of gluon_kernel.flash_fwd_gluon_ws), its
label, its shared-memory budget, and the candidates v7 races per head dimension.

Every configuration is warp-specialized: a loader warp and 2 or 3 consumer warpgroups of 64 query rows each, P in
registers, the softmax of tile j under P_(j-1) V_(j-1), the key loop's arrivals without Triton's bar.sync (the label's
"/preg" and "/ua" say so, as they always did). The options tried and dropped are one table in the Gluon log
(gluon_forward_hopper_log.md, "Retired options"), with what each measured and the last commit that had its code.
"""

from __future__ import annotations

from dataclasses import dataclass

from fa2triton.gpu import facts

@dataclass(frozen=True)
class GluonConfig:
    """One launch configuration of the warp-specialized Gluon forward: `consumers` warpgroups of 64 rows
    (block_m = 64 * consumers), block_n keys per tile, K/V round `slots` shared-memory slots."""
    block_m: int = 128
    block_n: int = 128
    slots: int = 3                # K/V shared-memory slots
    consumers: int = 2            # consumer warpgroups (2 or 3)
    pingpong: bool = False        # the consumers take turns issuing their products (a ring of mbarriers)
    split_tail: bool = False      # non-causal: the last wave's tiles split along the keys (split_plan; the /split2 and
                                  # /split3 forms, more parts per SM, were slower at N = 2048 and 4096)
    persistent: bool = False      # one program per SM looping over the work items, Q double-buffered (N = 512's one
                                  # wave: one program per tile, 112% of cuDNN against 108% persistent)
    direct_store: bool = False    # O stored from the wgmma registers, no shared-memory reshuffle (frees 32 KB at D = 128)
    one_q: bool = False           # persistent: one query-tile buffer, released after each item's last Q K^T, so that
                                  # three 128-key slots fit at D = 128
    lookahead: bool = False       # S_(j+1) issued beside P_(j-1) V_(j-1) before tile j's softmax (D = 128's 64-key
                                  # tiles; at D = 64 slower, 75.7-95.9% of cuDNN against 98.4-102.2%)
    exp_turn: bool = False        # instead of ping-pong: the consumers take turns at their exponentials, the turn passed
                                  # after one of a thread's row sums ("/et1"; after both, "/et", was slower)
    shared_code: bool = False     # the consumers run one copy of their code, inlined once by the PTX stage ("/sc2")

    def __post_init__(self):
        if self.consumers not in (2, 3) or self.block_m != 64 * self.consumers:
            raise ValueError(f"a configuration has 2 or 3 consumers of 64 rows (block_m = 64 * consumers): {self}")
        if self.block_n not in (64, 128) or self.slots < 2:
            raise ValueError(f"block_n is 64 or 128 and there are at least 2 slots: {self}")
        if self.exp_turn and (self.pingpong or self.lookahead):
            raise ValueError(f"exp_turn is a ring of turns at every key tile's exponentials in place of ping-pong's "
                             f"turns at the products: not with ping-pong or lookahead: {self}")
        if self.one_q and (not self.persistent or self.lookahead):
            raise ValueError(f"one_q is the persistent grid's choice (one program per tile has one Q buffer), its "
                             f"buffer released in _attend's key loop: not with lookahead: {self}")

    @property
    def label(self) -> str:
        return (f"ws{self.consumers}x64x{self.block_n}/{self.slots}s/preg{'/pp' if self.pingpong else ''}"
                f"{'/split' if self.split_tail else ''}{'/persist' if self.persistent else ''}"
                f"{'/ds' if self.direct_store else ''}/ua{'/la' if self.lookahead else ''}"
                f"{'/et1' if self.exp_turn else ''}{'/q1' if self.one_q else ''}{'/sc2' if self.shared_code else ''}")

    @property
    def q_buffers(self) -> int:
        """Query-tile buffers: 2 with a persistent grid (the next item's queries load while this item finishes),
        else 1."""
        return 2 if self.persistent and not self.one_q else 1

    @property
    def consumer_registers(self) -> int:
        """setmaxnreg for the worker consumers: what 2 or 3 consumers and a 24-register loader leave of 64 K registers
        (2: 232, 3: 160). With 2, Triton 3.6 gives the default partition (consumer 0) what the worker's count leaves of
        480 (the PTX's setmaxnreg: 248 beside 232); with the shared code (a 4-warp loader, both consumers workers) both
        get 240."""
        return {2: 240 if self.shared_code else 232, 3: 160}[self.consumers]

    def smem_bytes(self, D: int, elem: int = 2) -> int:
        """Shared memory the kernel allocates: Q, the K/V slots, each consumer's epilogue scratch and the mbarriers
        (offline sm_90 at D = 64: the compiled bytes exactly with 2 consumers, 8 more with 3; at D = 128 Triton's
        epilogue scratch is smaller, so fits() errs on the safe side)."""
        b = (self.block_m * D * self.q_buffers + 2 * self.slots * self.block_n * D) * elem
        b += 0 if self.direct_store else self.block_m * D * elem   # the epilogue's layout conversion
        # a row vector's conversion (64 floats), which the conversion's scratch held (offline sm_90: 256 bytes more)
        b += 64 * 4 if self.direct_store else 0
        # the mbarrier allocations (Q ready and empty, the slots' ready and empty, one turn per consumer), each
        # rounded up to 16 bytes
        return b + 2 * _align16(8 * self.q_buffers) + 2 * _align16(8 * self.slots) + 16 * self.consumers

    def fits(self, D: int, smem_per_block: int) -> bool:
        return self.smem_bytes(D) <= smem_per_block


def _align16(n: int) -> int:
    return -(-n // 16) * 16


# v7's candidates: its launch table holds which one (or v7's tl path) each input signature launches, raced
# offline by `invoke pick-launch` (gluon_forward_hopper.best_launch), or at run time where a GPU has no table.
# Head dimension 64:
V7_CANDIDATES = (
    # the persistent 128-row program whose consumers take turns at their exponentials (/et1 against ping-pong:
    # 98.6/100.5/102.9% of cuDNN at N = 1024/2048/4096 against 98.0/98.5/100.8%), one copy of their code (/sc2 minus
    # without, median points of cuDNN non-causal / causal: N = 512 +4.1 / +1.0, 1024 +2.4 / +2.5)
    GluonConfig(128, 128, 3, 2, persistent=True, exp_turn=True, shared_code=True),
    # one program per tile: where the tiles fit in one wave (N = 512: 128 tiles on 132 SMs) the persistent loop only
    # costs (112% of cuDNN by graph replay against 108%); /sc2 at N = 512 97.7% against 96.9% non-causal, 101.3%
    # against 99.3% causal
    GluonConfig(128, 128, 3, 2, pingpong=True, shared_code=True),
    # 192-row tiles with the split tail (N = 4096: 108.2% of cuDNN)
    GluonConfig(192, 128, 4, 3, pingpong=True, split_tail=True, persistent=True),
)
# Head dimension 128 (none of the above fits a block's shared memory there):
V7_CANDIDATES_WIDE = (
    # the persistent 64-key form with lookahead and 4 slots (89.4/94.5/95.1% of cuDNN at N = 1024/2048/4096 where 3
    # slots without it made 84.8/89.1/90.0%)
    GluonConfig(128, 64, 4, 2, pingpong=True, persistent=True, lookahead=True),
    # 192-row 64-key tiles with the split tail (N = 4096: 95.5%)
    GluonConfig(192, 64, 3, 3, pingpong=True, split_tail=True),
    # 128-key tiles in three slots beside one query-tile buffer, O from the registers (229760 bytes; non-causal
    # 95.7/98.8% of cuDNN at N = 2048/4096 against the lookahead form's 93.4/94.2%)
    GluonConfig(128, 128, 3, 2, pingpong=True, persistent=True, direct_store=True, one_q=True),
)

# What `invoke experiment gluon` measures: v7's candidates and the race alternatives each replaced (the persistent
# 128-row ping-pong form that /et1 replaced, and each 128-row D = 64 candidate without the shared code).
EXPERIMENT_CONFIGS = (
    *V7_CANDIDATES,
    *V7_CANDIDATES_WIDE,
    GluonConfig(128, 128, 3, 2, pingpong=True, persistent=True),
    GluonConfig(128, 128, 3, 2, persistent=True, exp_turn=True),
    GluonConfig(128, 128, 3, 2, pingpong=True),
)


def candidates_for(D: int) -> tuple:
    """v7's candidates at head dimension D (HEAD_DIMS)."""
    return V7_CANDIDATES_WIDE if D > 64 else V7_CANDIDATES


def fitting(candidates, D: int, device: int = 0) -> list:
    """The candidates whose shared memory fits a block of this GPU (fa2triton.gpu.facts) at head dimension D."""
    smem = facts(device).smem_per_block
    return [c for c in candidates if c.fits(D, smem)]


def configs_named(labels) -> list:
    """EXPERIMENT_CONFIGS by label, in the order asked for. A label of a retired option (one the Gluon log's "Retired
    options" table lists) or any other unknown one is an error naming the known ones."""
    known = {c.label for c in EXPERIMENT_CONFIGS}
    unknown = [w for w in labels if w not in known]
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)} (a retired option's? retired: see "
                         f"docs/experiments.md and the Gluon log's Retired options); known: {', '.join(sorted(known))}")
    named = {c.label: c for c in EXPERIMENT_CONFIGS}
    return [named[w] for w in labels]
