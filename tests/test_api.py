"""The library's calls (fa2triton.attention, flash_attn_func) against SDPA, for every version: forward and gradients in
float64 terms, SDPA's layout with other strides, flash-attn's layout, a scale, and one clear error per bad input.

On a machine without a GPU the kernels run under Triton's interpreter (tests/conftest.py). This file imports fa2triton
alone (no lab), so that CI runs it against the package installed without -e, from outside the checkout.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fa2triton
from fa2triton import api, attention, compile_op, flash_attn_func, inputs, versions

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = [v.name for v in fa2triton.VERSIONS]
TOL = {torch.float32: 2e-3, torch.bfloat16: 3e-2}   # relative Frobenius error against float64 (TF32 on a GPU)
# a gradient penalty's: the kernel's O (TF32 on a GPU: 2.6-3.2e-3 natively on the H200) enters its first term
TOL_SECOND = 1e-2 if DEVICE == "cuda" else TOL[torch.float32]


def sdpa64(q, k, v, is_causal, scale=None):
    """SDPA in float64 on the CPU, the reference."""
    return F.scaled_dot_product_attention(*(t.detach().double().cpu() for t in (q, k, v)), is_causal=is_causal,
                                          scale=scale)


def rel(out, ref) -> float:
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    return float((out - ref).norm() / ref.norm())


def bhnd(B, H, N, D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, N, D, generator=g).to(dtype=dtype, device=DEVICE)


def test_the_package_carries_every_versions_kernels():
    """The registry's folders live inside the package (what `pip install .` installs), each with its kernel file and,
    for the tuned versions, its configs.json; VERSIONS is the registry."""
    package = Path(fa2triton.__file__).resolve().parent
    assert versions.KERNELS == package / "kernels" and fa2triton.VERSIONS is versions.VERSIONS
    for v in versions.VERSIONS:
        assert v.path.is_file(), v.path
    assert all((versions.KERNELS / n / "configs.json").is_file() for n in NAMES if n != "v0_baseline")
    assert (package / "backward_configs.json").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_forward_and_gradients_match_sdpa(name):
    """Every version by name: causal with N_q != N_k, its output and the three gradients through autograd."""
    q = bhnd(1, 2, 48, 32, seed=1).requires_grad_()
    k, v = (bhnd(1, 2, 64, 32, seed=s).requires_grad_() for s in (2, 3))
    out = attention(q, k, v, is_causal=True, version=name)
    assert out.shape == (1, 2, 48, 32) and out.dtype == q.dtype
    ref64 = (q, k, v)
    qd, kd, vd = (t.detach().double().cpu().requires_grad_() for t in ref64)
    ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    assert rel(out, ref.detach()) < TOL[torch.float32]
    dO = bhnd(1, 2, 48, 32, seed=4)
    grads = torch.autograd.grad(out, (q, k, v), dO)
    want = torch.autograd.grad(ref, (qd, kd, vd), dO.double().cpu())
    for g, w, what in zip(grads, want, "qkv"):
        assert rel(g, w) < TOL[torch.float32], f"{name}: d{what}"


@pytest.mark.parametrize("name,D", [("v7_hopper", 8), ("v7_hopper", 96), ("v5_final", 48)])
def test_a_head_dimension_the_kernels_do_not_tile_is_padded(name, D):
    """D below 128 and not 16, 32, 64 or 128: zero-padded to the next of those; the output, its gradients (each of
    the inputs' own shape) and a scale match SDPA, in both layouts."""
    q = bhnd(1, 2, 40, D, seed=11).requires_grad_()
    k, v = (bhnd(1, 2, 40, D, seed=s).requires_grad_() for s in (12, 13))
    out = attention(q, k, v, is_causal=True, version=name)
    assert out.shape == (1, 2, 40, D)
    qd, kd, vd = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    assert rel(out, ref.detach()) < TOL[torch.float32]
    dO = bhnd(1, 2, 40, D, seed=14)
    for g, w, what in zip(torch.autograd.grad(out, (q, k, v), dO),
                          torch.autograd.grad(ref, (qd, kd, vd), dO.double().cpu()), "qkv"):
        assert g.shape == w.shape and rel(g, w) < TOL[torch.float32], f"d{what}"
    with torch.no_grad():
        assert rel(attention(q, k, v, scale=0.3, version=name), sdpa64(q, k, v, False, 0.3)) < TOL[torch.float32]
        flash = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True, version=name)
        assert flash.shape == (1, 40, 2, D) and rel(flash.transpose(1, 2), ref.detach()) < TOL[torch.float32]


