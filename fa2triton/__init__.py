"""FlashAttention-2 in Triton, one version per optimisation round (fa2triton/kernels/<round>/), and the runtime they
share: input checks, launch and lean host path, GPU facts, configuration tables, the Triton backward and the Hopper
Gluon kernels. It imports nothing from the lab (fa2lab) that measures it.

    from fa2triton import attention, flash_attn_func
    o = attention(q, k, v, is_causal=True)                  # SDPA's (B, H, N, D) layout
    o = flash_attn_func(q, k, v, causal=True, version="v5_final")   # flash-attn's (B, N, H, D)

`attention` and `flash_attn_func` import torch and Triton on first use (fa2triton.api); VERSIONS is the registry.
"""

from .versions import VERSIONS

__all__ = ["VERSIONS", "attention", "flash_attn_func"]


def __getattr__(name):   # the calls load torch and Triton: only when asked for, so the registry stays light
    if name in ("attention", "flash_attn_func"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
