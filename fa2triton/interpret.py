"""Workarounds for gaps in Triton's CPU interpreter (TRITON_INTERPRET=1; 3.6 and 3.9), so that a user can
import any version and call `apply()` on CPU tensors. Each patch is harmless where Triton no longer needs it.

When: fa2triton.inputs.validate_qkv, which every version's host wrapper (and the shared backward) calls
before it launches anything, ends with `install_if_interpreting()`: it installs the patches, once per
process, when fa2triton.gpu.interpreting() says TRITON_INTERPRET is on, and does nothing otherwise.
tests/conftest.py and tests/test_backward.py call `patch_interpreter()` themselves, for the kernels
some tests launch directly.

What, and why nothing changes on a GPU:
- bf16 `tl.dot`: the interpreter stores bf16 as uint16 and numpy multiplies the raw bit patterns
  (upstream treats bf16 as unsupported there, triton 3.6.0), so bf16 outputs were garbage. The patch
  upcasts bf16 operands to float32 before the product, which is what the tensor cores do (exact
  products, fp32 accumulation). It replaces a method of the interpreter's builder, which only the
  interpreter uses. Triton 3.9's interpreter still multiplies the raw bits (it converts only fp8).
- `@triton.autotune` cannot time candidates there: its benchmark asks Triton's driver, and without a
  GPU there is none ("0 active drivers"). fa2triton.launch.prune_to_fit leaves an autotuned version its
  first candidate when interpreting, but Triton 3.6's autotuner still times a pruned list of one (3.9's does not); the
  patch makes Autotuner._bench return equal times without running anything while interpreting() is
  true, checked on every call, so a process that is not interpreting times as Triton does.
- A tensor used as an index (a `range` bound, say) was converted by `int()` of its one-element numpy
  array (Triton 3.6), which numpy deprecated in 1.25 and refuses from 2.4 on: every kernel with a runtime
  loop bound raised under the interpreter there. The patch takes the element out with `.item()` first
  (Triton 3.9 squeezes the array itself), so numpy needs no upper bound.
- `only_config` leaves an autotuner one candidate, which it then runs without pruning or timing, so a
  test can check every configuration of the list in turn (tile_candidates).
"""

from __future__ import annotations

import contextlib

import numpy as np

from .gpu import interpreting

_patched = False


def _bf16_to_f32(data: np.ndarray) -> np.ndarray:
    return (data.astype(np.uint32) << 16).view(np.float32)


def install_if_interpreting() -> bool:
    """Install the patches when interpreting (idempotent); on a GPU run, nothing. Returns whether it did."""
    if not interpreting():
        return False
    patch_interpreter()
    return True


def patch_interpreter() -> None:
    """Install the patches, whatever the environment says (idempotent): the bf16 tl.dot fix into the
    interpreter's builder, untimed autotuning while interpreting, and the index conversion."""
    global _patched
    if _patched:
        return
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Autotuner

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a = interpreter.TensorHandle(_bf16_to_f32(a.data) if a.dtype.scalar == tl.bfloat16 else a.data,
                                         tl.float32)
            b = interpreter.TensorHandle(_bf16_to_f32(b.data) if b.dtype.scalar == tl.bfloat16 else b.data,
                                         tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot

    bench = Autotuner._bench

    def _bench(self, *args, config, **meta):
        if interpreting():   # equal "timings": the autotuner keeps the first of what prune_to_fit left
            return [0.0, 0.0, 0.0]   # the median and the 20/80 quantiles Autotuner._bench returns
        return bench(self, *args, config=config, **meta)

    Autotuner._bench = _bench

    patch_tensor = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        # Triton 3.6's interpreted tensor converts to an index by int() of its one-element array, which numpy
        # deprecated in 1.25 and refuses from 2.4 on; .item() takes the element out first.
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).item()))

    interpreter._patch_lang_tensor = _patch_lang_tensor
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
