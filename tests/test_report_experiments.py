"""The report's interleaved peer goal, variable-length workloads and the refactor's no-regression check, each built
from synthetic rows in a temporary results folder: the pooled numbers, the verdicts and what is left out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from figures import data
from report import no_regression as compare_trees, summary, varlen
from test_figures import GPU, PROV, _bench_rows, _write
from test_report_build import build, root  # noqa: F401 - root is the shared fixture: every version's bench rows

REPO = Path(__file__).resolve().parent.parent


def summary_part(root) -> str:
    text = build.build(root, width=None)
    return text[:text.index("## The article's rounds")]


# ---------------------------------------------------------------- the peer goal from the interleaved rounds

def peer_rounds(pct: dict, commit="1234abc", status="ok", rounds=5):
    """One row per round and shape as experiments/peer_goal.py writes them; pct[(N, D, causal)] -> per-round %."""
    rows = []
    for (N, D, c), f in pct.items():
        for r in range(1, rounds + 1):
            p = f(r)
            rows.append({"round": r, "B": 4, "H": 8, "N": N, "D": D, "causal": c, "ms": 1.0, "fa4_ms": p / 100,
                         "sdpa_ms": 1.1, "graph_ms": 1.0, "fa4_graph_ms": 1.0, "sdpa_graph_ms": 1.0,
                         "pct_of_fa4": p, "graph_pct_of_fa4": p - 10, "pct_of_sdpa": 110.0 + r,
                         "graph_pct_of_sdpa": 100.0, "fa4_status": status, "git_commit": commit, **PROV})
    return rows


def test_peer_goal_prefers_the_interleaved_rounds(root):
    shapes = {(2048, 64, 0): lambda r: 100.5 + r, (4096, 64, 0): lambda r: 90.0 + r,
              (2048, 128, 1): lambda r: 98.5 + r, (4096, 128, 1): lambda r: 101.0 + r}
    path = root / GPU / "experiments" / "peer_goal.csv"
    # an older process at the same commit first: only the last process's rounds per shape count; N = 1024 (timed by
    # the experiment's default) is below the goal's shapes
    _write(path, peer_rounds({k: (lambda r: 50.0) for k in shapes}) + peer_rounds(shapes)
           + peer_rounds({(1024, 64, 0): lambda r: 150.0}))
    rows, pooling = summary.peer_goal_rounds(GPU, root)
    by = {(r[0], r[1], r[2]): r for r in rows}
    assert sorted(by) == sorted((N, D, "yes" if c else "no") for N, D, c in shapes)
    assert by[(2048, 64, "no")][3:6] == [5, "103.5% (101.5–105.5%)", "ahead"]
    assert by[(4096, 64, "no")][4:6] == ["93.0% (91.0–95.0%)", "behind"]
    assert by[(2048, 128, "yes")][4:6] == ["101.5% (99.5–103.5%)", "level"]   # the median above, one round below
    # graph replay 10 points lower: its own verdict; % of cuDNN pooled the same way; the commit in its column
    assert by[(4096, 128, "yes")][5:9] == ["ahead", "94.0% (92.0–96.0%)", "behind", "113.0% (111.0–115.0%)"]
    assert by[(4096, 128, "yes")][-1] == "`1234abc`"
    assert "5 interleaved rounds in one process" in pooling
    s = summary_part(root)
    assert "5 interleaved rounds in one process" in s and "| 2048 | 64 | no | 5 | 103.5% (101.5–105.5%) | ahead |" in s
    assert "1234abc" not in "\n".join(line for line in s.split("\n") if not line.startswith("|"))


# ---------------------------------------------------------------- the backward against cuDNN and the peer

def bwd_runs(pct: dict, D=64, commit="abcdef1", protocol="20261202T000000-aaaaaa", status="ok", day="02"):
    """The backward harness's rows of one protocol: pct[(N, causal)] -> the per-run % of cuDNN (the peer's 20 points
    lower, the forward + backward step's 5 points higher; v7's host µs per backward 100, cuDNN's the run's % of
    cuDNN)."""
    rows = []
    for (N, c), f in pct.items():
        for r in range(1, 4):
            rows.append({**PROV, "version": "v7_hopper", "run_id": f"{protocol}/{r}", "date": f"2026-12-{day}T00:0{r}",
                         "N": N, "D": D, "causal": c, "bwd_ms": 1.0, "fwd_bwd_ms": 1.5, "sdpa_bwd_ms": 1.0,
                         "sdpa_fwd_bwd_ms": 1.5, "bwd_pct_of_sdpa": f(r),
                         "fwd_bwd_pct_of_sdpa": f(r) + 5, "bwd_pct_of_fa4": f(r) - 20, "fwd_bwd_pct_of_fa4": f(r) - 15,
                         "fa4_status": status, "git_commit": commit, "bwd_host_us": 100.0, "sdpa_bwd_host_us": f(r)})
    return rows


def test_backward_goal_pools_each_shapes_latest_protocol(root):
    # an older protocol: its N = 4096 rows give way to the newer one's, its N = 512 rows (which no later protocol
    # timed) stay
    old = bwd_runs({(4096, 0): lambda r: 50.0, (512, 0): lambda r: 70.0}, commit="0000000",
                   protocol="20261201T000000-bbbbbb", day="01")
    d64 = bwd_runs({(1024, 0): lambda r: 200.0, (2048, 0): lambda r: 100.5 + r, (4096, 0): lambda r: 90.0 + r,
                    (4096, 1): lambda r: 98.5 + r})
    d128 = bwd_runs({(4096, 1): lambda r: 80.0 + r}, D=128, commit="fedcba9", status="not installed")
    _write(root / GPU / "bench_bwd" / "v7_hopper.csv", old + d64 + d128)
    assert [r[0] for r in summary.backward_goal(GPU, root)[0]] == [2048, 4096, 4096, 4096]   # REPORT.md's: N >= 2048
    rows, pooling = summary.backward_goal(GPU, root, min_n=summary.BWD_GOAL_MIN_N)   # the backward page's
    by = {(r[0], r[1], r[2]): r for r in rows}
    assert sorted(by) == [(512, 64, "no"), (1024, 64, "no"), (2048, 64, "no"), (4096, 64, "no"), (4096, 64, "yes"),
                          (4096, 128, "yes")]
    assert by[(512, 64, "no")][4] == "70.0% (70.0–70.0%)" and by[(512, 64, "no")][-1] == "`0000000`"
    assert by[(2048, 64, "no")][3:10] == [3, "102.5% (101.5–103.5%)", "ahead", "102.5% (101.5–103.5%)", "ahead",
                                          "82.5% (81.5–83.5%)", "behind"]
    assert by[(1024, 64, "no")][6:8] == ["200.0% (200.0–200.0%)", "ahead"]      # the host: cuDNN's µs ÷ ours
    assert by[(4096, 64, "no")][4:8] == ["92.0% (91.0–93.0%)", "behind", "–", "–"]   # not the older 50%; no host
    assert by[(4096, 64, "yes")][4:6] == ["100.5% (99.5–101.5%)", "level"]
    assert by[(4096, 64, "yes")][10:] == ["105.5% (104.5–106.5%)", "85.5% (84.5–86.5%)", "3.6", "`abcdef1`"]
    assert by[(4096, 128, "yes")][8:10] == ["–", "–"] and by[(4096, 128, "yes")][-1] == "`fedcba9`"   # no peer there
    assert "(Triton, shape)'s latest protocol of at least 3 runs" in pooling
    s = summary_part(root)
    assert "### v7's backward against cuDNN and flash-attn-4, N ≥ 2048" in s and "| 1024 | 64 |" not in s
    assert "| 4096 | 64 | yes | 3 | 100.5% (99.5–101.5%) | level | – | – |" in s and "| 3.6 | `abcdef1` |" in s
    assert "| 1024 | 64 | no | 3 |" in summary.section_backward_goals(GPU, root)
    assert "abcdef1" not in "\n".join(line for line in s.split("\n") if not line.startswith("|"))


def test_the_peer_tables_pool_each_triton_apart_and_the_summary_shows_the_newest(root):
    """Rows under Triton 3.6 and 3.9 at one commit: each Triton's rows are pooled alone (its latest commit or
    protocol), named in the Triton column; REPORT.md's summary shows the newest Triton's, the pages every Triton's."""
    def under(rows, triton):
        return [{**r, "triton": triton} for r in rows]

    fwd = {(4096, 64, 0): lambda r: 90.0 + r}
    _write(root / GPU / "experiments" / "peer_goal.csv",
           under(peer_rounds(fwd, commit="3636363"), "3.6.0")
           + under(peer_rounds({(4096, 64, 0): lambda r: 100.5 + r}, commit="3939393"), "3.9.0"))
    rows, pooling = summary.peer_goal_rounds(GPU, root)
    assert [(r[4], r[5], r[10], r[11]) for r in rows] == [("93.0% (91.0–95.0%)", "behind", "3.6", "`3636363`"),
                                                         ("103.5% (101.5–105.5%)", "ahead", "3.9", "`3939393`")]
    assert [r[10] for r in summary.peer_goal_rounds(GPU, root, newest_only=True)[0]] == ["3.9"]
    assert "at each Triton's latest commit" in pooling
    bwd = under(bwd_runs({(4096, 0): lambda r: 90.0 + r}, protocol="20261202T000000-aaaaaa"), "3.6.0") + under(
        bwd_runs({(4096, 0): lambda r: 100.5 + r}, commit="3939393", protocol="20261201T000000-bbbbbb", day="01"),
        "3.9.0")
    _write(root / GPU / "bench_bwd" / "v7_hopper.csv", bwd)
    rows, _ = summary.backward_goal(GPU, root)   # the 3.9 protocol is older, yet it is 3.9's latest
    assert [(r[4], r[12], r[13]) for r in rows] == [("92.0% (91.0–93.0%)", "3.6", "`abcdef1`"),
                                                   ("102.5% (101.5–103.5%)", "3.9", "`3939393`")]
    s = summary_part(root)
    assert "| 3.9 | `3939393` |" in s and "| 3.6 |" not in s
    assert "| 3.6 | `abcdef1` |" in summary.section_backward_goals(GPU, root)
    assert "| 3.6 | `3636363` |" in summary.section_peer_goals(GPU, root)