@pytest.mark.parametrize("name", ["v5_final", "v7_hopper"])
def test_other_strides_bf16_and_a_scale(name):
    """q, k, v as views of flash-attn's layout (the kernel gets them with rows 2 heads apart), bf16, non-causal, a
    scale other than 1/sqrt(D)."""
    q, k, v = (bhnd(1, 64, 2, 32, torch.bfloat16, seed=s).transpose(1, 2) for s in (5, 6, 7))   # (1, 2, 64, 32)
    assert not q.is_contiguous()
    assert rel(attention(q, k, v, version=name), sdpa64(q, k, v, False)) < TOL[torch.bfloat16]
    assert rel(attention(q, k, v, scale=0.3, version=name), sdpa64(q, k, v, False, 0.3)) < TOL[torch.bfloat16]


@pytest.mark.parametrize("name", ["v5_final", "v7_hopper"])
@pytest.mark.parametrize("B", [1, 2])
def test_keys_broadcast_over_heads(name, B):
    """k and v expanded over the heads (stride 0: grouped-query attention written with expand), bf16: with B = 1 the
    (B * H, N, D) view keeps the 0 stride (on sm_90 v7 then builds its TMA descriptors over it), with B = 2 it
    cannot merge B and H and copies. The output and dk, dv (autograd sums them over the heads) match SDPA's."""
    q = bhnd(B, 4, 64, 64, torch.bfloat16, seed=8)
    k, v = (bhnd(B, 1, 64, 64, torch.bfloat16, seed=s).requires_grad_() for s in (9, 10))
    ke, ve = k.expand(B, 4, 64, 64), v.expand(B, 4, 64, 64)
    assert ke.stride(1) == 0
    out = attention(q, ke, ve, is_causal=True, version=name)
    kd, vd = (t.detach().double().cpu().requires_grad_() for t in (k, v))
    ref = F.scaled_dot_product_attention(q.double().cpu(), kd.expand(B, 4, 64, 64), vd.expand(B, 4, 64, 64),
                                         is_causal=True)
    assert rel(out, ref.detach()) < TOL[torch.bfloat16]
    dO = bhnd(B, 4, 64, 64, torch.bfloat16, seed=11)
    for g, w, what in zip(torch.autograd.grad(out, (k, v), dO), torch.autograd.grad(ref, (kd, vd), dO.double().cpu()),
                          "kv"):
        assert rel(g, w) < TOL[torch.bfloat16], f"{name}: d{what}"


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_takes_flash_attns_layout(causal):
    q, k, v = (bhnd(2, 40, 3, 16, seed=s) for s in (8, 9, 10))   # (B, N, H, D)
    out = flash_attn_func(q, k, v, causal=causal, softmax_scale=0.2, version="v4_exp2")
    assert out.shape == q.shape
    ref = sdpa64(*(t.transpose(1, 2) for t in (q, k, v)), causal, 0.2).transpose(1, 2)
    assert rel(out, ref) < TOL[torch.float32]


class _Recorder:
    """Stands in for a version's FlashAttentionTriton: records what apply gets, returns zeros of Q's shape."""

    def __init__(self):
        self.args = None

    def apply(self, Q, K, V, causal):
        self.args = (Q, K, V, causal)
        return torch.zeros_like(Q)


def test_views_not_copies_where_the_strides_allow(monkeypatch):
    """SDPA's layout with B and H on one stride, and flash-attn's with B = 1, reach the kernel as views; flash-attn's
    with B > 1 cannot (B and H need one stride), so apply gets a copy there."""
    fake = _Recorder()
    monkeypatch.setitem(api._FUNCTIONS, "fake", fake)
    q = torch.randn(2, 3, 8, 16)
    attention(q, q, q, version="fake")
    assert all(t.data_ptr() == q.data_ptr() and t.shape == (6, 8, 16) for t in fake.args[:3])
    one = torch.randn(1, 8, 3, 16)
    flash_attn_func(one, one, one, version="fake")
    assert fake.args[0].data_ptr() == one.data_ptr() and fake.args[0].stride() == (16, 48, 1)
    two = torch.randn(2, 8, 3, 16)
    flash_attn_func(two, two, two, version="fake")
    assert fake.args[0].is_contiguous() and fake.args[0].data_ptr() != two.data_ptr()


