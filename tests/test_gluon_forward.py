"""The Gluon forward (fa2triton/gluon/gluon_forward_hopper.py and its gluon_* siblings): its configuration rules, which
inputs it refuses and why, the PTX passes on synthetic PTX, and what an offline sm_90 compile of each of v7's
candidates contains.

Gluon is not interpreted (Triton 3.6), so nothing here runs the kernel: its results are checked on the H200 by
`invoke experiment gluon` (O and L against float64 on ragged and non-square shapes, both masks, D = 64 and 128;
results/nvidia-h200/experiments/gluon_check.csv). The compiles are real: Triton's compiler and its bundled ptxas, for
sm_90, in a subprocess without TRITON_INTERPRET.
"""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fa2triton import reference, versions
from fa2triton.gluon import gluon_forward_hopper as G
from fa2triton.triton_compat import triton_version

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not G.HAVE_GLUON, reason="this Triton has no Gluon")
NEW_TRITON = triton_version() >= (3, 9)   # where the offline sm_90 compile differs from Triton 3.6's (each use says how)

SHIPPED = {64: ["ws2x64x128/3s/preg/persist/ua/et1/sc2", "ws2x64x128/3s/preg/pp/ua/sc2",
                "ws3x64x128/4s/preg/pp/split/persist/ua"],
           128: ["ws2x64x64/4s/preg/pp/persist/ua/la", "ws3x64x64/3s/preg/pp/split/ua",
                 "ws2x64x128/3s/preg/pp/persist/ds/ua/q1"]}


def test_v7_races_the_shipped_candidates_and_each_is_an_experiment_config():
    assert {D: [c.label for c in G.candidates_for(D)] for D in (64, 128)} == SHIPPED
    assert G.candidates_for(64) == G.V7_CANDIDATES and G.candidates_for(128) == G.V7_CANDIDATES_WIDE
    assert [c.label for c in G.configs_named(SHIPPED[64])] == SHIPPED[64]
    labels = [c.label for c in G.EXPERIMENT_CONFIGS]
    assert len(labels) == len(set(labels)) and set(SHIPPED[64] + SHIPPED[128]) <= set(labels)


def test_a_retired_or_unknown_label_is_a_clear_error():
    for label in ("ws2x64x128/3s/preg/persist/ua/et1/sc", "128x64/8w/3s/psmem", "ws2x64x128/3s/preg/pp/persist/tm"):
        with pytest.raises(ValueError, match="retired: see docs/experiments.md") as err:
            G.configs_named([SHIPPED[64][0], label])
        assert label in str(err.value) and str(err.value).count("\n") == 0


def test_configurations_are_checked():
    with pytest.raises(ValueError, match="2 or 3 consumers"):
        G.GluonConfig(128, 128, 3, consumers=4)
    with pytest.raises(ValueError, match="2 or 3 consumers"):
        G.GluonConfig(192, 128, 3, consumers=2)
    with pytest.raises(ValueError, match="block_n"):
        G.GluonConfig(128, 32, 3)
    for clash in (dict(pingpong=True), dict(lookahead=True)):
        with pytest.raises(ValueError, match="exp_turn"):
            G.GluonConfig(128, 128, 3, exp_turn=True, **clash)
    for bad in (dict(), dict(persistent=True, lookahead=True)):
        with pytest.raises(ValueError, match="one_q"):
            G.GluonConfig(128, 128, 3, one_q=True, **bad)
    assert G.GluonConfig(192, 128, 3, consumers=3).label == "ws3x64x128/3s/preg/ua"
    assert G.GluonConfig(128, 128, 3, persistent=True, one_q=True).q_buffers == 1
    assert G.GluonConfig(128, 128, 3, persistent=True).q_buffers == 2 and G.GluonConfig().q_buffers == 1
    assert [G.GluonConfig(shared_code=s).consumer_registers for s in (False, True)] == [232, 240]
    assert G.GluonConfig(192, 128, 3, consumers=3).consumer_registers == 160


