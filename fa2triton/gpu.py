"""GPU facts read from the device at run time, never constants for one card.

The only per-architecture constant is the tensor-core rate per clock per SM
for bf16 inputs with fp32 accumulation, which no API reports; the SM count and
clock that turn it into TFLOP/s come from the device.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass

# Dense tensor-core FLOP per clock per SM, bf16 inputs, fp32 accumulation.
# sm_80 (A100): 312 TFLOP/s / (108 SMs * 1.41 GHz) = 2048.
# sm_86/sm_89 GeForce: fp32 accumulation runs at half the fp16-accumulation rate: 512
#   (the article's Round 2 table on the RTX 4070 SUPER).
# sm_90 (H100/H200 SXM): 989 TFLOP/s / (132 SMs * 1.83 GHz) = 4096.
TENSOR_FLOP_PER_CLK_PER_SM = {(8, 0): 2048, (8, 6): 512, (8, 9): 512, (9, 0): 4096, (10, 0): 8192}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


def arch_name(capability: tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the folder name under results/."""
    out = "".join(c.lower() if c.isalnum() else "-" for c in name)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")


@dataclass(frozen=True)
class GpuFacts:
    name: str
    capability: tuple[int, int]
    sm_count: int
    smem_per_block: int          # opt-in maximum a program may ask for, bytes
    smem_per_sm: int             # bytes shared by all resident programs of an SM
    smem_reserved_per_block: int # the driver's reservation per resident program
    regs_per_sm: int
    regs_per_thread_max: int
    max_threads_per_sm: int
    l2_bytes: int
    sm_clock_mhz: int            # the maximum SM clock the driver reports
    total_memory: int

    @property
    def arch(self) -> str:
        return arch_name(self.capability)

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def tensor_flop_per_clk_per_sm(self) -> int | None:
        return TENSOR_FLOP_PER_CLK_PER_SM.get(self.capability)

    def tensor_peak_tflops(self, clock_mhz: float | None = None) -> float | None:
        """bf16-in, fp32-accumulate tensor peak at a clock (default: the max clock)."""
        rate = self.tensor_flop_per_clk_per_sm
        if rate is None:
            return None
        clock = clock_mhz or self.sm_clock_mhz
        return rate * self.sm_count * clock * 1e6 / 1e12

    def programs_per_sm_by_smem(self, shared_bytes: int) -> int:
        if shared_bytes > self.smem_per_block:
            return 0
        return self.smem_per_sm // (shared_bytes + self.smem_reserved_per_block)

    def programs_per_sm_by_regs(self, regs_per_thread: int, num_warps: int) -> int:
        if regs_per_thread <= 0:
            return 0
        per_thread = -(-regs_per_thread // 8) * 8  # allocated in blocks of 8
        return self.regs_per_sm // (per_thread * 32 * num_warps)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["capability"] = f"{self.capability[0]}.{self.capability[1]}"
        d["arch"] = self.arch
        return d


@functools.lru_cache(maxsize=None)
def facts(device: int = 0) -> GpuFacts:
    """Read the facts of one CUDA device. Raises RuntimeError without a GPU."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is visible: GPU facts can only be read on a machine with one")
    p = torch.cuda.get_device_properties(device)
    smem_block = getattr(p, "shared_memory_per_block_optin", 0)
    smem_sm = getattr(p, "shared_memory_per_multiprocessor", 0)
    clock = 0
    try:
        from triton.runtime import driver

        tp = driver.active.utils.get_device_properties(device)
        smem_block = smem_block or tp["max_shared_mem"]
        clock = int(tp.get("sm_clock_rate", 0)) // 1000  # kHz -> MHz
    except Exception:  # noqa: BLE001 - triton's driver may be missing; torch's numbers suffice
        pass
    if not clock:
        clock = int(getattr(p, "clock_rate", 0)) // 1000
    reserved = 1024 if p.major >= 8 else 0  # the CUDA runtime reserves 1 KB per block from sm_80 on
    return GpuFacts(
        name=p.name,
        capability=(p.major, p.minor),
        sm_count=p.multi_processor_count,
        smem_per_block=int(smem_block),
        smem_per_sm=int(smem_sm),
        smem_reserved_per_block=reserved,
        regs_per_sm=int(getattr(p, "regs_per_multiprocessor", 65536)),
        regs_per_thread_max=255,
        max_threads_per_sm=int(getattr(p, "max_threads_per_multi_processor", 2048)),
        l2_bytes=int(getattr(p, "L2_cache_size", 0)),
        sm_clock_mhz=clock,
        total_memory=int(p.total_memory),
    )
