"""The test file, identical for every version.

The version is whichever fa2triton/kernels/<version> folder is on PYTHONPATH:

    PYTHONPATH=fa2triton/kernels/v3_causal_skip python -m pytest -q harness/test_flashattention_triton.py

On a GPU it runs the kernels natively. Without one it runs them on the CPU under
Triton's interpreter (TRITON_INTERPRET=1, set here before the kernel is imported),
whose gaps the kernels' own checks work around (fa2triton.interpret). The test checks
an autotuned kernel on every candidate of its list in turn (the interpreter cannot
time them; by itself it runs the first), which is stronger than checking the one it would pick.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fa2lab package, uninstalled

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the kernel's import (@triton.jit reads it)

import flashattention_autograd_function_triton as kernel_module  # noqa: E402
from fa2triton.interpret import autotuner_of, only_config, tile_candidates  # noqa: E402
from fa2triton.reference import attention, relative_error  # noqa: E402

FlashAttentionTriton = kernel_module.FlashAttentionTriton
DEVICE = "cuda" if ON_GPU else "cpu"

# Bounds on ||O - ref|| / ||ref|| against a float64 reference, and on max |O - ref|.
# fp32 runs its dots in TF32 on a GPU.
REL_TOL = {torch.float32: 3e-3, torch.float16: 5e-3, torch.bfloat16: 1.5e-2}
ABS_TOL = {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 3e-2}
L_TOL = 1e-2


def candidates():
    """The configurations to check: all of an autotuned kernel's list under the interpreter
    (deduplicated by tile sizes, the only part of a configuration the interpreter sees),
    otherwise whatever the version does by itself."""
    tuner = autotuner_of(kernel_module)
    return [None] if ON_GPU or tuner is None else tile_candidates(tuner)


def run(Q, K, V, causal, cfg=None):
    if cfg is None:
        return FlashAttentionTriton.apply(Q, K, V, causal)
    with only_config(autotuner_of(kernel_module), cfg):
        return FlashAttentionTriton.apply(Q, K, V, causal)


def saved_lse(O, B, n_q):
    found = [t for t in O.grad_fn.saved_tensors if t.shape == (B, n_q) and t.dtype == torch.float32]
    assert len(found) == 1, "the forward must save L, shape (B, N_q), float32, with ctx.save_for_backward"
    return found[0]


def inputs(B, n_q, n_k, D, dtype, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    make = lambda n: torch.randn(B, n, D, generator=g, dtype=torch.float32).to(DEVICE, dtype)  # noqa: E731
    Q, K, V = make(n_q), make(n_k), make(n_k)
    if requires_grad:
        for t in (Q, K, V):
            t.requires_grad_(True)
    return Q, K, V


# (B, N_q, N_k, D, causal): square and ragged, non-square, every supported head dimension.
FORWARD_CASES = [
    (1, 128, 128, 64, False),
    (2, 256, 256, 64, True),
    (1, 200, 96, 64, False),
    (1, 96, 200, 64, False),
    (1, 100, 100, 64, True),
    (1, 77, 77, 32, True),
    (2, 64, 64, 16, False),
    (1, 130, 130, 16, True),
    (1, 160, 48, 128, False),
    (1, 128, 128, 128, True),
    (1, 200, 96, 64, True),   # causal with more queries than keys (top-left aligned)
    (1, 48, 144, 32, True),   # causal with fewer queries than keys
]
DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("cfg", candidates(), ids=lambda c: "own" if c is None else
                         f"{c.kwargs['Q_TILE_SIZE']}x{c.kwargs['K_TILE_SIZE']}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B,n_q,n_k,D,causal", FORWARD_CASES)
def test_forward_matches_sdpa_and_logsumexp(B, n_q, n_k, D, causal, dtype, cfg):
    Q, K, V = inputs(B, n_q, n_k, D, dtype, seed=n_q * 7 + n_k + D, requires_grad=True)
    O = run(Q, K, V, causal, cfg)
    # O against SDPA (float64, on the CPU: its is_causal is top-left aligned for N_q != N_k too),
    # L against torch.logsumexp of the scaled, masked scores (fa2triton.reference.attention).
    q64, k64, v64 = (t.detach().cpu().double()[:, None] for t in (Q, K, V))
    ref_O = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)[:, 0]
    ref_L = attention(Q.detach().cpu(), K.detach().cpu(), V.detach().cpu(), causal)[1]

    assert O.shape == Q.shape and O.dtype == Q.dtype
    assert torch.isfinite(O).all(), "O has NaN or inf (unwritten or overflowed rows)"
    err = relative_error(O.detach().cpu(), ref_O)
    assert err < REL_TOL[dtype], f"relative error {err:.2e} >= {REL_TOL[dtype]:.0e}"
    assert torch.allclose(O.detach().cpu().double(), ref_O, atol=ABS_TOL[dtype], rtol=ABS_TOL[dtype])

    L = saved_lse(O, B, n_q).detach().cpu().double()
    assert torch.allclose(L, ref_L, atol=L_TOL, rtol=0), f"L off by {(L - ref_L).abs().max():.3e}"


@pytest.mark.parametrize("B,n_q,n_k,D,causal", [(1, 128, 128, 64, True), (2, 64, 64, 32, False)])
def test_forward_matches_sdpa_fp16(B, n_q, n_k, D, causal):
    Q, K, V = inputs(B, n_q, n_k, D, torch.float16)
    O = run(Q, K, V, causal, candidates()[0])
    ref = F.scaled_dot_product_attention(Q.float().cpu(), K.float().cpu(), V.float().cpu(), is_causal=causal)
    assert torch.allclose(O.float().cpu(), ref, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B,n_q,n_k,D,causal", [(1, 128, 128, 64, True), (1, 96, 160, 32, False),
                                                (2, 64, 64, 16, True)])
def test_gradients_match_sdpa(B, n_q, n_k, D, causal, dtype):
    Q, K, V = inputs(B, n_q, n_k, D, dtype, seed=1, requires_grad=True)
    dO = torch.randn(B, n_q, D, generator=torch.Generator().manual_seed(2)).to(DEVICE, dtype)
    O = run(Q, K, V, causal, candidates()[0])
    O.backward(dO)

    q, k, v = (t.detach().cpu().double().requires_grad_(True) for t in (Q, K, V))
    ref = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=causal)[:, 0]
    ref.backward(dO.cpu().double())
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
    for name, got, want in (("dQ", Q.grad, q.grad), ("dK", K.grad, k.grad), ("dV", V.grad, v.grad)):
        err = relative_error(got.cpu(), want)
        assert err < tol, f"{name} relative error {err:.2e} >= {tol:.0e}"


def test_scale_is_inverse_sqrt_head_dim():
    # Keys that differ only along one direction: a wrong scale changes the softmax weights visibly.
    Q, K, V = inputs(1, 64, 64, 64, torch.float32, seed=3)
    O = run(Q * 3, K * 3, V, False, candidates()[0])
    S = (Q * 3).cpu().double() @ (K * 3).cpu().double().transpose(1, 2) / math.sqrt(64)
    want = torch.softmax(S, -1) @ V.cpu().double()
    assert relative_error(O.cpu(), want) < REL_TOL[torch.float32]


BAD_INPUTS = [
    ("2-D", lambda q, k, v: (q[0], k[0], v[0]), ValueError, "3-D"),
    ("dtype mismatch", lambda q, k, v: (q, k.half(), v), TypeError, "dtype"),
    ("int dtype", lambda q, k, v: (q.int(), k.int(), v.int()), TypeError, "dtype"),
    ("head dims differ", lambda q, k, v: (q, k[..., :32], v), ValueError, "head dimension"),
    ("K and V lengths differ", lambda q, k, v: (q, k, v[:, :-1]), ValueError, "same length"),
    ("untileable head dim", lambda q, k, v: (q[..., :48], k[..., :48], v[..., :48]), ValueError, "head dimension 48"),
    ("batch differs", lambda q, k, v: (q, k[:1], v[:1]), ValueError, "batch"),
]


@pytest.mark.parametrize("name,mutate,exc,match", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_a_clear_error(name, mutate, exc, match):
    Q, K, V = inputs(2, 32, 32, 64, torch.float32)
    with pytest.raises(exc, match=match):
        FlashAttentionTriton.apply(*mutate(Q, K, V), False)


def test_cpu_tensors_rejected_when_not_interpreting(monkeypatch):
    Q, K, V = (t.cpu() for t in inputs(1, 32, 32, 64, torch.float32))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="CUDA"):
        FlashAttentionTriton.apply(Q, K, V, False)


@pytest.mark.skipif(not ON_GPU, reason="needs two devices: a GPU tensor beside a CPU one")
def test_mixed_devices_rejected():
    Q, K, V = inputs(1, 32, 32, 64, torch.float32)
    with pytest.raises(ValueError, match="one device"):
        FlashAttentionTriton.apply(Q, K.cpu(), V, False)
