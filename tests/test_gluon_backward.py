"""The Gluon dK/dV kernel for Hopper (fa2triton/gluon/gluon_backward_hopper.py, round 1 of backward_hopper_log.md):
what an offline sm_90 compile of it contains, which inputs `dkdv` refuses and why, and on a Hopper GPU its gradients
against float64.

Gluon is not interpreted (Triton 3.6), so without a GPU nothing here runs the kernel. The compiles are real: Triton's
compiler and its bundled ptxas, for sm_90, in a subprocess without TRITON_INTERPRET (as tests/test_gluon_forward.py
does).
"""

import csv
import math
import re
from pathlib import Path

import pytest
import torch

from fa2triton import flash_backward_triton, versions
from fa2triton.gluon import gluon_backward_hopper
from fa2triton.reference import attention, backward_from_lse, relative_error
from test_gluon_forward import _offline

GB = gluon_backward_hopper
pytestmark = pytest.mark.skipif(not GB.HAVE_GLUON, reason="this Triton has no Gluon")

# (D, causal, N, dtype) compiled offline: both head dimensions and masks at a ragged N, the aligned N once per D,
# and fp16 once
COMPILES = [(64, False, 1000, "bf16"), (64, True, 1000, "bf16"), (128, False, 1000, "bf16"),
            (128, True, 1000, "bf16"), (64, True, 2048, "bf16"), (128, False, 2048, "bf16"), (128, True, 1000, "fp16")]

