"""The Gluon forward (kernels/_shared/gluon_forward_hopper.py, issue 6's experiment): its configuration
rules, which inputs it refuses and why, and what an offline sm_90 compile of each form contains.

Gluon is not interpreted (Triton 3.6), so nothing here runs the kernel: its results are checked on the
H200 by `invoke experiment gluon` (O and L against float64 on ragged and non-square shapes, both masks,
D = 64, and D = 128 where a configuration's shared memory fits; results/nvidia-h200/experiments/gluon_check.csv). The compiles are real: Triton's
compiler and its bundled ptxas, for sm_90, in a subprocess without TRITON_INTERPRET.
"""

import inspect
from dataclasses import replace
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fa2lab import reference, versions
from switch_probe import probe

REPO = Path(__file__).resolve().parent.parent
G = versions.load_shared("gluon_forward_hopper")
pytestmark = pytest.mark.skipif(not G.HAVE_GLUON, reason="this Triton has no Gluon")


def _refused(option: dict, clashes, match: str) -> None:
    """A persistent 128-row configuration of two consumers with `option` and each of `clashes` is refused by
    GluonConfig with an error matching `match`."""
    for clash in clashes:
        with pytest.raises(ValueError, match=match):
            G.GluonConfig(**{**dict(block_m=128, block_n=128, num_warps=4, slots=3, consumers=2, persistent=True,
                                    **option), **clash})


def test_warp_specialized_configs_are_checked():
    with pytest.raises(ValueError, match="2 or 3 consumers"):
        G.GluonConfig(128, 128, 4, 3, consumers=4)
    with pytest.raises(ValueError, match="2 or 3 consumers"):
        G.GluonConfig(128, 128, 8, 3, consumers=2)        # 4 warps per consumer
    with pytest.raises(ValueError, match="always overlaps"):
        G.GluonConfig(128, 128, 4, 3, overlap=False, consumers=2)
    assert G.GluonConfig(192, 128, 4, 3, consumers=3).label == "ws3x64x128/3s/preg"


def test_shared_memory_estimate_grows_with_what_is_allocated():
    base = G.GluonConfig(128, 128, 8, 2)
    assert G.GluonConfig(128, 128, 8, 3).smem_bytes(64) - base.smem_bytes(64) == 2 * 128 * 64 * 2 + 16
    assert G.GluonConfig(128, 128, 8, 2, p_smem=True).smem_bytes(64) - base.smem_bytes(64) == 2 * 128 * 128 * 2
    assert not G.GluonConfig(128, 128, 4, 3, p_smem=True, consumers=2).fits(128, 232448)


@pytest.mark.parametrize("change, reason", [
    (dict(dtype=torch.float32), "dtype"),
    (dict(D=32), "head dimension 32"),
    (dict(window=8), "sliding window"),
    (dict(), "not a Hopper GPU"),          # CPU tensors
])
def test_applies_names_what_it_cannot_run(change, reason):
    D, dtype = change.get("D", 64), change.get("dtype", torch.bfloat16)
    q = torch.zeros(2, 128, D, dtype=dtype)
    why = G.applies(q, q, q, change.get("window", 0))
    assert why is not None and reason in why


@pytest.mark.parametrize("tiles, sms, key_tiles, plan", [
    (704, 132, 32, (660, 3)),    # N = 4096, 192-row tiles: 44 in the last wave, 3 splits fill it
    (352, 132, 16, (264, 3)),    # N = 2048: 88 left, 2 splits would take 2 waves of T / 2, 3 take 2 of T / 3
    (192, 132, 8, (132, 2)),     # N = 1024: 60 left
    (264, 132, 16, (264, 1)),    # whole waves: nothing to split
    (96, 132, 4, (96, 1)),       # one partial wave, 4 key tiles: 2 splits still take a whole T
    (96, 132, 16, (0, 4)),       # ... with 16 key tiles, 4 splits fill 3 waves of T / 4
])
def test_split_plan_fills_the_last_wave(tiles, sms, key_tiles, plan):
    full, splits = G.split_plan(tiles, sms, key_tiles)
    assert (full, splits) == plan
    if splits > 1:   # the tail's programs take less than a whole tile's time
        assert math.ceil((tiles - full) * splits / sms) / splits < 1
    assert splits == 1 or key_tiles // splits >= 2


def test_split_plan_with_parts_per_sm():
    assert G.split_plan(704, 132, 32, parts_per_sm=2) == (660, 6)     # 44 tail tiles: 264 parts
    assert G.split_plan(352, 132, 16, parts_per_sm=3) == (264, 5)     # 88 tail tiles: 440 parts
    assert G.split_plan(192, 132, 8, parts_per_sm=3) == (132, 4)      # capped: two key tiles per part
    assert G.split_plan(264, 132, 16, parts_per_sm=2) == (264, 1)     # whole waves


