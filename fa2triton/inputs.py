"""Input checks for the host wrappers: a clear error instead of a crash deep in Triton.

validate_qkv is also where the interpreter's workarounds are installed (fa2triton.interpret), as every
version calls it before it launches anything; it does so only when interpreting."""

from __future__ import annotations

import torch

from .gpu import interpreting
from .interpret import install_if_interpreting
from .versions import HEAD_DIMS

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SUPPORTED_HEAD_DIMS = HEAD_DIMS
# The most (batch * heads) slices one call takes: CUDA's limit on a grid's second axis (gridDim.y, the same on every
# NVIDIA GPU), where v0-v5's forward and the Triton and Gluon backwards put the slices (fa2triton.tile_order).
# fa2triton.attention and flash_attn_func split a larger batch into calls of at most this many.
MAX_SLICES = 65535


class TooManySlices(ValueError):
    """More (batch * heads) slices than one call takes (MAX_SLICES)."""


def validate_qkv(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> None:
    """Raise TypeError or ValueError naming the problem with Q, K, V. Inputs that pass, under
    TRITON_INTERPRET: install the interpreter's workarounds (fa2triton.interpret.install_if_interpreting)."""
    for name, t in (("Q", Q), ("K", K), ("V", V)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: bfloat16, float16, float32")
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D (batch, sequence, head_dim), got shape {tuple(t.shape)}")
    if not (Q.dtype == K.dtype == V.dtype):
        raise TypeError(f"Q, K and V must share one dtype, got {Q.dtype}, {K.dtype}, {V.dtype}")
    if not (Q.device == K.device == V.device):
        raise ValueError(f"Q, K and V must be on one device, got {Q.device}, {K.device}, {V.device}")
    device = Q.device.type
    if device not in ("cuda", "cpu"):   # meta, mps, xpu, ...: nothing to launch on, nothing to interpret
        raise ValueError(f"Q, K and V are on device '{Q.device}': the Triton kernel needs CUDA tensors, or "
                         "CPU tensors with TRITON_INTERPRET=1 (Triton's interpreter)")
    if device == "cpu" and not interpreting():
        raise ValueError(f"Q, K and V are on {Q.device}: the Triton kernel needs CUDA tensors "
                         "(or TRITON_INTERPRET=1 to run it on the CPU under the interpreter)")
    if (index := other_device(Q)) >= 0:
        raise ValueError(f"Q, K and V are on cuda:{index}, not the current device cuda:{torch.cuda.current_device()}: "
                         "Triton launches on the current one; call under torch.cuda.device(Q.device), or through "
                         "fa2triton.attention, which does")
    if not (Q.shape[0] == K.shape[0] == V.shape[0]):
        raise ValueError(f"batch sizes differ: Q {Q.shape[0]}, K {K.shape[0]}, V {V.shape[0]}")
    if K.shape[1] != V.shape[1]:
        raise ValueError(f"K and V must have the same length, got {K.shape[1]} and {V.shape[1]}")
    D = Q.shape[2]
    if not (D == K.shape[2] == V.shape[2]):
        raise ValueError(f"head dimensions differ: Q {D}, K {K.shape[2]}, V {V.shape[2]}")
    if D not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dimension {D} cannot be tiled by this kernel; supported: "
                         f"{', '.join(map(str, SUPPORTED_HEAD_DIMS))}")
    if Q.shape[1] == 0 or K.shape[1] == 0 or Q.shape[0] == 0:
        raise ValueError(f"empty input: Q {tuple(Q.shape)}, K {tuple(K.shape)}")
    if Q.shape[0] > MAX_SLICES:
        raise TooManySlices(f"{Q.shape[0]} (batch * heads) slices: one call takes at most {MAX_SLICES}, a CUDA grid's "
                         "second axis; fa2triton.attention splits a larger batch into calls")
    install_if_interpreting()


def other_device(t) -> int:
    """t's CUDA device index where that is not the current device, else -1 (also for a CPU tensor or a non-tensor).
    Triton compiles for, and launches on, the current device whatever its arguments' device, so a launch on another
    device's tensors would fault there: the library's calls switch to theirs (fa2triton.api), FlashAttentionTriton's
    own checks refuse them (validate_qkv). Autograd runs a backward on its tensors' device already."""
    try:
        index = t.get_device()
    except AttributeError:
        return -1
    return index if index >= 0 and index != torch.cuda.current_device() else -1


def unit_stride(t: torch.Tensor) -> torch.Tensor:
    """The kernels want the head dimension contiguous (unit column stride); copy only when it is not."""
    return t if t.stride(-1) == 1 else t.contiguous()