def test_shared_memory_estimate_grows_with_what_is_allocated():
    base = G.GluonConfig(128, 128, 2)
    # a slot more: its K and V tiles, and the slots' two barrier allocations grow from 16 to 32 bytes each
    assert G.GluonConfig(128, 128, 3).smem_bytes(64) - base.smem_bytes(64) == 2 * 128 * 64 * 2 + 32
    # a second query buffer; its two barriers still fit the 16 bytes of their allocations
    assert G.GluonConfig(128, 128, 2, persistent=True).smem_bytes(64) - base.smem_bytes(64) == 128 * 64 * 2
    assert G.GluonConfig(128, 128, 2, direct_store=True).smem_bytes(64) - base.smem_bytes(64) == 256 - 128 * 64 * 2
    assert G.GluonConfig(128, 128, 2, shared_code=True).smem_bytes(64) == base.smem_bytes(64)
    assert not G.GluonConfig(128, 128, 3, persistent=True).fits(128, 232448)


def test_every_head_dimension_has_candidates_that_fit_and_128_has_its_own():
    """At D = 128 none of the 128-row 128-key D = 64 candidates fits a Hopper block's 227 KB (three K/V slots of
    128 x 128 are 192 KB), so v7 takes candidates of its own there; each fits."""
    smem = 232448   # an H100/H200 block's opt-in maximum
    assert not any(c.fits(128, smem) for c in G.V7_CANDIDATES)
    assert all(c.fits(128, smem) for c in G.V7_CANDIDATES_WIDE)
    assert all(any(c.fits(D, smem) for c in G.candidates_for(D)) for D in G.HEAD_DIMS)


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


@pytest.mark.parametrize("heads, n_q", [(1, 1), (1, 2), (3, 5), (2, 11), (32, 16), (32, 22), (4, 64)])
@pytest.mark.parametrize("programs", [1, 3, 7, 132, 10_000])
def test_causal_pairs_take_every_item_once(heads, n_q, programs):
    from fa2triton.gluon.schedule import causal_pair

    got = [causal_pair.fn(i, heads, n_q, programs) for i in range(heads * n_q)]
    assert sorted(got) == [(h, r) for h in range(heads) for r in range(n_q)]


def _busiest_over_mean(order, heads: int, n_q: int, programs: int) -> float:
    """A persistent grid's makespan model: program p takes items p, p + programs, ...; rank r costs n_q - r key
    tiles plus one for the item's query tile and epilogue."""
    load = [0] * programs
    for i in range(heads * n_q):
        load[i % programs] += n_q - order(i)[1] + 1
    return max(load) / (sum(load) / programs)