def test_gluon_variants_are_checked():
    with pytest.raises(ValueError, match="warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, split_tail=True)
    with pytest.raises(ValueError, match="warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, pingpong=True)
    with pytest.raises(ValueError, match="p_buffers"):
        G.GluonConfig(128, 128, 4, 3, p_smem=True, p_buffers=3, consumers=2)
    cfg = G.GluonConfig(192, 128, 4, 4, consumers=3, pingpong=True, pin_ex2=True, split_tail=True)
    assert cfg.label == "ws3x64x128/4s/preg/pp/pin/split"
    assert G.GluonConfig(192, 128, 4, 4, consumers=3, split_tail=2).label == "ws3x64x128/4s/preg/split2"


@pytest.mark.parametrize("splits", [2, 3])
def test_combine_tail_merges_split_parts_into_attention(splits):
    """The split tail's combine (a tl kernel: the interpreter runs it without a GPU, a GPU natively): parts
    computed in float64 from disjoint key ranges, rows past N_q filled with garbage, against attention over
    all keys."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(splits)
    BH, N_q, N_k, D, block_m, full = 3, 100, 90, 64, 192, 1
    q, k, v = (torch.randn(BH, n, D, dtype=torch.float64) for n in (N_q, N_k, N_k))
    tail = list(range(full, BH))            # one query tile per head: tiles 1 and 2 are the tail
    Op = torch.randn(len(tail) * splits * block_m, D, dtype=torch.float32, device=dev)
    Lp = torch.randn(Op.shape[0], dtype=torch.float32, device=dev)
    bounds = [round(i * N_k / splits) for i in range(splits + 1)]
    for i, t in enumerate(tail):
        for s in range(splits):
            o, lse = reference.attention(q[t:t + 1], k[t:t + 1, bounds[s]:bounds[s + 1]],
                                         v[t:t + 1, bounds[s]:bounds[s + 1]])
            row = (i * splits + s) * block_m
            Op[row:row + N_q] = o[0].float()
            Lp[row:row + N_q] = (lse[0] / math.log(2)).float()   # log2 units
    O = torch.zeros(BH, N_q, D, dtype=torch.float32, device=dev)
    L = torch.zeros(BH, N_q, dtype=torch.float32, device=dev)
    G.combine_tail(Op, Lp, full, splits, O, L, block_m)
    O, L = O.cpu(), L.cpu()
    ref_o, ref_l = reference.attention(q, k, v)
    assert torch.allclose(O[tail], ref_o[tail].float(), atol=1e-5)
    assert torch.allclose(L[tail], ref_l[tail].float(), atol=1e-5)
    assert (O[:full] == 0).all()            # whole tiles are the kernel's, not the combine's


def test_a_repeated_gluon_launch_swaps_bases_and_refreshes_every_output(monkeypatch):
    """GluonLaunch (the lean repeat v7's Gluon path records): the descriptors are built once and only their
    bases change; O, L and the split tail's workspace are new on every call and reach the kernel and the
    combine at their places in the signatures, with the recorded sizes and constexprs."""
    import types

    launched = []

    class FakeKernel:   # stands in for a CompiledKernel: records what its launcher would get
        function = packed_metadata = None

        def __init__(self, name):
            self.name = name

        def run(self, *args):
            launched.append((self.name, args[9:]))   # after grid x3, stream, function, metadata, hooks

    import fa2lab.hostpath

    monkeypatch.setattr(fa2lab.hostpath, "driver",
                        types.SimpleNamespace(active=types.SimpleNamespace(get_current_stream=lambda i: 0)))
    B, N, D = 2, 100, 64
    descs = [types.SimpleNamespace(base=None) for _ in range(3)]
    O0, L0 = torch.empty(B, N, D), torch.empty(B, N)
    Op0, Lp0 = torch.empty(2 * 192, D), torch.empty(2 * 192)
    o_desc = types.SimpleNamespace(base=None)                          # tma_store's (None without it)
    # strides, sizes, scale, FULL, SPLITS, items, the workspace, mixed's BIG (0 here), O's descriptor
    args = (*descs, O0, L0, 64, 100, N, N, 0.18, 1, 2, 5, Op0, Lp0, 0, o_desc)
    launch = G.GluonLaunch(FakeKernel("main"), (5,), args, (False, 4), (Op0, Lp0, 1, 2),
                           (FakeKernel("combine"), (1, 6), (2, 192, 32, D)), "ws3x64x128/4s/preg/split")
    seen = []
    for _ in range(2):
        Q, K, V = (torch.randn(B, N, D) for _ in range(3))
        O, L = launch(Q, K, V)
        (main, m), (comb, c) = launched[-2:]
        assert (main, comb) == ("main", "combine")
        assert all(d.base is t for d, t in zip(m[:3], (Q, K, V))) and m[3] is O and m[4] is L
        assert m[5:13] == (64, 100, N, N, 0.18, 1, 2, 5) and m[15] == 0 and m[17:] == (False, 4)
        assert m[16] is o_desc and o_desc.base is O          # O's descriptor follows each call's O
        Op, Lp = m[13], m[14]
        assert Op.shape == Op0.shape and Op is not Op0 and Lp.shape == Lp0.shape
        assert all(x is y for x, y in zip(c[:4], (Op, Lp, O, L))) and c[4:] == (1, N, 64, 100, 2, 192, 32, D)
        seen.append((m[:3], O))
    assert all(a is b for a, b in zip(seen[0][0], seen[1][0])), "the descriptors are built once"
    assert seen[0][1] is not seen[1][1]


def test_flattened_rows_need_head_contiguous_strides():
    t = torch.zeros(3, 100, 64, dtype=torch.bfloat16)
    flat = G.flattened(t)
    assert flat.shape == (300, 64) and flat.data_ptr() == t.data_ptr()
    assert G.flattened(t.transpose(0, 1)) is None                      # heads not N rows apart
    wide = torch.zeros(3, 100, 72, dtype=torch.bfloat16)[..., :64]          # 144-byte rows: TMA-legal
    assert G.flattened(wide).stride() == (72, 1)
    assert G.flattened(torch.zeros(3, 100, 68, dtype=torch.bfloat16)[..., :64]) is None   # 136-byte rows

COMPILE = """
import json, re, sys
sys.path.insert(0, {repo!r})
from fa2lab.versions import load_shared
G = load_shared("gluon_forward_hopper")
from profiling.inspect_kernel import disassemble
out = {{}}
persist = lambda **option: G.GluonConfig(128, 128, 4, 3, consumers=2, pingpong=True, persistent=True, **option)
for label, cfg, causal in [("plain", G.GluonConfig(128, 64, 8, 3, p_smem=True), False),
                           ("ws", G.GluonConfig(192, 128, 4, 3, consumers=3), False),
                           ("ws_causal", G.GluonConfig(128, 128, 4, 3, consumers=2), True),
                           ("ws_pp_pin_split", G.GluonConfig(192, 128, 4, 3, consumers=3, pingpong=True,
                                                             pin_ex2=True, split_tail=True), False),
                           ("ws_persist", persist(), True),
                           ("ws_persist_ta", persist(thread_arrive=True), True),
                           ("ws_persist_io", persist(item_overlap=True), True),
                           ("ws_persist_pf", persist(tma_prefetch=True), False),
                           ("ws_persist_1024", persist(), False),
                           ("ws_persist_ts_1024", persist(tma_store=True), False),
                           ("ws_persist_ts", persist(tma_store=True), False),
                           ("ws_persist_vb", persist(v_barrier=True), True),
                           ("ws_persist_tm_1024", persist(tree_max=True), False),
                           ("ws_persist_tm", persist(tree_max=True), True),
                           ("ws_persist_ua_1024", persist(unsynced_arrive=True), False),
                           ("ws_persist_ua", persist(unsynced_arrive=True), True),
                           ("ws_persist_ua_px4_1024", persist(unsynced_arrive=True, poly_exp=4), False),
                           ("ws_persist_ua_px8_1024", persist(unsynced_arrive=True, poly_exp=8), False),
                           ("ws_persist_ua_rs_1024", persist(unsynced_arrive=True, row_sum=True), False),
                           ("ws3_split_ua_rs", G.GluonConfig(192, 128, 4, 4, consumers=3, pingpong=True, split_tail=True,
                                                             persistent=True, unsynced_arrive=True, row_sum=True), False),
                           ("ws_persist_ua_st_1024", persist(unsynced_arrive=True, stream=True), False),
                           ("ws_persist_ua_ff_1024", persist(unsynced_arrive=True, fold_first=True), False),
                           ("ws_persist_ua_l2_1024", persist(unsynced_arrive=True, l2_prefetch=True), False),
                           ("ws_persist_ua_qm_1024", persist(unsynced_arrive=True, q_major=True), False),
                           ("ws_persist_ua_v0_1024", persist(unsynced_arrive=True, v_first=True), False),
                           ("ws_persist_ua_h1_1024", persist(unsynced_arrive=True, hold_first=1), False),
                           ("ws_persist_ua_h2_1024", persist(unsynced_arrive=True, hold_first=2), False),
                           ("ws_persist_ua_n4_1024", persist(unsynced_arrive=True, narrow_from=4), False),
                           ("ws_persist_ua_sc_1024", persist(unsynced_arrive=True, shared_code=True), False),
                           ("ws3_split_ua_sc", G.GluonConfig(192, 128, 4, 4, consumers=3, pingpong=True,
                                                             split_tail=True, persistent=True, unsynced_arrive=True,
                                                             shared_code=True), False),
                           *((f"ws_persist_ua_et1{{tail.replace('/', '_')}}_1024",
                              G.configs_named(["ws2x64x128/3s/preg/persist/ua/et1" + tail])[0], False)
                             for tail in ("", "/sc", "/sc2")),
                           ("ws_persist_ua_ds_1024", persist(unsynced_arrive=True, direct_store=True), False),
                           ("ws_persist_ua_ds_q1_1024", persist(unsynced_arrive=True, direct_store=True, one_q=True),
                            False),
                           ("ws_persist_ua_st", persist(unsynced_arrive=True, stream=True), False),
                           ("ws3_mix", G.GluonConfig(192, 128, 4, 4, consumers=3, pingpong=True, persistent=True,
                                                     unsynced_arrive=True, mixed=True), False)]:
    c = G.compile_offline(cfg, N=1024 if label.endswith("_1024") else 1000, is_causal=causal)
    ttgir, ptx = c.asm["ttgir"], c.asm["ptx"]
    depth = {{}}   # the longest chain of max.f32 each feeding the next, by the PTX's virtual registers
    for m in re.finditer(r"max\\.f32\\s+(%r\\d+),\\s*(%r\\d+),\\s*(%r\\d+);", ptx):
        depth[m.group(1)] = 1 + max(depth.get(m.group(2), 0), depth.get(m.group(3), 0))
    out[label] = {{"shared": int(c.metadata.shared), "estimate": cfg.smem_bytes(64),
                   "warp_specialize": ttgir.count("ttg.warp_specialize"),
                   "wait_1": ttgir.count("pendings = 1"), "cubin": len(c.asm["cubin"]),
                   "arrives": ptx.count("mbarrier.arrive.shared"), "bar_sync": ptx.count("bar.sync"),
                   "thread_arrives": ptx.count("cp.async.mbarrier.arrive.noinc"),
                   "bulk_stores": ptx.count("cp.async.bulk.tensor.2d.global.shared::cta"),
                   "bulk_loads": ptx.count("cp.async.bulk.tensor.2d.shared"),
                   "store_waits": len(re.findall(r"cp\\.async\\.bulk\\.wait_group\\.read\\s+0;", ptx)),
                   "st_v4": ptx.count("st.global.v4"),
                   "max_f32": len(depth), "max_chain": max(depth.values(), default=0),
                   "shfl": ptx.count("shfl.sync"), "st_shared": ptx.count("st.shared"),
                   "ex2": ptx.count("ex2.approx"), "ld_shared": ptx.count("ld.shared"),
                   "add_f32": len(re.findall(r"\\badd\\.(?:rn\\.)?f32", ptx)),
                   "wgmma": {{n: len(re.findall(r"wgmma\\.mma_async[._a-z]*\\.m64n" + n + r"k16", ptx))
                             for n in ("8", "64", "128")}},
                   "marks": ptx.count(G.UNSYNCED_MARK),
                   # bar.syncs in the key loop's issue of S_j and P_(j-1) V_(j-1): from the slot's wait, the third
                   # mbarrier operation before the wait for S_j (the only wait_group 1, with row_sum 2), to that wait
                   "issue_syncs": (lambda head: head[head.rfind("\\n", 0, [m.start() for m in re.finditer(
                       r"mbarrier\\.", head)][-3]):].count("bar.sync"))(
                       ptx.split(f"wgmma.wait_group.sync.aligned {{2 if cfg.row_sum else 1}};")[0]),
                   "expects": ptx.count("expect_tx"), "try_waits": ptx.count("mbarrier.try_wait"),
                   "partition_bars": ptx.count("bar.sync %fa2bar, 128"),
                   "calls": ptx.count("call.uni"), "funcs": ptx.count(".func"), "ties": ptx.count("%fa2tie, "),
                   "inlined": ptx.count("$fa2_consumer:"), "returns": len(re.findall(r"^\\$fa2_ret\\d+:", ptx, re.M)),
                   # ptxas waits for each HGMMA of a called function (C7510): WARPGROUP.DEPBAR per HGMMA in the SASS
                   "hgmma_depbar": (lambda sass: (sass.count("HGMMA."), sass.count("WARPGROUP.DEPBAR")))(
                       disassemble(c.asm["cubin"])[0] or "") if "_sc" in label else None,
                   "func_whole_cta_syncs": G.partition_syncs(ptx)[1],
                   # the product issued last before a whole tile's O leaves (m64n128: a Q K^T; m64n64: a P V)
                   "before_store": (re.findall(r"wgmma[._a-z]*\\.(m64n\\d+k16)", ptx.split("st.global.v4")[0])
                                    or [None])[-1],
                   "tensormaps": [int(i) for i in re.findall(r"\\.b8 flash_fwd_gluon_ws_param_(\\d+)\\[128\\]", ptx)],
                   "l2_asks": re.findall(r"flash_fwd_gluon_ws_param_(\\d+);\\s*cvta\\.param\\.u64 \\S+ \\S+\\s*"
                                         r"@\\S+ cp\\.async\\.bulk\\.prefetch\\.tensor\\.2d\\.L2", ptx),
                   "prefetched": re.findall(r"prefetch\\.param\\.tensormap \\[flash_fwd_gluon_ws_param_(\\d+)\\]",
                                            ptx.split("cp.async.bulk.tensor")[0])}}
print(json.dumps(out))
"""


def _offline(script: str) -> dict:
    """The JSON that a compile script (COMPILE, WIDE_COMPILE) prints last, run in a subprocess without
    TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-c", script.format(repo=str(REPO))], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def compiled():
    return _offline(COMPILE)


def test_offline_compiles_for_sm90(compiled):
    for label, r in compiled.items():
        assert r["cubin"] > 0, label
        # the estimate is what fits() uses: within 64 bytes (barrier alignment) of what Triton allocates; tma_store's
        # counts its row vector's scratch (256 bytes) even where N leaves it to plain stores (N = 1000)
        over = 256 if label == "ws_persist_ts" else 0
        assert -64 <= r["estimate"] - r["shared"] <= 64 + over, (label, r)


def test_warp_specialized_form_is_warp_specialized(compiled):
    assert compiled["plain"]["warp_specialize"] == 0
    assert compiled["ws"]["warp_specialize"] >= 1 and compiled["ws_causal"]["warp_specialize"] >= 1


def test_persistent_form_double_buffers_the_queries(compiled):
    # two Q buffers (the estimate counts them: within 64 bytes of what Triton allocates, like every form),
    # so its shared memory exceeds the one-buffer form's by one query tile of 2 x 64 rows
    assert compiled["ws_persist"]["shared"] - compiled["ws_causal"]["shared"] == pytest.approx(2 * 64 * 64 * 2 + 40,
                                                                                             abs=64)
    assert compiled["ws_persist"]["warp_specialize"] >= 1


def test_ping_pong_turns_are_in_the_binary(compiled):
    # without ping-pong each of the 3 consumers has three arrive sites (a slot released in the key loop,
    # the last slot, its Q buffer); with it three more (turns passed after S_0, after each loop
    # iteration's products, after the last P V), plus consumer 0's first turn given at the start
    assert compiled["ws"]["arrives"] == 3 * 3
    assert compiled["ws_pp_pin_split"]["arrives"] == 3 * 6 + 1


def test_each_form_leaves_one_product_in_flight_under_the_softmax(compiled):
    # the wait after Q K_j^T leaves P_(j-1) V_(j-1) running (one per consumer partition in the
    # warp-specialized form, whose partitions are copies of one function)
    assert compiled["plain"]["wait_1"] >= 1
    assert compiled["ws"]["wait_1"] >= 3 and compiled["ws_causal"]["wait_1"] >= 2


def test_thread_arrive_drops_the_bar_sync_before_each_arrive(compiled):
    # thread_arrive: each consumer's five arrive sites on a turn or a slot (turns after S_0, after each loop
    # iteration's products and after the last P V; slots released in the loop and after it) become per-thread
    # cp.async arrivals; what stays elected: consumer 0's first turn and each consumer's Q buffer release
    ta, base = compiled["ws_persist_ta"], compiled["ws_persist"]
    assert (ta["thread_arrives"], ta["arrives"]) == (2 * 5, 1 + 2)
    assert base["thread_arrives"] == 0 and base["arrives"] == 1 + 2 * 6
    # the bar.sync Triton 3.6 puts before an elected arrive (and, after one, before the next shared-memory
    # access) goes with it: at least the two of each consumer's key loop
    assert ta["bar_sync"] <= base["bar_sync"] - 2 * 2, (ta, base)


def test_item_overlap_issues_the_next_scores_before_the_epilogue(compiled):
    # persistent, 128 keys a tile, D = 64: without item_overlap the last product before an item's O store is its
    # last P V; with it, the next item's (or the spare tile's) S_0 = Q K^T is issued in between
    assert compiled["ws_persist"]["before_store"] == "m64n64k16"
    assert compiled["ws_persist_io"]["before_store"] == "m64n128k16"
    with pytest.raises(ValueError, match="item_overlap needs a persistent grid"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, item_overlap=True)


def test_tma_prefetch_names_the_three_descriptors(compiled):
    # _prefetch_descriptors names the kernel's parameters: they must be the 128-byte tensormaps of Q, K and V,
    # and the prefetches come before the first bulk copy
    pf = compiled["ws_persist_pf"]
    assert pf["tensormaps"] == [0, 5, 10]
    assert sorted(int(i) for i in pf["prefetched"]) == pf["tensormaps"]
    assert compiled["ws_persist"]["prefetched"] == []


def test_tma_store_sends_o_through_the_copy_engine_where_rows_stay_in_their_head(compiled):
    # N = 1024: each consumer's O leaves by one TMA store per item (both consumers' partitions: 2 sites) and no
    # 16-byte plain store is left (the split tail's fp32 parts still use plain 8-byte ones); each consumer waits
    # for its staging buffer's previous store before writing it and once after its last item
    ts, base = compiled["ws_persist_ts_1024"], compiled["ws_persist_1024"]
    assert (ts["bulk_stores"], ts["st_v4"]) == (2, 0), ts
    assert ts["store_waits"] == 2 * 2, ts
    assert base["bulk_stores"] == 0 and base["st_v4"] > 0
    # N = 1000: a consumer's 64 rows could cross a head's end, so the host passes no descriptor: plain stores
    ragged = compiled["ws_persist_ts"]
    assert ragged["bulk_stores"] == 0 and ragged["st_v4"] == compiled["ws_persist"]["st_v4"] > 0


def test_tma_store_descriptor_only_where_a_block_stays_in_one_head():
    cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, tma_store=True)
    O = torch.empty(4, 1024, 64, dtype=torch.bfloat16, device="meta")
    d = G.o_descriptor(O, cfg)
    assert d is not None and list(d.block_shape) == [64, 64] and list(d.shape) == [4 * 1024, 64]
    assert G.o_descriptor(torch.empty(4, 1000, 64, dtype=torch.bfloat16, device="meta"), cfg) is None
    assert G.o_descriptor(O, G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True)) is None
    assert G.o_descriptor(O.transpose(0, 1), cfg) is None     # heads not N rows apart: not flattened rows
    with pytest.raises(ValueError, match="one at most"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, tma_store=True, direct_store=True)
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, tma_store=True)


