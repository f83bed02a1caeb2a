"""Issue 47's measurement, on the CPU: profiling/host_steps.py times fa2triton's attention() and flash_attn_func()
beside FlashAttentionTriton.apply on views of apply's own inputs, writes their rows beside apply's, and the host-path
page judges them from those rows (synthetic here: a CPU timing would mean nothing)."""

from __future__ import annotations

import pytest
import torch

from fa2triton import api
from fa2lab.results import append_rows
from profiling import host_steps
from report import hostpath
from test_figures import GPU, PROV
from test_report_build import build, root  # noqa: F401 - root: the shared fixture, every version's bench rows


class Recording(torch.autograd.Function):
    """A stand-in FlashAttentionTriton: records what apply receives, returns an empty O like the kernels'."""

    calls: list = []

    @staticmethod
    def forward(ctx, Q, K, V, is_causal):
        Recording.calls.append((Q, K, V, is_causal))
        return torch.empty_like(Q)


def test_the_api_steps_call_apply_on_views_of_apply_s_own_inputs(monkeypatch):
    """attention() and flash_attn_func() reach apply with tensors of the same storage, shape and strides as apply's
    own step, and the same mask: the wrapper is all that the rows' difference can hold."""
    monkeypatch.setitem(api._FUNCTIONS, "v7_hopper", Recording)
    monkeypatch.setattr(Recording, "calls", [])
    B, H, N, D = 2, 3, 16, 16  # a tiled head dimension: 8 would be padded, a copy
    q, k, v = (torch.randn(B * H, N, D) for _ in range(3))
    fns = host_steps.api_steps(Recording, "v7_hopper", q, k, v, True, B, H)
    assert set(fns) == {"apply", "attention", "flash_attn_func"}
    outs = {name: fn() for name, fn in fns.items()}
    assert outs["attention"].shape == (B, H, N, D) and outs["flash_attn_func"].shape == (B, N, H, D)
    assert len(Recording.calls) == 3
    for Q, K, V, causal in Recording.calls:
        assert causal is True
        for got, ref in zip((Q, K, V), (q, k, v)):
            assert got.data_ptr() == ref.data_ptr() and got.shape == ref.shape and got.stride() == ref.stride()


def test_attention_s_own_4d_record_must_repeat_apply_s_launch():
    """attention() records its launch under the (B, H, N, D) signature (LaunchCache.merged_heads): the steps time
    the same call only while both records run one kernel on one grid (v7 marks another path's record: .launch)."""
    from types import SimpleNamespace as NS

    kernel, other = object(), object()
    apply_s = NS(kernel=kernel, grid=(4, 1, 1))
    assert host_steps.same_launches([apply_s, NS(launch=NS(kernel=kernel, grid=(4, 1, 1)))])
    assert host_steps.same_launches([apply_s])
    assert not host_steps.same_launches([apply_s, NS(kernel=other, grid=(4, 1, 1))])
    assert not host_steps.same_launches([apply_s, NS(kernel=kernel, grid=(8, 1, 1))])
    assert not host_steps.same_launches([apply_s] * 3)


def test_the_api_steps_refuse_when_the_api_would_time_another_class(monkeypatch):
    class Other(Recording):
        pass

    monkeypatch.setitem(api._FUNCTIONS, "v7_hopper", Other)
    q = torch.randn(2, 16, 16)
    with pytest.raises(RuntimeError, match="another class than apply"):
        host_steps.api_steps(Recording, "v7_hopper", q, q, q, False, 1, 2)


def test_an_unknown_step_is_named_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        host_steps.main(["--steps", "apply,atention"])
    err = capsys.readouterr().err
    assert "unknown atention" in err and "flash_attn_func" in err


# (median-making samples per repeat) µs: attention level with apply, flash_attn_func 10 µs more; sdpa for reference
SAMPLES = {"sdpa": [15.0, 16.0, 17.0], "apply": [19.0, 20.0, 21.0], "attention": [20.0, 20.5, 22.0],
           "flash_attn_func": [29.0, 30.0, 31.0], "cache_hit": [9.0, 9.0, 9.0]}