@pytest.mark.parametrize("n_q", [8, 16, 32, 64])   # 128-row tiles at N = 1024-8192
def test_causal_pairs_balance_a_persistent_grid(n_q):
    """At B·H = 32 on 132 SMs the busiest program has at most 3.2% more work than the mean; each head's tiles
    longest first, head after head (the order before), gave it 7.7-31%."""
    from fa2triton.gluon.schedule import causal_pair

    paired = _busiest_over_mean(lambda i: causal_pair.fn(i, 32, n_q, 132), 32, n_q, 132)
    head_after_head = _busiest_over_mean(lambda i: (i // n_q, i % n_q), 32, n_q, 132)
    assert paired <= 1.032 < 1.07 < head_after_head


ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(not ON_HOPPER, reason="Gluon is not interpreted: a Hopper GPU runs this")
@pytest.mark.parametrize("label", [c.label for c in G.EXPERIMENT_CONFIGS])
@pytest.mark.parametrize("n", [1000, 1300])   # 8 / 6 and 11 / 7 query tiles of 128 / 192 rows: pairs, and a middle
def test_every_configuration_covers_each_causal_item_once(label, n):
    """Causal, 40 heads: a persistent program takes 2-4 items (causal_pair's double waves, the last one partial, and
    the middle tiles of an odd count), each query tile exactly once: O and L against float64."""
    cfg = G.configs_named([label])[0]
    D = 128 if cfg in G.candidates_for(128) else 64   # the other experiment configurations are D = 64 forms
    if not cfg.fits(D, torch.cuda.get_device_properties(0).shared_memory_per_block_optin):
        pytest.skip(f"{label} does not fit at D = {D}")
    gen = torch.Generator().manual_seed(n)
    Q, K, V = (torch.randn(40, n, D, generator=gen).to("cuda", torch.bfloat16) for _ in range(3))
    O, L, _ = G.forward(Q, K, V, True, cfg)
    ref_O, ref_L = reference.attention(Q.cpu(), K.cpu(), V.cpu(), True)
    assert reference.relative_error(O.cpu(), ref_O) < 3e-2
    assert torch.allclose(L.cpu(), ref_L.float(), atol=1e-2)


def test_launch_plan_splits_only_the_non_causal_tail_and_persists_on_request():
    Q = torch.empty(32, 4096, 64, dtype=torch.bfloat16, device="meta")
    L = torch.empty(32, 4096, dtype=torch.float32, device="meta")
    split = G.configs_named([SHIPPED[64][2]])[0]
    for causal, grid, tail in ((False, (132,), (660, 3)), (True, (132,), None)):
        kernel, g, args, warps, flags, t = G.launch_plan(split, Q, Q, Q, Q, L, causal, sms=132)
        assert kernel is G.flash_fwd_gluon_ws and g == grid and warps == 4 and flags["CAUSAL"] is causal
        assert (t[2:] if t else None) == tail and len(args) == 15
        assert set(flags) == {n for n in kernel.arg_names if n.isupper() and n not in ("N_QUERIES", "N_KEYS", "FULL",
                                                                                        "SPLITS", "N_ITEMS")}
    one = G.launch_plan(G.configs_named([SHIPPED[64][1]])[0], Q, Q, Q, Q, L, False, sms=132)
    assert one[1] == (32 * 32,) and one[5] is None and one[4]["SHARED_CODE"] and one[4]["CONSUMER_REGS"] == 240


@pytest.mark.parametrize("splits", [2, 3, G.MAX_SPLITS])
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
    """GluonLaunch (the lean repeat v7's Gluon path records): the descriptors are built once and each launch gives
    their bases (the templates keep none); O, L and the split tail's workspace are new on every call and reach the
    kernel and the combine at their places in the signatures, with the recorded sizes and constexprs."""
    import types

    launched = []

    class FakeKernel:   # stands in for a CompiledKernel: records what its launcher would get
        function = packed_metadata = None

        def __init__(self, name):
            self.name = name

        def run(self, *args):   # after grid x3, stream, function, metadata, hooks; the bases as the launcher reads them
            launched.append((self.name, args[9:], [getattr(d, "base", None) for d in args[9:12]]))

    import fa2triton.lean_path

    monkeypatch.setattr(fa2triton.lean_path, "driver",
                        types.SimpleNamespace(active=types.SimpleNamespace(get_current_stream=lambda i: 0)))
    B, N, D = 2, 100, 64
    descs = [types.SimpleNamespace(base=None) for _ in range(3)]
    O0, L0 = torch.empty(B, N, D), torch.empty(B, N)
    Op0, Lp0 = torch.empty(2 * 192, D), torch.empty(2 * 192)
    # strides, sizes, scale, FULL, SPLITS, items, the workspace
    args = (*descs, O0, L0, 64, 100, N, N, 0.18, 1, 2, 5, Op0, Lp0)
    launch = G.GluonLaunch(FakeKernel("main"), (5,), args, (False, 4), (Op0, Lp0, 1, 2),
                           (FakeKernel("combine"), (1, 6), (G.MAX_SPLITS, 192, 32, D)),
                           "ws3x64x128/4s/preg/split/ua")
    seen = []
    for _ in range(2):
        Q, K, V = (torch.randn(B, N, D) for _ in range(3))
        O, L = launch(Q, K, V)
        (main, m, bases), (comb, c, _) = launched[-2:]
        assert (main, comb) == ("main", "combine")
        assert all(b is t for b, t in zip(bases, (Q, K, V))) and m[3] is O and m[4] is L
        assert all(d.base is None for d in launch.descs), "no descriptor of the launch keeps a caller's tensor"
        assert m[5:13] == (64, 100, N, N, 0.18, 1, 2, 5) and m[15:] == (False, 4)
        Op, Lp = m[13], m[14]
        assert Op.shape == Op0.shape and Op is not Op0 and Lp.shape == Lp0.shape
        assert all(x is y for x, y in zip(c[:4], (Op, Lp, O, L))) and c[4:] == (1, N, 64, 100, 2, G.MAX_SPLITS, 192, 32, D)
        seen.append((list(launch.descs), O))
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
from fa2lab.compile_offline import compile_plan
from fa2triton.gluon import gluon_forward_hopper as G
from profiling.inspect_kernel import disassemble
out = {{}}
runs = [(c, D, N, causal) for D, N, causal in ((64, 1024, False), (64, 1000, True), (128, 2048, False))
        for c in G.candidates_for(D)]
for cfg, D, N, causal in runs:
    c = compile_plan(G.offline_plan(cfg, N=N, D=D, is_causal=causal))
    ptx, sass = c.asm["ptx"], disassemble(c.asm["cubin"])[0]
    head = ptx.split("wgmma.wait_group.sync.aligned 1;")[0]   # up to the key loop's (or lookahead's first) wait
    out[f"{{cfg.label}} D={{D}} causal={{int(causal)}}"] = {{
        "shared": int(c.metadata.shared), "estimate": cfg.smem_bytes(D), "cubin": len(c.asm["cubin"]),
        "warp_specialize": c.asm["ttgir"].count("ttg.warp_specialize"),
        "bulk_loads": ptx.count("cp.async.bulk.tensor.2d.shared"), "marks": ptx.count(G.UNSYNCED_MARK),
        # bar.syncs from the slot's wait (the third mbarrier operation before the first wait_group 1) to that wait
        "issue_syncs": head[head.rfind("\\n", 0, [m.start() for m in re.finditer(r"mbarrier\\.", head)][-3]):]
                       .count("bar.sync"),
        "ties": ptx.count("%fa2tie, "), "calls": ptx.count("call.uni"), "funcs": ptx.count(".func"),
        "inlined": ptx.count("$fa2_consumer:"), "returns": len(re.findall(r"^\\$fa2_ret\\d+:", ptx, re.M)),
        # the shared code's partition barriers: partition_syncs' (3.6), or the id register 3.9 passes in, inlined
        "partition_bars": len(re.findall(r"bar\\.sync\\s+%fa2(?:bar|ir\\d+), 128;", ptx)),
        "wgmma": {{n: len(re.findall(r"wgmma\\.mma_async[._a-z]*\\.m64n" + n + r"k16", ptx)) for n in ("64", "128")}},
        "ex2": ptx.count("ex2.approx"),
        "sass": None if sass is None else {{k: sass.count(k) for k in ("HGMMA", "WARPGROUP.DEPBAR", "MUFU.EX2", "STL",
                                                                      "LDL", "UTMALDG")}},
        "two_in_flight": None if sass is None else "WARPGROUP.DEPBAR.LE gsb0, 0x2" in sass,
        # -inf selects per block between branch labels, where a block holds a masked tile's (16 or more)
        "mask_selects": None if sass is None else sorted({{n for n in (len(re.findall(r"FSEL R\\d+, R\\d+, -INF", b))
                                                                for b in re.split(r"\\.L_x_\\d+:", sass)) if n >= 16}}),
        "block_n": cfg.block_n}}
print(json.dumps(out))
"""


def _offline(script: str, **fields) -> dict:
    """The JSON that a compile script prints last, run in a subprocess without TRITON_INTERPRET; the script is
    formatted with the repository's path as {repo} and `fields`."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-c", script.format(repo=str(REPO), **fields)], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def compiled():
    return _offline(COMPILE)


def test_every_candidate_compiles_within_its_shared_memory_estimate(compiled):
    assert len(compiled) == 9
    for label, r in compiled.items():
        assert r["cubin"] > 0 and r["warp_specialize"] == 1, label
        if "D=64" in label:   # the estimate is what fits() uses: the compiled bytes (3 consumers: 8 bytes more)
            assert 0 <= r["shared"] - r["estimate"] <= 8, (label, r)
        else:                 # at D = 128 Triton's epilogue scratch is smaller: fits() errs on the safe side only
            assert r["shared"] <= r["estimate"] <= 232448, (label, r)


def test_no_candidate_spills_or_serialises_its_products(compiled):
    for label, r in compiled.items():
        s = r["sass"]
        if s is None:   # no nvdisasm or cuobjdump to read the SASS
            continue
        # none on either Triton since _softmax_tile's one key bound (with the bounds apart and the key count
        # unspecialised, /la and /q1 spilled: docs/worklogs/gluon_forward_hopper.md)
        assert s["STL"] == 0 and s["LDL"] == 0, (label, s)
        # ptxas did not serialise the wgmma (C7510 / C7514 put a wait after every one)
        assert 0 < s["WARPGROUP.DEPBAR"] < s["HGMMA"] / 2, (label, s)
        # lookahead's key loop waits for S_j with P_(j-1) V_(j-1) and S_(j+1) still in flight; nothing else does
        assert r["two_in_flight"] == ("/la" in label), (label, r)
        assert s["UTMALDG"] >= 3 and s["MUFU.EX2"] > 0, (label, s)   # the loader's copies of Q, K and V


def test_the_masked_tile_selects_each_score_once(compiled):
    """_softmax_tile's mask, N_KEYS unspecialised: one select per score a thread holds (64 rows x BLOCK_N over 128
    threads) in every masked tile's block. The bounds apart (k < N_KEYS and k <= q + causal_off) took two selects per
    score, N_KEYS specialised on 16-divisibility or not (N = 512 causal's slowdown: docs/worklogs/
    gluon_forward_hopper.md)."""
    for label, r in compiled.items():
        if r["mask_selects"] is not None:
            assert r["mask_selects"] == [64 * r["block_n"] // 128], (label, r["mask_selects"])


def test_every_consumer_arrive_and_slot_wait_is_unsynced(compiled):
    """Triton 3.9 compiles the shared code's function (sc2) with a barrier of its partition (bar.sync <register>, 128)
    before and after each wait (3.6: none); drop_marked_syncs drops those around the slot's wait, and with ping-pong
    the one after the turn's wait stays (one per key tile: the turn is passed by one thread, and that barrier has
    every thread out of the wait first); every inlined partition has none on either version."""
    for label, r in compiled.items():
        kept = 1 if NEW_TRITON and "/sc2" in label and "/pp/" in label else 0
        assert r["marks"] > 0 and r["issue_syncs"] == kept, (label, r)


def test_the_exponential_turn_is_tied_to_a_row_sum(compiled):
    for label, r in compiled.items():
        # one tied arrive per softmax copy: a consumer's first tile and its key loop, in the one shared copy
        assert r["ties"] == (2 if "/et1" in label else 0), (label, r)


def test_the_shared_code_is_inlined_once_with_its_partitions_barriers(compiled):
    for label, r in compiled.items():
        sc = "/sc2" in label
        assert r["calls"] == 0 and r["funcs"] == 0, (label, r)   # no call and no function left after the inlining
        assert r["inlined"] == int(sc) and r["returns"] == (2 if sc else 0), (label, r)
        assert (r["partition_bars"] > 0) == sc, (label, r)
    one, split = compiled[SHIPPED[64][1] + " D=64 causal=0"], compiled[SHIPPED[64][2] + " D=64 causal=0"]
    # one copy: each product and exponential once where the 3 inlined consumers hold them 3 times
    assert one["wgmma"]["128"] > 0 and 3 * one["wgmma"]["64"] == split["wgmma"]["64"]


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


def test_drop_marked_syncs_drops_the_sync_after_a_marked_wait_only_before_a_wgmma_or_a_wait():
    """Triton 3.9's shared function: the partition's bar.sync after a marked slot wait goes where a wgmma or another
    mbarrier wait comes next (register arithmetic and line info between); before a shared-memory access, after a
    block label, after an unmarked wait or after a marked arrive it stays."""
    mark = G.UNSYNCED_MARK

    def wait(bar, marked=True):
        return ["\t// begin inline asm", "{", "\t.reg .pred complete;", "\twaitLoop:",
                f"\tmbarrier.try_wait.parity.shared::cta.b64 complete, [%r{bar}], %r9;",
                "\t@!complete bra.uni waitLoop;", "}", "\t// end inline asm",
                *([f"\tmov.b32 %r{bar + 50}, %r7; // {mark}"] if marked else [])]

    sync = "\tbar.sync \t%r113, 128;"
    ptx = "\n".join([
        *wait(1), "$L__tmp1:", "\t.loc\t1 342 35", "\tshl.b32 \t%r20, %r21, 14;", sync,     # dropped: a wgmma next
        "\tbfe.u32 \t%r22, %r20, 4, 15;", "\twgmma.fence.sync.aligned;",
        *wait(2), "\tand.b32 \t%r23, %r24, 1;", sync, *wait(3, marked=False),          # dropped: a wait next
        sync, "\twgmma.fence.sync.aligned;",                                            # kept: after an unmarked wait
        *wait(4), sync, "\tst.shared.b32 [%r12], %r13;",                                # kept: a store next
        *wait(5), "$L__BB1_5:", sync, "\twgmma.fence.sync.aligned;",                    # kept: a block label between
        "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r15];", f"\tmov.b32 %r16, %r7; // {mark}",
        sync, "\twgmma.fence.sync.aligned;",                                            # kept: after an arrive
    ])
    out, removed = G.drop_marked_syncs(ptx)
    assert removed == 2 and out.count("bar.sync") == ptx.count("bar.sync") - 2 == 4
    assert "shl.b32 \t%r20, %r21, 14;\n\tbfe.u32" in out and "and.b32 \t%r23, %r24, 1;\n\t// begin inline asm" in out
    assert G.drop_marked_syncs(out) == (out, 0)


def test_tie_marked_arrives_predicates_the_next_elected_arrive_on_the_marked_row_sum():
    mark = G.TIE_MARK + " one"
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
    assert lines[:6] == ptx.splitlines()[:6] and lines[-1] == ptx.splitlines()[-1]
    assert lines[6] == ("\t{ .reg .pred %fa2tie; setp.geu.and.f32 %fa2tie, %r156, 0f00000000, %p190; "
                        "@%fa2tie mbarrier.arrive.shared::cta.b64 _, [%r1241]; }")
    assert G.tie_marked_arrives(ptx.replace(mark, "other")) == (ptx.replace(mark, "other"), 0)


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


def _binder_key(kernel, args, **kwargs) -> str:
    """The specialization key of a launch of `kernel` with `args`, as JITFunction.run binds it for sm_90."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import MockTensor, create_function_from_signature

    from triton.runtime.jit import JITFunction

    from fa2lab.compile_offline import jit_function

    # under the interpreter (the combine, a tl kernel): the JITFunction its decorator's arguments make on a GPU
    fn = JITFunction(kernel.fn, **kernel.kwargs) if hasattr(kernel, "rewriter") else jit_function(kernel)
    binder = create_function_from_signature(fn.signature, fn.params, make_backend(GPUTarget("cuda", 90, 32)))
    return str(binder(*map(MockTensor.wrap_dtype, args), **kwargs, num_stages=1, debug=False)[1])


def _specialization(N: int, causal: bool = False, D: int = 64, label: str = "ws3x64x128/4s/preg/pp/split/persist/ua"):
    """The specialization keys a launch of the Gluon forward at (32 heads, N, D) and of its combine (None without a
    split tail) bind, and the work-item counts."""
    cfg = next(c for c in G.candidates_for(D) if c.label == label)
    Q = torch.empty(32, N, D, dtype=torch.bfloat16, device="meta")
    O, L = torch.empty_like(Q), torch.empty(32, N, dtype=torch.float32, device="meta")
    kernel, _, args, num_warps, flags, tail = G.launch_plan(cfg, Q, Q, Q, O, L, causal, sms=132)
    combine = None if tail is None else _binder_key(
        G._combine_tail_kernel(), (tail.Op, tail.Lp, O, L, tail.full, N, O.stride(1), L.stride(0), tail.splits),
        MAX=G.MAX_SPLITS, BLOCK_M=cfg.block_m, CHUNK=32, D=D, num_warps=4)
    ints = dict(zip(("FULL", "SPLITS", "N_ITEMS"), args[-5:-2]), splits=1 if tail is None else tail.splits)
    return _binder_key(kernel, args, num_warps=num_warps, **flags), combine, ints


@pytest.mark.parametrize("D, causal, label", [(64, False, "ws3x64x128/4s/preg/pp/split/persist/ua"),
                                              (64, True, "ws2x64x128/3s/preg/persist/ua/et1/sc2"),
                                              (128, False, "ws2x64x128/3s/preg/pp/persist/ds/ua/q1")])
def test_a_new_length_reuses_its_class_kernels(D, causal, label):
    """Issue 49's cold start: every length of one (configuration, D, mask) class binds one Gluon kernel and one
    combine, whatever N's, the work-item counts' and L's stride's 16-divisibility and the split count (1 or more:
    the lengths below hold both, and N multiples of 16 and not). Fails when a length-like argument specialises."""
    Ns = (4099, 4112, 6448, 7174, 7696, 7779, 8166, 8185)
    keys = {N: _specialization(N, causal, D, label) for N in Ns}
    assert {N % 16 == 0 for N in Ns} == {True, False}
    if "/split/" in label:   # the split configuration meets both an unsplit and a split tail here
        assert {ints["splits"] > 1 for _, _, ints in keys.values()} == {True, False}
        assert len({c for _, c, _ in keys.values() if c is not None}) == 1
    assert len({g for g, _, _ in keys.values()}) == 1, {N: k[2] for N, k in keys.items()}


def test_specialising_a_length_again_would_fail_the_class_test():
    """The class test can fail: with N_KEYS specialised on 16-divisibility again, lengths 7174 and 7696 (a multiple
    of 16) bind two kernels."""
    from fa2lab.compile_offline import jit_function

    (p,) = [p for p in jit_function(G._kernel.flash_fwd_gluon_ws).params if p.name == "N_KEYS"]
    assert p.do_not_specialize_on_alignment
    try:
        p.do_not_specialize_on_alignment = False
        assert _specialization(7174)[0] != _specialization(7696)[0]
    finally:
        p.do_not_specialize_on_alignment = True


SASS_ALIGNMENT = """
import hashlib, json, sys, torch
sys.path.insert(0, {repo!r})
from fa2lab.compile_offline import compile_for_target, jit_function
from fa2triton.gluon import gluon_forward_hopper as G
from profiling.inspect_kernel import disassemble
cfg = next(c for c in G.candidates_for(64) if c.label == "ws3x64x128/4s/preg/pp/split/persist/ua")
Q = torch.empty(32, 512, 64, dtype=torch.bfloat16, device="meta")
L = torch.empty(32, 512, dtype=torch.float32, device="meta")
kernel, _, args, num_warps, flags, _ = G.launch_plan(cfg, Q, Q, Q, torch.empty_like(Q), L, False, sms=132)
params = [p for p in jit_function(kernel).params if p.name in ("FULL", "N_ITEMS")]
out = {{"counts": list(args[-5:-2])}}
for aligned in (False, True):
    for p in params:
        p.do_not_specialize_on_alignment = not aligned
    c = compile_for_target(kernel, args, arch=90, num_warps=num_warps, num_stages=1, **flags)
    sass = disassemble(c.asm["cubin"])[0] or ""
    body = "\\n".join(line.split("/*")[0].strip() for line in sass.splitlines() if "/*" in line)
    out[str(aligned)] = [hashlib.md5(body.encode()).hexdigest(), body.count("\\n")]
print(json.dumps(out))
"""


def test_unspecialised_work_item_counts_compile_the_same_code_at_a_harness_shape():
    """The split candidate at N = 512, whose whole-tile and item counts are multiples of 16: its SASS without the
    specialisation on their alignment is the SASS with it, instruction for instruction."""
    r = _offline(SASS_ALIGNMENT)
    assert all(n % 16 == 0 for n in (r["counts"][0], r["counts"][2])), r["counts"]
    assert r["True"][1] > 1000 and r["True"] == r["False"], r