def test_v_barrier_lets_q_k_wait_for_k_alone(compiled):
    # the loader's K/V copy site expects K's bytes on the slot's ready barrier and V's on its own (one expect more);
    # each consumer waits for V before each P V (in the key loop and before the last): two waits more per consumer,
    # and no bar.sync more in the key loop (the 3 more are after the 3 new barriers' initialisation)
    vb, base = compiled["ws_persist_vb"], compiled["ws_persist"]
    assert vb["expects"] == base["expects"] + 1
    assert vb["try_waits"] == base["try_waits"] + 2 * 2
    assert vb["bar_sync"] == base["bar_sync"] + 3


def test_tree_max_folds_each_row_by_halves(compiled):
    # the same max instructions, shuffles and shared-memory stores (the reshapes only rename registers), but the
    # longest chain of maxima, which the first exponential of each tile waits for, from 33 (32 per row in a thread,
    # then the running maximum) to at most 8 (5 halvings, the quad's 2 shuffles' maxima, the running maximum)
    for tm, base in ((compiled["ws_persist_tm_1024"], compiled["ws_persist_1024"]),
                     (compiled["ws_persist_tm"], compiled["ws_persist"])):
        assert base["max_chain"] >= 32, base
        assert tm["max_chain"] <= 8, tm
        for key in ("max_f32", "shfl", "st_shared", "bar_sync", "shared"):
            assert tm[key] == base[key], (key, tm, base)
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, tree_max=True).label == "ws2x64x128/3s/preg/tm"
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, tree_max=True)


def test_drop_marked_syncs_removes_only_the_bar_sync_before_a_marked_mbarrier_operation():
    mark = G.UNSYNCED_MARK
    ptx = "\n".join([
        "\tbar.sync \t0, 128;",                                  # before a marked arrive (an address computed between)
        "\tadd.s32 \t%r5, %r4, 147552;",
        "\t// begin inline asm",
        "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r5];",
        "\t// end inline asm",
        "$L__tmp3:",
        f"\tmov.b32 %r6, %r7; // {mark}",
        "\tbar.sync \t0, 128;",                                  # before a marked wait
        "\t// begin inline asm",
        "\t",
        "{",
        "\t.reg .pred complete;",
        "\twaitLoop:",
        "\tmbarrier.try_wait.parity.shared.b64 complete, [%r8], %r9;",
        "}",
        f"\tmov.b32 %r10, %r7; // {mark}",
        "\tbar.sync \t0, 128;",                                  # before an unmarked arrive: kept
        "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r11];",
        "\tst.shared.b32 [%r12], %r13;",
        "\tbar.sync \t0, 128;",                                  # a shared-memory store between: kept
        "\tld.shared.b32 %r14, [%r12];",
        "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r15];",
        f"\tmov.b32 %r16, %r7; // {mark}",
        "\tbar.sync \t1, 256;",                                  # not a 4-warp partition's: kept
        "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r17];",
        f"\tmov.b32 %r18, %r7; // {mark}",
    ])
    out, removed = G.drop_marked_syncs(ptx)
    assert removed == 2
    assert out.count("bar.sync") == ptx.count("bar.sync") - 2 == 3
    assert out.splitlines()[0].startswith("\tadd.s32") and "mbarrier.try_wait" in out
    assert G.drop_marked_syncs(out) == (out, 0)                     # idempotent
    assert G.drop_marked_syncs(ptx.replace(mark, "other")) == (ptx.replace(mark, "other"), 0)


