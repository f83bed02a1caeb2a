"""The report's builder and README's generated block: REPORT.md and docs/report/ are what the builder writes from
results/ (byte for byte, twice the same), REPORT.md stays one screen of summary plus a short body, README's block is
the report's numbers, and the peer (flash-attn-4) column reads 'not measured yet' until rows with fa4_status ok exist."""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest

from fa2lab import shapes
from fa2triton import versions
import report
from figures import data
from report import readme, summary
from test_figures import GPU, PROV, _bench_rows, _write

build = importlib.import_module("report.build")   # the module (report.build is also its function)
REPO = Path(__file__).resolve().parent.parent
NAMES = list(versions.NAMES)


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "results"
    shutil.copytree(REPO / "results" / "reference", r / "reference")
    for i, v in enumerate(NAMES):
        _write(r / GPU / "bench" / f"{v}.csv", [{**row, "git_commit": "aaaaaaa"} for row in _bench_rows(i, v)])
    return r


def with_peer(rows, pct_of_fa4, D=64, run_id=None):
    """The harness rows as the peer-aware harness writes them: fa4 columns measured (fa4_status ok)."""
    return [{**r, "D": D, "fa4_ms": r["ms"] * pct_of_fa4 / 100, "fa4_tflops": 1.0, "pct_of_fa4": pct_of_fa4 + i % 3,
             "fa4_status": "ok", **({"run_id": f"{run_id}/{i % 3}"} if run_id else {})} for i, r in enumerate(rows)]


# ---------------------------------------------------------------- the committed files

@pytest.fixture(scope="module")
def committed():
    """What the builder writes from the committed results/ (built once for this module)."""
    return build.build_all(None)


def test_committed_results_md_and_pages_are_the_builders_output(committed):
    for rel_path, text in committed.items():
        path = REPO / rel_path
        assert path.exists(), f"{rel_path} is not committed: run `invoke report`"
        assert path.read_text() == text, f"{rel_path} differs from what `invoke report` writes from results/"
    pages = {f"{build.PAGES_DIR}/{p.name}" for p in (REPO / build.PAGES_DIR).glob("*.md")}
    assert pages == {k for k in committed if k.startswith(build.PAGES_DIR)}, "a page the builder no longer writes"


def test_the_builder_gives_the_same_bytes_twice(root):
    assert build.build_all(root) == build.build_all(root)


def test_results_md_is_short_and_opens_with_the_verdict(committed):
    lines = committed["REPORT.md"].split("\n")
    assert len(lines) <= 500
    verdict = next(i for i, line in enumerate(lines) if line.startswith("| N | causal | A: median"))
    assert verdict < 60 and any(w in "\n".join(lines[verdict:verdict + 12]) for w in ("ahead", "behind", "level"))
    assert sum(len(line) > 300 for line in lines if not line.startswith("|")) == 0   # prose is wrapped
    for page in build.PAGES:
        assert f"({build.PAGES_DIR}/{page.slug}.md)" in committed["REPORT.md"]


def test_no_work_log_labels_or_commit_hashes_in_the_prose(committed):
    for rel_path, text in committed.items():
        prose = [line for line in text.split("\n") if not line.startswith("|")]
        for line in prose:
            assert not re.search(r"\bsession \d+|\bcall \d+\b", line, re.I), (rel_path, line)
            assert not re.search(r"\b20\d\d-[01]\d-[0-3]\d\b", line), (rel_path, line)
            hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", line) if re.search(r"[a-f]", w)
                      and re.search(r"\d", w)]
            assert not hashes, (rel_path, line)


def test_no_report_module_is_long():
    for path in (REPO / "figures" / "report").glob("*.py"):
        assert len(path.read_text().splitlines()) <= 500, path.name
    for path in (REPO / "figures").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 600, path


# ---------------------------------------------------------------- README's block

def test_readme_block_is_what_the_report_computes():
    """README.md's generated block against the report's numbers from the committed results/: a digit edited by hand
    in README.md fails here."""
    text = (REPO / "README.md").read_text()
    if not readme.has_markers(text):
        pytest.skip("README.md has no <!-- report:... --> markers yet")
    assert readme.differences(REPO / "README.md") == []


