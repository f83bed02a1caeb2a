"""The Triton 3.9 port's report (report/port.py) on synthetic rows: three trees per round, both comparisons'
verdicts, REPORT.md's brief table and the page."""

from __future__ import annotations

from report import port
from test_figures import GPU, PROV, _write
from test_report_build import build, root  # noqa: F401 - root is the shared fixture: every version's bench rows


def port_rows(t39_slow: float = 1.0, rounds: int = 3) -> list[dict]:
    """v5 forward and v7 backward at N = 4096, D = 64, non-causal: the port level with block pointers, 3.9 taking
    `t39_slow` times 3.6's time. Round 4 has no t39 row (incomplete)."""
    rows = []
    for r in range(1, rounds + 2):
        for tree, triton, f in ((port.BEFORE, "3.6.0", 1.0), (port.PORT, "3.6.0", 1.001), (port.T39, "3.9.0", t39_slow)):
            if r == rounds + 1 and tree == port.T39:
                continue
            for version, mode in (("v5_final", "fwd"), ("v7_hopper", "bwd")):
                ms = (1.0 + 0.01 * r) * f
                rows.append({"version": version, "mode": mode, "N": 4096, "D": 64, "causal": 0, "round": r,
                             "tree": tree, "tree_commit": "abc1234", "ms": ms, "sdpa_ms": 1.0, "graph_ms": 0.9 * ms,
                             "sdpa_graph_ms": 0.9, "pct_of_sdpa": 100.0 / ms, **dict(PROV, triton=triton)})
    return rows


def test_port_verdicts_per_comparison(root):
    _write(root / GPU / "experiments" / port.CSV, port_rows(t39_slow=1.05))
    df = port._load(GPU, root)
    rows = port.comparison_table(df, port.BEFORE, port.PORT)
    assert rows.count("within 1%") == 2   # both versions: the port is level
    slower = port.comparison_table(df, port.PORT, port.T39)
    assert slower.count("t39 slower by") == 4   # graph replay and % of cuDNN, two versions
    assert "| `v5_final` | fwd | 4096 | 64 | no | 3 |" in slower   # round 4 had no t39: 3 complete rounds


def test_port_brief_and_page(root):
    _write(root / GPU / "experiments" / port.CSV, port_rows())
    text = build.build(root, width=None)
    brief = text[text.index("Triton 3.6 and 3.9 side by side"):]
    # graph replay 0.9 x (1 + 0.01 r): medians over rounds 1-4 (t39: 1-3); causal was not measured
    assert "| `v7_hopper` | bwd | 923 / – | 923 / – | 918 / – | level / – | level / – |" in brief
    page = build.build_all(root)["docs/report/compare_trees.md"]
    assert "Triton 3.9.0" in page and "Triton 3.6.0" in page
    assert "### Triton 3.9 ÷ Triton 3.6, the same checkout" in page


def test_port_not_measured(root):
    assert "not measured yet" in port.section_port(GPU, root)
    assert "not measured yet" in port.section_port_brief(GPU, root)


def test_port_without_graphs_judges_by_do_bench_and_one_round_by_nothing(root):
    rows = [dict(r, graph_ms=float("nan")) if r["mode"] == "bwd" else r for r in port_rows(t39_slow=1.05)]
    _write(root / GPU / "experiments" / port.CSV, rows)
    df = port._load(GPU, root)
    bwd = [line for line in port.comparison_table(df, port.PORT, port.T39).splitlines() if "| bwd |" in line]
    assert len(bwd) == 1 and "do_bench: t39 slower by 4.9%" in bwd[0] and "graph replay" not in bwd[0]
    _write(root / GPU / "experiments" / port.CSV, [r for r in port_rows() if r["round"] == 1])
    assert port.comparison_table(port._load(GPU, root), port.PORT, port.T39).count("one round: no spread") == 2


def test_a_backward_with_kernel_times_is_judged_by_them(root):
    """Backward rows with the kernels' own GPU time (kernel_ms) are judged by it, not by do_bench (the host's time
    at small N): here do_bench says 3.9 is 5% slower, the kernels 2% faster."""
    rows = [dict(r, graph_ms=float("nan"), kernel_ms=0.5 * r["ms"] * (0.98 / 1.05 if r["tree"] == port.T39 else 1))
            if r["mode"] == "bwd" else r for r in port_rows(t39_slow=1.05)]
    _write(root / GPU / "experiments" / port.CSV, rows)
    bwd = [line for line in port.comparison_table(port._load(GPU, root), port.PORT, port.T39).splitlines()
           if "| bwd |" in line]
    assert len(bwd) == 1 and "kernel time: t39 faster by 2.1%" in bwd[0] and "(kernels)" in bwd[0], bwd


