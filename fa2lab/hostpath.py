"""A lean host path (issue 8): after the first call for a given input signature, launch the
compiled kernel directly, skipping input checks, autotune key building and argument binding.

At small N on a fast GPU the host's per-call work (checks, `.contiguous()`, Triton's
argument binding and specialisation, the autotuner's key) can take longer than the kernel,
so do_bench measures Python. The first call with a new signature goes through the normal
path (checks, autotuning, compilation) and records what it launched; later calls with the
same signature are a dictionary hit, two allocations and one launch.

The signature covers everything the checks and Triton's specialisation look at: shapes,
strides, dtypes, device and mask, and it only applies when every input is 16-byte aligned
with a unit last stride (so Triton's alignment specialisation is the same on every hit).
Under the interpreter, or for any other input, the normal path runs every time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch
from triton import knobs
from triton.runtime import driver

from .gpu import interpreting


@dataclass
class Launch:
    """What one normal-path call launched: enough to repeat it without Triton's front end."""

    kernel: object            # triton.compiler.CompiledKernel
    grid: tuple[int, int, int]
    tail: tuple               # every argument after the five pointers, in signature order
    o_shape: torch.Size
    o_stride: tuple
    l_shape: torch.Size

    def __call__(self, Q, K, V):   # the per-call hot path: no imports or checks here
        O = torch.empty_strided(self.o_shape, self.o_stride, dtype=Q.dtype, device=Q.device)
        L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device)
        k = self.kernel
        args = (Q, K, V, O, L, *self.tail)
        stream = driver.active.get_current_stream(Q.device.index)
        enter = knobs.runtime.launch_enter_hook
        meta = k.launch_metadata(self.grid, stream, *args) if enter is not None else None
        k.run(*self.grid, stream, k.function, k.packed_metadata, meta, enter, knobs.runtime.launch_exit_hook, *args)
        return O, L


class LaunchCache:
    """signature -> Launch. `stats` counts normal-path ('slow') and cached ('fast') calls."""

    def __init__(self):
        self.entries: dict[tuple, Launch] = {}
        self.stats: Counter = Counter()

    @staticmethod
    def signature(Q, K, V, mode):
        """The cache key, or None when this input must take the normal path."""
        if not (isinstance(Q, torch.Tensor) and isinstance(K, torch.Tensor) and isinstance(V, torch.Tensor)):
            return None
        if Q.device.type != "cuda" or interpreting():
            return None
        if (Q.data_ptr() | K.data_ptr() | V.data_ptr()) % 16 or Q.stride(-1) != 1 or K.stride(-1) != 1 \
                or V.stride(-1) != 1:
            return None
        return (Q.shape, K.shape, V.shape, Q.stride(), K.stride(), V.stride(), Q.dtype, K.dtype, V.dtype,
                Q.device, mode)

    def __call__(self, Q, K, V, mode, slow: Callable):
        """`mode` is whatever else selects the kernel (the mask, a window: hashable);
        `slow(Q, K, V, mode)` runs the normal path and returns (O, L, Launch or None)."""
        key = self.signature(Q, K, V, mode)
        launch = self.entries.get(key) if key is not None else None
        if launch is not None:
            self.stats["fast"] += 1
            return launch(Q, K, V)
        self.stats["slow"] += 1
        O, L, launch = slow(Q, K, V, mode)
        if key is not None and launch is not None:
            self.entries[key] = launch
        return O, L