@pytest.mark.parametrize("name", ["v6_longest_first", "v7_hopper"])
def test_without_a_gradient_the_lean_versions_take_the_4d_tensors(name, monkeypatch):
    """No gradient asked: attention() hands (B, H, N, D) to apply_heads (the lean path merges B and H without views
    on a repeat); with one asked it goes through apply on (B * H, N, D) views, as every other version does."""
    fn, got = api._function(name), []
    original = fn.apply_heads.__func__
    monkeypatch.setattr(fn, "apply_heads", classmethod(lambda c, *a: (got.append(a[1].shape), original(c, *a))[1]))
    q, k, v = (bhnd(1, 2, 32, 16, seed=s) for s in (11, 12, 13))
    out = attention(q, k, v, is_causal=True, version=name)
    assert got == [q.shape] and rel(out, sdpa64(q, k, v, True)) < TOL[torch.float32]
    attention(q.requires_grad_(), k, v, version=name)
    assert got == [q.shape, q.shape]   # asked, and it declined: the gradient needs autograd's path
    qs, ks, vs = (t.detach().transpose(1, 2) for t in (q, k, v))   # flash-attn's (B, N, H, D)
    out = flash_attn_func(qs, ks, vs, causal=True, version=name)
    assert got[-1] == q.shape and out.shape == qs.shape
    assert rel(out, sdpa64(q, k, v, True).transpose(1, 2)) < TOL[torch.float32]


def test_a_version_is_loaded_once():
    attention(*(bhnd(1, 1, 16, 16) for _ in range(3)), version="v0_baseline")
    assert api._FUNCTIONS["v0_baseline"] is versions.load("v0_baseline").FlashAttentionTriton


q4 = torch.randn(1, 2, 16, 32)


@pytest.mark.parametrize("call,message", [
    (lambda: attention(q4, q4, q4, version="v8"), r"unknown kernel version 'v8'; known: v0_baseline, .*v7_hopper"),
    (lambda: attention(q4[0], q4, q4), r"q must be a 4-D tensor \(batch, heads, sequence, head_dim\), got shape"),
    (lambda: attention([1], q4, q4), r"q must be a 4-D tensor .*got a list"),
    (lambda: attention(q4, torch.randn(1, 3, 16, 32), q4), r"q, k and v must share batch, heads and head dimension"),
    (lambda: attention(q4, q4, torch.randn(1, 2, 8, 32)), r"and k and v their length"),
    (lambda: flash_attn_func(q4, q4, torch.randn(1, 2, 8, 32)), r"\(batch, sequence, heads, head_dim\); got"),
    (lambda: flash_attn_func(q4, torch.randn(1, 3, 16, 32), torch.randn(1, 3, 16, 32), causal=True),
     r"causal with seqlen_q 2 != seqlen_k 3"),
    (lambda: attention(q4, q4, q4, scale=math.inf), r"scale must be a finite number, got inf"),
    (lambda: attention(q4.int(), q4.int(), q4.int()), r"Q has dtype torch.int32; supported: bfloat16, float16"),
    (lambda: attention(*(torch.randn(1, 2, 16, 192, device=DEVICE) for _ in range(3))),
     r"head dimension 192 cannot be tiled"),
    (lambda: attention(*(torch.empty(1, 2, 16, 32, device="meta") for _ in range(3))), r"on device 'meta'"),
])
def test_bad_input_gets_one_clear_error(call, message):
    with pytest.raises((ValueError, TypeError), match=message) as e:
        call()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("version", NAMES)
@pytest.mark.parametrize("n_q,n_k", [(0, 0), (16, 0), (0, 16)])
def test_a_zero_length_is_named_by_every_version(version, n_q, n_k):
    """A sequence of length 0 gets the kernels' own "empty input" line, also on the lean versions' 4-D path (whose
    views once merged B and H as -1, which torch cannot infer from 0 elements)."""
    q, k = (torch.randn(1, 2, n, 32, device=DEVICE) for n in (n_q, n_k))
    for call in (lambda: attention(q, k, k, version=version),
                 lambda: flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), version=version)):
        with pytest.raises(ValueError, match=r"^empty input: Q \(2, \d+, 32\), K \(2, \d+, 32\)$"):
            call()


@pytest.mark.parametrize("backend,name", [("eager", "v5_final"), ("aot_eager", "v5_final"), ("eager", "v7_hopper"),
                                          ("aot_eager", "v7_hopper"), ("inductor", "v7_hopper")])