COMPILE = """
import json, re, sys
sys.path.insert(0, {repo!r})
from fa2lab.compile_offline import compile_plan
from fa2triton.gluon import gluon_backward_hopper as GB
from profiling import ir
from profiling.inspect_kernel import disassemble, resource_usage
out = {{}}
for D, causal, N, dtype in {compiles!r}:
    c = compile_plan(GB.offline_plan(D, causal, N, dtype=dtype))
    ptx, sass = c.asm["ptx"], disassemble(c.asm["cubin"])[0]
    loops = [lp for lp in ir.sass_loops(sass) if lp["counts"].get("HGMMA", 0)] if sass else []
    out[f"D={{D}} causal={{int(causal)}} N={{N}} {{dtype}}"] = {{
        "shared": int(c.metadata.shared), "warps": int(c.metadata.num_warps), "cubin": len(c.asm["cubin"]),
        "res": resource_usage(c.asm["cubin"]),
        "wgmma_shapes": sorted(set(re.findall(r"wgmma\\.mma_async[._a-z]*\\.(m64n\\d+k16)", ptx))),
        "bulk_loads": ptx.count("cp.async.bulk.tensor.2d.shared"),
        "warp_specialize": c.asm["ttgir"].count("ttg.warp_specialize"),
        "sass": None if sass is None else {{k: sass.count(k) for k in ("HGMMA", "WARPGROUP.DEPBAR", "STL", "LDL",
                                                                      "UTMALDG", "MUFU.EX2")}},
        "rs_hgmma": None if sass is None else len(re.findall(r"HGMMA\\.\\S+ R\\d+, R\\d+, gdesc", sass)),
        "loops": [{{k: lp["counts"].get(k, 0) for k in ("HGMMA", "SHFL", "STS", "LDS", "WARPGROUP.DEPBAR", "STL",
                                                          "LDL")}}
                  for lp in loops]}}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    return _offline(COMPILE, compiles=COMPILES)


def _case(label: str) -> tuple[int, bool]:
    m = re.match(r"D=(\d+) causal=(\d)", label)
    return int(m.group(1)), m.group(2) == "1"


def test_every_case_compiles_for_one_warpgroup_within_a_blocks_shared_memory(compiled):
    assert len(compiled) == len(COMPILES)
    for label, r in compiled.items():
        D, _ = _case(label)
        assert r["cubin"] > 0 and r["warps"] == 4 and r["warp_specialize"] == 0, (label, r)
        # K, V and two slots each of Q and dO, 64 x D 16-bit elements each, and three 8-byte mbarriers
        assert r["shared"] == 6 * 64 * D * 2 + 3 * 8, (label, r)
        assert r["shared"] <= 227 * 1024, (label, r)


def test_no_case_spills_in_its_key_loops(compiled):
    """No spill in a key loop. Outside them D = 128 causal keeps 4 words of the prologue on the stack since its
    grid became one axis (fa2triton.tile_order); no case more than 8."""
    for label, r in compiled.items():
        assert r["res"].get("LOCAL", 0) == 0 and r["res"].get("REG", 0) <= 255, (label, r["res"])
        if r["sass"] is not None:
            assert r["sass"]["STL"] <= 8 and r["sass"]["LDL"] <= 8, (label, r["sass"])
            assert all(lp["STL"] == lp["LDL"] == 0 for lp in r["loops"]), (label, r["loops"])


def test_the_products_are_the_expected_wgmma_shapes_and_forms(compiled):
    """Per query tile: S^T and dP^T (64 keys x 64 queries, K = D) from shared memory, dV and dK (64 x D, K = 64
    queries) with their A operand in registers; one copy of the tile per query range the mask needs (no diagonal
    range without the causal mask)."""
    for label, r in compiled.items():
        D, causal = _case(label)
        assert r["wgmma_shapes"] == sorted({"m64n64k16", f"m64n{D}k16"}), (label, r["wgmma_shapes"])
        if r["sass"] is None:   # no nvdisasm or cuobjdump to read the SASS
            continue
        copies = 3 if causal else 2
        assert r["sass"]["HGMMA"] == copies * (2 * D // 16 + 2 * 64 // 16), (label, r["sass"])
        assert r["rs_hgmma"] == copies * 2 * 64 // 16, (label, r)
        assert r["sass"]["MUFU.EX2"] == copies * 64 * 64 // 128, (label, r["sass"])
        assert len(r["loops"]) == copies, (label, r["loops"])
        for lp in r["loops"]:
            # the accumulator-to-operand conversions move no data; the three waits are the kernel's own (S^T with
            # dP^T in flight, dP^T with dV in flight, all), none added by ptxas between S^T and dP^T
            assert lp["SHFL"] == lp["STS"] == lp["LDS"] == 0, (label, lp)
            assert lp["WARPGROUP.DEPBAR"] == 3, (label, lp)


def test_q_do_k_v_come_by_tma(compiled):
    for label, r in compiled.items():
        _, causal = _case(label)
        copies = 3 if causal else 2
        # K and V once, the first query tile's Q and dO, and each loop copy's refill of the next tile
        assert r["bulk_loads"] == 4 + 2 * copies, (label, r)
        if r["sass"] is not None:
            assert r["sass"]["UTMALDG"] == r["bulk_loads"], (label, r["sass"])


# ------------------------------------------------------------------------------------------------ input checks

def _inputs(BH=2, N=128, D=64, dtype=torch.bfloat16, device="cpu", N_k=None):
    q, do = (torch.zeros(BH, N, D, dtype=dtype, device=device) for _ in range(2))
    k, v = (torch.zeros(BH, N if N_k is None else N_k, D, dtype=dtype, device=device) for _ in range(2))
    lse, delta = (torch.zeros(BH, N, dtype=torch.float32, device=device) for _ in range(2))
    return dict(q=q, k=k, v=v, do=do, lse=lse, delta=delta)


def _call(args, scale=0.125):
    return GB.dkdv(args["q"], args["k"], args["v"], args["do"], args["lse"], args["delta"], False, scale)


@pytest.mark.parametrize("change, message", [
    (dict(dtype=torch.float32), "dtype torch.float32; the Gluon dK/dV kernel takes bfloat16 or float16"),
    (dict(D=32), r"head dimension 32 is not supported \(the Gluon dK/dV kernel takes \(64, 128\)\)"),
    (dict(), "q is on cpu: the Gluon dK/dV kernel runs on a CUDA"),
])
def test_dkdv_refuses_dtype_head_dimension_and_device(change, message):
    with pytest.raises(ValueError, match=message):
        _call(_inputs(**change))


@pytest.mark.parametrize("field, bad, message", [
    ("do", torch.zeros(2, 100, 64, dtype=torch.bfloat16), r"do must have q's shape \(2, 128, 64\)"),
    ("v", torch.zeros(2, 96, 64, dtype=torch.bfloat16), r"v must have k's shape \(2, 128, 64\)"),
    ("k", torch.zeros(3, 128, 64, dtype=torch.bfloat16), r"k must be \(batch \* heads, N_k, D\)"),
    ("q", torch.zeros(128, 64, dtype=torch.bfloat16), r"q must be \(batch \* heads, N, D\)"),
    ("lse", torch.zeros(2, 100), r"lse must have shape \(batch \* heads, N_q\) = \(2, 128\)"),
    ("delta", torch.zeros(2, 128, dtype=torch.float64), "delta must be float32"),
    ("lse", torch.zeros(128, 2).t(), "lse must have a unit stride along the queries"),
    ("k", torch.zeros(2, 128, 64, dtype=torch.float16), "k has dtype torch.float16 but q is torch.bfloat16"),
    ("delta", [0.0], "delta must be a torch.Tensor, got list"),
])
def test_dkdv_refuses_mismatched_inputs(field, bad, message):
    args = _inputs()
    args[field] = bad
    if field == "k":   # v like k, so that what is wrong with k is the first thing wrong
        args["v"] = bad.clone()
    with pytest.raises(ValueError, match=message):
        _call(args)


def test_dkdv_refuses_a_bad_scale():
    for scale in (0.0, -1.0, float("nan"), "0.125"):
        with pytest.raises(ValueError, match="scale must be a positive finite number"):
            _call(_inputs(), scale)


def test_offline_plan_refuses_what_the_kernel_does_not_take():
    with pytest.raises(ValueError, match="dtype must be 'bf16' or 'fp16'"):
        GB.offline_plan(64, False, 256, dtype="fp32")
    with pytest.raises(ValueError, match="head dimension 96"):
        GB.offline_plan(96, False, 256)


def test_launch_args_cover_every_key_tile_and_head_with_64_row_tma_blocks():
    a = _inputs(BH=3, N=200, D=128, device="meta", N_k=130)
    dk, dv = torch.empty_like(a["k"]), torch.empty_like(a["v"])
    grid, args = GB.launch_args(a["q"], a["k"], a["v"], a["do"], a["lse"], a["delta"], dk, dv, 0.125, False)
    assert grid == (3, 3)
    # causal: one axis, the heads fastest, so every head's first (longest) key tile starts first (tile_order)
    b = _inputs(BH=2, N=200, D=128, device="meta", N_k=130)
    args_of = [b[n] for n in ("q", "k", "v", "do", "lse", "delta")]
    args_of += [torch.empty_like(b["k"]), torch.empty_like(b["v"])]
    assert GB.launch_args(*args_of, 0.125, False)[0] == (3, 2)
    assert GB.launch_args(*args_of, 0.125, True)[0] == (6, 1)
    assert [d.block_shape for d in args[:4]] == [[64, 128]] * 4
    assert [d.shape for d in args[:4]] == [[600, 128], [390, 128], [390, 128], [600, 128]]
    assert args[8:14] == (200, 200, 128, 128, 200, 130)
    assert args[14] == pytest.approx(0.125 * math.log2(math.e)) and args[15] == 0.125


# ------------------------------------------------------------------------------------------------ on a Hopper GPU

ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
# ||grad - ref|| / ||ref|| bounds per input dtype, as tests/test_backward.py's REL_TOL
REL_TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
GPU_CASES = [(N, N, D, dtype, causal) for N in (64, 200, 1000, 2048) for D in (64, 128)
             for dtype in (torch.bfloat16, torch.float16) for causal in (False, True)]
GPU_CASES += [(200, 130, 64, torch.bfloat16, True), (130, 200, 128, torch.float16, True),
              (1000, 333, 64, torch.float16, False)]


def _ids(cases) -> list[str]:
    return [f"{a}x{b}-d{d}-{str(t)[6:]}-{'causal' if c else 'full'}" for a, b, d, t, c in cases]


def _gpu_inputs(N_q, N_k, D, dtype, seed, BH=3):
    """q, k, v, do on the GPU in `dtype`, from a seeded CPU generator."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(BH, n, D, generator=g).to("cuda", dtype) for n in (N_q, N_k, N_k))
    return q, k, v, torch.randn(BH, N_q, D, generator=g).to("cuda", dtype)