def test_backward_goal_and_headline_pool_the_default_dq_mode(root):
    """A later --dq-mode experiment's protocol does not replace the default backward's in either summary."""
    from fa2triton import versions
    from report.backward import DEFAULT_DQ_MODE

    assert all(versions.load(v).FlashAttentionTriton.BACKWARD_DQ_MODE == DEFAULT_DQ_MODE
               for v in ("v6_longest_first", "v7_hopper"))
    default = [{**r, "dq_mode": DEFAULT_DQ_MODE} for r in bwd_runs({(4096, 0): lambda r: 90.0 + r})]
    atomic = [{**r, "dq_mode": "atomic"} for r in bwd_runs({(4096, 0): lambda r: 60.0}, commit="1111111",
                                                           protocol="20261203T000000-cccccc", day="03")]
    _write(root / GPU / "bench_bwd" / "v7_hopper.csv", default + atomic)
    rows, _ = summary.backward_goal(GPU, root)
    assert [r[4] for r in rows] == ["92.0% (91.0–93.0%)"] and rows[0][-1] == "`abcdef1`"
    head, _ = summary.backward_headline(GPU, root)
    v7 = next(r for r in head if r["version"] == "v7_hopper")
    assert v7["dq_mode"] == DEFAULT_DQ_MODE and v7["b_0"] == 92.0