def test_port_brief_says_faster_slower_in_short(root):
    _write(root / GPU / "experiments" / port.CSV, port_rows(t39_slow=0.95))
    brief = build.build(root, width=None)
    assert "| `v5_final` | fwd | 923 / – | 923 / – | 872 / – | level / – | faster 5.1% / – |" in brief


def test_a_version_measured_later_keeps_the_others_rounds(root):
    """v7 re-measured at a later commit starts its own comparison; v5's rounds, at the earlier commit, stay judged."""
    rows = port_rows(t39_slow=1.05)
    later = [dict(r, round=r["round"] + 20, tree_commit="def5678") for r in rows
             if r["version"] == "v7_hopper" and r["tree"] != port.BEFORE]
    _write(root / GPU / "experiments" / port.CSV, rows + later)
    df = port._load(GPU, root)
    table = port.comparison_table(df, port.PORT, port.T39)
    assert "| `v5_final` | fwd | 4096 | 64 | no | 3 |" in table and "| `v7_hopper` | bwd | 4096 | 64 | no | 3 |" in table
    text = build.build(root, width=None)
    brief = text[text.index("Triton 3.6 and 3.9 side by side"):]
    assert "| `v5_final` | fwd |" in brief and "| `v7_hopper` | bwd |" in brief


def test_a_later_run_of_some_shapes_keeps_the_other_shapes_rounds(root):
    """A later run at another commit that measures v7's backward at N = 2048 only judges that shape by its own
    rounds; N = 4096, which it did not measure, stays judged by the earlier run's."""
    rows = [dict(r, git_commit="abc1234") for r in port_rows(t39_slow=1.05)]
    later = [dict(r, N=2048, round=r["round"] + 20, tree_commit="def5678", git_commit="def5678", ms=r["ms"] / 1.05)
             for r in rows if r["version"] == "v7_hopper" and r["tree"] != port.BEFORE]
    _write(root / GPU / "experiments" / port.CSV, rows + later)
    table = port.comparison_table(port._load(GPU, root), port.PORT, port.T39)
    assert "| `v7_hopper` | bwd | 4096 | 64 | no | 3 |" in table and "| `v7_hopper` | bwd | 2048 | 64 | no | 3 |" in table


def test_a_later_run_of_b_without_a_keeps_the_comparison(root):
    """B (t39) measured again in later rounds that A (bp36) did not run: bp36 ÷ t39 stays judged by the rounds both ran,
    with the µs of those rounds, not B's later ones."""
    rows = [dict(r, git_commit="abc1234") for r in port_rows(t39_slow=1.05)]
    later = [dict(r, round=r["round"] + 20, tree_commit="def5678", git_commit="def5678", ms=r["ms"] * 3,
                  graph_ms=r["graph_ms"] * 3) for r in rows if r["tree"] == port.T39]
    _write(root / GPU / "experiments" / port.CSV, rows + later)
    df = port._load(GPU, root)
    table = port.comparison_table(df, port.BEFORE, port.T39)
    line = next(ln for ln in table.splitlines() if ln.startswith("| `v5_final` | fwd | 4096 | 64 | no | 3 |"))
    us_before, us_t39 = (float(c) for c in line.split(" | ")[6:8])
    assert 1.04 < us_t39 / us_before < 1.06   # the paired rounds' times, not the later 3x ones


def test_port_names_the_shapes_where_raced_launches_differ(root):
    """Rows whose v7 chose its launches in each process (no launch table): the note names the shapes at which the two
    trees ran different launches; rows from the table get no note."""
    def launched(choice, t39_config):
        return [dict(r, path="gluon", choice=choice if r["version"] == "v7_hopper" else "",
                     config=t39_config if r["tree"] == port.T39 else "q1") for r in port_rows()]
    _write(root / GPU / "experiments" / port.CSV, launched("tuned", "la"))
    df = port._load(GPU, root)
    text = port.comparison_table(df, port.PORT, port.T39)
    assert "(choice `tuned`, not its launch table's), and the trees ran different launches at 2 shapes" in text
    assert text.count("N = 4096, D = 64, non-causal") == 2   # v5's row and v7's: one key each
    _write(root / GPU / "experiments" / port.CSV, launched("tuned", "q1"))
    assert "different launches at 0 shapes." in port.comparison_table(port._load(GPU, root), port.PORT, port.T39)
    _write(root / GPU / "experiments" / port.CSV, launched("table", "la"))
    assert "choice" not in port.comparison_table(port._load(GPU, root), port.PORT, port.T39)
