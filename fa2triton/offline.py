"""What a kernel gives an offline compile: the runtime says what to compile, the lab (fa2lab.compile_offline) compiles
it for an explicit target without a GPU. Here: the short dtype names the offline tools take, the forward's positional
arguments for contiguous tensors (v0-v5's signature; dtypes stand in for the tensors, as Triton's warmup takes them),
and OfflinePlan, one compile of a Gluon kernel (its `offline_plan`)."""

from __future__ import annotations

import math
from typing import NamedTuple

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}   # short name -> torch's
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


class OfflinePlan(NamedTuple):
    """One offline compile: `kernel` (a @triton.jit or @gluon.jit function, or a wrapper of one) on `args` (meta
    tensors or dtypes standing in for tensors) with `options` (num_warps, num_stages and the constexprs)."""

    kernel: object
    args: tuple
    options: dict


def torch_dtype(name: str):
    """The torch dtype of a short name ('bf16', 'fp16', 'fp32'); ValueError naming the choices otherwise."""
    import torch

    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(torch, DTYPES[name])


def forward_args(N: int, D: int, dtype: str, batch: int) -> tuple:
    """flash_fwd_kernel's positional arguments (v0-v5) for contiguous (batch, N, D) tensors of a short dtype name:
    the dtype for Q, K, V, O and float32 for L, then the 14 strides, N_QUERIES, N_KEYS, scale."""
    import torch

    t = torch_dtype(dtype)
    st3 = (N * D, D, 1)
    return (t, t, t, t, torch.float32, *st3, *st3, *st3, *st3, N, 1, N, N, 1.0 / math.sqrt(D))
