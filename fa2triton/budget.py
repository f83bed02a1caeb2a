"""The shared-memory and register budget of one configuration (Round 1).

The article's formula counts what the TTGIR allocates on Ada: the Q tile, parked in
shared memory for the whole loop, and num_stages - 1 buffers each of K and V for the
asynchronous copies. The compiled size exceeds it when the warps lie along the key axis
(P makes a trip through shared memory), with one stage, and, as the H200 sweep showed
(results/nvidia-h200/sweep/v4_exp2.csv), on Hopper's wgmma path, which keeps num_stages
buffers of K and V. `predicted_shared_bytes` adds those; `explain` says which applies.
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

    @classmethod
    def of_triton(cls, c) -> "Config":
        """The tiles, warps and stages of a triton.Config as fa2triton.launch.autotune_configs builds them."""
        return cls(c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"], c.num_warps, c.num_stages)

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


def uses_wgmma(cfg: Config, arch: str | None) -> bool:
    """Hopper's warpgroup MMA: Triton uses it when whole warpgroups (4 warps) tile 64-row blocks."""
    return arch == "sm_90" and cfg.num_warps >= 4 and cfg.q_tile >= 64


def p_buffer_bytes(cfg: Config, D: int = 64, elem_bytes: int = 2, arch: str | None = None) -> int:
    """P's trip through shared memory: on the mma.sync path, with several warps and a query tile
    shorter than the head dimension, Triton lays the warps along the key axis and no warp owns
    whole rows of P. (A warpgroup on Hopper's wgmma path owns whole rows.)"""
    if uses_wgmma(cfg, arch) or cfg.num_warps == 1 or cfg.q_tile >= D:
        return 0
    return elem_bytes * cfg.q_tile * cfg.k_tile


def predicted_shared_bytes(cfg: Config, D: int = 64, elem_bytes: int = 2, arch: str | None = None) -> int:
    """The formula plus what the H200 sweep showed the compiler adds (stages >= 2):
    the P buffer when the warps lie along the key axis, and on Hopper's wgmma path one more
    K and V buffer (num_stages of each instead of num_stages - 1)."""
    extra_stage = 2 * elem_bytes * D * cfg.k_tile if uses_wgmma(cfg, arch) else 0
    return formula_shared_bytes(cfg, D, elem_bytes) + p_buffer_bytes(cfg, D, elem_bytes, arch) + extra_stage


def explain(cfg: Config, compiled_shared: int, D: int = 64, elem_bytes: int = 2, arch: str | None = None) -> str:
    """Why the compiled shared memory differs from the Round 1 formula."""
    diff = compiled_shared - formula_shared_bytes(cfg, D, elem_bytes)
    if diff == 0:
        return "matches"
    parts = []
    if p_buffer_bytes(cfg, D, elem_bytes, arch):
        parts.append(f"P buffer, warps along the key axis ({p_buffer_bytes(cfg, D, elem_bytes, arch)} B)")
    if uses_wgmma(cfg, arch):
        parts.append(f"wgmma pipeline keeps num_stages K and V buffers, one more of each "
                     f"({2 * elem_bytes * D * cfg.k_tile} B)")
    if cfg.num_stages == 1:
        parts.append("1 stage: a K/V tile is still staged")
    known = compiled_shared == predicted_shared_bytes(cfg, D, elem_bytes, arch)
    tail = "" if known else " (not fully explained by these)"
    return f"{diff:+d} B: " + ("; ".join(parts) or "unexplained") + tail


def fit_stages(cfg: Config, smem_limit: int, D: int, elem_bytes: int, arch: str | None = None) -> Config | None:
    """The article's fallback: the same tiles with fewer stages until the prediction fits."""
    for stages in range(cfg.num_stages, 0, -1):
        candidate = cfg.with_stages(stages)
        if predicted_shared_bytes(candidate, D, elem_bytes, arch) <= smem_limit:
            return candidate
    return None