def test_host_steps_writes_the_api_rows_beside_apply_and_the_page_judges_them(monkeypatch, root):  # noqa: F811
    """main with its GPU parts faked: each block's rows (only the steps asked for) share one date, appended as timed;
    the page pairs attention's row with apply's of that run: level where the ranges overlap, else by how much."""
    import fa2lab.provenance
    import fa2lab.results
    import fa2lab.switches
    import fa2lab.timers

    made = []

    def fake_steps(module, version, N, causal, wanted):
        made.append((version, N, causal, tuple(wanted)))
        return {s: iter(xs * 2) for s, xs in SAMPLES.items()}   # next() of each: the repeats' samples in order

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fa2lab.provenance, "environment", lambda: {k: v for k, v in PROV.items() if k != "date"})
    monkeypatch.setattr(fa2lab.results, "gpu_dir", lambda: root / GPU)
    monkeypatch.setattr(fa2lab.timers, "host_us_per_call", next)
    monkeypatch.setattr(fa2lab.switches, "load", lambda name: name)
    monkeypatch.setattr(host_steps, "step_functions", fake_steps)
    assert host_steps.main(["--kernel", "v7_hopper", "--N", "512", "4096", "--repeats", "3",
                            "--steps", "apply,attention,flash_attn_func"]) == 0
    assert made == [("v7_hopper", N, c, ("apply", "attention", "flash_attn_func")) for c in (False, True)
                    for N in (512, 4096)]
    df, path = hostpath.host_steps(GPU, root, latest=False)
    assert len(df) == 4 * 3 and set(df.step) == {"apply", "attention", "flash_attn_func"}
    assert df.groupby(["N", "causal"]).date.nunique().eq(1).all()
    table = hostpath.api_table(df)
    assert [(r["N"], r["causal"]) for r in table] == [(512, 0), (4096, 0), (512, 1), (4096, 1)]
    assert table[0]["times"]["attention"] == (20.5, 20.0, 22.0)
    page = build.build_all(root)["docs/report/host-path.md"]
    row = "| v7_hopper | 512 | no | 20.0 (19.0–21.0) | 20.5 (20.0–22.0) | +0.5 | level (the ranges overlap) | " \
          "30.0 (29.0–31.0) | +10.0 | more by 10.0 µs (50%) |"
    assert row in page
    assert "(level or less): attention() at 4 of 4; flash_attn_func() at 0 of 4." in page


def test_the_api_verdict():
    assert hostpath.api_verdict((20.0, 19.0, 21.0), (21.5, 21.0, 23.0)) == "level (the ranges overlap)"
    assert hostpath.api_verdict((20.0, 19.0, 21.0), (25.0, 24.0, 26.0)) == "more by 5.0 µs (25%)"
    assert hostpath.api_verdict((20.0, 19.0, 21.0), (15.0, 14.0, 16.0)) == "less by 5.0 µs (25%)"


def test_the_api_table_pairs_each_call_with_apply_of_its_own_run(root):  # noqa: F811
    """A later run that timed apply alone does not pair with an earlier run's attention row; the latest run that timed
    both does, and a shape whose runs never timed them together is left out."""
    def rows(date, N, steps):
        return [{"version": "v7_hopper", "N": N, "causal": 0, "step": s, "us_median": m, "us_min": m - 1,
                 "us_max": m + 1, "repeats": 3, "calls_each": 200, **PROV, "date": date} for s, m in steps.items()]

    path = root / GPU / "hostpath" / "steps.csv"
    append_rows(path, rows("2026-12-01T00:00:00+00:00", 512, {"apply": 20.0, "attention": 30.0}))
    append_rows(path, rows("2026-12-02T00:00:00+00:00", 512, {"apply": 20.0, "attention": 21.0}))
    append_rows(path, rows("2026-12-03T00:00:00+00:00", 512, {"apply": 40.0}))
    append_rows(path, rows("2026-12-01T00:00:00+00:00", 1024, {"attention": 21.0}))
    append_rows(path, rows("2026-12-02T00:00:00+00:00", 1024, {"apply": 21.0}))
    table = hostpath.api_table(hostpath.host_steps(GPU, root, latest=False)[0])
    assert [r["N"] for r in table] == [512]
    assert table[0]["times"] == {"apply": (20.0, 19.0, 21.0), "attention": (21.0, 20.0, 22.0)}
    section = hostpath.section_api_host(GPU, root)
    assert "| v7_hopper | 512 | no | 20.0 (19.0–21.0) | 21.0 (20.0–22.0) | +1.0 | level (the ranges overlap) | – |" \
        in section
    assert "attention() at 1 of 1." in section and "flash_attn_func() at" not in section


def test_the_page_says_not_measured_yet_without_api_rows(root):  # noqa: F811
    assert "`invoke host-steps --kernel v7_hopper --N 512,1024,2048,4096 --steps sdpa,apply,attention," \
           "flash_attn_func` writes" in hostpath.section_api_host(GPU, root)
