"""Slices more than 2^31 elements apart: every kernel forms a slice's base offset in 64 bits.

A (batch * heads) slice's base is its index times the tensor's first stride. Triton passes a stride below 2^31 as a
32-bit integer, so index * stride wrapped once a tensor passed 2^31 elements (4 GiB of bf16), and the kernels read
and wrote another slice's memory (a segfault under the interpreter, which wraps as the GPU does). Here Q's three
slices lie 2^30 elements apart in one storage of 2^31 + 512 elements: torch.empty reserves it, and only the pages
the slices touch become memory."""

from __future__ import annotations

import os

import pytest
import torch

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"   # before the kernels' import

from fa2triton import versions  # noqa: E402
from fa2triton.flash_backward_triton import DQ_MODES, flash_attention_backward  # noqa: E402
from fa2triton.reference import attention, relative_error  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
B, N, D = 3, 16, 16
APART = 2 ** 30   # slice i starts at i * 2^30: the last at 2^31, past a 32-bit offset


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(0)
    storage = torch.empty((B - 1) * APART + N * D, dtype=torch.float16, device=DEVICE)
    Q = storage.as_strided((B, N, D), (APART, D, 1))
    for i in range(B):
        Q[i].copy_(torch.randn(N, D, generator=g))
    K, V, dO = (torch.randn(B, N, D, generator=g).to(torch.float16).to(DEVICE) for _ in range(3))
    return Q, K, V, dO


@pytest.mark.parametrize("name", [v.name for v in versions.VERSIONS])
def test_every_version_s_forward_reads_slices_past_2_31(inputs, name):
    Q, K, V, _ = inputs
    O = versions.load(name).FlashAttentionTriton.apply(Q, K, V, True)
    assert relative_error(O.cpu(), attention(Q.cpu(), K.cpu(), V.cpu(), True)[0]) < 1e-2


@pytest.mark.parametrize("dq_mode", DQ_MODES)
def test_the_backward_reads_slices_past_2_31(inputs, dq_mode):
    Q, K, V, dO = inputs
    O, L = (t.to(DEVICE) for t in attention(Q.cpu(), K.cpu(), V.cpu(), True, torch.float32))
    grads = flash_attention_backward(Q, K, V, O.to(Q.dtype), L, dO, True, dq_mode=dq_mode)
    q, k, v = (t.detach().cpu().double().requires_grad_() for t in (Q, K, V))
    want = torch.autograd.grad(attention(q, k, v, True)[0], (q, k, v), dO.cpu().double())
    for g, w, what in zip(grads, want, "QKV"):
        assert relative_error(g.cpu(), w) < 1e-2, f"d{what}"