def test_torch_compile_traces_both_calls_to_the_custom_ops(backend, name):
    """With fullgraph=True (no graph break allowed) the compiled model gives the eager output and gradients: both
    calls trace to fa2triton::attention_forward, whose registered backward runs the version's own (aot_eager
    compiles it with autograd). Dynamo traced into the lean path before, and failed in Triton's launcher."""
    import torch._dynamo

    window = (7, 0) if name == "v7_hopper" else (-1, -1)   # v7 with a sliding window, through the op too

    def model(q, k, v):
        o = attention(q * 2.0, k, v, is_causal=True, version=name)
        flash = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), window_size=window,
                                version=name)
        return (o + flash.transpose(1, 2)).sum(-1)

    torch._dynamo.reset()
    inputs = [bhnd(1, 2, 40, 32, seed=s).requires_grad_() for s in (12, 13, 14)]
    want = model(*inputs)
    want_grads = torch.autograd.grad(want.sum(), inputs)
    got = torch.compile(model, backend=backend, fullgraph=True)(*inputs)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(torch.autograd.grad(got.sum(), inputs), want_grads):
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def test_torch_compile_traces_a_padded_head_dimension():
    """D = 48 under torch.compile (fullgraph): the padding and the slice trace around the custom op, and give the
    eager output and gradients."""
    import torch._dynamo

    def model(q, k, v):
        flash = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)))
        return attention(q, k, v, is_causal=True) + flash.transpose(1, 2)

    torch._dynamo.reset()
    inputs = [bhnd(1, 2, 24, 48, seed=s).requires_grad_() for s in (15, 16, 17)]
    want = model(*inputs)
    got = torch.compile(model, backend="aot_eager", fullgraph=True)(*inputs)
    assert got.shape == (1, 2, 24, 48) and torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(torch.autograd.grad(got.sum(), inputs), torch.autograd.grad(want.sum(), inputs)):
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def test_the_custom_ops_pass_torch_s_opcheck():
    """torch.library.opcheck: the fake kernels' shapes, the autograd registration, no aliasing between outputs."""
    q, k, v = (bhnd(1, 3, 24, 16, seed=s).reshape(3, 24, 16).requires_grad_() for s in (33, 34, 35))
    for version in ("v5_final", "v7_hopper"):
        torch.library.opcheck(torch.ops.fa2triton.attention_forward.default, (q, k, v, True, 0, version))


