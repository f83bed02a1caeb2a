"""The Triton FlashAttention-2 backward (fa2triton/flash_backward_triton.py, issue 7).

On a GPU the kernels run natively; without one they run on the CPU under Triton's
interpreter (TRITON_INTERPRET=1, set here before the kernel module is imported) with the
bf16 tl.dot fix of fa2triton.interpret. O and L come from the float64 reference
(fa2triton.reference.attention; L is natural log, float32, as every forward saves it), so these
tests isolate the backward; one test feeds it v4_exp2's Triton forward instead.

Each gradient is checked against two references, by ||grad - ref|| / ||ref||:
  - float64 autograd through fa2triton.reference.attention (the ground truth);
  - fa2triton.reference.backward_from_lse, the PyTorch recompute every version's backward uses today.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))   # the packages, uninstalled

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the kernel's import (@triton.jit reads it)

from fa2triton import backward_config as bc  # noqa: E402
from fa2triton import versions  # noqa: E402
from fa2triton import flash_backward_triton as fb  # noqa: E402
from fa2triton.backward_config import BackwardConfig  # noqa: E402
from fa2triton.flash_backward_kernels import _bwd_dkdv_kernel  # noqa: E402
from fa2triton.flash_backward_triton import flash_attention_backward  # noqa: E402
from fa2triton.interpret import patch_interpreter  # noqa: E402
from fa2triton.reference import attention, backward_from_lse, relative_error  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
if not ON_GPU:
    patch_interpreter()

# Bounds on ||grad - ref|| / ||ref||, per input dtype. Under the interpreter fp32 dots are
# exact fp32 products (measured ~4e-7); on a GPU they run in TF32 (10-bit mantissa), like the
# forward's. bf16 and fp16 cast P and dS to the input dtype before their dots, as
# FlashAttention-2 does, and return the gradients rounded to that dtype (measured over these
# cases: bf16 6.6e-3, fp16 3.2e-4; the PyTorch recompute itself is at 2.0e-3 and 2.3e-4).
REL_TOL = {
    torch.float32: 5e-3 if ON_GPU else 1e-4,
    torch.float16: 5e-3,
    torch.bfloat16: 2e-2,
}

# Tile configurations besides the default: the owned tile larger than the streamed one
# (as in the sm_90 default) and the reverse, with the smallest and a mid-sized tile.
KEY_WIDER = BackwardConfig(dkdv_q_tile=16, dkdv_k_tile=64, dq_q_tile=64, dq_k_tile=16, num_warps=4, num_stages=1)
QUERY_WIDER = BackwardConfig(dkdv_q_tile=64, dkdv_k_tile=16, dq_q_tile=16, dq_k_tile=64, num_warps=4, num_stages=1,
                             preprocess_q_tile=16)

# (id, N_q, N_k, D, dtype, causal, config); every case runs in both dq modes.
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
CASES = [
    ("square-128-d64-f32", 128, 128, 64, F32, False, None),
    ("square-128-d64-f32-causal", 128, 128, 64, F32, True, None),
    ("ragged-200x96-d32-f32", 200, 96, 32, F32, False, None),
    ("ragged-96x200-d32-f32", 96, 200, 32, F32, False, None),
    ("ragged-200x96-d32-f32-causal", 200, 96, 32, F32, True, None),
    ("ragged-96x200-d32-f32-causal", 96, 200, 32, F32, True, None),
    ("ragged-77x77-d16-f32-causal", 77, 77, 16, F32, True, None),
    ("ragged-130x70-d128-f32-causal", 130, 70, 128, F32, True, None),
    ("square-128-d64-bf16-causal", 128, 128, 64, BF16, True, None),
    ("ragged-200x96-d32-bf16", 200, 96, 32, BF16, False, None),
    ("ragged-96x200-d128-bf16-causal", 96, 200, 128, BF16, True, None),
    ("ragged-100x100-d16-bf16", 100, 100, 16, BF16, False, None),
    ("ragged-200x96-d64-f16-causal", 200, 96, 64, F16, True, None),
    ("keywider-200x96-d32-f32-causal", 200, 96, 32, F32, True, KEY_WIDER),
    ("keywider-96x200-d32-bf16-causal", 96, 200, 32, BF16, True, KEY_WIDER),
    ("querywider-200x96-d32-f32-causal", 200, 96, 32, F32, True, QUERY_WIDER),
    ("querywider-96x200-d64-f32", 96, 200, 64, F32, False, QUERY_WIDER),
    ("querywider-96x200-d32-bf16-causal", 96, 200, 32, BF16, True, QUERY_WIDER),
]


def make_inputs(B, N_q, N_k, D, dtype, causal, seed=0):
    """Q, K, V, dO in `dtype`; O (in `dtype`) and L (float32, natural log) from the float64 reference."""
    g = torch.Generator().manual_seed(seed)
    Q, K, V = (torch.randn(B, n, D, generator=g).to(DEVICE, dtype) for n in (N_q, N_k, N_k))
    dO = torch.randn(B, N_q, D, generator=g).to(DEVICE, dtype)
    O64, L64 = attention(Q, K, V, causal)
    return Q, K, V, O64.to(dtype), L64.float(), dO


def float64_grads(Q, K, V, dO, causal):
    q, k, v = (t.detach().double().requires_grad_() for t in (Q, K, V))
    O, _ = attention(q, k, v, causal)
    return torch.autograd.grad(O, (q, k, v), dO.double())


def check(grads, Q, K, V, O, L, dO, causal, tol, label=""):
    """Shapes and dtypes, then every gradient against both references."""
    for name, g, like in zip("QKV", grads, (Q, K, V)):
        assert g.shape == like.shape and g.dtype == like.dtype, f"d{name}: {g.shape} {g.dtype}"
    truth = float64_grads(Q, K, V, dO, causal)
    recompute = backward_from_lse(Q, K, V, O, L, dO, causal)
    for name, g, t, r in zip("QKV", grads, truth, recompute):
        e64, erc = relative_error(g, t), relative_error(g, r)
        assert e64 <= tol, f"{label} d{name}: relative error {e64:.2e} vs float64 > {tol:.0e}"
        assert erc <= tol, f"{label} d{name}: relative error {erc:.2e} vs backward_from_lse > {tol:.0e}"


@pytest.mark.parametrize("dq_mode", fb.DQ_CHOICES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_references(case, dq_mode):
    _, N_q, N_k, D, dtype, causal, cfg = case
    Q, K, V, O, L, dO = make_inputs(2, N_q, N_k, D, dtype, causal)
    grads = flash_attention_backward(Q, K, V, O, L, dO, causal, config=cfg, dq_mode=dq_mode)
    check(grads, Q, K, V, O, L, dO, causal, REL_TOL[dtype], label=f"{case[0]} {dq_mode}")
    if causal and N_q < N_k:
        # Keys no query sees (j >= N_q with the top-left mask) get exactly zero gradient:
        # their programs skip every query tile and still store.
        assert not grads[1][:, N_q:].any() and not grads[2][:, N_q:].any()


@pytest.mark.parametrize("case", [c for c in CASES if c[4] != torch.float32][:4], ids=lambda c: c[0])
def test_fused_mode_computes_what_the_separate_kernels_compute(case):
    """dq_mode="fused" runs the same dK/dV and dQ bodies in one launch, with Delta computed from O in
    each program instead of by the preprocessing kernel: the same gradients up to summation order."""
    _, N_q, N_k, D, dtype, causal, cfg = case
    Q, K, V, O, L, dO = make_inputs(2, N_q, N_k, D, dtype, causal)
    separate = flash_attention_backward(Q, K, V, O, L, dO, causal, config=cfg, dq_mode="separate")
    fused = flash_attention_backward(Q, K, V, O, L, dO, causal, config=cfg, dq_mode="fused")
    for name, a, b in zip("QKV", separate, fused):
        assert relative_error(b.float(), a.float()) < 1e-2, f"d{name}"


def test_non_contiguous_inputs_and_expanded_dO():
    """Strided views (B, N, D) of (N, B, D) buffers, and dO as autograd gives it for a sum (stride 0)."""
    B, N_q, N_k, D = 3, 70, 50, 32
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(n, B, D, generator=g).to(DEVICE).transpose(0, 1) for n in (N_q, N_k, N_k))
    dO = torch.randn(1, 1, D, generator=g).to(DEVICE).expand(B, N_q, D)
    O64, L64 = attention(Q, K, V, True)
    O, L = O64.float(), L64.float()
    assert not Q.is_contiguous() and dO.stride()[:2] == (0, 0)
    for mode in fb.DQ_MODES:
        grads = flash_attention_backward(Q, K, V, O, L, dO, True, dq_mode=mode)
        check(grads, Q, K, V, O, L, dO, True, REL_TOL[torch.float32], label=mode)


def test_with_v4_triton_forward():
    """What v6 will do: the Triton forward's saved O and L (log2 inside, natural log saved) feed
    the backward, whose gradients then match float64 and the version's own PyTorch backward."""
    from fa2triton import versions

    FlashAttentionTriton = versions.load("v4_exp2").FlashAttentionTriton
    B, N_q, N_k, D, causal = 2, 100, 80, 32, True
    g = torch.Generator().manual_seed(2)
    Q, K, V = (torch.randn(B, n, D, generator=g).to(DEVICE).requires_grad_() for n in (N_q, N_k, N_k))
    dO = torch.randn(B, N_q, D, generator=g).to(DEVICE)
    O = FlashAttentionTriton.apply(Q, K, V, causal)
    O_saved, L = (t.detach() for t in O.grad_fn.saved_tensors[3:])
    grads = flash_attention_backward(Q.detach(), K.detach(), V.detach(), O_saved, L, dO, causal)
    check(grads, Q.detach(), K.detach(), V.detach(), O_saved, L, dO, causal, REL_TOL[torch.float32])
    theirs = torch.autograd.grad(O, (Q, K, V), dO)
    for ours, ref in zip(grads, theirs):
        assert relative_error(ours, ref) <= REL_TOL[torch.float32]


