"""The shared-memory and register budget of one configuration (Round 1).

The formula counts what the TTGIR of the kernel allocates: the Q tile, parked in
shared memory for the whole loop, and num_stages - 1 buffers each of K and V
for the asynchronous copies. The compiled size can exceed it when the warps lie
along the key axis (P makes a trip through shared memory) and with one stage
(Triton still stages a V tile); `explain` says which applies.
"""

from __future__ import annotations

from dataclasses import dataclass

# A configuration whose two fp32 accumulators alone need more registers per
# thread than this is skipped without compiling (it would spill heavily).
ACCUMULATOR_REGISTER_LIMIT = 512


@dataclass(frozen=True, order=True)
class Config:
    """One launch configuration: query tile, key tile, warps, stages."""

    q_tile: int
    k_tile: int
    num_warps: int
    num_stages: int

    @classmethod
    def parse(cls, text: str) -> "Config":
        parts = [int(p) for p in str(text).replace("x", ",").split(",") if p.strip()]
        if len(parts) != 4:
            raise ValueError(f"a configuration is 'Q_TILE,K_TILE,WARPS,STAGES', got {text!r}")
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.q_tile}x{self.k_tile}, {self.num_warps}w, {self.num_stages}s"

    @property
    def key(self) -> str:
        return f"{self.q_tile},{self.k_tile},{self.num_warps},{self.num_stages}"

    def with_stages(self, stages: int) -> "Config":
        return Config(self.q_tile, self.k_tile, self.num_warps, stages)


def formula_shared_bytes(cfg: Config, D: int = 64, elem_bytes: int = 2) -> int:
    """Q tile + (stages - 1) buffers of K and V, in bytes."""
    q = elem_bytes * D * cfg.q_tile
    kv = (max(cfg.num_stages, 1) - 1) * 2 * elem_bytes * D * cfg.k_tile
    return q + kv


def accumulator_registers(cfg: Config, D: int = 64) -> float:
    """fp32 registers per thread held by the score tile and O accumulator alone."""
    return (cfg.q_tile * cfg.k_tile + cfg.q_tile * D) / (32 * cfg.num_warps)


def skip_reason(cfg: Config, D: int = 64) -> str | None:
    """Why a configuration is not worth compiling, or None."""
    regs = accumulator_registers(cfg, D)
    if regs > ACCUMULATOR_REGISTER_LIMIT:
        return f"accumulators need {regs:.0f} fp32 registers per thread (> {ACCUMULATOR_REGISTER_LIMIT})"
    return None


def explain(cfg: Config, compiled_shared: int, D: int = 64, elem_bytes: int = 2) -> str:
    """Why the compiled shared memory differs from the formula, as far as Round 1 knows."""
    predicted = formula_shared_bytes(cfg, D, elem_bytes)
    diff = compiled_shared - predicted
    if diff == 0:
        return "matches"
    reasons = []
    if cfg.num_stages == 1:
        reasons.append(f"1 stage: a V tile is still staged ({elem_bytes * D * cfg.k_tile} B)")
    if cfg.q_tile < D or cfg.q_tile < 16 * cfg.num_warps:
        reasons.append(f"warps along the key axis: P passes through shared memory ({elem_bytes * cfg.q_tile * cfg.k_tile} B)")
    if diff < 0:
        reasons.append("compiler reused or dropped a buffer")
    if not reasons:
        reasons.append("unexplained by the Round 1 formula (e.g. barriers or layout scratch)")
    return f"{diff:+d} B: " + "; ".join(reasons)


def fit_stages(cfg: Config, smem_limit: int, D: int, elem_bytes: int) -> Config | None:
    """The article's fallback: the same tiles with fewer stages until the formula fits."""
    for stages in range(cfg.num_stages, 0, -1):
        candidate = cfg.with_stages(stages)
        if formula_shared_bytes(candidate, D, elem_bytes) + _p_buffer(candidate, D, elem_bytes) <= smem_limit:
            return candidate
    return None


def _p_buffer(cfg: Config, D: int, elem_bytes: int) -> int:
    # A margin for P's trip through shared memory when the warps cannot own whole rows.
    return elem_bytes * cfg.q_tile * cfg.k_tile if cfg.q_tile < D else 0
