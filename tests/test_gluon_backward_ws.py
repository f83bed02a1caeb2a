"""The warp-specialized Gluon backward for Hopper (fa2triton/gluon/gluon_backward_ws.py, round 3 of
backward_hopper_log.md): what an offline sm_90 compile of it contains, what it refuses, and on a Hopper GPU its three
gradients against float64, alone and as the backward's dq_mode "atomic".

The compiles are real (Triton's compiler and bundled ptxas, sm_90, in a subprocess without TRITON_INTERPRET).
"""

import math

import pytest
import torch

from fa2triton import flash_backward_triton as FB
from fa2triton import versions
from fa2triton.gluon import gluon_backward_ws as WS
from fa2triton.reference import attention
from test_gluon_backward import (GPU_CASES, BACKWARD_CASES, ON_HOPPER, _check_against_float64,
                                 _gpu_inputs, _ids, _inputs)
from test_gluon_forward import _offline

pytestmark = pytest.mark.skipif(not WS.HAVE_GLUON, reason="this Triton has no Gluon")

COMPILES = [(64, False, 1000, "bf16"), (64, True, 2048, "bf16"), (128, False, 2048, "bf16"),
            (128, True, 1000, "fp16")]

COMPILE = """
import json, re, sys
sys.path.insert(0, {repo!r})
from fa2lab.compile_offline import compile_plan
from fa2triton.gluon import gluon_backward_ws as WS
from profiling import ir
from profiling.inspect_kernel import disassemble, resource_usage
out = {{}}
for D, causal, N, dtype in {compiles!r}:
    c = compile_plan(WS.offline_plan(D, causal, N, dtype=dtype))
    ptx, sass = c.asm["ptx"], disassemble(c.asm["cubin"])[0]
    KEYS = ("HGMMA", "STL", "LDL", "UTMAREDG", "SEL")
    loops = [lp for lp in ir.sass_loops(sass, keys=KEYS) if lp["counts"].get("HGMMA", 0)] if sass else []
    out[f"D={{D}} causal={{int(causal)}} N={{N}} {{dtype}}"] = {{
        "shared": int(c.metadata.shared), "res": resource_usage(c.asm["cubin"]),
        "warp_specialize": c.asm["ttgir"].count("ttg.warp_specialize"),
        "ttgir_dots": c.asm["ttgir"].count("warp_group_dot "),
        "wgmma_shapes": sorted(set(re.findall(r"wgmma\\.mma_async[._a-z]*\\.(m64n\\d+k16)", ptx))),
        "reduce_adds": ptx.count("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add"),
        "inf_selects": len(re.findall(r"selp\\.[bf]32[^;]*(?:0f7F800000|2139095040)", ptx)),
        "sass": None if sass is None else {{k: sass.count(k) for k in ("HGMMA", "UTMALDG", "UTMAREDG", "MUFU.EX2")}},
        "loops": [{{k: lp["counts"].get(k, 0) for k in KEYS}} for lp in loops if lp["innermost"]]}}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    return _offline(COMPILE, compiles=COMPILES)


def test_every_case_is_warp_specialized_within_a_blocks_shared_memory(compiled):
    assert len(compiled) == len(COMPILES)
    for label, r in compiled.items():
        D = int(label.split()[0][2:])
        assert r["warp_specialize"] == 1, label
        # K and V (128 rows), two slots each of Q and dO (M rows), two dS tiles (128 x M), two fp32 dQ shares (64 x D
        # by rows, M x D / 2 by columns)
        M = WS.query_tile(D)
        share = 64 * D if D in WS.ROW_SPLIT_HEAD_DIMS else M * D // 2
        buffers = 2 * 128 * D * 2 + 4 * M * D * 2 + 2 * 128 * M * 2 + 2 * share * 4
        assert buffers <= r["shared"] <= 232448, (label, r["shared"], buffers)


def test_only_a_ragged_key_tile_pays_for_zeroing_dS_rows(compiled):
    """even_keys: where N_KEYS is a multiple of BLOCK_N no key loop selects dS^T's rows (LLVM's select runs per score
    after the bf16 cast: 32 SEL per thread and tile at D = 64); where it is not, every key loop does."""
    assert [WS.even_keys(n) for n in (1000, 1024, 2048, 4096 + 64)] == [False, True, True, False]
    for label, r in compiled.items():
        N = int(label.split()[2][2:])
        sels = [lp["SEL"] for lp in r["loops"]]
        assert sels, label
        # (a causal diagonal's loop of 128-query tiles selects 16 packed scores for the mask itself)
        assert min(sels) == 0 and max(sels) < 32 if WS.even_keys(N) else min(sels) >= 32, (label, sels)


def test_the_five_products_per_tile_and_one_reduce_add_per_consumer(compiled):
    """Per query tile (M queries) and consumer: S^T and dP^T (64 x M, K = D), dV and dK (64 x D, K = M), its dQ share
    (K = 128 keys: 64 x D split by rows, M x D / 2 by columns); then one TMA reduce-add of that share. Every loop
    holding products holds exactly this."""
    for label, r in compiled.items():
        D = int(label.split()[0][2:])
        M = WS.query_tile(D)
        share = D if D in WS.ROW_SPLIT_HEAD_DIMS else D // 2
        assert r["wgmma_shapes"] == sorted({f"m64n{M}k16", f"m64n{D}k16", f"m64n{share}k16"}), (label, r)
        per_tile = 2 * D // 16 + 2 * M // 16 + 128 // 16
        assert r["loops"] and all(lp["HGMMA"] == per_tile and lp["UTMAREDG"] == 1 for lp in r["loops"]), (label, r)
        assert r["reduce_adds"] >= len(r["loops"]), (label, r)


def test_the_flags_are_compile_time_constants_in_the_partitions(compiled):
    """CAUSAL, UNSYNCED, EVEN_KEYS and BY_ROWS reach the consumers as constexprs (in the Flags aggregate, not inside
    a tuple, where Triton 3.6 turns them into int1 values): the TTGIR holds the five products of each query tile the
    consumers run, two consumers times one range per mask (diagonal, whole, tail; no diagonal without the causal
    mask), and nothing of a branch a flag rules out."""
    for label, r in compiled.items():
        causal = "causal=1" in label
        assert r["ttgir_dots"] == 5 * 2 * (3 if causal else 2), (label, r["ttgir_dots"])


def test_split_by_rows_only_the_loader_masks_L(compiled):
    """Round 14: where dQ is split by rows the loader stores L = +inf past N_QUERIES (its one select per L value it
    loads: BLOCK_M / 32 per thread), so a consumer reads L after S^T's wait with no select and no address to compute
    there (under Triton 3.6 they had come to sit on that wait's path: the backward log's "Round 14"); split by columns
    each consumer selects +inf as it reads L, before S^T's issue."""
    for label, r in compiled.items():
        D = int(label.split()[0][2:])
        if D in WS.ROW_SPLIT_HEAD_DIMS:
            assert r["inf_selects"] == WS.query_tile(D) // 32, (label, r["inf_selects"])
        else:
            assert r["inf_selects"] > WS.query_tile(D) // 32, (label, r["inf_selects"])