def test_default_config_by_architecture(monkeypatch):
    monkeypatch.setattr(bc, "PICKED", {})   # the built-in defaults, whatever a sweep picked
    assert bc.default_config(64, torch.bfloat16, "sm_90") == bc.SM90_DEFAULT
    assert bc.default_config(128, torch.bfloat16, "sm_90") == bc.SM90_DEFAULT
    assert bc.default_config(64, torch.float32, "sm_90a") == bc.SM90_DEFAULT
    assert bc.default_config(128, torch.float32, "sm_90") == bc.SM90_FP32_D128
    assert bc.default_config(64, torch.bfloat16, "sm_100") == bc.SM90_DEFAULT
    assert bc.default_config(64, torch.bfloat16, "sm_89") == bc.SM80_DEFAULT
    assert bc.default_config(64, torch.bfloat16, "sm_75") == bc.FALLBACK
    assert BackwardConfig.parse("32,128,128,32,8,3") == bc.SM90_DEFAULT
    for cfg in (bc.SM90_DEFAULT, bc.SM90_FP32_D128, bc.SM80_DEFAULT, bc.FALLBACK):
        cfg.validate()


def test_a_picked_configuration_applies_where_the_sweep_measured_it(tmp_path, monkeypatch):
    """The sweep's pick (bf16, D = 64) becomes the default for 16-bit inputs with D <= 64 on its
    architecture; fp32, larger heads and other GPUs keep the built-in defaults."""
    picks = tmp_path / "backward_configs.json"
    picks.write_text('{"arches": {"sm_90": {"config": [64, 128, 128, 64, 8, 2], "dq_mode": "separate"}}}')
    monkeypatch.setattr(bc, "PICKED", bc._load_picks(picks))
    chosen = BackwardConfig(64, 128, 128, 64, num_warps=8, num_stages=2)
    assert bc.default_config(64, torch.bfloat16, "sm_90a") == chosen
    assert bc.default_config(32, torch.float16, "sm_90") == chosen
    assert bc.default_config(64, torch.bfloat16, None) == chosen          # the interpreter runs the sm_90 choice
    assert bc.default_config(128, torch.bfloat16, "sm_90") == bc.SM90_DEFAULT
    assert bc.default_config(64, torch.float32, "sm_90") == bc.SM90_DEFAULT
    assert bc.default_config(64, torch.bfloat16, "sm_89") == bc.SM80_DEFAULT
    assert bc._load_picks(tmp_path / "absent.json") == {}


