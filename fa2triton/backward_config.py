"""The Triton backward's launch configurations (issue 7): BackwardConfig (tiles, warps, stages), the built-in
defaults per architecture, and this GPU's pick in backward_configs.json (`invoke sweep-backward --pick`), which
applies to 16-bit inputs with D <= 64; default_config chooses among them. Why each default, with its numbers:
docs/worklogs/backward_hopper.md, "The Triton backward's notes".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .launch import device_arch


@dataclass(frozen=True)
class BackwardConfig:
    """Tile sizes, warps and stages of the backward's kernels (one point of fa2lab.backward_sweep).

    The dK/dV kernel owns a key tile of `dkdv_k_tile` rows and streams query tiles of
    `dkdv_q_tile`; the dQ kernel owns a query tile of `dq_q_tile` and streams key tiles of
    `dq_k_tile`. Tiles are powers of two >= 16 (tl.dot's minimum). num_warps and num_stages
    apply to both main kernels; the preprocessing kernel uses `preprocess_q_tile` rows and
    4 warps.
    """

    dkdv_q_tile: int = 32
    dkdv_k_tile: int = 128
    dq_q_tile: int = 128
    dq_k_tile: int = 32
    num_warps: int = 8
    num_stages: int = 3
    preprocess_q_tile: int = 64

    @classmethod
    def parse(cls, text: str) -> "BackwardConfig":
        """'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES' (the command-line form)."""
        parts = [int(p) for p in str(text).replace("x", ",").split(",") if p.strip()]
        if len(parts) != 6:
            raise ValueError(f"a backward configuration is 'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES', got {text!r}")
        return cls(*parts)

    def __str__(self) -> str:
        return (f"dkdv {self.dkdv_q_tile}x{self.dkdv_k_tile}, dq {self.dq_q_tile}x{self.dq_k_tile}, "
                f"{self.num_warps}w, {self.num_stages}s")

    def with_stages(self, stages: int) -> "BackwardConfig":
        return replace(self, num_stages=stages)

    def validate(self) -> None:
        for name in ("dkdv_q_tile", "dkdv_k_tile", "dq_q_tile", "dq_k_tile", "preprocess_q_tile"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"BackwardConfig.{name} must be a power of two >= 16, got {v!r}")
        if not isinstance(self.num_warps, int) or self.num_warps < 1 or self.num_warps & (self.num_warps - 1):
            raise ValueError(f"BackwardConfig.num_warps must be a power of two, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"BackwardConfig.num_stages must be >= 1, got {self.num_stages!r}")


# The built-in defaults (a sweep's pick in backward_configs.json overrides them where it applies). The
# numbers below are from offline sm_90 compiles (Triton 3.6.0, its ptxas; no GPU), causal, both dQ modes.
# sm_90: the shape of Triton's fused-attention tutorial (the owned tile 128, the streamed
# one 32) at 8 warps: wgmma, no spills for 16-bit inputs at D = 16..128 and fp32 at D <= 64
# (D = 64 bf16: 153/179 registers dK/dV without/with atomics, 112 dQ; 58/82 KB shared).
# At 4 warps the dK/dV kernel hits 255 registers and spills at D = 64.
SM90_DEFAULT = BackwardConfig(32, 128, 128, 32, num_warps=8, num_stages=3)
# sm_90, fp32 at D = 128: every configuration tried spills in dK/dV; this one least
# (236 B, 164/230 KB shared).
SM90_FP32_D128 = BackwardConfig(16, 128, 128, 16, num_warps=8, num_stages=2)
# sm_80/sm_86/sm_89 (mma.sync, 100-164 KB of shared memory): smaller owned tiles, 2 stages.
SM80_DEFAULT = BackwardConfig(32, 64, 64, 32, num_warps=4, num_stages=2)
# Any other GPU, and the last resort when a configuration does not fit.
FALLBACK = BackwardConfig(16, 64, 64, 16, num_warps=4, num_stages=1)


# The sweep's pick per architecture (sweeps/sweep_backward.py --pick writes backward_configs.json beside
# this file): the configuration with the best geometric mean over the harness shapes on that GPU. The
# sweep runs bf16 at D = 64, so the pick applies to 16-bit inputs with D <= 64; the rest keep the
# defaults above.
PICKS_FILE = Path(__file__).with_name("backward_configs.json")


def _load_picks(path: Path = PICKS_FILE) -> dict[str, BackwardConfig]:
    if not path.exists():
        return {}
    arches = json.loads(path.read_text()).get("arches", {})
    return {arch: BackwardConfig(*entry["config"]) for arch, entry in arches.items()}


PICKED = _load_picks()


def default_config(D: int, dtype: torch.dtype, arch: str | None = None) -> BackwardConfig:
    """The configuration used when none is given: by architecture, head dimension and dtype.
    Under the interpreter (arch None) the sm_90 choice, so the tests run what the H200 will."""
    arch = arch if arch is not None else device_arch()
    cc = int(arch.removeprefix("sm_").rstrip("a")) if arch else None
    picked = PICKED.get(f"sm_{cc if cc is not None else 90}")
    if picked is not None and dtype != torch.float32 and D <= 64:
        return picked
    if cc is None or cc >= 90:
        return SM90_FP32_D128 if (dtype == torch.float32 and D > 64) else SM90_DEFAULT
    if cc >= 80:
        return SM80_DEFAULT
    return FALLBACK