def test_unsynced_arrive_leaves_no_bar_sync_in_the_key_loop(compiled):
    # each consumer marks 6 mbarrier operations (the slot's ready wait, the turn's and the slot's arrives in the key
    # loop; the first and last turns' and the last slot's arrives); each had a bar.sync before it, and nothing else is
    # touched: the base keeps 3 in the key loop, the same shared memory, the same number of mbarrier operations
    for ua, base in ((compiled["ws_persist_ua_1024"], compiled["ws_persist_1024"]),
                     (compiled["ws_persist_ua"], compiled["ws_persist"])):
        assert base["marks"] == 0 and ua["marks"] == 2 * 6
        assert ua["bar_sync"] == base["bar_sync"] - ua["marks"]
        assert base["issue_syncs"] == 1 and ua["issue_syncs"] == 0      # the one before the turn's arrive
        for key in ("arrives", "try_waits", "shared", "expects"):
            assert ua[key] == base[key], (key, ua, base)
    cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True)
    assert cfg.label == "ws2x64x128/3s/preg/pp/persist/ua"
    for clash in (dict(thread_arrive=True), dict(p_smem=True), dict(pin_ex2=True)):
        with pytest.raises(ValueError, match="unsynced_arrive"):
            G.GluonConfig(128, 128, 4, 3, consumers=2, unsynced_arrive=True, **clash)


@pytest.mark.parametrize("env, ua, ta", [({}, True, False), ({"FA2_V7_UNSYNCED_ARRIVE": "0"}, False, False),
                                         ({"FA2_V7_THREAD_ARRIVE": "1"}, False, True)])
def test_v7_candidates_drop_the_arrive_syncs_unless_switched_off(env, ua, ta):
    # on by default since session 20; thread_arrive, which arrives from every thread, excludes it
    printed = "[(c.unsynced_arrive, c.thread_arrive) for c in G.V7_CANDIDATES]"
    assert _candidates(printed, **env) == str([(ua, ta)] * len(G.V7_BASE))


def test_poly_exp_moves_a_quarter_or_an_eighth_of_the_exponentials_off_the_mufu(compiled):
    # 16 of each thread's 64 exponentials per tile (px4) or 8 (px8), in each of the softmax's 4 copies (2 consumers,
    # the first tile and the loop's), leave ex2; the alphas stay; the split and join only rename registers (no shared
    # memory, no shuffle more)
    base, px4, px8 = (compiled[k] for k in ("ws_persist_ua_1024", "ws_persist_ua_px4_1024", "ws_persist_ua_px8_1024"))
    assert base["ex2"] - px4["ex2"] == 2 * (base["ex2"] - px8["ex2"]) == 4 * 16
    for key in ("shfl", "st_shared", "ld_shared", "shared", "bar_sync", "marks"):
        assert px4[key] == px8[key] == base[key], (key, px4, px8, base)
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, poly_exp=4).label == "ws2x64x128/3s/preg/px4"
    with pytest.raises(ValueError, match="poly_exp is 0"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, poly_exp=2)
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, poly_exp=4)


def _exp2_poly_float32(x):
    """_exp2_poly's arithmetic in numpy float32, from its source's constants (so that the two cannot drift apart)."""
    import numpy as np

    src = inspect.getsource(G._exp2_poly.fn)
    coeffs = [float(c) for c in re.findall(r"p = [pf] \* (?:f|0\.\d+) \+ (-?\d+\.\d+)", src)]
    first = float(re.search(r"p = f \* (\d+\.\d+)", src).group(1))
    assert (first, *coeffs) == G.POLY_EXP_COEFFS, (first, coeffs)
    c = [np.float32(v) for v in G.POLY_EXP_COEFFS]
    x = np.maximum(x.astype(np.float32), np.float32(-126.0))
    t = x + np.float32(12582912.0)
    f = x - (t - np.float32(12582912.0))
    p = ((f * c[0] + c[1]) * f + c[2]) * f + c[3]
    return (p.astype(np.float32).view(np.int32) + (t.view(np.int32) << np.int32(23))).view(np.float32)


def test_exp2_poly_is_within_bf16_rounding_and_finite_on_masked_scores():
    import numpy as np

    x = np.linspace(-126.0, 0.0, 1_000_001, dtype=np.float32)
    exact = np.exp2(x.astype(np.float64))
    assert (np.abs(_exp2_poly_float32(x) - exact) / exact).max() < 2e-4   # bf16's rounding of P: 2^-9 = 2e-3
    low = _exp2_poly_float32(np.array([-np.inf, -1e4, -200.0], dtype=np.float32))
    assert np.all(np.isfinite(low)) and np.all((low >= 0) & (low < 2e-38))


def test_mixed_schedule_plan_and_offline_compile(compiled):
    # whole rounds of 192-row items over the SMs, spread evenly over the heads, the rest of each head in 128-row items
    assert G.mix_plan(2048, 32, 132, 192) == 8        # 8 x 192 + 4 x 128 rows per head: 2 rounds, then at most 1 small
    assert G.mix_plan(1024, 32, 132, 192) == 4
    assert G.mix_plan(1000, 32, 132, 192) == 4        # experiments' GLUON_CHECK_SHAPES (32, 1000, 1000, 64): mixed runs
    assert G.mix_plan(512, 32, 132, 192) == 0         # not one round: one item size
    assert G.mix_plan(300, 1000, 132, 192) == 1       # 11 rounds over 1000 heads: one 192-row item each
    for rows, heads in ((2048, 32), (1000, 32), (300, 1000), (777, 64), (192, 132)):
        assert 0 <= G.mix_plan(rows, heads, 132, 192) * 192 <= rows
    assert compiled["ws3_mix"]["cubin"] > 0 and compiled["ws3_mix"]["warp_specialize"] >= 1
    cfg = G.GluonConfig(192, 128, 4, 4, consumers=3, pingpong=True, persistent=True, mixed=True)
    assert cfg.label == "ws3x64x128/4s/preg/pp/persist/mix"
    for bad in (dict(consumers=2, block_m=128), dict(persistent=False), dict(split_tail=True), dict(item_overlap=True)):
        with pytest.raises(ValueError, match="mixed is a persistent 3-consumer schedule"):
            G.GluonConfig(**{**dict(block_m=192, block_n=128, num_warps=4, slots=4, consumers=3, pingpong=True,
                                    persistent=True, mixed=True), **bad})


def test_mixed_launch_plan_counts_its_items():
    # N = 2048, 32 heads, 132 SMs: 8 items of 192 rows and 4 of 128 per head, one program per SM, BIG passed to the
    # kernel
    cfg = G.GluonConfig(192, 128, 4, 4, consumers=3, pingpong=True, persistent=True, mixed=True)
    q = torch.empty(32, 2048, 64, dtype=torch.bfloat16)
    if not G.HAVE_GLUON:
        pytest.skip("this Triton has no Gluon")
    O, L = torch.empty_like(q), torch.empty(32, 2048)
    kernel, grid, args, _, flags, tail = G.launch_plan(cfg, q, q, q, O, L, False, 132)
    full, splits, items, big = args[10], args[11], args[12], args[15]
    assert (full, splits, items, big, grid, tail) == (32 * 12, 1, 32 * 12, 8, (132,), None)
    assert flags["MIXED"] is True
    *_, args_causal, _, flags_causal, _ = G.launch_plan(cfg, q, q, q, O, L, True, 132)
    assert args_causal[15] == 0                          # the causal mask keeps one item size


def test_row_sum_moves_the_row_sums_onto_the_tensor_cores(compiled):
    # each P V (m64n64k16 in the PTX) has its P ones beside it (m64n8k16), and the adds of the row sums leave every
    # copy of the softmax (2 consumers x the first tile and the loop's: 4 x 66 with 128 keys, 6 x 66 for 3 consumers);
    # the S_j wait leaves two groups in flight, not one; the ones tile costs its 2 KB and one barrier at the start, no
    # shuffle or shared-memory access in the key loop (the row's total is read once, after the last product)
    base, rs = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_rs_1024"]
    for r in (rs, compiled["ws3_split_ua_rs"]):
        assert r["wgmma"]["8"] == r["wgmma"]["64"] > 0, r
    assert base["wgmma"]["8"] == 0 and base["wgmma"]["64"] == rs["wgmma"]["64"]
    assert base["add_f32"] - rs["add_f32"] == 4 * 66, (base, rs)
    assert compiled["ws3_split_ua_rs"]["add_f32"] <= 6 * 8, compiled["ws3_split_ua_rs"]
    assert base["wait_1"] > 0 and rs["wait_1"] == 0
    assert rs["shared"] - base["shared"] == G.ROW_SUM_COLS * 128 * 2
    assert rs["shfl"] < base["shfl"] and rs["ld_shared"] == base["ld_shared"]
    assert (rs["bar_sync"], rs["marks"], rs["ex2"]) == (base["bar_sync"] + 1, base["marks"], base["ex2"])
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, row_sum=True).label == "ws2x64x128/3s/preg/rs"
    with pytest.raises(ValueError, match="row_sum takes P from registers"):
        G.GluonConfig(128, 128, 4, 3, p_smem=True, consumers=2, row_sum=True)
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, row_sum=True)