def _ok_inputs():
    return make_inputs(1, 20, 20, 16, torch.float32, False)


@pytest.mark.parametrize("mutate, error, match", [
    (lambda a: a.update(L=a["L"].double()), TypeError, "L must be float32"),
    (lambda a: a.update(dO=a["dO"].half()), TypeError, "dO has dtype torch.float16 but Q, K, V are torch.float32"),
    (lambda a: a.update(O=a["O"].to(torch.int32)), TypeError, "O has dtype torch.int32"),
    (lambda a: a.update(Q=a["Q"].half()), TypeError, "Q, K and V must share one dtype"),
    (lambda a: a.update(O=a["O"][:, :10]), ValueError, r"O must have Q's shape \(1, 20, 16\)"),
    (lambda a: a.update(dO=a["dO"][0]), ValueError, "dO must have Q's shape"),
    (lambda a: a.update(V=a["V"][:, :10]), ValueError, "K and V must have the same length"),
    (lambda a: a.update(L=a["L"][:, :10]), ValueError, r"L must have shape \(batch, N_q\) = \(1, 20\)"),
    (lambda a: a.update(L=a["L"][..., None]), ValueError, "L must have shape"),
    (lambda a: a.update(L=None), TypeError, "L must be a torch.Tensor"),
    (lambda a: a.update(Q=a["Q"][..., :8], O=a["O"][..., :8], dO=a["dO"][..., :8]), ValueError,
     "head dimensions differ"),
])
def test_bad_inputs_raise_clear_errors(mutate, error, match):
    Q, K, V, O, L, dO = _ok_inputs()
    args = dict(Q=Q, K=K, V=V, O=O, L=L, dO=dO)
    mutate(args)
    with pytest.raises(error, match=match):
        flash_attention_backward(**args, is_causal=False)


@pytest.mark.parametrize("dq_mode", fb.DQ_MODES)
@pytest.mark.parametrize("cfg", [None, KEY_WIDER, QUERY_WIDER], ids=["default", "key-wider", "query-wider"])
@pytest.mark.parametrize("n_q,n_k,window", [(130, 130, 5), (130, 130, 33), (100, 60, 20), (60, 100, 70)])
def test_a_sliding_window_s_gradients_match_the_band_s(dq_mode, cfg, n_q, n_k, window):
    """The kernels' causal band (query i sees keys i - window < j <= i): tiles outside it skipped, its far edge
    masked, against float64 autograd through the reference with that band; narrower and wider than the tiles,
    rows past n_k + window - 1 seeing nothing (100 x 60)."""
    Q, K, V, dO = (torch.randn(2, n, 32, generator=torch.Generator().manual_seed(n + i)).to(DEVICE)
                   for i, n in enumerate((n_q, n_k, n_k, n_q)))
    O, L = attention(Q, K, V, True, torch.float32, window)
    grads = flash_attention_backward(Q, K, V, O, L, dO, True, config=cfg, dq_mode=dq_mode, window=window)
    q, k, v = (t.detach().cpu().double().requires_grad_() for t in (Q, K, V))
    want = torch.autograd.grad(attention(q, k, v, True, window=window)[0], (q, k, v), dO.cpu().double())
    for name, g, w in zip("QKV", grads, want):
        assert relative_error(g.cpu(), w) < REL_TOL[torch.float32], f"d{name}"


@pytest.mark.parametrize("kwargs,match", [(dict(window=4), "a sliding window is a causal band"),
                                          (dict(window=4, is_causal=True, dkdv="gluon"), "has no sliding window"),
                                          (dict(window=-2, is_causal=True), "integer window >= 1")])
def test_a_window_the_backward_cannot_run_is_named(kwargs, match):
    Q, K, V, O, L, dO = _ok_inputs()
    causal = kwargs.pop("is_causal", False)
    with pytest.raises(ValueError, match=match):
        flash_attention_backward(Q, K, V, O, L, dO, causal, **kwargs)