def test_a_later_protocol_of_one_length_refreshes_that_length_only(root):
    """The harness's tables take each (dQ mode, shape)'s latest protocol: a later run of the default mode at N = 1024
    alone replaces N = 1024's rows, and the headline at N = 4096 still reads the full protocol before it."""
    from report.backward import DEFAULT_DQ_MODE, backward_summary

    full = [{**r, "dq_mode": DEFAULT_DQ_MODE} for r in bwd_runs({(1024, 0): lambda r: 80.0 + r,
                                                                 (4096, 0): lambda r: 90.0 + r})]
    one = [{**r, "dq_mode": DEFAULT_DQ_MODE} for r in bwd_runs({(1024, 0): lambda r: 100.0 + r}, commit="1111111",
                                                                protocol="20261203T000000-cccccc", day="03")]
    _write(root / GPU / "bench_bwd" / "v7_hopper.csv", full + one)
    table, _, _ = backward_summary(GPU, root)
    v7 = table[(table.version == "v7_hopper") & (table.dq_mode == DEFAULT_DQ_MODE)].set_index("N")
    assert v7.loc[1024, "b_pct"] == 102.0 and v7.loc[1024, "protocol"] == "20261203T000000-cccccc"
    assert v7.loc[4096, "b_pct"] == 92.0 and v7.loc[4096, "protocol"] == "20261202T000000-aaaaaa"
    head, _ = summary.backward_headline(GPU, root)
    assert next(r for r in head if r["version"] == "v7_hopper")["b_0"] == 92.0