def test_stream_issues_the_next_items_first_scores_with_the_last_p_v(compiled):
    # per consumer _attend is inlined twice (the items before the last, whose last P V goes with the next item's S_0,
    # and the last item), each with the item loop's products and marked arrivals; three waits leaving one group in
    # flight (the two key loops' and the next S_0's); the epilogue twice; the same shared memory, no bar.sync in the
    # issue of a key tile
    base, st = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_st_1024"]
    assert st["cubin"] > 0 and st["warp_specialize"] >= 1
    assert st["wgmma"] == {n: 2 * c for n, c in base["wgmma"].items()}, (st, base)
    assert st["wait_1"] == 3 * base["wait_1"] and st["marks"] == 2 * base["marks"], (st, base)
    assert st["st_v4"] == 2 * base["st_v4"], (st, base)
    assert (st["shared"], st["issue_syncs"]) == (base["shared"], 0)
    assert compiled["ws_persist_ua_st"]["cubin"] > 0   # N = 1000: a ragged last key tile, masked in every item
    cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, pingpong=True, persistent=True, stream=True)
    assert cfg.label == "ws2x64x128/3s/preg/pp/persist/st"
    _refused(dict(stream=True), (dict(persistent=False), dict(split_tail=True), dict(item_overlap=True),
                                 dict(row_sum=True), dict(p_smem=True), dict(tma_store=True), dict(v_barrier=True)),
             "stream is a persistent grid of whole tiles")
    q = torch.empty(8, 1024, 64, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="non-causal only"):
        G.launch_plan(cfg, q, q, q, torch.empty_like(q), torch.empty(8, 1024, device="meta"), True, sms=132)


def test_stream_is_switched_on_for_the_persistent_128_row_candidate_and_off_under_the_causal_mask():
    printed = "[c.stream for c in G.V7_CANDIDATES], [c.stream for c in G.for_mask(G.V7_CANDIDATES, True)]"
    assert _candidates(printed, FA2_V7_STREAM="1") == "[True, False, False] [False, False, False]"
    assert _candidates(printed) == "[False, False, False] [False, False, False]"


def test_switches_that_one_q_or_direct_store_exclude_pass_the_one_q_candidate_by():
    """stream and item_overlap need a second query buffer, tma_store is another way out for O than direct_store:
    switched on for v7's candidates, they leave the D = 128 one_q candidate as it is rather than failing."""
    printed = "[(c.stream, c.item_overlap, c.tma_store, c.one_q) for c in G.V7_CANDIDATES_WIDE]"
    f, q1 = (False,) * 4, (False, False, False, True)
    assert _candidates(printed) == str([f, f, q1])
    assert _candidates(printed, FA2_V7_STREAM="1") == str([(True, False, False, False), f, q1])
    assert _candidates(printed, FA2_V7_ITEM_OVERLAP="1") == str([(False, True, False, False), f, q1])
    assert _candidates(printed, FA2_V7_TMA_STORE="1") == str([(False, False, True, False)] * 2 + [q1])


def test_head_dimension_128_has_candidates_of_its_own():
    """At D = 128 none of v7's 128-key candidates fits a Hopper block's 227 KB (three K/V slots of 128 x 128 are 192 KB),
    so v7 takes candidates of its own there (64-key tiles, experiment gluon --D 128): each fits, each is a measured
    configuration."""
    smem = 232448   # an H100/H200 block's opt-in maximum
    assert G.candidates_for(64) == G.V7_CANDIDATES and G.candidates_for(128) == G.V7_CANDIDATES_WIDE
    assert not any(c.fits(128, smem) for c in G.V7_CANDIDATES)
    assert G.V7_CANDIDATES_WIDE and all(c.fits(128, smem) for c in G.V7_CANDIDATES_WIDE)
    assert {c.label for c in G.V7_CANDIDATES_WIDE} <= {c.label for c in G.EXPERIMENT_CONFIGS}
    # every head dimension the Gluon path takes (fa2lab.shapes, experiment gluon --D) has a candidate that fits
    assert all(any(c.fits(D, smem) for c in G.candidates_for(D)) for D in G.HEAD_DIMS)


WIDE_COMPILE = """
import json, sys
sys.path.insert(0, {repo!r})
from fa2lab.versions import load_shared
from profiling.inspect_kernel import disassemble
G = load_shared("gluon_forward_hopper")
out = {{}}
for cfg in G.V7_CANDIDATES_WIDE:
    c = G.compile_offline(cfg, N=2048, D=128)
    sass = disassemble(c.asm["cubin"])[0]
    out[cfg.label] = {{"shared": int(c.metadata.shared), "estimate": cfg.smem_bytes(128),
                       "local_stores": None if sass is None else sass.count("STL"),
                       "products": None if sass is None else sass.count("HGMMA"),
                       "waits": None if sass is None else sass.count("WARPGROUP.DEPBAR"),
                       "two_in_flight": None if sass is None else "WARPGROUP.DEPBAR.LE gsb0, 0x2" in sass}}
print(json.dumps(out))
"""


def test_head_dimension_128_candidates_compile_within_the_estimate_and_without_spills():
    out = _offline(WIDE_COMPILE)
    assert set(out) == {c.label for c in G.V7_CANDIDATES_WIDE}
    for label, r in out.items():
        # fits() may only err on the safe side: at D = 128 Triton's epilogue scratch is smaller than the estimate's
        assert r["shared"] <= r["estimate"] <= 232448, (label, r)
        assert r["local_stores"] in (None, 0), (label, r)   # None: no nvdisasm or cuobjdump to read the SASS
        if r["products"] is not None:
            # ptxas did not serialise the wgmma (C7514 puts a wait after every one)
            assert r["waits"] < r["products"] / 2, (label, r)
            # lookahead's key loop waits for S_j with P_(j-1) V_(j-1) and S_(j+1) still in flight; nothing else does
            assert r["two_in_flight"] == label.endswith("/la"), (label, r)
    assert any(label.endswith("/la") for label in out)


def test_lookahead_is_a_warp_specialized_option_with_p_in_registers():
    cfg = G.GluonConfig(128, 64, 4, 4, consumers=2, pingpong=True, persistent=True, unsynced_arrive=True,
                        lookahead=True)
    assert cfg.label == "ws2x64x64/4s/preg/pp/persist/ua/la"
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 64, 8, 3, lookahead=True)
    for clash in (dict(p_smem=True), dict(row_sum=True), dict(item_overlap=True), dict(v_barrier=True),
                  dict(stream=True)):
        with pytest.raises(ValueError, match="lookahead"):
            G.GluonConfig(**{**dict(block_m=128, block_n=64, num_warps=4, slots=4, consumers=2, persistent=True,
                                    lookahead=True), **clash})


def _candidates(printed: str, **env) -> str:
    """What a fresh process with the env switches `env` prints of the Gluon module's candidates (G: the module)."""
    return probe("from fa2lab.versions import load_shared; G = load_shared('gluon_forward_hopper'); "
                 f"print({printed})", **env)


def test_lookahead_is_on_for_the_head_dimension_128_candidate_unless_switched_off():
    printed = "[c.lookahead for c in G.V7_CANDIDATES_WIDE], [c.lookahead for c in G.V7_CANDIDATES]"
    assert _candidates(printed) == "[True, False, False] [False, False, False]"
    assert _candidates(printed, FA2_V7_LOOKAHEAD="0") == "[False, False, False] [False, False, False]"
    # an option lookahead excludes, switched on for the candidates, switches it off rather than failing
    assert _candidates(printed, FA2_V7_ROW_SUM="1") == "[False, False, False] [False, False, False]"


def test_even_registers_gives_two_consumers_240_each_and_only_two():
    two = G.GluonConfig(128, 128, 4, 2, consumers=2, pingpong=True, persistent=True)
    assert two.consumer_registers == 232   # the worker's; Triton gives the default partition 480 minus it
    even = G.GluonConfig(128, 128, 4, 2, consumers=2, pingpong=True, persistent=True, even_registers=True)
    assert even.consumer_registers == 240 and even.label.endswith("/er")
    with pytest.raises(ValueError, match="2 consumers only"):
        G.GluonConfig(192, 64, 4, 3, consumers=3, even_registers=True)


def test_tie_marked_arrives_predicates_the_next_elected_arrive_on_both_marked_row_sums():
    mark = G.TIE_MARK
    ptx = "\n".join([
        "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r1];",        # before any mark: left alone
        "\t// begin inline asm",
        "\tmov.b32 %r20, %r155;",
        f"\tmov.b32 %r21, %r156; // {mark}",
        "\t// end inline asm",
        "\tbar.sync \t0, 128;",
        "\t@%p190 mbarrier.arrive.shared::cta.b64 _, [%r1241];",  # the first arrive after the mark: tied
        "\t@%p190 mbarrier.arrive.shared::cta.b64 _, [%r1242];",  # the next one: left alone
    ])
    out, tied = G.tie_marked_arrives(ptx)
    assert tied == 1
    lines = out.splitlines()
    assert lines[0] == ptx.splitlines()[0] and lines[-1] == ptx.splitlines()[-1]
    tied_line = lines[6]
    one, tied_one = G.tie_marked_arrives(ptx.replace(mark, mark + " one"))
    assert tied_one == 1 and "%r155" not in one.splitlines()[6]   # "one": the second row's sum only
    assert "setp.geu.and.f32 %fa2tie, %r156, 0f00000000, %p190; @%fa2tie" in one.splitlines()[6]
    assert "setp.geu.and.f32 %fa2tie, %r155, 0f00000000, %p190;" in tied_line
    assert "setp.geu.and.f32 %fa2tie, %r156, 0f00000000, %fa2tie;" in tied_line
    assert "@%fa2tie mbarrier.arrive.shared::cta.b64 _, [%r1241];" in tied_line
    assert tied_line.strip().startswith("{") and tied_line.strip().endswith("}")
    assert G.tie_marked_arrives(ptx.replace(mark, "other")) == (ptx.replace(mark, "other"), 0)


