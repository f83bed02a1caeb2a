"""README.md's generated block: the results table and the version table, written between their markers.

`<!-- report:results -->` ... `<!-- /report:results -->` holds every version at N = 4096 against SDPA (and the peer
once measured), v7 against cuDNN at the harness shapes with the verdict, and the backward; `<!-- report:versions -->`
... `<!-- /report:versions -->` one line per version of fa2triton/versions.py. The numbers are summary.py's, the same
functions REPORT.md's summary prints. Nothing outside the markers is touched.
"""

from __future__ import annotations

from pathlib import Path

from fa2triton import versions
from figures import data
from report.summary import HEADLINE_N, backward_headline, goal_cells, headline, versions_legend, versions_table
from report.tables import NOT_YET, PEER, fmt, md_table

BLOCKS = ("results", "versions")


class ReadmeError(ValueError):
    """A README without one of the generated block's markers, or with them out of order."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- report:{name} -->", f"<!-- /report:{name} -->"


def results_block(root=None) -> str:
    gpus = data.harness_gpus(root)
    if not gpus:
        raise data.ResultsError(f"no GPU with harness rows under {data.root(root)}: nothing to report")
    gpu = gpus[0]
    rows, pooling, _ = headline(gpu, root)
    out = [f"{gpu}, N = {HEADLINE_N}: every version against SDPA's default backend (cuDNN) and {PEER}, pooled over "
           f"{pooling}:", "", versions_table(rows), "", versions_legend()]
    pools, path = goal_cells(gpu, root)
    if pools:
        what, cells, _ = pools[-1]
        Ns = sorted({N for N, _ in cells})
        body = [[N] + [" ".join(cells[(N, c)][i] for i in (0, 2)) if (N, c) in cells else "–" for c in ("no", "yes")]
                for N in Ns]
        out += ["", f"v7 against cuDNN at the harness shapes: the median of each run's own ratio and the verdict of its "
                f"95% interval, pooled over {what} (`{path.name}`; REPORT.md gives each interval):", "",
                md_table(["N", "non-causal", "causal"], body)]
    bwd, _ = backward_headline(gpu, root)
    if bwd:   # the last version with a backward: one line (REPORT.md's summary has every version's)
        r = bwd[-1]
        peer = (f"{fmt(r['peer_0'], '.0f', '%')} / {fmt(r['peer_1'], '.0f', '%')} of {PEER}'s (its runs at the "
                f"latest commit that measured it)"
                if r["peer_0"] == r["peer_0"] or r["peer_1"] == r["peer_1"] else f"{PEER}: {NOT_YET}")
        out += ["", f"The backward of `{r['version']}` at N = {HEADLINE_N} (non-causal / causal; {r['dq_mode']} dQ, "
                f"{r['runs']} runs of its latest protocol, medians of per-run ratios): {fmt(r['b_0'], '.0f', '%')} / "
                f"{fmt(r['b_1'], '.0f', '%')} of cuDNN's, {fmt(r['b_fa_0'], '.0f', '%')} / "
                f"{fmt(r['b_fa_1'], '.0f', '%')} of FLASH_ATTENTION's; {peer}."]
    return "\n".join(out)


def versions_block() -> str:
    rows = [[f"`{v.name}`", getattr(v, "round_label", None) or str(v.round), v.changed] for v in versions.VERSIONS]
    return md_table(["version", "round", "what changes"], rows)


def blocks(root=None) -> dict[str, str]:
    return {"results": results_block(root), "versions": versions_block()}


def _span(text: str, name: str, where: str) -> tuple[int, int]:
    start, end = markers(name)
    i, j = text.find(start), text.find(end)
    if i < 0 or j < 0:
        raise ReadmeError(f"{where} lacks the marker {start if i < 0 else end} (the report writes between "
                          f"{start} and {end})")
    if j < i or text.count(start) > 1 or text.count(end) > 1:
        raise ReadmeError(f"{where}: the markers {start} ... {end} are out of order or repeated")
    return i + len(start), j


def between(text: str, name: str, where: str = "README.md") -> str:
    """The text between a block's markers, without the newlines that frame it."""
    i, j = _span(text, name, where)
    return text[i:j].strip("\n")


def rewrite(text: str, new: dict[str, str], where: str = "README.md") -> str:
    """`text` with each block's body replaced by new[name]; every other byte kept."""
    for name in BLOCKS:
        i, j = _span(text, name, where)
        text = text[:i] + "\n" + new[name] + "\n" + text[j:]
    return text


def write(path: Path, root=None) -> None:
    path = Path(path)
    text = path.read_text()
    new = rewrite(text, blocks(root), str(path))
    if new != text:
        path.write_text(new)


def differences(path: Path, root=None) -> list[str]:
    """The lines of README's generated block that differ from what the report computes from results/ now."""
    text = Path(path).read_text()
    out = []
    for name, want in blocks(root).items():
        have = between(text, name, str(path))
        if have != want:
            want_lines, have_lines = want.split("\n"), have.split("\n")
            bad = [f"{name}: README has {h!r}, the report computes {w!r}"
                   for h, w in zip(have_lines, want_lines) if h != w]
            if len(want_lines) != len(have_lines):
                bad.append(f"{name}: README has {len(have_lines)} lines, the report computes {len(want_lines)}")
            out += bad
    return out


def has_markers(text: str) -> bool:
    return all(m in text for name in BLOCKS for m in markers(name))