def test_backward_goal_is_absent_without_rows(root):
    path = root / GPU / "bench_bwd" / "v7_hopper.csv"
    if path.exists():
        path.unlink()
    assert summary.backward_goal(GPU, root) is None and summary.section_backward_goal(GPU, root) == ""


def test_peer_goal_falls_back_to_the_harness_without_ok_rounds(root):
    _write(root / GPU / "experiments" / "peer_goal.csv",
           peer_rounds({(2048, 64, 0): lambda r: 101.0}, status="not installed"))
    assert summary.peer_goal_rounds(GPU, root) is None
    path = root / GPU / "bench" / "v7_hopper.csv"
    rows = [{**r, "git_commit": "bbbbbbb", "fa4_status": "ok", "pct_of_fa4": 104.0}
            for r in _bench_rows(7, "v7_hopper")]
    _write(path, rows)
    s = summary_part(root)
    assert "interleaved rounds" not in s and "| N | D | causal | runs | % of flash-attn-4 | interval | verdict |" in s


# ---------------------------------------------------------------- variable-length workloads

def varlen_run(version, run_id, cache, first_s, pct=100.0, total=True, compare=(), launch_from=None):
    """A bench_varlen.py run: one call row per first-call seconds, the "total" row over all calls unless cut short,
    and "compare" rows with the given pct_of_tuned; `launch_from` as v7 with a launch table writes it (None: a run
    from before the table, which has no such column)."""
    base = {"version": version, "run_id": run_id, "triton_cache": cache, "pick_cache": cache, "git_commit": "ccccccc",
            **PROV, **({"launch_from": launch_from} if launch_from else {})}
    rows = [{**base, "row": "call", "index": i, "N": 300 + i, "D": 64, "causal": 0, "first_call_s": s,
             "pct_of_sdpa": pct} for i, s in enumerate(first_s)]
    if total:
        first = sorted(first_s)
        rows.append({**base, "row": "total", "group": "all", "calls": len(first_s),
                     "total_first_call_s": sum(first_s), "median_first_call_s": first[len(first) // 2],
                     "max_first_call_s": max(first_s), "median_pct_of_sdpa": pct})
    rows += [{**base, "row": "compare", "index": i, "N": 300 + i, "D": 64, "causal": 0, "pct_of_tuned": p}
             for i, p in enumerate(compare)]
    return rows


def test_varlen_pools_complete_runs_against_the_goals(root, monkeypatch):
    monkeypatch.setattr(varlen, "GOAL_CALLS", 3)   # these runs' plan stands for the goals' 32 lengths x 4
    folder = root / GPU / "varlen"
    _write(folder / "v5_final.csv", varlen_run("v5_final", "a", "cold", [30.0, 20.0, 5.0])
           + varlen_run("v5_final", "a", "warm", [0.5, 0.05, 0.01], pct=90.0))
    _write(folder / "v7_hopper.csv", varlen_run("v7_hopper", "b", "cold", [50.0, 15.0, 0.5], pct=105.0)
           + varlen_run("v7_hopper", "b", "warm", [2.0, 0.2, 0.01], pct=106.0)
           + varlen_run("v7_hopper", "cut", "warm", [9.0, 9.0], total=False)
           + varlen_run("v7_hopper", "t", "cold", [20.0, 5.0, 0.5], pct=104.0, launch_from="table"))
    rows, cut, tuned = varlen.varlen_table(GPU, root)
    by = {(r[0], r[1], r[2]): r for r in rows}
    assert set(by) == {("`v5_final`", "race", "cold"), ("`v5_final`", "race", "warm"), ("`v7_hopper`", "race", "cold"),
                       ("`v7_hopper`", "race", "warm"), ("`v7_hopper`", "table", "cold")}
    assert by[("`v5_final`", "race", "cold")][3:9] == [1, "3", "55.0", "20.000", "30.00", "100.0%"]
    assert by[("`v5_final`", "race", "cold")][9] == "total missed (55.0 s > 30.0 s)"
    assert by[("`v7_hopper`", "race", "cold")][9] == "total missed (65.5 s > 30.0 s)"
    # the table's run is its own row, not pooled with the race's
    assert by[("`v7_hopper`", "table", "cold")][9] == "total met (25.5 s ≤ 30.0 s)"
    assert by[("`v5_final`", "race", "warm")][9] == "largest met (0.50 s ≤ 1.00 s); median met (0.050 s ≤ 0.100 s)"
    assert by[("`v7_hopper`", "race", "warm")][9] == ("largest missed (2.00 s > 1.00 s); median missed (0.200 s > "
                                                      "0.100 s)")
    # the run cut short is listed, not pooled (its 9 s calls would miss the warm goal)
    assert cut == [("v7_hopper", "cut", "warm", "warm", 2)] and by[("`v7_hopper`", "race", "warm")][3] == 1
    assert tuned.startswith("not measured")
    # a smaller plan (a --compare-tuned run of fewer lengths) is a row of its own, and the goals do not judge it
    _write(folder / "v5_final.csv", varlen_run("v5_final", "a", "cold", [30.0, 20.0, 5.0])
           + varlen_run("v5_final", "s", "cold", [40.0, 1.0]))
    small = [r for r in varlen.varlen_table(GPU, root)[0] if r[0] == "`v5_final`" and r[4] == "2"]
    assert len(small) == 1 and small[0][5] == "41.0" and small[0][9].startswith("– (not the goals' 3 calls)")
    assert "| 41.0 |" not in varlen.varlen_brief(GPU, root) and "| 55.0 |" in varlen.varlen_brief(GPU, root)
    page = build.build_all(root)["docs/report/varlen.md"]
    assert "Incomplete runs" in page and "| `v7_hopper` | `cut` | warm | warm | 2 |" in page
    assert "Variable-length workloads ([the page](docs/report/varlen.md))" in build.build(root, width=None)


def test_varlen_compare_rows_decide_the_tuned_goal(root):
    _write(root / GPU / "varlen" / "v7_hopper.csv",
           varlen_run("v7_hopper", "b", "warm", [0.5, 0.01], compare=(99.0, 97.5)))
    assert varlen.varlen_table(GPU, root)[2] == "`v7_hopper` 1 of 2 compared calls at ≥ 98% (least 97.5%): missed"
    _write(root / GPU / "varlen" / "v7_hopper.csv",
           varlen_run("v7_hopper", "b", "warm", [0.5, 0.01], compare=(99.0, 98.5)))
    assert varlen.varlen_table(GPU, root)[2].endswith("(least 98.5%): met")


def test_varlen_malformed_file_is_named(root):
    path = _write(root / GPU / "varlen" / "v7_hopper.csv", [{"version": "v7_hopper", "row": "call"}])
    with pytest.raises(data.ResultsError, match="v7_hopper.csv"):
        varlen.varlen_table(GPU, root)
    path.unlink()


# ---------------------------------------------------------------- the refactor's no-regression check

def tree_rows(rounds=3, slow=1.05):
    """Two shapes: one level (after / before 1.002), one whose graph replay is `slow` times before's; an extra round
    where only before ran."""
    rows = []
    for r in range(1, rounds + 2):
        for tree, commit in (("before", "dddddd1"), ("after", "eeeeee2")):
            if r == rounds + 1 and tree == "after":
                continue   # the incomplete round
            for N, f in ((1024, 1.002), (4096, slow)):
                k = f if tree == "after" else 1.0
                ms = (1.0 + 0.01 * r) * (1.002 if tree == "after" else 1.0)
                rows.append({"N": N, "D": 64, "causal": 0, "round": r, "tree": tree, "tree_commit": commit, "ms": ms,
                             "sdpa_ms": 1.0, "graph_ms": 0.5 * k, "sdpa_graph_ms": 0.5, "pct_of_sdpa": 100.0 / ms,
                             **PROV})
    return rows


def test_compare_trees_ratios_over_complete_rounds(root, capsys):
    path = _write(root / GPU / "experiments" / "compare_trees.csv", tree_rows())
    _, a, b, rows = compare_trees.compare(GPU, root)
    assert (a, b) == ("before", "after") and [r["rounds"] for r in rows] == [3, 3]
    level, slow = rows
    assert compare_trees.verdict(level) == "within 1%"
    assert compare_trees.verdict(slow) == "graph replay: after slower by 5.0%"
    assert compare_trees.cell(slow["graph_ms"]) == "1.050 (1.050–1.050)"
    assert "at 1 of 2 shapes" in compare_trees.within_count(GPU, root)
    page = build.build_all(root)["docs/report/compare_trees.md"]
    assert "| before | `dddddd1` | 3 |" in page and "| after | `eeeeee2` | 3 |" in page   # round 4 had no after
    assert "| 4096 | 64 | no | 3 |" in page and "graph replay: after slower by 5.0%" in page
    assert "at 1 of 2 shapes" in build.build(root, width=None)
    # the script's --summary prints the report's table: one implementation
    spec = importlib.util.spec_from_file_location("compare_trees_script", REPO / "scripts" / "compare_trees.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.summary(path, "before", "after") == 0
    assert compare_trees.table(rows) in capsys.readouterr().out


def test_compare_trees_pools_only_the_latest_after_commit(root):
    """Rounds against an earlier checkout of `after` are history: a later commit's rounds replace them in the pool."""
    old = tree_rows(slow=1.05)
    new = [dict(r, round=r["round"] + 10, tree_commit="ffffff3" if r["tree"] == "after" else r["tree_commit"])
           for r in tree_rows(rounds=5, slow=0.9)]
    _write(root / GPU / "experiments" / "compare_trees.csv", old + new)
    df, _, _, rows = compare_trees.compare(GPU, root)
    assert [r["rounds"] for r in rows] == [5, 5]
    assert compare_trees.verdict(rows[1]) == "graph replay: after faster by 10.0%"
    assert set(df.tree_commit) == {"dddddd1", "ffffff3"} and df["round"].min() == 11


def test_compare_trees_keeps_a_later_run_apart_when_its_rounds_repeat_the_numbers(root):
    """A later run (another driving checkout) that numbers its rounds 1, 2, 3 again: its rows alone are pooled."""
    old = [dict(r, git_commit="aaaaaa0") for r in tree_rows(slow=1.05)]
    new = [dict(r, git_commit="bbbbbb0", tree_commit={"before": "cccccc1", "after": "bbbbbb0"}[r["tree"]])
           for r in tree_rows(slow=0.9)]
    _write(root / GPU / "experiments" / "compare_trees.csv", old + new)
    df, _, _, rows = compare_trees.compare(GPU, root)
    assert set(df.tree_commit) == {"cccccc1", "bbbbbb0"}
    assert compare_trees.verdict(rows[1]) == "graph replay: after faster by 10.0%"


def test_compare_trees_faster_and_unknown_labels(root):
    _write(root / GPU / "experiments" / "compare_trees.csv", tree_rows(slow=0.9))
    rows = compare_trees.compare(GPU, root)[3]
    assert compare_trees.verdict(rows[1]) == "graph replay: after faster by 10.0%"
    df = compare_trees.load(root / GPU / "experiments" / "compare_trees.csv")
    with pytest.raises(data.ResultsError, match="no tree 'later'"):
        compare_trees.labels(df, "before", "later")


def test_compare_trees_calls_a_ratio_whose_rounds_straddle_one_level():
    """A median off by more than 1% whose rounds' min-max holds 1 is noise: level, not slower or faster."""
    r = {"rounds": 3, "graph_ms": [0.97, 1.03, 1.05], "pct_of_sdpa": [1.0, 1.0, 1.0], "ms": [1.0, 1.0, 1.0]}
    assert compare_trees.verdict(r) == "graph replay: level (the spread holds 1)"
    r["graph_ms"] = [1.02, 1.03, 1.05]
    assert compare_trees.verdict(r) == "graph replay: after slower by 3.0%"


# ---------------------------------------------------------------- v7 beside the peer under Nsight Compute

def peer_ncu_rows(run_id: str, v7_us: float, barrier: tuple[float, float], grid=(132, 1024)) -> list[dict]:
    """One run of profile_driver --peer fa4 at N = 4096, D = 128, non-causal: v7, the peer and cuDNN."""
    flop = 4 * 4 * 8 * 4096 * 4096 * 128
    rows = []
    for who, us, g, bar in (("v7_hopper", v7_us, grid[0], barrier[0]), ("fa4-fwd", 390.0, grid[1], barrier[1]),
                            ("sdpa", 412.0, 132, 1.4)):
        rows.append({"kernel": f"{who} N=4096 causal=0/k", "version": who, "N": 4096, "causal": 0, "D": 128,
                     "config": "", "predicted_flops": flop, "gpu__time_duration.sum [ns]": us * 1e3,
                     "dram__bytes_read.sum [byte]": 1e8, "dram__bytes_write.sum [byte]": 3e7,
                     "l1tex__m_xbar2l1tex_read_bytes.sum [byte]": 2e9, "launch__block_size": 384,
                     "launch__grid_size": g, "device__attribute_multiprocessor_count": 132,
                     "launch__registers_per_thread [register/thread]": 168,
                     "launch__shared_mem_per_block_dynamic [byte/block]": 229760 if who == "v7_hopper" else 164864,
                     "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active [%]": 74.0,
                     "sm__ops_path_tensor_src_bf16_dst_fp32.sum": flop,
                     "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio [inst]": bar,
                     "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio [inst]": 1.6,
                     "run_id": run_id, "date": run_id, **{k: v for k, v in PROV.items() if k != "date"}})
    return rows


def test_peer_profile_tables_and_what_differs(root):
    page_of = lambda: build.build_all(root)["docs/report/peer-profile.md"]   # noqa: E731
    assert "not measured yet" in page_of()
    path = root / GPU / "ncu" / "v7_hopper_fa4_N4096_noncausal_D128.csv"
    _write(path, peer_ncu_rows("2026-12-01T00:00:00+00:00", 800.0, (0.6, 0.6))
           + peer_ncu_rows("2026-12-01T01:00:00+00:00", 420.0, (3.5, 0.6)))
    page = page_of()
    assert "#### N = 4096, D = 128, non-causal" in page
    assert "| µs under ncu | 420.0 | 390.0 | 412.0 |" in page           # the file's last run, not the first
    assert "| CTAs (query rows each) | 132 (persistent) | 1,024 (128) | 132 (persistent) |" in page
    assert "- Time: flash-attn-4 takes 0.929× v7's (390.0 µs against 420.0)." in page
    assert "- Stall 'barrier': 3.50 cycles per issued instruction in v7, 0.60 in flash-attn-4." in page
    assert "- Stall 'wait'" not in page                                  # equal: not a difference
    assert "- The same in both: 384 threads per CTA and 168 registers per thread." in page
    assert "- Shared memory: 229.8 KB per CTA in v7, 164.9 KB in flash-attn-4." in page
    # the harness's final-profile table (D = 64) leaves the D = 128 rows out
    assert "| fa4-fwd | 4096 |" not in build.build(root, width=None)
    _write(path, peer_ncu_rows("2026-12-01T02:00:00+00:00", 420.0, (0.7, 0.6), grid=(1024, 1024)))
    page = page_of()
    assert "Stall 'barrier'" not in page and "- Grid:" not in page


# ---------------------------------------------------------------- the warp-specialized Gluon backward's page

def ws_rows(v7_us: float, ws_us: float, cudnn_us: float, N=4096, D=128, causal=0) -> list[dict]:
    """One shape's rows as experiments/bwd_gluon_ws.py writes them (3 rounds folded into median, min, max)."""
    rows = []
    for who, g, d in (("v7", v7_us, v7_us), ("gluon-ws/s2", ws_us, ws_us), ("cudnn", float("nan"), cudnn_us)):
        rows.append({"who": who, "N": N, "D": D, "causal": causal, "rounds": 3, "max_rel_err_vs_fp64": 2e-3,
                     "graph_us": g, "graph_us_min": g, "graph_us_max": g, "graph_tflops": 500.0,
                     "dobench_us": d, "dobench_us_min": d, "dobench_us_max": d,
                     "v7_over_graph": v7_us / g, "v7_over_graph_min": v7_us / g, "v7_over_graph_max": v7_us / g,
                     "cudnn_over_dobench": cudnn_us / d, "cudnn_over_dobench_min": cudnn_us / d,
                     "cudnn_over_dobench_max": cudnn_us / d, "git_commit": "abcdef1", **PROV})
    return rows


def test_the_ws_page_gives_each_shapes_ratios_from_the_rows(root):
    from report.backward import section_bwd_gluon_ws

    assert "not measured yet (`invoke experiment bwd-gluon-ws` writes" in section_bwd_gluon_ws(GPU, root)
    _write(root / GPU / "experiments" / "bwd_gluon_ws.csv",
           ws_rows(1300.0, 1000.0, 1100.0) + ws_rows(500.0, 550.0, 440.0, N=2048, D=64, causal=1))
    text = section_bwd_gluon_ws(GPU, root)
    assert "| 4096 | 128 | no | s2 | 1300.0 | 1000.0 | 1.300× (1.300–1.300×) | 500 | 1100.0 | 110.0% (110.0–110.0%) | " \
           "84.6% (84.6–84.6%) | 2.0e-03 |" in text
    assert "| 2048 | 64 | yes | s2 | 500.0 | 550.0 | 0.909× (0.909–0.909×) | 500 | 440.0 | 80.0% (80.0–80.0%) |" in text


def test_the_ws_page_sets_each_trial_beside_its_own_runs_shipped_kernel(root):
    """A trial form (the shipped label and a suffix) is tabled per shape and Triton from its latest run, with the
    shipped kernel's time from that same run (a later run's shipped row is another commit's kernel, and one commit's
    runs under two Tritons are two kernels); /synced keeps its own table, round 5's run, the first that timed it."""
    from report.backward import section_bwd_gluon_ws

    def run(commit, date, shipped_us, trials: dict, triton="3.6.0"):
        rows = [dict(r, git_commit=commit, date=date, triton=triton)
                for r in ws_rows(1000.0, shipped_us, 900.0, N=2048, D=64)]
        for suffix, us in trials.items():
            ratio = shipped_us / us
            rows.append(dict(rows[1], who=f"gluon-ws/s2/{suffix}", graph_us=us, graph_us_min=us, graph_us_max=us,
                             gluon_over_graph=ratio, gluon_over_graph_min=ratio - 0.01, gluon_over_graph_max=ratio))
        return rows

    _write(root / GPU / "experiments" / "bwd_gluon_ws.csv",
           run("1111111", "2026-12-01T00:00:00+00:00", 200.0, {"synced": 190.0})
           + run("2222222", "2026-12-02T00:00:00+00:00", 220.0, {"synced": 220.0, "lag": 275.0})
           + run("3333333", "2026-12-03T00:00:00+00:00", 210.0, {"synced": 210.0, "zk": 225.0})
           + run("3333333", "2026-12-03T01:00:00+00:00", 200.0, {"zk": 250.0}, triton="3.9.0"))
    text = section_bwd_gluon_ws(GPU, root)
    # round 5's table: the first run that timed /synced (unsynced 200 against synced 190), not a later one
    assert "| 2048 | 64 | no | 190.0 | 200.0 |" in text and "| 2048 | 64 | no | 210.0 | 210.0 |" not in text
    # each trial beside its own run's shipped kernel: /lag's 220 (2222222), not the latest run's 210
    assert "| `/lag` | 2048 | 64 | no | 3.6.0 | 3 | 220.0 | 275.0 | 0.800× (0.790–0.800×) | `2222222` |" in text
    # one commit under two Tritons: a row each, each beside its own Triton's shipped kernel
    assert "| `/zk` | 2048 | 64 | no | 3.6.0 | 3 | 210.0 | 225.0 | 0.933× (0.923–0.933×) | `3333333` |" in text
    assert "| `/zk` | 2048 | 64 | no | 3.9.0 | 3 | 200.0 | 250.0 | 0.800× (0.790–0.800×) | `3333333` |" in text
    assert "`/synced` |" not in text


def test_varlen_judges_the_latest_commits_runs_alone(root, monkeypatch):
    """A later commit's runs replace an earlier commit's in the table (its code is the one under test); runs of one
    commit still pool."""
    monkeypatch.setattr(varlen, "GOAL_CALLS", 3)

    def at(commit, date, rows):
        return [dict(r, git_commit=commit, date=date) for r in rows]

    _write(root / GPU / "varlen" / "v7_hopper.csv",
           at("aaaaaaa", "2026-12-02T11:00:00+00:00", varlen_run("v7_hopper", "old", "cold", [40.0, 4.0, 0.5],
                                                                  launch_from="table"))
           + at("bbbbbbb", "2026-12-02T14:00:00+00:00", varlen_run("v7_hopper", "new", "cold", [20.0, 4.0, 0.5],
                                                                    launch_from="table"))
           + at("bbbbbbb", "2026-12-02T14:05:00+00:00", varlen_run("v7_hopper", "new2", "cold", [22.0, 4.0, 0.5],
                                                                    launch_from="table")))
    (row,) = varlen.varlen_table(GPU, root)[0]
    assert row[3] == 2 and row[10] == "`bbbbbbb`" and row[9] == "total met (25.5 s ≤ 30.0 s)", row
