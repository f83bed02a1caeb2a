"""Workarounds for gaps in Triton 3.6's CPU interpreter (TRITON_INTERPRET=1), test side only.

Nothing here changes what a kernel does on a GPU:
- bf16 `tl.dot`: the interpreter stores bf16 as uint16 and numpy multiplies the raw
  bit patterns (upstream treats bf16 as unsupported there, triton 3.6.0). The patch
  upcasts bf16 operands to float32 before the product, which is what the tensor
  cores do (exact products, fp32 accumulation).
- `@triton.autotune` cannot time candidates there (no active driver). `only_config`
  leaves an autotuner one candidate, which it then runs without timing, so a test
  can check every configuration of the list in turn.
"""

from __future__ import annotations

import contextlib

import numpy as np

_patched = False


def _bf16_to_f32(data: np.ndarray) -> np.ndarray:
    return (data.astype(np.uint32) << 16).view(np.float32)


def patch_interpreter() -> None:
    """Install the bf16 tl.dot fix into the interpreter's builder (idempotent)."""
    global _patched
    if _patched:
        return
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a = interpreter.TensorHandle(_bf16_to_f32(a.data) if a.dtype.scalar == tl.bfloat16 else a.data,
                                         tl.float32)
            b = interpreter.TensorHandle(_bf16_to_f32(b.data) if b.dtype.scalar == tl.bfloat16 else b.data,
                                         tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
    _patched = True


def autotuner_of(module):
    """The module's @triton.autotune object, or None for fixed-configuration versions."""
    from triton.runtime.autotuner import Autotuner

    kernel = getattr(module, "flash_fwd_kernel", None)
    return kernel if isinstance(kernel, Autotuner) else None


def tile_candidates(autotuner) -> list:
    """The autotuner's candidates, the first of each (Q_TILE_SIZE, K_TILE_SIZE) pair: the only part
    of a configuration the interpreter sees (warps and stages do not change what it computes)."""
    seen = {}
    for cfg in autotuner.configs:
        seen.setdefault((cfg.kwargs["Q_TILE_SIZE"], cfg.kwargs["K_TILE_SIZE"]), cfg)
    return list(seen.values())


@contextlib.contextmanager
def only_config(autotuner, config):
    """Temporarily leave `autotuner` a single candidate (it then runs it without timing)."""
    saved = autotuner.configs, dict(autotuner.cache)
    autotuner.configs = [config]
    autotuner.cache.clear()
    try:
        yield
    finally:
        autotuner.configs, autotuner.cache = saved[0], saved[1]