def test_exp_turn_replaces_ping_pong_and_excludes_what_takes_no_turns():
    cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, unsynced_arrive=True, exp_turn=1)
    assert cfg.label == "ws2x64x128/3s/preg/persist/ua/et"
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, exp_turn=2).label == "ws2x64x128/3s/preg/et1"
    with pytest.raises(ValueError, match="exp_turn is 0"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, exp_turn=3)
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, exp_turn=1)
    _refused(dict(exp_turn=1), (dict(pingpong=True), dict(lookahead=True), dict(stream=True), dict(row_sum=True),
                                dict(block_m=192, consumers=3, mixed=True)), "exp_turn")


EXP_TURN_COMPILE = """
import json, re, sys
sys.path.insert(0, {repo!r})
from fa2lab.versions import load_shared
from profiling.inspect_kernel import disassemble
G = load_shared("gluon_forward_hopper")
out = {{}}
for label, cfg in [("ws2", G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, unsynced_arrive=True,
                                          exp_turn=1)),
                   ("ws3", G.GluonConfig(192, 128, 4, 4, consumers=3, persistent=True, split_tail=True,
                                          unsynced_arrive=True, exp_turn=1)),
                   ("ws2_one", G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, unsynced_arrive=True,
                                              exp_turn=2))]:
    c = G.compile_offline(cfg, N=2048)
    sass = disassemble(c.asm["cubin"])[0]
    ptx = c.asm["ptx"]
    spans = None
    if sass is not None:   # MUFU.EX2 between each wait and the next arrive of the SASS, in address order
        spans, count = [], None
        for line in sass.splitlines():
            if "SYNCS.PHASECHK" in line:
                count = 0
            elif "MUFU.EX2" in line and count is not None:
                count += 1
            elif "SYNCS.ARRIVE" in line and count is not None:
                spans.append(count)
                count = None
    out[label] = {{"marks": ptx.count(G.TIE_MARK), "tied": ptx.count("@%fa2tie mbarrier.arrive"),
                   "spans": spans}}
print(json.dumps(out))
"""


def test_exp_turn_arrives_after_every_exponential_of_its_tile():
    out = _offline(EXP_TURN_COMPILE)
    for label, r in out.items():
        assert r["marks"] > 0 and r["tied"] == r["marks"], (label, r)   # every marked pass of a turn is tied
        if r["spans"] is not None and label != "ws2_one":
            # a key tile's 64 exponentials and its 2 alphas lie between a wait (the turn's) and the tied arrive;
            # untied, ptxas put the arrive after the tile's first dozen (tied to one row: where ptxas likes)
            assert max(r["spans"]) == 66, (label, r)


def test_exp_turn_is_on_for_the_persistent_candidate_unless_switched_off():
    printed = "[(c.exp_turn, c.pingpong) for c in G.V7_CANDIDATES]"
    assert _candidates(printed) == "[(2, False), (0, True), (0, True)]"
    assert _candidates(printed, FA2_V7_EXP_TURN="0") == "[(0, True), (0, True), (0, True)]"
    # an option exp_turn excludes, switched on for the candidates, gives ping-pong's turns back rather than failing
    assert _candidates(printed, FA2_V7_ROW_SUM="1") == "[(0, True), (0, True), (0, True)]"
    # the rounds of sessions 15-24 keep varying ping-pong's candidates
    assert all(c.pingpong for c in G.with_option(tree_max=True))


def test_fold_first_keeps_one_copy_of_the_softmax_per_consumer(compiled):
    # each consumer's softmax was written out twice, for an item's first key tile and in the key loop; folded, the
    # first tile runs in the loop: 64 exponentials less in each consumer's code, one Q K^T issue site less and, for
    # tile 0's product of zeros, the same number of P V sites
    base, ff = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_1024".replace("_1024", "_ff_1024")]
    assert base["ex2"] - ff["ex2"] == 2 * 64, (ff, base)   # a first-tile copy's 64 exp2s (its alpha went unused)
    assert ff["wgmma"]["128"] < base["wgmma"]["128"] and ff["wgmma"]["64"] == base["wgmma"]["64"], (ff, base)
    assert ff["cubin"] < base["cubin"] and ff["shared"] == base["shared"]
    # the turn passed after S_0 (one arrive site per consumer) is the loop's own now
    assert ff["arrives"] == base["arrives"] - 2 and ff["try_waits"] <= base["try_waits"], (ff, base)
    cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, unsynced_arrive=True, exp_turn=2, fold_first=True)
    assert cfg.label == "ws2x64x128/3s/preg/persist/ua/et1/ff"
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, fold_first=True)
    _refused(dict(fold_first=True), (dict(p_smem=True), dict(row_sum=True), dict(stream=True),
                                     dict(item_overlap=True), dict(lookahead=True), dict(v_barrier=True)), "fold_first")


def test_l2_prefetch_asks_l2_for_key_and_query_tiles_beside_the_copies(compiled):
    base, l2 = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_l2_1024"]
    assert base["l2_asks"] == [] and l2["shared"] == base["shared"]
    # each ask names its descriptor's tensormap: K's (param_5) and V's (param_10) together, Q's (param_0) alone
    asks = l2["l2_asks"]
    assert set(asks) == {"0", "5", "10"} and asks.count("5") == asks.count("10") >= 2, asks
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, exp_turn=2,
                         l2_prefetch=True).label == "ws2x64x128/3s/preg/persist/et1/l2"
    with pytest.raises(ValueError, match="need the warp-specialized form"):
        G.GluonConfig(128, 128, 8, 3, l2_prefetch=True)


def test_q_major_orders_whole_tiles_only(compiled):
    base, qm = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_qm_1024"]
    assert qm["shared"] == base["shared"] and qm["cubin"] != base["cubin"]
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, q_major=True).label.endswith("/persist/qm")
    _refused(dict(q_major=True), (dict(split_tail=True), dict(stream=True)), "q_major")


def test_v_first_waits_for_the_first_v_once_per_consumer(compiled):
    base, v0 = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_v0_1024"]
    # one wait site per consumer (after its S_0's issue), one more expect site in the loader (tile 0's K alone, its V
    # on the new barrier), the same products
    assert v0["try_waits"] == base["try_waits"] + 2 and v0["expects"] == base["expects"] + 2, (v0, base)
    assert v0["wgmma"] == base["wgmma"] and v0["ex2"] == base["ex2"]
    assert v0["shared"] > base["shared"] and v0["estimate"] - base["estimate"] == 8
    _refused(dict(v_first=True), (dict(v_barrier=True), dict(lookahead=True), dict(stream=True)), "v_first")


def test_one_q_fits_three_128_key_slots_at_head_dimension_128(compiled):
    cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, pingpong=True, persistent=True, direct_store=True, one_q=True)
    assert cfg.label == "ws2x64x128/3s/preg/pp/persist/ds/q1" and cfg.q_buffers == 1
    h200 = 232448   # an H200 block's shared memory (the offline compile of this form: 229760 bytes)
    assert cfg.fits(128, h200) and not replace(cfg, one_q=False).fits(128, h200)
    assert not replace(cfg, direct_store=False).fits(128, h200)
    with pytest.raises(ValueError, match="one_q"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, one_q=True)
    assert {c.label for c in G.EXPERIMENT_CONFIGS} >= {"ws2x64x128/3s/preg/pp/persist/ds/ua/q1",
                                                        "ws2x64x128/3s/preg/persist/ds/ua/et1/q1"}
    _refused(dict(one_q=True, p_smem=False), (dict(lookahead=True), dict(item_overlap=True),
                                              dict(persistent=False)), "one_q")
    # the loader's key tiles in two loops (the first SLOTS - 1 before the query tile, the rest after it): K's and V's
    # copies issued from two sites each, one more wait for a free slot; Q's copies and the products as they were
    q1, two = compiled["ws_persist_ua_ds_q1_1024"], compiled["ws_persist_ua_ds_1024"]
    assert q1["bulk_loads"] == two["bulk_loads"] + 2 and q1["try_waits"] == two["try_waits"] + 1, (q1, two)
    assert q1["wgmma"] == two["wgmma"] and q1["shared"] < two["shared"]


def test_l2_prefetch_and_q_major_are_off_unless_switched_on():
    printed = "[(c.l2_prefetch, c.q_major) for c in G.V7_CANDIDATES + G.V7_CANDIDATES_WIDE]"
    assert _candidates(printed) == str([(False, False)] * 6)
    assert _candidates(printed, FA2_V7_L2_PREFETCH="1") == str([(True, False)] * 6)
    # the split-tail candidates keep their order
    assert _candidates(printed, FA2_V7_Q_MAJOR="1") == str([(False, q) for q in (True, True, False, True, False, True)])
    # v_first gives way to the D = 128 candidate's lookahead and to v_barrier
    v0 = "[c.v_first for c in G.V7_CANDIDATES + G.V7_CANDIDATES_WIDE]"
    assert _candidates(v0) == str([False] * 6)
    assert _candidates(v0, FA2_V7_V_FIRST="1") == str([True, True, True, False, True, True])
    assert _candidates(v0, FA2_V7_V_FIRST="1", FA2_V7_V_BARRIER="1") == str([False] * 6)
    # ... and to stream where a candidate takes it (the persistent 128-row ones without the split tail or one_q)
    assert _candidates(v0, FA2_V7_V_FIRST="1", FA2_V7_STREAM="1") == str([False, True, True, False, True, True])