def _math64(q, k, v, is_causal):
    """softmax(q k^T / sqrt(D)) v in float64 by plain torch ops (SDPA's CPU kernels have no second derivative)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [False, True])
def test_second_derivatives_match_the_float64_reference(name, causal):
    """A gradient penalty's double backward (create_graph=True): d/dq of |d(|o|^2)/dv|^2 + sum(o). Every version's
    backward then recomputes the forward as a graph; before, v0-v5 came out 38% off (their saved O and L were
    constants to autograd) and v6, v7 returned gradients without a graph."""
    def penalty(fn, q, k, v):
        o = fn(q, k, v)
        dv, = torch.autograd.grad((o * o).sum(), v, create_graph=True)
        return torch.autograd.grad((dv * dv).sum() + o.sum(), q)[0]

    inputs = [bhnd(1, 2, 32, 16, seed=s) for s in (15, 16, 17)]
    got = penalty(lambda q, k, v: attention(q, k, v, is_causal=causal, version=name),
                  *(t.clone().requires_grad_() for t in inputs))
    want = penalty(lambda q, k, v: _math64(q, k, v, causal), *(t.double().cpu().requires_grad_() for t in inputs))
    assert rel(got, want) < TOL_SECOND


@pytest.mark.parametrize("name", ["v5_final", "v7_hopper"])
def test_a_batch_past_the_grid_limit_runs_in_calls(monkeypatch, name):
    """With MAX_SLICES at 5 (CUDA's is 65535), batch * heads = 3 * 2 runs as calls of 2 batch elements, and so does
    flash-attn's layout: outputs and gradients are SDPA's. One call with more slices is refused by name."""
    from fa2triton import inputs

    monkeypatch.setattr(inputs, "MAX_SLICES", 5)
    q, k, v = (bhnd(3, 2, 24, 16, seed=s).requires_grad_() for s in (18, 19, 20))
    out = attention(q, k, v, is_causal=True, version=name)
    flash = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True, version=name).transpose(1, 2)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    dO = bhnd(3, 2, 24, 16, seed=21)
    want = torch.autograd.grad(ref, (qd, kd, vd), dO.double())
    for o in (out, flash):
        assert rel(o, ref.detach()) < TOL[torch.float32]
        for g, w in zip(torch.autograd.grad(o, (q, k, v), dO), want):
            assert rel(g, w) < TOL[torch.float32]
    with pytest.raises(ValueError, match=r"^6 \(batch \* heads\) slices: one call takes at most 5, a CUDA grid's"):
        versions.load(name).FlashAttentionTriton.apply(*(t.reshape(6, 24, 16) for t in (q, k, v)), True)
    with pytest.raises(ValueError, match=r"^6 heads: one batch element must have at most 5$"):
        attention(*(bhnd(1, 6, 8, 16) for _ in range(3)), version=name)


def test_attention_takes_sdpa_s_arguments_in_sdpa_s_order():
    """Names, order, defaults and keyword-only marks of SDPA's schema (aten's, the builtin has no Python signature),
    so that a call written for SDPA, positional or not, binds every argument to the same meaning."""
    import inspect

    ours = list(inspect.signature(attention).parameters.values())
    theirs = torch.ops.aten.scaled_dot_product_attention.default._schema.arguments
    assert [p.name for p in ours[:len(theirs)]] == [a.name for a in theirs]
    for p, a in zip(ours, theirs):
        assert (p.kind is inspect.Parameter.KEYWORD_ONLY) == a.kwarg_only, p.name
        if p.name in ("query", "key", "value"):
            assert p.default is inspect.Parameter.empty
        else:
            assert p.default == a.default_value, p.name
    assert [p.name for p in ours[len(theirs):]] == ["version"]
    q, k, v = (bhnd(1, 2, 24, 16, seed=s) for s in (22, 23, 24))
    assert torch.equal(attention(q, k, v, None, 0.0, True), attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("call,message", [
    (lambda: attention(q4, q4, q4, torch.ones(16, 16, dtype=torch.bool)), r"^attn_mask is not implemented"),
    (lambda: attention(q4, q4, q4, dropout_p=0.1), r"^dropout_p=0.1: dropout is not implemented; pass 0.0$"),
    (lambda: flash_attn_func(q4, q4, q4, dropout_p=0.1), r"^dropout_p=0.1: dropout is not implemented"),
    (lambda: attention(q4, torch.randn(1, 3, 16, 32), q4, enable_gqa=True),
     r"^grouped heads: k and v's 3 heads must divide q's 2$"),
])
def test_what_the_kernels_do_not_implement_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_flash_attn_func_takes_its_options_by_keyword_only():
    """flash-attn 2's fourth positional argument is dropout_p, 4's softmax_scale: neither binds here."""
    with pytest.raises(TypeError, match="positional argument"):
        flash_attn_func(q4, q4, q4, 0.0)


@pytest.mark.parametrize("name", ["v5_final", "v7_hopper"])
def test_grouped_heads_repeat_k_and_v_as_sdpa_does(name):
    """attention(enable_gqa=True) and flash_attn_func with fewer k, v heads: SDPA's enable_gqa output and gradients
    (k and v's gradients summed over their groups)."""
    q = bhnd(2, 6, 32, 16, seed=25).requires_grad_()
    k, v = (bhnd(2, 2, 40, 16, seed=s).requires_grad_() for s in (26, 27))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, enable_gqa=True)
    dO = bhnd(2, 6, 32, 16, seed=28)
    want = torch.autograd.grad(ref, (qd, kd, vd), dO.double())
    ours = attention(q, k, v, is_causal=True, enable_gqa=True, version=name)
    flash = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), version=name).transpose(1, 2)
    ref_nc = F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)
    for out, r, causal in ((ours, ref, True), (flash, ref_nc, False)):
        assert rel(out, r.detach()) < TOL[torch.float32], causal
        w = want if causal else torch.autograd.grad(ref_nc, (qd, kd, vd), dO.double())
        for g, wg, what in zip(torch.autograd.grad(out, (q, k, v), dO), w, "qkv"):
            assert rel(g, wg) < TOL[torch.float32], f"causal {causal}: d{what}"