# Spill stores per key loop iteration at D = 64, at most: round 12's 128-query tiles, with L read after S^T's wait
# (none without the mask, up to 3 with it under either Triton; 1-8 where L is read before S^T's issue).
D64_SPILL_STORES = 3


def test_head_dimension_64_spills_at_most_a_few_registers(compiled):
    for label, r in compiled.items():
        if label.startswith("D=64"):
            assert all(lp["STL"] <= D64_SPILL_STORES for lp in r["loops"]), (label, r["loops"])


def _ws_call(args, acc=None, scale=0.125):
    acc = torch.zeros(args["q"].shape, dtype=torch.float32) if acc is None else acc
    return WS.validate(args["q"], args["k"], args["v"], args["do"], args["lse"], args["delta"], scale, acc)


def test_validate_names_the_dq_accumulator_and_the_inputs_problems():
    with pytest.raises(ValueError, match=r"dQ accumulator must be a contiguous float32 tensor of q's shape"):
        _ws_call(_inputs(), acc=torch.zeros(2, 128, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="head dimension 32 is not supported"):
        _ws_call(_inputs(D=32))
    with pytest.raises(ValueError, match="q is on cpu"):
        _ws_call(_inputs())
    assert "float32" in WS.unsupported(*(_inputs(dtype=torch.float32).values()), 0.125, torch.zeros(2, 128, 64))


def test_launch_args_give_a_3d_dq_descriptor_and_128_key_tiles():
    a = _inputs(BH=3, N=200, D=128, device="meta", N_k=130)
    dk, dv = torch.empty_like(a["k"]), torch.empty_like(a["v"])
    acc = torch.empty(a["q"].shape, dtype=torch.float32, device="meta")
    grid, args = WS.launch_args(a["q"], a["k"], a["v"], a["do"], a["lse"], a["delta"], dk, dv, acc, 0.125, False)
    assert grid == (2, 3)
    assert [d.block_shape for d in args[:5]] == [[64, 128], [128, 128], [128, 128], [64, 128], [1, 64, 64]]
    assert args[4].shape == [3, 200, 128]
    assert args[13:15] == (200, 130) and args[16] == 0.125
    # causal: one axis, the heads fastest, so every head's first (longest) key tile starts first (tile_order)
    assert WS.launch_args(a["q"], a["k"], a["v"], a["do"], a["lse"], a["delta"], dk, dv, acc, 0.125, True)[0] == (6, 1)
    # D = 64 (ROW_SPLIT_HEAD_DIMS): 128-query tiles, and each consumer's dQ share is 64 rows of all of D
    a = _inputs(BH=3, N=200, D=64, device="meta")
    acc = torch.empty(a["q"].shape, dtype=torch.float32, device="meta")
    _, args = WS.launch_args(a["q"], a["k"], a["v"], a["do"], a["lse"], a["delta"], dk, dv, acc, 0.125, False)
    assert [d.block_shape for d in args[:5]] == [[128, 64], [128, 64], [128, 64], [128, 64], [1, 64, 64]]


# ------------------------------------------------------------------------------------------------ on a Hopper GPU

@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel runs on a Hopper GPU only")
@pytest.mark.parametrize("N_q, N_k, D, dtype, causal", GPU_CASES, ids=_ids(GPU_CASES))
def test_backward_matches_float64(N_q, N_k, D, dtype, causal):
    q, k, v, do = _gpu_inputs(N_q, N_k, D, dtype, N_q + N_k + D)
    o64, l64 = attention(q, k, v, causal)
    o, lse = o64.to(dtype), l64.float()
    delta = (o.float() * do.float()).sum(-1)
    grads = WS.backward(q, k, v, do, lse, delta, causal, 1.0 / math.sqrt(D))
    _check_against_float64(grads, q, k, v, do, causal, dtype)
    if causal and N_k > N_q:   # keys no query sees get exactly zero gradient
        assert not grads[1][:, N_q:].any() and not grads[2][:, N_q:].any()


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel runs on a Hopper GPU only")
@pytest.mark.parametrize("N_q, N_k, D, dtype, causal", BACKWARD_CASES, ids=_ids(BACKWARD_CASES))
def test_the_atomic_backward_takes_the_ws_kernel_and_repeats(monkeypatch, N_q, N_k, D, dtype, causal):
    monkeypatch.setattr(FB, "LAUNCHES", FB.LaunchCache())
    q, k, v, do = _gpu_inputs(N_q, N_k, D, dtype, N_q + D)
    o64, l64 = attention(q, k, v, causal)
    args = (q, k, v, o64.to(dtype), l64.float(), do, causal)
    first = FB.flash_attention_backward(*args, dq_mode="atomic", dkdv="gluon")
    again = FB.flash_attention_backward(*args, dq_mode="atomic", dkdv="gluon")   # the recorded launch
    assert FB.LAUNCHES.stats == {"slow": 1, "fast": 1}
    assert all(getattr(launch, "gluon_dkdv", False) for launch in FB.LAUNCHES.entries.values())
    for a, b in zip(first, again):   # dQ's reduce-adds come in any order: equal to rounding, not bitwise
        assert (a.float() - b.float()).abs().max() <= 1e-2 * b.float().abs().max()
    _check_against_float64(first, q, k, v, do, causal, dtype)
    _check_against_float64(again, q, k, v, do, causal, dtype)


def test_the_kernels_names_are_the_ones_committed_rows_key_on():
    """The harness's bwd_config names the Gluon kernel by label(D) where it ran, experiment bwd-gluon-ws's `who` by
    its slots: each head dimension's latest committed rows must name what ships."""
    import csv
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "results" / "nvidia-h200"
    with open(results / "bench_bwd" / "v7_hopper.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["bwd_config"].startswith("ws ")]
    with open(results / "experiments" / "bwd_gluon_ws.csv") as f:
        who = {r["who"] for r in csv.DictReader(f)}
    for D in (64, 128):
        at_d = [r for r in rows if int(r["D"]) == D]
        latest = max(at_d, key=lambda r: r["date"])["git_commit"]
        assert {r["bwd_config"] for r in at_d if r["git_commit"] == latest} == {WS.label(D)}, D
    assert WS.label(64) == "ws 128x128/2wg/s2/rows" and WS.label(128) == "ws 128x64/2wg/s2"
    assert f"gluon-ws/s{WS.SLOTS}" in who


def test_auto_takes_the_ws_kernel_where_it_measured_faster():
    sms = 132
    assert [FB.auto_dq_mode(32, n, n, 128, c, sms, gluon_ws=True) for n in (2048, 4096) for c in (0, 1)] == \
        ["atomic"] * 4
    assert FB.auto_dq_mode(32, 2048, 2048, 64, False, sms, gluon_ws=True) == "atomic"
    assert FB.auto_dq_mode(32, 2048, 2048, 64, True, sms, gluon_ws=True) == "atomic"     # since tile_order
    for D, causal in ((64, True), (64, False), (128, True)):                               # the host's time there
        assert FB.auto_dq_mode(32, 1024, 1024, D, causal, sms, gluon_ws=True) == "fused"
    assert FB.auto_dq_mode(32, 1024, 1024, 128, False, sms, gluon_ws=True) == "atomic"   # past the threshold
    assert FB.auto_dq_mode(128, 1024, 1024, 64, False, sms, gluon_ws=True) == "atomic"   # four times the heads
    assert FB.auto_dq_mode(32, 512, 512, 64, False, sms, gluon_ws=True) == "fused"       # not measured below 1024
    assert FB.auto_dq_mode(32, 2048, 2048, 128, False, sms) == "separate"                # no Gluon kernel here
    assert not FB.gluon_ws_takes(128, torch.bfloat16, "triton")


def test_preferreds_docstring_gives_the_committed_ratios():
    """`preferred` quotes the range of v7's graph time over the Gluon backward's (two slots) where it takes the kernel
    and where it does not: the medians of results/nvidia-h200/experiments/bwd_gluon_ws.csv, rounded."""
    import csv
    import re
    from pathlib import Path

    doc = " ".join(WS.preferred.__doc__.split())
    quoted = re.search(r"(\d\.\d\d)-(\d\.\d\d)x as fast without the mask and at D = 128; at D = 64 causal "
                       r"(\d\.\d\d)-(\d\.\d\d)x since .*rows of (\w+)\), "
                       r"where before it was (\d\.\d\d)-(\d\.\d\d)x", doc)
    path = Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "experiments" / "bwd_gluon_ws.csv"
    with open(path) as f:
        rows = list(csv.DictReader(f))
    # round 3's runs: not those that also timed the synced form before the launch order (their v7 already took
    # this kernel)
    assert quoted
    since = quoted.group(5)
    synced = {r["git_commit"] for r in rows if r["who"].endswith("/synced")} - {since}
    rows = [r for r in rows if r["who"] == f"gluon-ws/s{WS.SLOTS}" and int(r["N"]) >= 1024
            and r["git_commit"] not in synced]
    d64c = [r for r in rows if r["D"] == "64" and r["causal"] == "1"]
    groups = ([r for r in rows if r not in d64c], [r for r in d64c if r["git_commit"] == since],
              [r for r in d64c if r["git_commit"] != since])
    ratios = [[float(r["v7_over_graph"]) for r in g] for g in groups]
    assert all(ratios)
    assert tuple(map(float, quoted.groups()[:4] + quoted.groups()[5:])) == tuple(
        round(f(g), 2) for g in ratios for f in (min, max))
    assert min(ratios[0]) > 1.0 and min(ratios[1]) > 1.0 > min(ratios[2])
    assert all(WS.preferred(int(r["N"]), int(r["N"]), int(r["D"]), r["causal"] == "1") for r in groups[0])
    assert all(WS.preferred(int(r["N"]), int(r["N"]), 64, True) for r in groups[1])


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel runs on a Hopper GPU only")
def test_v7s_autograd_backward_takes_the_ws_kernel_at_d128(monkeypatch):
    FA = versions.load("v7_hopper").FlashAttentionTriton
    monkeypatch.setattr(FB, "LAUNCHES", FB.LaunchCache())
    BH, N, D = 32, 1500, 128
    assert FB.auto_dq_mode(BH, N, N, D, True, gluon_ws=True) == "atomic"
    q, k, v, do = _gpu_inputs(N, N, D, torch.bfloat16, 11, BH=BH)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    grads = torch.autograd.grad(FA.apply(q, k, v, True), (q, k, v), do)
    launches = list(FB.LAUNCHES.entries.values())
    assert len(launches) == 1 and launches[0].gluon_dkdv and launches[0].dq is None   # dQ by the Gluon kernel
    _check_against_float64(grads, q, k, v, do, True, torch.bfloat16)


def test_unsynced_head_dims_follow_the_committed_ratios():
    """UNSYNCED_HEAD_DIMS' comment quotes round 5's rows (the synced form's graph time against the unsynced one's,
    results/nvidia-h200/experiments/bwd_gluon_ws.csv at the commit it names): faster at D = 128 non-causal N >= 2048, slower at D = 64
    non-causal; offline_plan and launch take the marks at the listed head dimensions only."""
    import csv
    import inspect
    import re
    from pathlib import Path

    source = " ".join(inspect.getsource(WS).split())
    commit = re.search(r"bwd-gluon-ws at ([0-9a-f]{7})", source)
    path = Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "experiments" / "bwd_gluon_ws.csv"
    with open(path) as f:   # (later runs' /synced rows at D = 64 time the shipped kernel twice)
        rows = [r for r in csv.DictReader(f) if r["who"].endswith("/synced") and commit
                and r["git_commit"].startswith(commit.group(1))]
    ratio = {(int(r["N"]), int(r["D"]), r["causal"] == "1"): float(r["gluon_over_graph"]) for r in rows}
    faster = [100 * (1 - v) for (n, d, c), v in ratio.items() if d == 128 and not c and n >= 2048]
    slower = [100 * (v - 1) for (n, d, c), v in ratio.items() if d == 64 and not c]
    quoted = re.search(r"(\d\.\d)-(\d\.\d)% faster at D = 128 non-causal N >= 2048, (\d\.\d)-(\d\.\d)% slower at "
                       r"D = 64 non-causal", source)
    assert quoted and faster and slower and min(faster) > 0 and min(slower) > 0
    assert tuple(map(float, quoted.groups())) == (round(min(faster), 1), round(max(faster), 1), round(min(slower), 1),
                                                  round(max(slower), 1))
    assert WS.UNSYNCED_HEAD_DIMS == (128,)
    assert [WS.offline_plan(D, False, 1024).options["UNSYNCED"] for D in (64, 128)] == [False, True]
    assert WS.offline_plan(64, False, 1024, unsynced=True).options["UNSYNCED"] is True


def test_row_split_head_dims_follow_the_committed_ratios():
    """ROW_SPLIT_HEAD_DIMS' comment quotes rows of results/nvidia-h200/experiments/bwd_gluon_ws.csv at the commits it
    names: the row split's time over the column split's at N = 2048 and 4096, both masks, from /cs rows (the row split
    shipped: the rows' ratio is row / column) and /rs rows (the column split shipped: column / row), per Triton
    version, each beyond its round spread."""
    import csv
    import inspect
    import re
    from pathlib import Path

    source = " ".join(inspect.getsource(WS).replace("#", " ").split())
    quoted = re.search(r"the row split takes (0\.\d\d)-(0\.\d\d) of the column split's time under Triton 3\.6 "
                       r"\(the /cs rows at ([0-9a-f]{7})\) and (0\.\d\d)-(0\.\d\d) under 3\.9 \(the /rs rows at "
                       r"([0-9a-f]{7})\)", source)
    assert quoted
    q = quoted.groups()
    path = Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "experiments" / "bwd_gluon_ws.csv"
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if int(r["D"]) == 64 and int(r["N"]) >= 2048]

    def span(form, commit, version):
        """(min, max) over the rows of the row split's time over the column split's, two decimals."""
        found = []
        for r in rows:
            if r["who"] == f"gluon-ws/s{WS.SLOTS}/{form}" and r["git_commit"][:7] == commit and r["triton"] == version:
                ratio, lo, hi = (float(r[c]) for c in ("gluon_over_graph", "gluon_over_graph_min",
                                                       "gluon_over_graph_max"))
                assert not lo <= 1 <= hi, r   # beyond the round spread
                found.append((int(r["N"]), int(r["causal"]), ratio if form == "cs" else 1 / ratio))
        assert sorted((n, c) for n, c, _ in found) == [(2048, 0), (2048, 1), (4096, 0), (4096, 1)], found
        return round(min(x for *_, x in found), 2), round(max(x for *_, x in found), 2)

    assert (float(q[0]), float(q[1])) == span("cs", q[2], "3.6.0")
    assert (float(q[3]), float(q[4])) == span("rs", q[5], "3.9.0")
    assert WS.ROW_SPLIT_HEAD_DIMS == (64,) and [WS.query_tile(D) for D in (64, 128)] == [128, 64]