def test_fold_first_is_off_unless_switched_on_and_gives_way_to_lookahead():
    printed = "[c.fold_first for c in G.V7_CANDIDATES], [c.fold_first for c in G.V7_CANDIDATES_WIDE]"
    assert _candidates(printed) == "[False, False, False] [False, False, False]"
    assert _candidates(printed, FA2_V7_FOLD_FIRST="1") == "[True, True, True] [False, True, True]"
    assert _candidates(printed, FA2_V7_FOLD_FIRST="1", FA2_V7_ROW_SUM="1") == \
        "[False, False, False] [False, False, False]"


def test_l2_promotion_is_host_only_and_marks_the_three_input_descriptors():
    """l2_promotion changes the descriptors' encoding (fa2lab.tma), never the kernel: the launch plan's kernel, grid,
    scalars and constexprs are those of the same configuration at Triton's 128 bytes; Q's, K's and V's descriptors
    carry the size asked for. Any other size is refused."""
    from fa2lab import tma

    with pytest.raises(ValueError, match="l2_promotion is one of"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, l2_promotion=100)
    q = torch.empty(8, 1024, 64, dtype=torch.bfloat16, device="meta")
    o, l = torch.empty_like(q), torch.empty(8, 1024, device="meta")
    plans = []
    for size in (128, 256):
        cfg = G.GluonConfig(128, 128, 4, 3, consumers=2, persistent=True, exp_turn=2, unsynced_arrive=True,
                            l2_promotion=size)
        plans.append(G.launch_plan(cfg, q, q, q, o, l, False, sms=132))
        assert cfg.label.endswith("/et1/l2p256" if size == 256 else "/et1")
    (k0, g0, a0, w0, f0, _), (k1, g1, a1, w1, f1, _) = plans
    assert (k0, g0, w0, f0) == (k1, g1, w1, f1) and len(a0) == len(a1)
    assert all(x is y if isinstance(x, torch.Tensor) else x == y for x, y in zip(a0[3:], a1[3:]))
    assert [getattr(d, "_fa2_l2_promotion", None) for d in a0[:3]] == [None] * 3
    assert [getattr(d, "_fa2_l2_promotion", None) for d in a1[:3]] == [256] * 3
    with pytest.raises(ValueError, match="L2 promotion is one of"):
        tma.mark(a1[0], 96)


def test_the_promotion_hook_rewrites_marked_host_descriptors_only(monkeypatch):
    """fa2lab.tma's wrapper of Triton's make_tensordesc_arg leaves unmarked descriptors and frontend-decomposed ones
    (no TMA metadata) as Triton made them, and re-encodes a marked one in place with its size."""
    import types

    from fa2lab import tma

    made, encoded = [], []

    def original(arg, metadata):
        made.append(arg)
        return [object(), 1, 2]

    monkeypatch.setattr(tma, "_map_address", lambda cu_map: 4096)
    monkeypatch.setattr(tma, "encode", lambda address, desc, metadata, size: encoded.append((address, desc, size)))
    monkeypatch.setitem(tma._state, "checked", True)
    wrapped = tma._promoting(original)
    plain, marked = types.SimpleNamespace(), tma.mark(types.SimpleNamespace(), 256)
    assert wrapped(plain, {"swizzle": 3})[1:] == [1, 2] and encoded == []
    assert wrapped(marked, None)[1:] == [1, 2] and encoded == []          # decomposed: no CUtensorMap to rewrite
    wrapped(marked, {"swizzle": 3})
    assert encoded == [(4096, marked, 256)] and made == [plain, marked, marked]
    assert tma.mark(types.SimpleNamespace(), 128).__dict__ == {}           # Triton's own size: left unmarked


def test_l2_promotion_is_128_unless_switched_to_256():
    printed = "sorted({c.l2_promotion for c in G.V7_CANDIDATES + G.V7_CANDIDATES_WIDE})"
    assert _candidates(printed) == "[128]"
    assert _candidates(printed, FA2_V7_L2_256="1") == "[256]"


def test_hold_first_is_one_more_loader_wait_before_an_early_key_tile(compiled):
    """hold_first (session 28): the loader waits for the program's first key tile before issuing tile 1 or 2, one
    mbarrier wait more in the PTX, the same shared memory; it must come before slot 0's reuse and is 0, 1 or 2."""
    for clash in (dict(hold_first=3, slots=4), dict(hold_first=2, slots=2)):
        with pytest.raises(ValueError, match="hold_first"):
            G.GluonConfig(**{**dict(block_m=128, block_n=128, num_warps=4, slots=3, consumers=2), **clash})
    with pytest.raises(ValueError, match="hold_first"):
        G.GluonConfig(128, 128, 8, 3, hold_first=1)                      # warp-specialized only
    base = compiled["ws_persist_ua_1024"]
    for hold in (1, 2):
        held = compiled[f"ws_persist_ua_h{hold}_1024"]
        assert held["try_waits"] == base["try_waits"] + 1 and held["shared"] == base["shared"]
        assert held["bulk_loads"] == base["bulk_loads"] and held["wgmma"] == base["wgmma"]
    cfg = G.configs_named(["ws2x64x128/3s/preg/persist/ua/et1"])[0]
    assert [replace(cfg, hold_first=h).label[-4:] for h in (0, 1, 2)] == ["/et1", "1/h1", "1/h2"]


def test_narrow_from_is_one_more_loader_wait_from_a_program_tile_on(compiled):
    """narrow_from (session 28): from the program's key tile narrow_from on, the loader also waits for the release of
    the tile SLOTS - 1 back; one mbarrier wait more in the PTX, the same copies and products; 4, 8, 16 or 32, at
    least SLOTS - 1."""
    for bad in (dict(narrow_from=3), dict(narrow_from=4, slots=6)):
        with pytest.raises(ValueError, match="narrow_from"):
            G.GluonConfig(**{**dict(block_m=128, block_n=128, num_warps=4, slots=3, consumers=2), **bad})
    base, narrow = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_n4_1024"]
    assert narrow["try_waits"] == base["try_waits"] + 1 and narrow["shared"] == base["shared"]
    assert narrow["bulk_loads"] == base["bulk_loads"] and narrow["wgmma"] == base["wgmma"]
    assert G.configs_named(["ws2x64x128/4s/preg/persist/ua/et1/n8"])[0].narrow_from == 8


def test_shared_code_keeps_one_copy_of_the_consumers_code(compiled):
    """shared_code (session 28): the consumers call one non-inlined function, so the offline PTX holds each
    consumer product and exponential once where the inlined form holds them twice; the loader is the 4-warp default
    partition and two consumers get 240 registers each; with three, each call site's barriers are its own too."""
    with pytest.raises(ValueError, match="shared_code"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, shared_code=True, even_registers=True)
    base, shared = compiled["ws_persist_ua_1024"], compiled["ws_persist_ua_sc_1024"]
    assert 2 * shared["ex2"] == base["ex2"] and all(2 * shared["wgmma"][n] == base["wgmma"][n] for n in base["wgmma"])
    assert shared["bulk_loads"] == base["bulk_loads"]
    # the function's barriers are its partition's (partition_syncs), none of them the whole CTA's
    assert shared["partition_bars"] > 0 and shared["func_whole_cta_syncs"] == 0 and base["partition_bars"] == 0
    three = compiled["ws3_split_ua_sc"]
    assert three["partition_bars"] == shared["partition_bars"] and three["func_whole_cta_syncs"] == 0
    cfg = G.configs_named(["ws2x64x128/3s/preg/persist/ua/et1/sc"])[0]
    assert cfg.consumer_registers == 240 and cfg.smem_bytes(64) > replace(cfg, shared_code=False).smem_bytes(64)


def test_shared_code_inlined_once_keeps_one_copy_and_pipelines_its_products(compiled):
    """shared_code 2 (session 29): the PTX stage inlines the consumer function once (inline_consumer_call), so no call
    and no function is left, each product and exponential is there once, and exp_turn's arrive is still tied to the
    row sums (tie_marked_arrives runs before the inlining). In the offline SASS ptxas waits for each HGMMA of the
    called form (C7510), not of the inlined-once form. Also shared_code's valid values and labels."""
    base, called, once = (compiled[f"ws_persist_ua_et1{tail}_1024"] for tail in ("", "_sc", "_sc2"))
    assert called["calls"] == 2 and called["funcs"] >= 2 and once["calls"] == 0 and once["funcs"] == 0
    assert once["inlined"] == 1 and once["returns"] == 2
    assert 2 * once["ex2"] == base["ex2"] and all(2 * once["wgmma"][n] == base["wgmma"][n] for n in base["wgmma"])
    assert base["ties"] > 0 and 2 * once["ties"] == base["ties"]
    (h1, d1), (h2, d2) = called["hgmma_depbar"], once["hgmma_depbar"]
    assert h1 == h2 > 0 and d1 == h1 and d2 < h2 // 2
    for bad in (dict(shared_code=4), dict(shared_code=3, consumers=3, block_m=192)):
        with pytest.raises(ValueError, match="shared_code"):
            G.GluonConfig(**{**dict(block_m=128, block_n=128, num_warps=4, slots=3, consumers=2), **bad})
    labels = ["ws2x64x128/3s/preg/persist/ua/et1/sc2", "ws2x64x128/3s/preg/persist/ua/et1/sc3"]
    assert [c.shared_code for c in G.configs_named(labels)] == [2, 3]
    assert [c.consumer_registers for c in G.configs_named(labels)] == [240, 232]   # 3: beside an idle default