def test_readme_is_a_landing_page():
    """README.md, generated blocks included: at most 120 lines, none over 300 characters, no path outside the repo."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 120, len(lines)
    assert [n for n, line in enumerate(lines, 1) if len(line) > 300] == []
    assert not [line for line in lines if "../" in line]


def test_readme_writer_touches_only_the_blocks_and_catches_a_hand_edit(root, tmp_path):
    path = tmp_path / "README.md"
    before, middle, after = "# Title\n\nProse 4096 before.\n\n", "\n\nProse between.\n\n", "\n\n## Tasks\nafter\n"
    path.write_text(before + "<!-- report:results -->\nSTALE BLOCK\n<!-- /report:results -->" + middle
                    + "<!-- report:versions -->\n<!-- /report:versions -->" + after)
    readme.write(path, root)
    text = path.read_text()
    assert text.startswith(before + "<!-- report:results -->\n") and text.endswith("<!-- /report:versions -->" + after)
    assert middle in text and "STALE BLOCK" not in text
    assert readme.differences(path, root) == []
    readme.write(path, root)
    assert path.read_text() == text                                 # idempotent
    # v7's non-causal median in the versions table, one digit changed by hand
    rows, _, _ = summary.headline(GPU, root)
    cell = next(r for r in rows if r["version"] == "v7_hopper")["sdpa_0"].text()
    digit = next(ch for ch in cell if ch.isdigit())
    edited = text.replace(f"| {cell} |", f"| {cell.replace(digit, str((int(digit) + 1) % 10), 1)} |", 1)
    assert edited != text
    path.write_text(edited)
    problems = readme.differences(path, root)
    assert problems and "results:" in problems[0]


def test_readme_without_a_marker_is_a_clear_error(root, tmp_path):
    path = tmp_path / "README.md"
    path.write_text("# Title\n<!-- report:results -->\n<!-- /report:results -->\n")
    with pytest.raises(readme.ReadmeError, match="lacks the marker <!-- report:versions -->"):
        readme.write(path, root)
    assert report.main(["--results", str(root), "--out-dir", str(tmp_path / "out"), "--readme", str(path)]) == 1


def test_readme_and_summary_print_the_same_numbers(root):
    rows, pooling, _ = summary.headline(GPU, root)
    block = readme.results_block(root)
    text = build.build(root, width=None)
    table = summary.versions_table(rows)
    assert table in block and table in text and pooling in block and pooling in text
    v5 = next(r for r in rows if r["version"] == "v5_final")
    ratios = [100 * 0.001 * 8 / (0.001 * 8 * 1.1 * (1 + 0.01 * run)) for run in (1, 2, 3)]   # _bench_rows at 4096
    assert v5["sdpa_0"].runs == 3 and v5["sdpa_0"].text() == f"{sorted(ratios)[1]:.0f}% ({min(ratios):.0f}–" \
                                                             f"{max(ratios):.0f}%)"
    versions_block = readme.versions_block()
    assert "| `v4_exp2` | 4b | softmax scale" in versions_block


# ---------------------------------------------------------------- the peer column

def test_peer_column_says_not_measured_yet_without_ok_rows(root):
    text = build.build(root, width=None)
    summary_part = text[:text.index("## The article's rounds")]
    assert "| % of flash-attn-4 |" in summary_part and "| not measured yet |" in summary_part
    assert "FA3-class peer" not in text
    # rows whose peer could not run do not count as measured
    path = root / GPU / "bench" / "v7_hopper.csv"
    df = data.load(path).assign(fa4_status="not installed", pct_of_fa4=float("nan"))
    df.to_csv(path, index=False)
    assert "FA3-class peer" not in build.build(root) and "| not measured yet |" in build.build(root)


def test_peer_column_and_goal_once_rows_exist(root):
    path = root / GPU / "bench" / "v7_hopper.csv"
    rows = [{**r, "git_commit": "bbbbbbb"} for r in _bench_rows(7, "v7_hopper")]
    wide = [{**r, "git_commit": "bbbbbbb"} for r in _bench_rows(7, "v7_hopper") if r["N"] >= 2048]
    _write(path, with_peer(rows, 104.0) + with_peer(wide, 97.0, D=128, run_id="20261130T000000-ffffff"))
    text = build.build(root, width=None)
    s = text[:text.index("## The article's rounds")]
    # 3 runs of 104, 105, 106 per shape (pct_of_fa4 + i % 3): the median of per-run ratios with its spread
    v7 = next(line for line in s.split("\n") if line.startswith("| `v7_hopper` |"))
    assert v7.endswith("| 3 / 3 | 105% (104–106%) | 105% (104–106%) |")
    assert next(line for line in s.split("\n") if line.startswith("| `v0_baseline` |")).endswith("| – | – |")
    assert "### v7's forward against the FA3-class peer (flash-attn-4), N ≥ 2048" in s
    # n = 3 runs: too few for a 95% interval of the median
    assert "| 4096 | 64 | no | 3 | 105.0% (104.0–106.0%) |" in s and "| 4096 | 128 | yes | 3 | 98.0% (97.0–99.0%) |" in s
    peer = summary.peer_goal(GPU, root)[0]
    assert {(r[0], r[1], r[2]) for r in peer} == {(N, D, c) for N in (2048, 4096) for D in (64, 128)
                                                   for c in ("no", "yes")}
    # D = 128 rows from a newer protocol leave the D = 64 harness tables alone
    harness, _ = data.bench(GPU, root)
    assert set(harness[harness.version == "v7_hopper"].D) == {64}


def test_peer_goal_verdicts_follow_the_interval(root):
    path = root / GPU / "bench" / "v7_hopper.csv"
    rows = []
    for run in range(8):   # n = 8: the interval is the 1st and 8th values
        for r in _bench_rows(7, "v7_hopper")[:8]:   # one run's shapes
            rows.append({**r, "run_id": f"20261130T000000-eeeeee/{run}", "git_commit": "ccccccc", "fa4_status": "ok",
                         "pct_of_fa4": {2048: 101.0 + run, 4096: 90.0 + run}.get(r["N"], 99.0 + 0.5 * run)})
    _write(path, rows)
    verdicts = {(r[0], r[2]): r[-1] for r in summary.peer_goal(GPU, root)[0] if r[1] == 64}
    assert verdicts == {(2048, "no"): "ahead", (2048, "yes"): "ahead", (4096, "no"): "behind",
                        (4096, "yes"): "behind"}


def test_versions_table_gives_ms_tflops_and_a_legend_line_per_column(root):
    """README's and the summary's table: median ms and TFLOP/s beside each % of SDPA, SDPA's own row, and one legend
    line naming every column."""
    rows, _, _ = summary.headline(GPU, root)
    table = summary.versions_table(rows)
    header = [h.strip() for h in table.splitlines()[0].strip("|").split("|")]
    v5 = next(ln for ln in table.splitlines() if ln.startswith("| `v5_final` |"))
    v5 = [c.strip() for c in v5.strip("|").split("|")]
    flop = shapes.flops(4, 8, 4096, 64, False)
    ms = [0.001 * 4096 / 512 * 1.1 * (1 + 0.01 * run) for run in (1, 2, 3)]   # _bench_rows, v5_final, non-causal
    assert v5[header.index("ms, non-causal")] == f"{ms[1]:.3f}"
    assert v5[header.index("TFLOP/s, non-causal")] == f"{flop / ms[1] / 1e9:.0f}"
    sdpa = [c.strip() for c in table.splitlines()[-1].strip("|").split("|")]
    assert sdpa[0] == summary.SDPA_ROW and sdpa[header.index("ms, causal")] == f"{0.001 * 4096 / 512:.3f}"
    assert sdpa[header.index("runs")] == f"{3 * len(versions.NAMES)} / {3 * len(versions.NAMES)}"
    legend = summary.versions_legend().splitlines()
    named = {name.strip() for line in legend for name in line[2:].split(":")[0].split(",")}
    assert {h.split(",")[0] for h in header} <= named and all(line.startswith("- ") for line in legend)
    block = readme.results_block(root)
    assert table in block and summary.versions_legend() in block


def test_readme_says_how_long_the_tests_take():
    assert "`invoke test` takes about" in (REPO / "README.md").read_text()


def test_a_gpu_with_experiments_alone_is_reported_apart(root):
    """A GPU folder with experiment rows and no harness rows (one comparison on a lent GPU): REPORT.md gives it one
    line, the pages that have its rows show them under its heading, the others and README's table leave it out."""
    from test_report_port import port_rows
    other = "other-gpu"
    _write(root / other / "experiments" / "port_triton39.csv", port_rows())
    assert data.gpu_slugs(root) == sorted([GPU, other]) and data.harness_gpus(root) == [GPU]
    files = build.build_all(root, width=None)
    text = files["REPORT.md"]
    assert f"(`results/{other}/`)\n" in text
    assert ("No harness rows; experiments only (`port_triton39.csv`), shown on: [No-regression checks]"
            "(docs/report/compare_trees.md). Nothing in the sections above pools them.") in text
    page = files["docs/report/compare_trees.md"]
    mine = page[page.index(f"(`results/{other}/`)"):]
    assert "### Triton 3.9 ÷ Triton 3.6, the same checkout" in mine and "| `v5_final` | fwd | 4096 |" in mine
    assert "v7's launch table against its race" not in mine   # a heading without its GPU's rows is left out
    assert all(f"results/{other}/" not in t for k, t in files.items() if k not in ("REPORT.md", build.PAGES_DIR
                                                                                  + "/compare_trees.md"))
    assert other not in readme.results_block(root)