def test_bad_options_raise_clear_errors():
    Q, K, V, O, L, dO = _ok_inputs()
    with pytest.raises(ValueError, match="dq_mode must be one of auto, deterministic, separate, atomic, fused"):
        flash_attention_backward(Q, K, V, O, L, dO, False, dq_mode="fast")
    with pytest.raises(ValueError, match="dkdv_k_tile must be a power of two >= 16"):
        flash_attention_backward(Q, K, V, O, L, dO, False, config=BackwardConfig(dkdv_k_tile=24))
    with pytest.raises(ValueError, match="num_stages must be >= 1"):
        flash_attention_backward(Q, K, V, O, L, dO, False, config=BackwardConfig(num_stages=0))
    with pytest.raises(TypeError, match="config must be a BackwardConfig"):
        flash_attention_backward(Q, K, V, O, L, dO, False, config=(32, 128, 128, 32, 4, 3))
    with pytest.raises(ValueError, match="backward configuration is"):
        BackwardConfig.parse("32,128,4")


def test_dkdv_option_errors_name_the_problem():
    Q, K, V, O, L, dO = _ok_inputs()
    with pytest.raises(ValueError, match="dkdv must be one of triton, gluon, auto, got 'fast'"):
        flash_attention_backward(Q, K, V, O, L, dO, False, dkdv="fast")
    with pytest.raises(ValueError, match="dkdv='gluon' .* needs dq_mode 'separate' or 'atomic', not 'fused'"):
        flash_attention_backward(Q, K, V, O, L, dO, False, dq_mode="fused", dkdv="gluon")
    with pytest.raises(ValueError, match="dkdv='gluon': q has dtype torch.float32; the Gluon dK/dV kernel takes"):
        flash_attention_backward(Q, K, V, O, L, dO, False, dkdv="gluon")


def test_dkdv_auto_runs_the_triton_kernel_where_the_gluon_one_cannot():
    """D = 32 is not one of the Gluon kernel's head dimensions: "auto" launches exactly what "triton" does."""
    Q, K, V, O, L, dO = make_inputs(2, 48, 80, 32, BF16, True)
    auto = flash_attention_backward(Q, K, V, O, L, dO, True, dkdv="auto")
    plain = flash_attention_backward(Q, K, V, O, L, dO, True, dkdv="triton")
    assert all(torch.equal(a, b) for a, b in zip(auto, plain))
    assert not any(getattr(launch, "gluon_dkdv", False) for launch in fb.LAUNCHES.entries.values())