def _float64_grads(q, k, v, do, causal):
    """dQ, dK, dV of the float64 reference through autograd."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, _ = attention(q64, k64, v64, causal)
    return torch.autograd.grad(out, (q64, k64, v64), do.double())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(torch.cuda.is_available() and not ON_HOPPER, reason="the Gluon kernel is sm_90 only")
@pytest.mark.parametrize("N_q, N_k, D, dtype, causal", GPU_CASES, ids=_ids(GPU_CASES))
def test_dkdv_matches_float64(N_q, N_k, D, dtype, causal):
    q, k, v, do = _gpu_inputs(N_q, N_k, D, dtype, N_q + N_k + D)
    o64, l64 = attention(q, k, v, causal)
    o, lse = o64.to(dtype), l64.float()
    delta = (o.float() * do.float()).sum(-1)          # what _bwd_preprocess_kernel computes
    dk, dv = GB.dkdv(q, k, v, do, lse, delta, causal, 1.0 / math.sqrt(D))
    assert dk.shape == k.shape and dv.shape == v.shape and dk.dtype == dv.dtype == dtype

    _, tk, tv = _float64_grads(q, k, v, do, causal)
    _, rk, rv = backward_from_lse(q, k, v, o, lse, do, causal)
    for name, got, truth, recompute in (("dK", dk, tk, rk), ("dV", dv, tv, rv)):
        e64, erc = relative_error(got, truth), relative_error(got, recompute)
        assert e64 <= REL_TOL[dtype], f"{name}: relative error {e64:.2e} vs float64"
        assert erc <= REL_TOL[dtype], f"{name}: relative error {erc:.2e} vs backward_from_lse"
    if causal and N_k > N_q:   # keys no query sees get exactly zero gradient
        assert not dk[:, N_q:].any() and not dv[:, N_q:].any()


# --- the Gluon dK/dV inside the backward (flash_backward_triton's dkdv option) and v7's autograd backward

FB = flash_backward_triton
BACKWARD_CASES = [(1000, 1000, 64, torch.bfloat16, True), (333, 1000, 128, torch.float16, False),
                  (200, 130, 64, torch.float16, True), (2048, 2048, 128, torch.bfloat16, True),
                  (777, 777, 64, torch.bfloat16, False)]


def _gluon_launches(cache) -> int:
    return sum(bool(getattr(launch, "gluon_dkdv", False)) for launch in cache.entries.values())


def _check_against_float64(grads, q, k, v, do, causal, dtype):
    for name, got, truth in zip(("dQ", "dK", "dV"), grads, _float64_grads(q, k, v, do, causal)):
        assert got.dtype == dtype and got.shape == truth.shape, name
        err = relative_error(got, truth)
        assert err <= REL_TOL[dtype], f"{name}: relative error {err:.2e} vs float64"


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel runs on a Hopper GPU only")
@pytest.mark.parametrize("N_q, N_k, D, dtype, causal", BACKWARD_CASES, ids=_ids(BACKWARD_CASES))
def test_the_backward_with_the_gluon_dkdv_matches_float64_and_repeats_exactly(monkeypatch, N_q, N_k, D, dtype,
                                                                              causal):
    monkeypatch.setattr(FB, "LAUNCHES", FB.LaunchCache())
    q, k, v, do = _gpu_inputs(N_q, N_k, D, dtype, N_q + D)
    o64, l64 = attention(q, k, v, causal)
    args = (q, k, v, o64.to(dtype), l64.float(), do, causal)
    first = FB.flash_attention_backward(*args, dkdv="gluon")
    again = FB.flash_attention_backward(*args, dkdv="gluon")        # the recorded launch, rebound descriptors
    auto = FB.flash_attention_backward(*args, dkdv="auto")
    assert FB.LAUNCHES.stats == {"slow": 2, "fast": 1} and _gluon_launches(FB.LAUNCHES) == 2
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(first, again, auto))   # deterministic
    _check_against_float64(first, q, k, v, do, causal, dtype)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel runs on a Hopper GPU only")
def test_v7s_autograd_backward_takes_the_gluon_dkdv_where_dq_is_separate(monkeypatch):
    FA = versions.load("v7_hopper").FlashAttentionTriton
    assert FA.BACKWARD_DKDV == "auto" and FA.BACKWARD_DQ_MODE == "auto"
    monkeypatch.setattr(FB, "LAUNCHES", FB.LaunchCache())
    BH, N, D = 8, 3000, 64
    assert FB.auto_dq_mode(BH, N, N, D, True) == "separate"
    q, k, v, do = _gpu_inputs(N, N, D, torch.bfloat16, 7, BH=BH)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    grads = torch.autograd.grad(FA.apply(q, k, v, True), (q, k, v), do)
    assert _gluon_launches(FB.LAUNCHES) == 1
    _check_against_float64(grads, q, k, v, do, True, torch.bfloat16)


def test_the_backwards_comment_on_the_gluon_dkdv_gives_the_committed_ratios():
    """flash_backward_triton's DKDV_CHOICES comment quotes the range of the Gluon kernel's time over the Triton one's:
    the medians of results/nvidia-h200/experiments/bwd_gluon_dkdv.csv, rounded."""
    repo = Path(__file__).resolve().parent.parent
    src = (repo / "fa2triton" / "flash_backward_triton.py").read_text()
    quoted = re.search(r"(\d\.\d\d)-(\d\.\d\d)x this one's time", src)
    with open(repo / "results" / "nvidia-h200" / "experiments" / "bwd_gluon_dkdv.csv") as f:
        ratios = [float(r["gluon_over_triton"]) for r in csv.DictReader(f) if r["who"] == "gluon"]
    assert quoted and ratios
    assert (float(quoted[1]), float(quoted[2])) == (round(min(ratios), 2), round(max(ratios), 2))