@pytest.mark.parametrize("name", ["v6_longest_first", "v7_hopper"])
@pytest.mark.parametrize("window_size, causal", [((5, 0), False), ((5, -1), True), ((-1, 0), False), ([-1, -1], True)])
def test_a_sliding_window_is_flash_attn_s_band(name, window_size, causal):
    """flash-attn's window_size (left, right): query i sees keys i - left <= j <= i; (-1, 0) is the causal mask.
    Output and gradients against the float64 reference with that band (fa2triton.reference's window)."""
    from fa2triton.reference import attention as reference

    q, k, v = (bhnd(2, 40, 2, 16, seed=s).requires_grad_() for s in (29, 30, 31))   # (B, N, H, D)
    out = flash_attn_func(q, k, v, causal=causal, window_size=window_size, version=name)
    band = window_size[0] + 1 if window_size[0] >= 0 else None
    flat = [t.detach().double().transpose(1, 2).reshape(4, 40, 16).requires_grad_() for t in (q, k, v)]
    ref = reference(*flat, True, torch.float64, band)[0]
    dO = bhnd(2, 40, 2, 16, seed=32)
    want = torch.autograd.grad(ref, flat, dO.double().transpose(1, 2).reshape(4, 40, 16))
    assert rel(out.transpose(1, 2).reshape(4, 40, 16), ref.detach()) < TOL[torch.float32]
    for g, w in zip(torch.autograd.grad(out, (q, k, v), dO), want):
        assert rel(g.transpose(1, 2).reshape(4, 40, 16), w) < TOL[torch.float32]


@pytest.mark.parametrize("kwargs,message", [
    (dict(window_size=(5, 3)), r"^window_size=\(5, 3\) looks ahead: not implemented"),
    (dict(window_size=(5, 0), version="v5_final"), r"^v5_final has no sliding window; v6_longest_first and v7_hopper"),
    (dict(window_size=(-3, 0)), r"left must be -1 \(unbounded\) or at least 0"),
    (dict(window_size=5), r"^window_size must be two integers"),
])
def test_a_window_the_kernels_do_not_have_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        flash_attn_func(q4, q4, q4, **kwargs)


def test_cuda_autocast_runs_q_k_v_in_its_dtype(monkeypatch):
    """Under CUDA autocast SDPA runs in autocast's dtype, and so do attention() and flash_attn_func() (stood in for
    here: this CPU build cannot enable CUDA autocast, so the flag and dtype are patched and CUDA tensors faked by
    is_cuda); outside it the inputs keep their dtype."""
    seen = []

    class Recording(torch.autograd.Function):
        @staticmethod
        def forward(ctx, Q, K, V, is_causal):
            seen.append((Q.dtype, K.dtype, V.dtype))
            return torch.empty_like(Q)

    monkeypatch.setitem(api._FUNCTIONS, "recording", Recording)
    monkeypatch.setattr(api, "is_autocast_enabled", lambda: True)
    monkeypatch.setattr(torch, "get_autocast_dtype", lambda device: torch.bfloat16)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    q = torch.randn(1, 2, 8, 16)
    out = attention(q, q, q, version="recording")
    flash = flash_attn_func(q, q, q, version="recording")
    assert out.dtype == flash.dtype == torch.bfloat16 and seen == [(torch.bfloat16,) * 3] * 2
    monkeypatch.setattr(api, "is_autocast_enabled", lambda: False)
    assert attention(q, q, q, version="recording").dtype == torch.float32


def test_tensors_of_another_device_run_there(monkeypatch):
    """Triton launches on the current CUDA device: attention() and flash_attn_func() (eagerly and as the custom op)
    make the inputs' device current for the call and restore it; FlashAttentionTriton's own checks name the mismatch.
    Stood in for (one device here): the inputs claim cuda:1 by get_device, the current device is a variable."""
    current, seen = [0], []

    class Recording(torch.autograd.Function):
        @staticmethod
        def forward(ctx, Q, K, V, is_causal):
            seen.append(current[0])
            return torch.empty_like(Q)

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.before, current[0] = current[0], self.index

        def __exit__(self, *exc):
            current[0] = self.before

    monkeypatch.setitem(api._FUNCTIONS, "recording", Recording)
    monkeypatch.setattr(torch.Tensor, "get_device", lambda t: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "device", Device)
    q = torch.randn(1, 2, 8, 16, device=DEVICE)   # a CPU tensor is refused as such first under the kernels' checks
    attention(q, q, q, version="recording")
    flash_attn_func(q, q, q, version="recording")
    assert seen == [1, 1] and current == [0]
    with compile_op._on_device_of(q):
        assert current == [1]
    assert current == [0]
    with pytest.raises(ValueError, match=r"on cuda:1, not the current device cuda:0"):
        inputs.validate_qkv(q[0], q[0], q[0])
    current[0] = 1
    with compile_op._on_device_of(q):   # already current: nothing to switch
        assert current == [1]
    inputs.validate_qkv(q[0], q[0], q[0])