def test_backward_bench_help_runs_without_a_gpu():
    out = subprocess.run([sys.executable, str(REPO / "harness" / "bench_flashattention_backward.py"), "--help"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "backward" in out.stdout and "--dq-mode" in out.stdout


# --- the lean host path (issues 7 and 8): a repeat skips checks, configuration choice and binding

def test_backward_signature_separates_what_selects_the_kernels(monkeypatch):
    """The cache key must change with everything that changes the launch (a wrong hit would
    silently run another kernel), and refuse what only the checked path may see."""
    monkeypatch.setattr(fb, "aligned_cuda", lambda *t: True)   # CPU tensors stand in for GPU ones
    Q, K, V, O, L, dO = _ok_inputs()
    base = fb.backward_signature(Q, K, V, O, L, dO, False, None, "separate", False)
    assert base == fb.backward_signature(Q.clone(), K.clone(), V, O, L, dO, False, None, "separate", False)
    others = [
        fb.backward_signature(Q, K, V, O, L, dO, True, None, "separate", False),
        fb.backward_signature(Q, K, V, O, L, dO, False, KEY_WIDER, "separate", False),
        fb.backward_signature(Q, K, V, O, L, dO, False, None, "atomic", False),
        fb.backward_signature(Q, K, V, O, L, dO, False, None, "separate", True),
        fb.backward_signature(Q.double(), K, V, O, L, dO, False, None, "separate", False),
        fb.backward_signature(Q, K[:, :10], V[:, :10], O, L, dO, False, None, "separate", False),
        fb.backward_signature(Q, K, V, O, L, dO.transpose(1, 2).contiguous().transpose(1, 2), False, None,
                              "separate", False),
    ]
    assert all(k is not None and k != base for k in others)
    assert len(set(others)) == len(others)
    # Unhashable or wrong options go to the checked path, which names the problem.
    assert fb.backward_signature(Q, K, V, O, L, dO, False, (32, 128), "separate", False) is None
    assert fb.backward_signature(Q, K, V, O, L, dO, False, None, ["atomic"], False) is None
    monkeypatch.undo()
    cpu = [t.cpu() for t in (Q, K, V, O, L, dO)]
    assert fb.backward_signature(*cpu, False, None, "separate", False) is None   # CPU tensors: the checked path


def test_backward_second_call_skips_the_checked_path(monkeypatch):
    """Two calls with one signature: the first takes the checked path and records its launch, the
    second replays it; a call with another mask is another signature."""
    monkeypatch.setattr(fb, "aligned_cuda", lambda *t: True)
    replays, checked = [], []

    def fake_checked(Q, K, V, O, L, dO, causal, config, dq_mode, strict, dkdv="triton", window=0):
        checked.append(causal)
        return Q * 0, K * 0, V * 0, lambda *a: (replays.append(1), (Q * 1, K * 1, V * 1))[1]

    monkeypatch.setattr(fb, "_checked_backward", fake_checked)
    monkeypatch.setattr(fb, "LAUNCHES", fb.LaunchCache())
    Q, K, V, O, L, dO = _ok_inputs()
    first = flash_attention_backward(Q, K, V, O, L, dO, False)
    second = flash_attention_backward(Q, K, V, O, L, dO, False)
    flash_attention_backward(Q, K, V, O, L, dO, True)
    assert checked == [False, True] and replays == [1]
    assert torch.equal(first[0], Q * 0) and torch.equal(second[0], Q)
    assert fb.LAUNCHES.stats == {"slow": 2, "fast": 1}


def test_interpreter_records_a_repeat_but_a_cpu_call_is_never_cached(monkeypatch):
    """Under the interpreter the checked path records an Interpreted repeat (so the repeat path is testable on the
    CPU), but a CPU tensor has no cache key: every call still takes the checked path (and its checks)."""
    if ON_GPU:
        pytest.skip("the interpreter's behaviour")
    monkeypatch.setattr(fb, "LAUNCHES", fb.LaunchCache())
    Q, K, V, O, L, dO = _ok_inputs()
    assert isinstance(fb._checked_backward(Q, K, V, O, L, dO, False, None, "separate", False)[-1], fb.BackwardLaunch)
    for _ in range(2):
        flash_attention_backward(Q, K, V, O, L, dO, False)
    assert fb.LAUNCHES.stats == {"slow": 2} and not fb.LAUNCHES.entries


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: the cached launch replays real binaries")
@pytest.mark.parametrize("dq_mode", fb.DQ_MODES)
def test_backward_replay_matches_the_checked_path(monkeypatch, dq_mode):
    Q, K, V, O, L, dO = make_inputs(4, 320, 320, 64, BF16, True)
    monkeypatch.setattr(fb, "LAUNCHES", fb.LaunchCache())
    first = flash_attention_backward(Q, K, V, O, L, dO, True, dq_mode=dq_mode)
    runs = []
    original = type(_bwd_dkdv_kernel).run
    monkeypatch.setattr(type(_bwd_dkdv_kernel), "run",
                        lambda self, *a, **kw: (runs.append(1), original(self, *a, **kw))[1])
    second = flash_attention_backward(Q, K, V, O, L, dO, True, dq_mode=dq_mode)
    assert runs == [], "the repeat went through Triton's argument binding"
    assert fb.LAUNCHES.stats == {"slow": 1, "fast": 1}
    for a, b in zip(first, second):
        if dq_mode == "separate":
            assert torch.equal(a, b)
        else:   # atomics add in a varying order
            assert relative_error(b, a) < 1e-2


# --- dq_mode="auto" and autograd's entry (backward_after_forward)

def test_auto_mode_fuses_exactly_the_problems_up_to_the_threshold():
    """On the H200's 132 SMs the harness shapes (B*H = 32, D = 64) split at N = 1024 non-causal and
    N = 1024 causal (fused) against N = 2048 either way (separate); the rule scales with the SMs."""
    sms = 132
    assert [fb.auto_dq_mode(32, n, n, 64, False, sms) for n in (512, 1024, 2048, 4096)] == \
        ["fused", "fused", "separate", "separate"]
    assert [fb.auto_dq_mode(32, n, n, 64, True, sms) for n in (512, 1024, 2048, 4096)] == \
        ["fused", "fused", "separate", "separate"]
    assert fb.auto_dq_mode(32, 1024, 1024, 128, False, sms) == "separate"   # twice the work per pair
    assert fb.auto_dq_mode(32, 2048, 2048, 64, False, 4 * sms) == "fused"   # four times the SMs
    limit = fb.AUTO_FUSED_MAX_WORK_PER_SM
    assert fb.auto_dq_mode(1, limit // 64, 1, 64, False, 1) == "fused"
    assert fb.auto_dq_mode(1, limit // 64 + 1, 1, 64, False, 1) == "separate"


@pytest.mark.parametrize("limit, expect", [(2 ** 40, "fused"), (0, "separate")])
def test_auto_mode_launches_what_auto_dq_mode_says(monkeypatch, limit, expect):
    """dq_mode="auto" resolves in the checked path and then runs that mode's kernels: spied here."""
    monkeypatch.setattr(fb, "AUTO_FUSED_MAX_WORK_PER_SM", limit)
    monkeypatch.setattr(fb, "LAUNCHES", fb.LaunchCache())
    ran = []
    real = fb._checked_fused
    monkeypatch.setattr(fb, "_checked_fused", lambda *a: (ran.append("fused"), real(*a))[1])
    Q, K, V, O, L, dO = make_inputs(2, 48, 80, 32, BF16, True)
    grads = flash_attention_backward(Q, K, V, O, L, dO, True, dq_mode="auto")
    assert ran == (["fused"] if expect == "fused" else [])
    check(grads, Q, K, V, O, L, dO, True, REL_TOL[BF16], label=f"auto -> {expect}")


@pytest.fixture
def deterministic():
    """torch.use_deterministic_algorithms as the test sets it (deterministic(on, warn_only)), restored after."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    yield lambda on, warn_only=False: torch.use_deterministic_algorithms(on, warn_only=warn_only)
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_torch_determinism_makes_auto_deterministic_and_refuses_atomic(deterministic):
    deterministic(False)
    assert [fb.torch_determinism(m) for m in fb.DQ_CHOICES] == list(fb.DQ_CHOICES)
    deterministic(True)
    assert fb.torch_determinism("auto") == "deterministic"
    assert [fb.torch_determinism(m) for m in ("deterministic", "separate", "fused")] == ["deterministic", "separate",
                                                                                      "fused"]
    with pytest.raises(RuntimeError, match=r"^dq_mode 'atomic' adds dQ's partials in no fixed order, .* pass dq_mode "
                                           r"'deterministic' or 'separate'$"):
        fb.torch_determinism("atomic")
    deterministic(True, warn_only=True)
    with pytest.warns(UserWarning, match="no fixed order"):
        assert fb.torch_determinism("atomic") == "atomic"


@pytest.mark.parametrize("dq_mode, torch_on, ws_asked", [("auto", False, True), ("deterministic", False, False),
                                                         ("auto", True, False)])
def test_the_deterministic_mode_never_asks_for_the_ws_kernel(monkeypatch, deterministic, dq_mode, torch_on, ws_asked):
    """Where the warp-specialized kernel would take the inputs (spied: it can here), "auto" offers it to auto_dq_mode
    and "deterministic" does not, nor "auto" under torch.use_deterministic_algorithms(True); the mode then runs."""
    deterministic(torch_on)
    monkeypatch.setattr(fb, "LAUNCHES", fb.LaunchCache())
    monkeypatch.setattr(fb, "_ws_takes", lambda *a: True)
    offered = []
    real = fb.auto_dq_mode
    monkeypatch.setattr(fb, "auto_dq_mode", lambda *a, gluon_ws=False: (offered.append(gluon_ws), real(*a))[1])
    Q, K, V, O, L, dO = make_inputs(2, 48, 80, 32, BF16, True)
    grads = flash_attention_backward(Q, K, V, O, L, dO, True, dq_mode=dq_mode)
    assert offered == [ws_asked]
    check(grads, Q, K, V, O, L, dO, True, REL_TOL[BF16], label=f"{dq_mode}, torch deterministic {torch_on}")


@pytest.mark.parametrize("version", ["v6_longest_first", "v7_hopper"])
def test_autograd_follows_torch_determinism(monkeypatch, deterministic, version):
    """v6's and v7's autograd backward ask the setting on every call, repeats included: "auto" runs as
    "deterministic" while it is on, and a version set to "atomic" raises torch's kind of error."""
    FA = versions.load(version).FlashAttentionTriton
    seen = []
    real = fb.forward_keyed_signature
    monkeypatch.setattr(fb, "forward_keyed_signature",
                        lambda f, dO, c, cfg, mode, *a: (seen.append(mode), real(f, dO, c, cfg, mode, *a))[1])
    Q, K, V = (torch.randn(2, 48, 32, dtype=BF16, device=DEVICE, requires_grad=True) for _ in range(3))
    for on in (False, True, True, False):
        deterministic(on)
        torch.autograd.grad(FA.apply(Q, K, V, True), (Q, K, V), torch.ones(2, 48, 32, dtype=BF16, device=DEVICE))
    assert seen == ["auto", "deterministic", "deterministic", "auto"]
    monkeypatch.setattr(FA, "BACKWARD_DQ_MODE", "atomic")
    deterministic(True)
    with pytest.raises(RuntimeError, match="no fixed order"):
        torch.autograd.grad(FA.apply(Q, K, V, True), (Q, K, V), torch.ones(2, 48, 32, dtype=BF16, device=DEVICE))


def test_forward_keyed_signature_covers_do_and_the_options():
    """The forward's recorded launch stands for Q, K, V, O, L, and autograd's engine for dO's shape, dtype and
    device; dO's layout and every option that selects the launch must be in the key."""
    Q, K, V, O, L, dO = _ok_inputs()
    fwd, other = object(), object()   # two forwards' recorded launches (any object: the key holds its identity)
    assert fb.forward_keyed_signature(None, dO, False, None, "auto") is None        # the forward recorded none
    assert fb.forward_keyed_signature(fwd, dO.transpose(1, 2), False, None, "auto") is None   # a strided last dim
    shifted = torch.empty(dO.numel() + 1, dtype=dO.dtype, device=dO.device)[1:].view(dO.shape)
    assert fb.forward_keyed_signature(fwd, shifted, False, None, "auto") is None   # not 16-byte aligned
    base = fb.forward_keyed_signature(fwd, dO, False, None, "auto")
    others = [
        fb.forward_keyed_signature(fwd, dO, False, None, "auto", all_grads=True),
        fb.forward_keyed_signature(other, dO, False, None, "auto"),
        fb.forward_keyed_signature(fwd, torch.empty(*dO.shape[:-1], 2 * dO.shape[-1], dtype=dO.dtype,
                                                    device=dO.device)[..., :dO.shape[-1]], False, None, "auto"),
        fb.forward_keyed_signature(fwd, dO, True, None, "auto"),
        fb.forward_keyed_signature(fwd, dO, False, KEY_WIDER, "auto"),
        fb.forward_keyed_signature(fwd, dO, False, None, "separate"),
        fb.forward_keyed_signature(fwd, dO, False, None, "auto", dkdv="gluon"),
    ]
    assert base is not None and all(k is not None and k != base for k in others)
    assert len(set(others)) == len(others)
    assert fb.forward_keyed_signature(fwd, dO.clone(), False, None, "auto") == base   # the layout, not the tensor
    unhashable = [1]   # a forward launch need not hash (dataclasses with eq do not): its id enters the key
    assert hash(fb.forward_keyed_signature(unhashable, dO, False, None, "auto"))


def test_backward_after_forward_replays_by_the_forward_key(monkeypatch):
    """With the forward's recorded launch the second call replays; without one (the forward recorded none) the checked
    path runs every time, as a direct call's own signature would give none either."""
    calls = []

    def fake_checked(Q, K, V, O, L, dO, causal, config, dq_mode, strict, stack_grads=False, dkdv="triton", window=0):
        calls.append(dq_mode)
        return Q * 0, K * 0, V * 0, lambda *a: (calls.append("replay"), (Q * 1, K * 1, V * 1))[1]

    monkeypatch.setattr(fb, "_checked_backward", fake_checked)
    monkeypatch.setattr(fb, "LAUNCHES", fb.LaunchCache())
    Q, K, V, O, L, dO = (t.cpu() for t in _ok_inputs())   # CPU tensors: no signature, on a GPU machine too
    fb.backward_after_forward(None, Q, K, V, O, L, dO, False)
    fb.backward_after_forward(None, Q, K, V, O, L, dO, False)
    assert calls == ["auto", "auto"]
    fwd = object()   # a forward's recorded launch
    fb.backward_after_forward(fwd, Q, K, V, O, L, dO, False)
    second = fb.backward_after_forward(fwd, Q, K, V, O, L, dO, False)
    assert calls == ["auto", "auto", "auto", "replay"] and torch.equal(second[0], Q)
    assert all(launch.forward is fwd for launch in fb.LAUNCHES.entries.values())   # keeps the keyed id alive


@pytest.mark.parametrize("version", ["v6_longest_first", "v7_hopper"])
@pytest.mark.parametrize("dq_mode", fb.DQ_CHOICES)
def test_autograd_backward_is_the_direct_call_in_every_mode(monkeypatch, version, dq_mode):
    """A version's autograd backward, with BACKWARD_DQ_MODE set to each choice, gives the gradients the
    backward module gives when called directly on the forward's own O and L (same kernels: equal up to
    the atomics' order), and a second backward with the same shapes is a replay on a GPU."""
    from fa2triton import versions
    from fa2triton.interpret import autotuner_of, tile_candidates
    from fa2triton.reference import saved_lse

    module = versions.load(version)
    FA = module.FlashAttentionTriton
    tuner = autotuner_of(module)
    if tuner is not None and not ON_GPU:   # the interpreter cannot time the autotuner's candidates
        monkeypatch.setattr(tuner, "configs", tile_candidates(tuner)[:1])
        monkeypatch.setattr(tuner, "cache", {})
    bk = fb   # the module the versions use
    monkeypatch.setattr(FA, "BACKWARD_DQ_MODE", dq_mode)
    monkeypatch.setattr(bk, "LAUNCHES", bk.LaunchCache())
    Q, K, V, _, _, dO = make_inputs(2, 64, 64, 32, BF16, True)
    Q, K, V = (t.detach().requires_grad_() for t in (Q, K, V))
    O = FA.apply(Q, K, V, True)
    got = torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True)
    direct = bk.flash_attention_backward(Q.detach(), K.detach(), V.detach(), O.detach(), saved_lse(O), dO, True,
                                         dq_mode=dq_mode, dkdv=getattr(FA, "BACKWARD_DKDV", "triton"))
    for name, a, b in zip("QKV", got, direct):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert relative_error(a.float(), b.float()) < (1e-2 if dq_mode == "atomic" else 1e-6), f"d{name}"
    again = torch.autograd.grad(O, (Q, K, V), dO)   # a repeat on a GPU (ints for addresses, the stream read once)
    assert bk.LAUNCHES.stats["fast"] == (1 if ON_GPU else 0)
    for name, a, b in zip("QKV", got, again):
        assert a.dtype == b.dtype and relative_error(a.float(), b.float()) < (1e-2 if dq_mode == "atomic" else 1e-6)


def test_gradient_buffers_stack_only_what_stays_aligned():
    """One allocation split into dQ, dK, dV (self-attention), or into dK, dV: contiguous views, each
    slice 16-byte aligned like a fresh allocation (a recorded launch assumes it), no two overlapping."""
    Q, K = torch.empty(2, 64, 32, dtype=BF16), torch.empty(2, 48, 32, dtype=BF16)
    assert fb.gradient_stack(Q, Q) == 3 and fb.gradient_stack(Q, K) == 2
    assert fb.gradient_stack(Q, torch.empty(1, 3, 3, dtype=BF16)) == 0   # 18 bytes per slice
    assert fb.gradient_stack(Q, Q, allowed=False) == 0                    # not every gradient wanted
    for q, k in ((Q, Q), (Q, K), (Q, torch.empty(1, 3, 3, dtype=BF16))):
        stack = fb.gradient_stack(q, k)
        dQ, dK, dV = fb.gradient_buffers(q, k, stack)
        assert dQ.shape == q.shape and dK.shape == dV.shape == k.shape
        assert dQ.dtype == q.dtype and dK.dtype == dV.dtype == k.dtype
        assert all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (dQ, dK, dV)) or stack == 0
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in (dQ, dK, dV))
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "gradients overlap"
        shared = len({t.untyped_storage().data_ptr() for t in (dQ, dK, dV)})
        assert shared == {3: 1, 2: 2, 0: 3}[stack]


@pytest.mark.parametrize("dtype", [BF16, torch.float32])
@pytest.mark.parametrize("atomic", [False, True])
def test_backward_buffers_one_scratch_block_for_the_accumulator_and_delta(dtype, atomic):
    """Atomic dQ in a 16-bit dtype: the fp32 accumulator (contiguous, offset 0) and Delta share one allocation,
    Delta 16-byte aligned after it; in fp32 the accumulator is dQ itself; without atomics it is dQ, and Delta has
    its own allocation. Shapes whose B * N_q * D is not a multiple of 4 floats still align Delta."""
    for B, N, D in ((2, 40, 16), (1, 3, 5)):
        Q = torch.empty(B, N, D, dtype=dtype)
        dQ, dK, dV, acc, Delta = fb.backward_buffers(Q, Q, fb.gradient_stack(Q, Q), atomic)
        assert Delta.shape == (B, N) and Delta.dtype == torch.float32 and Delta.is_contiguous()
        assert Delta.data_ptr() % 16 == 0 and dQ.dtype == dtype
        if atomic and dtype != torch.float32:
            assert acc is not dQ and acc.dtype == torch.float32 and acc.shape == Q.shape and acc.is_contiguous()
            assert acc.untyped_storage().data_ptr() == Delta.untyped_storage().data_ptr() == acc.data_ptr()
            assert Delta.data_ptr() >= acc.data_ptr() + acc.numel() * 4, "Delta overlaps the accumulator"
        else:
            assert acc is dQ and Delta.untyped_storage().data_ptr() != dQ.untyped_storage().data_ptr()
    assert fb.backward_buffers(Q, Q, 0, atomic, delta=False)[4] is None


@pytest.mark.parametrize("dq_mode", fb.DQ_MODES)
@pytest.mark.parametrize("dtype", [BF16, torch.float32])
def test_the_recorded_repeat_gives_the_checked_paths_gradients_bitwise(dq_mode, dtype):
    """The repeat path (BackwardLaunch: one scratch block, the accumulator zeroed by the Delta launch, the cast
    into the gradients' own block) against the checked call that recorded it, under the interpreter (which runs
    programs in order, so even atomic dQ is reproducible there) and causal with N_q != N_k."""
    if ON_GPU:
        pytest.skip("the interpreter's repeat (Interpreted); tests on the GPU compare with tolerance")
    for stack in (False, True):
        Q, K, V, O, L, dO = make_inputs(2, 24, 40, 16, dtype, True)
        *checked, launch = fb._checked_backward(Q, K, V, O, L, dO, True, None, dq_mode, False, stack)
        assert isinstance(launch.dkdv, fb.Interpreted)
        for _ in range(2):   # the scratch block is reused by the allocator: the zeroing must be the launch's
            again = launch(Q, K, V, O, L, dO)
            for a, b in zip(checked, again):
                assert a.dtype == b.dtype == dtype and torch.equal(a, b), (dq_mode, stack)
        assert relative_error(again[0], backward_from_lse(Q, K, V, O, L, dO, True)[0]) < REL_TOL[dtype]


@pytest.mark.parametrize("dq_mode", ["atomic", "separate"])
def test_a_repeat_keeps_its_scratch_per_thread_and_below_the_cap(monkeypatch, dq_mode):
    """The accumulator and Delta are kept across repeats (the same memory again), apart per thread (and on the GPU
    per stream), and not kept above SCRATCH_KEPT_BYTES; the gradients stay new on every call, and a repeat on other
    inputs of the same shapes gives that input's checked gradients (bitwise, but for atomic dQ's order of additions on
    the GPU): nothing of the last call's scratch leaks in."""
    import threading

    first, second = make_inputs(2, 64, 80, 32, BF16, True), make_inputs(2, 64, 80, 32, BF16, True, seed=7)
    *_, launch = fb._checked_backward(*first, True, None, dq_mode, False, True)
    scratch = lambda: launch.buffers(first[0], first[1])[3:]   # noqa: E731
    kept = lambda: [t.data_ptr() for t in scratch()[dq_mode == "separate":]]   # noqa: E731 (separate: acc is dQ)
    before = kept()
    assert kept() == before
    dQ, dK, dV, acc, delta = launch.buffers(first[0], first[1])
    assert all(g.untyped_storage().data_ptr() != delta.untyped_storage().data_ptr() for g in (dQ, dK, dV))
    assert (acc is dQ) == (dq_mode == "separate")
    other = []
    t = threading.Thread(target=lambda: other.append(kept()))
    t.start()
    t.join()
    assert other[0] != before and len(launch.scratch) == 2
    if ON_GPU:
        with torch.cuda.stream(torch.cuda.Stream()):
            assert kept() != before and len(launch.scratch) == 3
    for inputs in (second, first, second):
        want = fb._checked_backward(*inputs, True, None, dq_mode, False, True)[:3]
        for name, a, b in zip("QKV", want, launch(*inputs)):
            exact = not ON_GPU or (dq_mode, name) != ("atomic", "Q")
            assert torch.equal(a, b) if exact else relative_error(a.float(), b.float()) < 1e-2, (dq_mode, name)
    monkeypatch.setattr(fb, "SCRATCH_KEPT_BYTES", 0)
    launch.scratch.clear()
    scratch()
    assert launch.scratch == {}


@pytest.mark.parametrize("wanted", [(True, True, True), (True, False, False), (False, True, True)])
def test_autograd_gradients_share_a_block_only_when_all_three_are_wanted(monkeypatch, wanted):
    """A gradient kept alone must not keep the others' memory: with all of Q, K, V requiring a gradient
    the three come from one allocation (views of a 3x block), otherwise each has its own."""
    from fa2triton import versions
    from fa2triton.interpret import autotuner_of, tile_candidates

    module = versions.load("v7_hopper")
    FA = module.FlashAttentionTriton
    tuner = autotuner_of(module)
    if tuner is not None and not ON_GPU:
        monkeypatch.setattr(tuner, "configs", tile_candidates(tuner)[:1])
        monkeypatch.setattr(tuner, "cache", {})
    bk = fb
    monkeypatch.setattr(bk, "LAUNCHES", bk.LaunchCache())
    Q, K, V, _, _, dO = make_inputs(1, 32, 32, 16, BF16, False)
    Q, K, V = (t.detach().requires_grad_(w) for t, w in zip((Q, K, V), wanted))
    out = FA.apply(Q, K, V, False)
    inputs = [t for t, w in zip((Q, K, V), wanted) if w]
    grads = torch.autograd.grad(out, inputs, dO)
    for g in grads:
        block = g.untyped_storage().nbytes()
        assert block == (3 if all(wanted) else 1) * g.numel() * g.element_size(), (wanted, block)
