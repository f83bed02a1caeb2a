"""The PTX passes' marks for tl kernels (the Gluon kernels plant their own): where this Triton needs a pass, a kernel
that calls `plant` carries its mark, and fa2triton.gluon.gluon_ptx (imported here, which installs the passes as a
PTX stage) rewrites that kernel's PTX. Each mark is a comment in a register move that ptxas drops; the gates are
fa2triton.triton_compat's, so on Triton 3.6, and under the interpreter, nothing is planted and the PTX is as before.

- FENCES, drop_repeated_proxy_fences (adds_loop_proxy_fences): the Triton backward's wgmma kernels;
- DESCRIPTORS, wgmma_descriptor_adds (splits_wgmma_descriptors): those and v7's tl forward;
- REDUCTIONS, chain_reduction_trees (reduces_in_trees): v7's tl forward.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gpu import interpreting
from .triton_compat import adds_loop_proxy_fences, reduces_in_trees, splits_wgmma_descriptors

if not interpreting() and (adds_loop_proxy_fences() or splits_wgmma_descriptors() or reduces_in_trees()):
    from .gluon import gluon_ptx as _ptx

    _FENCE_ASM = tl.constexpr(_ptx.FENCE_ASM if adds_loop_proxy_fences() else "")
    _DESCRIPTOR_ASM = tl.constexpr(_ptx.DESCRIPTOR_ASM if splits_wgmma_descriptors() else "")
    _REDUCE_ASM = tl.constexpr(_ptx.REDUCE_ASM if reduces_in_trees() else "")
else:
    _FENCE_ASM, _DESCRIPTOR_ASM, _REDUCE_ASM = tl.constexpr(""), tl.constexpr(""), tl.constexpr("")


@triton.jit
def _mark(asm: tl.constexpr):
    if asm != "":
        lane = tl.arange(0, 32)
        tl.inline_asm_elementwise(asm, "=r,r", [lane], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def plant(FENCES: tl.constexpr, DESCRIPTORS: tl.constexpr, REDUCTIONS: tl.constexpr):
    """The marks of the passes asked for that this Triton needs (above); nothing where it needs none."""
    if FENCES:
        _mark(_FENCE_ASM)
    if DESCRIPTORS:
        _mark(_DESCRIPTOR_ASM)
    if REDUCTIONS:
        _mark(_REDUCE_ASM)