def test_inline_consumer_call_on_a_synthetic_ptx():
    """inline_consumer_call: the function's body goes into the kernel once with its registers renamed and its
    parameters read from registers that each call site sets (vector and offset moves element by element); each call
    sequence becomes those moves, a return index and a branch; the body's ret branches back by that index; a call
    sequence to another function is left alone."""
    f = "fa2_x_$__ws_consumer_call__A"
    ptx = "\n".join([
        f".func {f}", "(", f"\t.param .b32 {f}_param_0,", f"\t.param .align 16 .b8 {f}_param_1[12]", ")", ";",
        ".visible .entry k(", ")", "{", "\t.reg .b32 \t%r<9>;",
        "\t{ // callseq 0, 0", "\t.param .b32 \tparam0;", "\t.param .align 16 .b8 \tparam1[12];",
        "\tadd.s32 \t%r5, %r1, 8;", "\tst.param.b32 \t[param0], 0;", "\tst.param.v2.b32 \t[param1], {%r5, 0};",
        "\tst.param.b32 \t[param1+8], %r2;", f"\tcall.uni {f}, (param0, param1);", "\t} // callseq 0",
        "\tbar.sync \t1;",
        "\t{ // callseq 1, 0", "\t.param .b32 \tparam0;", "\t.param .align 16 .b8 \tparam1[12];",
        "\tst.param.b32 \t[param0], 1;", "\tst.param.v2.b32 \t[param1], {%r6, 0};",
        "\tst.param.b32 \t[param1+8], %r3;", f"\tcall.uni {f}, (param0, param1);", "\t} // callseq 1",
        "\t{ // callseq 2, 0", "\t.param .b32 \tparam0;", "\tst.param.b32 \t[param0], %r4;",
        "\tcall.uni vprintf, (param0);", "\t} // callseq 2",
        "\tret;", "$L__tmp0:", "$L__func_end0:", "\t// -- End function", "}",
        f".func {f}(", f"\t.param .b32 {f}_param_0,", f"\t.param .align 16 .b8 {f}_param_1[12]", ")", "{",
        "\t.reg .pred \t%p<3>;", "\t.reg .b32 \t%r<7>;",
        f"\tld.param.b32 \t%r1, [{f}_param_0];", f"\tld.param.v2.b32 \t{{%r2, %r3}}, [{f}_param_1];",
        f"\tld.param.b32 \t%r4, [{f}_param_1+8];", "\tsetp.eq.s32 \t%p1, %r1, 0;", "\t@%p1 bra \t$L__BB1_2;",
        "\tadd.s32 \t%r5, %r2, %r4;", "\tret;", "$L__BB1_2:", "\tret;", "$L__func_end1:", "\t// -- End function",
        "}"])
    text, sites = G.inline_consumer_call(ptx)
    assert sites == 2 and f not in text and "call.uni vprintf" in text and text.count("$fa2_consumer:") == 1
    assert "\t.reg .b32 \t%fa2ir<7>;" in text and "\t.reg .pred \t%fa2ip<3>;" in text and "%r<9>" in text
    calls, body = text.split("$fa2_consumer:")
    assert not re.search(r"%r\d", body) and "@%fa2ip1 bra" in body and body.count("bra.uni \t$fa2_return;") == 2
    for move in ("mov.b32 \t%fa2a0_0, 0;", "mov.b32 \t%fa2a1_0, %r5;", "mov.b32 \t%fa2a1_4, 0;",
                 "mov.b32 \t%fa2a1_8, %r2;", "mov.b32 \t%fa2a0_0, 1;", "mov.b32 \t%fa2a1_8, %r3;",
                 "add.s32 \t%r5, %r1, 8;", "mov.u32 \t%fa2ret, 1;\n\tbra.uni \t$fa2_consumer;\n$fa2_ret1:"):
        assert move in calls, move
    for move in ("mov.b32 \t%fa2ir1, %fa2a0_0;", "mov.b32 \t%fa2ir2, %fa2a1_0;", "mov.b32 \t%fa2ir3, %fa2a1_4;",
                 "mov.b32 \t%fa2ir4, %fa2a1_8;"):
        assert move in body, move
    assert "setp.eq.u32 \t%fa2r, %fa2ret, 0;\n\t@%fa2r bra.uni \t$fa2_ret0;" in body
    assert body.index("$L__func_end1:") < body.index("$fa2_return:") < body.index("$L__tmp0:")
    # without line info (TRITON_DISABLE_LINE_INFO=1) there are no debug labels: the same rewrite, the body last
    bare, bare_sites = G.inline_consumer_call("\n".join(w for w in ptx.split("\n") if not w.startswith("$L__tmp")
                                                         and not w.startswith("$L__func_end")))
    assert bare_sites == 2 and bare == "\n".join(w for w in text.split("\n") if not w.startswith("$L__tmp")
                                                  and not w.startswith("$L__func_end"))
    assert bare.split("$fa2_return:")[1].split("\n")[-2:] == ["\t// -- End function", "}"]


def test_partition_syncs_rewrites_only_the_consumer_functions_whole_cta_barriers():
    """partition_syncs (shared_code): inside the body of the non-inlined consumer function each whole-CTA bar.sync
    becomes a barrier of the calling partition's 128 threads; the kernel entry's and other functions' are left alone.
    Before it, drop_marked_syncs takes such a whole-CTA bar.sync for the function's partition sync, as it takes
    `bar.sync <id>, 128` in an inlined partition, and drops the one before a marked mbarrier operation."""
    ptx = "\n".join([
        ".func fa2_x_$__ws_consumer_call__A(", "\t.param .b32 p0", ");",
        ".visible .entry k(", ")", "{", "\tbar.sync \t0;", "\tbar.sync \t0, 128;", "}",
        ".func fa2_x_$__ws_consumer_call__A(", "\t.param .b32 p0", ")", "{",
        "\tbar.sync \t0;", "\tmbarrier.arrive.shared::cta.b64 _, [%r1];", "\tbarrier.sync 0;", "\tbar.sync \t0;",
        "\tmbarrier.arrive.shared::cta.b64 _, [%r2];", f"\tmov.b32 %r3, %r4; // {G.UNSYNCED_MARK}", "\tret;", "}",
        ".func other(", ")", "{", "\tbar.sync \t0;", "}"])
    dropped, d = G.drop_marked_syncs(ptx)
    assert d == 1 and dropped.count("\tbar.sync \t0;") == 3        # of 4: the one before the marked arrive is gone
    final, n = G.partition_syncs(dropped)
    assert n == 2 and final.count("bar.sync %fa2bar, 128;") == 2
    assert final.count("\tbar.sync \t0;") == 2                     # the entry's and the other function's stay
    assert "add.u32 %fa2bar, %fa2bar, 8;" in final and "barrier.sync 0;" not in final


def test_smoke_labels_keeps_the_labels_that_pass_and_drops_failures_and_hangs(tmp_path):
    """scripts/smoke_labels.sh (device_batch's SMOKE=1): a label whose smoke run fails or outlives SMOKE_S is left
    out and named on stderr; the others are printed in order. A stand-in python3 plays gluon_smoke.py."""
    fake = tmp_path / "python3"
    fake.write_text('#!/bin/sh\ncase "$2" in good*) exit 0 ;; hang) sleep 30 ;; *) exit 1 ;; esac\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SMOKE_S": "1"}
    p = subprocess.run(["bash", "scripts/smoke_labels.sh", "good1", "hang", "bad", "good2"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.split() == ["good1", "good2"]
    assert "hang failed or hung" in p.stderr and "bad failed or hung" in p.stderr and "good" not in p.stderr


def test_shared_code_is_the_base_candidates_own_unless_switched():
    """Since session 30 the two D = 64 128-row candidates keep one copy of the consumers' code, inlined once; the
    192-row one and the D = 128 ones none. FA2_V7_SHARED_CODE sets every candidate's level, 0 turning it off."""
    printed = "[c.shared_code for c in G.V7_CANDIDATES + G.V7_CANDIDATES_WIDE]"
    assert _candidates(printed) == str([2, 2, 0, 0, 0, 0])
    assert _candidates(printed, FA2_V7_SHARED_CODE="0") == str([0] * 6)
    # l2_prefetch asks from a one-warp loader, which levels 1 and 2 replace: switched on, it takes the level's place
    assert _candidates(printed, FA2_V7_L2_PREFETCH="1") == str([0] * 6)
    with pytest.raises(ValueError, match="l2_prefetch"):
        G.GluonConfig(128, 128, 4, 3, consumers=2, shared_code=2, l2_prefetch=True)
    assert G.GluonConfig(128, 128, 4, 3, consumers=2, shared_code=3, l2_prefetch=True).shared_code == 3
    assert _candidates(printed, FA2_V7_SHARED_CODE="1") == str([1] * 6)
    assert _candidates(printed, FA2_V7_SHARED_CODE="2") == str([2] * 6)
    assert _candidates(printed, FA2_V7_SHARED_CODE="yes") == str([1] * 6)
