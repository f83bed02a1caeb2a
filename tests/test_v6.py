"""v6_longest_first: launch orders, the sliding window, rows that see no key, the P-cast variants (issue 6)."""

import pytest
import torch

from fa2triton import versions
from fa2triton.interpret import autotuner_of, only_config, tile_candidates
from fa2triton.reference import attention, causal_keep, relative_error, saved_lse

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
v6 = versions.load("v6_longest_first")
FA = v6.FlashAttentionTriton
TUNER = autotuner_of(v6)


def tile_configs():
    """Every distinct tile pair of v6's candidates (the interpreter only sees the tiles)."""
    return tile_candidates(TUNER)


def run(Q, K, V, causal, window=None, cfg=None):
    """On a GPU the autotuner picks; under the interpreter (which cannot time) a named
    candidate, by default the first."""
    if cfg is None and ON_GPU:
        return FA.apply(Q, K, V, causal, window)
    cfg = cfg or tile_configs()[0]
    with only_config(TUNER, cfg):
        return FA.apply(Q, K, V, causal, window)


def inputs(B, n_q, n_k, D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, n, D, generator=g).to(DEVICE, dtype) for n in (n_q, n_k, n_k)]


# fp32 inputs: on a GPU tl.dot rounds them to TF32 (10-bit mantissa), which moves a score, and so L,
# by about 1e-3 at D = 64 (on the H200: 1.5318 against 1.5330, commit 260ca6e); the interpreter multiplies in full fp32.
# A wrong L (a missing ln 2, a dropped row maximum) is off by 0.1 or more, far beyond either bound.
L_ATOL = 1e-3 if DEVICE == "cpu" else 5e-3


CASES = [  # (n_q, n_k, D, window)
    (256, 256, 64, 1),
    (256, 256, 64, 37),
    (200, 200, 32, 64),
    (130, 77, 16, 20),    # more queries than keys: rows past 77 + 20 - 1 see nothing
    (96, 200, 64, 50),    # fewer queries than keys
    (100, 100, 64, 1000),  # a window wider than the sequence is plain causal
]


@pytest.mark.parametrize("cfg", tile_configs(), ids=lambda c: f"{c.kwargs['Q_TILE_SIZE']}x{c.kwargs['K_TILE_SIZE']}")
@pytest.mark.parametrize("n_q,n_k,D,window", CASES)
def test_window_matches_explicit_masked_reference(n_q, n_k, D, window, cfg):
    Q, K, V = inputs(1, n_q, n_k, D, seed=n_q + window)
    Q.requires_grad_(True)
    O = run(Q, K, V, True, window, cfg)
    ref_O, ref_L = attention(Q.detach().cpu(), K.cpu(), V.cpu(), True, window=window)
    assert torch.isfinite(O).all()
    assert relative_error(O.detach().cpu(), ref_O) < 3e-3
    L = saved_lse(O).detach().cpu().double()
    seen = torch.isfinite(ref_L)
    assert torch.equal(torch.isfinite(L), seen), "rows that see no key must have L = -inf, the others finite"
    assert torch.allclose(L[seen], ref_L[seen], atol=L_ATOL)


def test_rows_that_see_no_key_give_zero_output_and_minus_inf_lse():
    Q, K, V = inputs(2, 160, 48, 32, seed=5)
    Q.requires_grad_(True)
    O = run(Q, K, V, True, 8)
    blind = ~causal_keep(160, 48, window=8).any(dim=1)
    assert blind.sum() == 160 - (48 + 8 - 1)
    assert torch.equal(O.detach()[:, blind.to(O.device)], torch.zeros_like(O.detach()[:, blind.to(O.device)]))
    assert torch.isneginf(saved_lse(O).detach()[:, blind.to(O.device)]).all()


def test_tiles_outside_the_band_are_never_visited():
    # NaN in keys and values 0..95: a row whose tile visits those tiles becomes NaN even where
    # the mask hides them (0 * NaN), so finite rows prove the lower side of the band is skipped.
    cfg = next(c for c in TUNER.configs if c.kwargs["Q_TILE_SIZE"] >= 64 and c.kwargs["K_TILE_SIZE"] <= 32)
    q_tile = cfg.kwargs["Q_TILE_SIZE"]
    Q, K, V = inputs(1, 256, 256, 64, seed=7)
    ref, _ = attention(Q.cpu(), K.cpu(), V.cpu(), True, window=32)   # on clean keys: the reference sums them all
    K[:, :96] = float("nan")
    V[:, :96] = float("nan")
    O = run(Q, K, V, True, 32, cfg)
    last = slice(256 - q_tile, 256)   # its rows see keys >= 256 - q_tile - 31 > 96
    assert torch.isfinite(O[:, last]).all()
    assert relative_error(O[:, last].cpu(), ref[:, last]) < 3e-3
    assert torch.isnan(O[:, :64]).any()   # the poison is real: early tiles do see it


@pytest.mark.parametrize("order", ["longest_first", "reversed", "forward"])
def test_launch_orders_compute_the_same_thing(order, monkeypatch):
    Q, K, V = inputs(3, 192, 192, 64, torch.bfloat16, seed=11)
    monkeypatch.setattr(FA, "LAUNCH_ORDER", order)
    O = run(Q, K, V, True)
    ref, _ = attention(Q.cpu(), K.cpu(), V.cpu(), True)
    assert relative_error(O.cpu(), ref) < 1.5e-2


def test_gradients_with_a_window_match_float64_autograd():
    Q, K, V = inputs(1, 130, 77, 16, seed=3)
    for t in (Q, K, V):
        t.requires_grad_(True)
    dO = torch.randn(1, 130, 16, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    run(Q, K, V, True, 20).backward(dO)
    q, k, v = (t.detach().cpu().double().requires_grad_(True) for t in (Q, K, V))
    attention(q, k, v, True, window=20)[0].backward(dO.cpu().double())
    for got, want in ((Q.grad, q.grad), (K.grad, k.grad), (V.grad, v.grad)):
        assert relative_error(got.cpu(), want) < 5e-3


@pytest.mark.parametrize("causal,window", [(False, 16), (True, 0), (True, -3)])
def test_bad_window_is_a_clear_error(causal, window):
    Q, K, V = inputs(1, 32, 32, 64)
    with pytest.raises(ValueError, match="window_size"):
        FA.apply(Q, K, V, causal, window)


@pytest.mark.parametrize("p_cast,tol", [(0, 1.5e-2), (1, 1.5e-2), (2, 5e-3)])
def test_p_cast_variants_compute_attention(p_cast, tol, monkeypatch):
    Q, K, V = inputs(2, 160, 160, 64, torch.bfloat16, seed=13)
    monkeypatch.setattr(FA, "P_CAST", p_cast)
    O = run(Q, K, V, True)
    ref, _ = attention(Q.cpu(), K.cpu(), V.cpu(), True)
    assert relative_error(O.cpu(), ref) < tol


def test_p_cast_must_be_a_known_variant(monkeypatch):
    Q, K, V = inputs(1, 32, 32, 64)
    monkeypatch.setattr(FA, "P_CAST", 3)
    with pytest.raises(ValueError, match="P_CAST"):
        FA.apply(Q, K, V, True)
