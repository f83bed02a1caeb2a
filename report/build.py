"""The builder: one list of REPORT.md's sections and one list of pages under docs/report/, walked for each measured
GPU, and the writer of REPORT.md, the pages and README.md's generated block.

REPORT.md opens with the summary, then the article's rounds in the article's order beside Ada's numbers, then
v7's goal, the backward and the claims ledger, then one line per page. Each page holds one experiment (or one
detail table) in full. Everything is read from results/ alone; writing twice gives the same bytes.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from figures import data
from report import readme
from report.backward import (section_backward, section_backward_profile,
                                     section_backward_sweep, section_bwd_gluon_ws, section_bwd_modes)
from report.checks import section_nonsquare, section_pending
from report.no_regression import launch_brief, section_compare_trees, section_launch_table, within_count
from report.peer_profile import section_peer_profile
from report.port import section_port, section_port_brief
from report.experiment_pages import section_exp2_poly, section_grid, section_launch_order, section_pcast, section_timing
from report.experiments_v7 import section_coldstart, section_dobench, section_gluon, section_items, section_tl_pick
from report.goal import section_goal, section_other_shapes
from report.hostpath import section_api_host, section_backward_steps, section_host_steps, section_hostpath
from report.ledger import ledger, section_ledger
from report.profile import section_inspect, section_matmul_ncu, section_ncu, section_ncu_source
from report.rounds import section_rounds, section_versions
from report.summary import section_backward_goals, section_peer_goals, section_summary
from report.sweep_tables import SWEEPS, SMALL_N_NOTE, section_budget, section_one_sweep
from report.tables import NOT_YET, REPO, ada, bench_summary
from report.tuning import section_autotune_bias, section_compile_cost
from report.varlen import section_varlen, varlen_brief

PAGES_DIR = "docs/report"   # relative to the output root: one page per experiment or detail table
WRAP = 240                    # prose lines longer than this are wrapped (tables and headings never)


@dataclass
class Context:
    """What every section of one GPU reads: the harness summary, its files, Ada's table, the claims."""
    gpu: str
    root: object
    summary: object
    paths: list
    ref: object
    ref_path: object
    _claims: list | None = field(default=None, repr=False)

    @property
    def claims(self):
        if self._claims is None:
            self._claims = ledger(self.gpu, self.root, self.root, self.summary, self.paths, self.ref)
        return self._claims


Part = Callable[[Context], str]


def sweep(i: int, note: bool = False) -> Part:
    return lambda c: section_one_sweep(c.gpu, c.root, c.root, *SWEEPS[i]) + ("\n\n" + SMALL_N_NOTE if note else "")


def heading(text: str) -> Part:
    part = lambda c: text   # noqa: E731
    part.heading = True
    return part


# REPORT.md, per GPU: the summary, the article's rounds in its order (each section's title names its round),
# beyond the article, the ledger.
SECTIONS: list[Part] = [
    lambda c: section_summary(c.gpu, c.root, c.claims),
    lambda c: varlen_brief(c.gpu, c.root),
    lambda c: " ".join([within_count(c.gpu, c.root), launch_brief(c.gpu, c.root),   # the no-regression checks
                        section_port_brief(c.gpu, c.root)]),
    heading("## The article's rounds, in its order, beside Ada's numbers"),
    lambda c: section_versions(c.gpu, c.root, c.summary, c.paths, c.ref, c.ref_path),
    lambda c: section_rounds(c.gpu, c.root, c.summary, c.paths, c.ref),
    lambda c: section_inspect(c.root),
    sweep(0, note=True),
    lambda c: section_budget(c.gpu, c.root, c.root),
    lambda c: section_matmul_ncu(c.gpu, c.root),
    lambda c: section_compile_cost(c.gpu, c.root, c.root),
    lambda c: section_autotune_bias(c.gpu, c.root),
    sweep(1),
    lambda c: section_ncu(c.gpu, c.root, c.root),
    heading("## Beyond the article"),
    sweep(2),
    lambda c: section_goal(c.gpu, c.root),
    lambda c: section_ledger(c.claims),
]


@dataclass(frozen=True)
class Page:
    slug: str                  # docs/report/<slug>.md
    title: str
    question: str              # REPORT.md's one line for it
    parts: tuple[Part, ...]


def gpu_part(fn) -> Part:
    """A part that reads its GPU's own files alone, so that it applies to an experiments-only GPU too."""
    part = lambda c: fn(c.gpu, c.root)   # noqa: E731
    part.own_files = True
    return part


PAGES: list[Page] = [
    Page("ledger", "Claims ledger", "every claim of the article with the numbers that decide it and their files",
         (lambda c: section_ledger(c.claims, full=True),)),
    Page("host-path", "The host path", "do_bench against CUDA-graph replay, where a call's host time goes, "
         "attention() against apply, and the backward's repeat piece by piece",
         (gpu_part(section_hostpath), gpu_part(section_host_steps), gpu_part(section_api_host),
          gpu_part(section_backward_steps))),
    Page("ncu-source", "Where the warps wait", "ncu's source page: stalls by reason, opcode and phase",
         (gpu_part(section_ncu_source),)),
    Page("pcast", "Where P is rounded", "v6's P_CAST: time and error of casting P before or after the sum",
         (gpu_part(section_pcast),)),
    Page("launch-order", "Launch order", "v6's longest-first order against v5's, the configuration pinned",
         (gpu_part(section_launch_order),)),
    Page("timing", "Small-N timing", "the harness's do_bench against graph replay and the host per call",
         (gpu_part(section_timing),)),
    Page("other-shapes", "Other shapes", "v7 against v6 and SDPA on shapes neither was tuned on",
         (gpu_part(section_other_shapes),)),
    Page("exp2-poly", "exp2 on the FMA pipe", "part of the softmax's exp2 by a polynomial instead of the MUFU",
         (gpu_part(section_exp2_poly),)),
    Page("grid", "Persistent grid", "v7's persistent grid against one program per tile",
         (gpu_part(section_grid),)),
    Page("gluon", "The Gluon forward", "the warp-specialized Gluon forward's configurations, run by run",
         (gpu_part(section_gluon),)),
    Page("coldstart", "Cold start", "what do_bench's cache flush costs v7 and SDPA",
         (gpu_part(section_coldstart),)),
    Page("dobench", "do_bench across processes", "do_bench's spread at small N over fresh processes",
         (gpu_part(section_dobench),)),
    Page("items", "What a work item costs", "a round of work items beside its key tiles",
         (gpu_part(section_items),)),
    Page("tl-pick", "v7's tl autotuner across processes", "what v7's tl autotuner and race pick, process by process",
         (gpu_part(section_tl_pick),)),
    Page("backward", "The backward", "every dQ mode and shape against cuDNN and FLASH_ATTENTION",
         (gpu_part(section_backward), gpu_part(section_backward_goals))),
    Page("bwd-modes", "The backward's dQ modes", "the dQ modes timed apart: GPU, host and do_bench",
         (gpu_part(section_bwd_modes),)),
    Page("bwd-gluon-ws", "The warp-specialized Gluon backward", "the Hopper backward's round 3 against v7's previous "
         "backward and cuDNN's", (gpu_part(section_bwd_gluon_ws),)),
    Page("backward-sweep", "The backward's sweep", "the backward's configuration sweep against its default",
         (gpu_part(section_backward_sweep),)),
    Page("backward-profile", "The backward under Nsight Compute", "the backward's kernels against cuDNN's",
         (gpu_part(section_backward_profile),)),
    Page("varlen", "Variable-length workloads", "what a new sequence length costs, cold and warm, against the goals",
         (gpu_part(section_varlen),)),
    Page("peer-profile", "v7 beside flash-attn-4 under Nsight Compute", "the two forwards' kernels side by side where "
         "the peer is ahead, and what differs; the forward against it under each Triton",
         (gpu_part(section_peer_goals), gpu_part(section_peer_profile))),
    Page("compare_trees", "No-regression checks", "v7 after a refactor against before; the port off block pointers "
         "and Triton 3.9 against 3.6, every version; v7's launch table against its race; round by round",
         (gpu_part(section_compare_trees), heading("## The Triton 3.9 port"), gpu_part(section_port),
          heading("## v7's launch table against its race"), gpu_part(section_launch_table))),
    Page("nonsquare", "The non-square causal check", "every version on non-square causal inputs",
         (gpu_part(section_nonsquare),)),
]


def wrap(text: str, width: int | None = WRAP) -> str:
    """Prose lines over `width` characters wrapped at spaces (None: none); table rows, headings and list items left
    whole."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width or line.startswith(("|", "#", "- ", "```")):
            out.append(line)
        else:
            out += textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(out)


def contexts(root) -> list[Context]:
    """One context per measured GPU: harness GPUs first (their summary), then those with experiments alone."""
    harness = data.harness_gpus(root)
    if not harness:
        raise data.ResultsError(f"no GPU with harness rows under {data.root(root)}: nothing to report")
    ref, ref_path = ada("results", root)
    out = []
    for gpu in harness:
        summary, paths = bench_summary(gpu, root)   # a missing or malformed file is an error naming it
        out.append(Context(gpu, root, summary, paths, ref, ref_path))
    out += [Context(gpu, root, None, [], ref, ref_path) for gpu in data.gpu_slugs(root) if gpu not in harness]
    return out


def gpu_heading(c: Context) -> str:
    """The GPU's heading and stack, from its harness file's latest protocol, else from its first experiment file."""
    if c.paths:
        env = data.latest_protocol(data.load(c.paths[0])).iloc[0]
    else:
        env = data.load(experiment_files(c)[0]).iloc[-1]
    return (f"## {env.get('gpu', c.gpu)} (`results/{c.gpu}/`)\n"
            f"Driver {env.get('driver', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}.")


def experiment_files(c: Context) -> list[Path]:
    return sorted((data.root(c.root) / c.gpu / "experiments").glob("*.csv"))


def measured(parts: tuple[Part, ...], c: Context) -> list[str]:
    """An experiments-only GPU's texts of a page: the parts that read its own files and give a table, each heading
    kept only before one of them."""
    out = []
    for part in parts:
        if getattr(part, "heading", False):
            out.append((True, part(c)))
        elif getattr(part, "own_files", False):
            try:
                text = part(c)
            except data.MissingResults:   # a file the part needs that this GPU never had (a malformed one still raises)
                continue
            if any(line.startswith("|") for line in text.splitlines()):   # a table: it has rows for this GPU
                out.append((False, text))
    return [t for i, (is_heading, t) in enumerate(out)
            if not is_heading or (i + 1 < len(out) and not out[i + 1][0])]


def page_text(page: Page, ctxs: list[Context], width: int | None = WRAP) -> str:
    """Every harness GPU's parts; an experiments-only GPU's parts where it has their rows."""
    parts = [f"# {page.title}", "",
             "Generated by `invoke report` from `results/` alone; one of the pages of [REPORT.md](../../REPORT.md).", ""]
    for c in ctxs:
        texts = [p(c) for p in page.parts] if c.summary is not None else measured(page.parts, c)
        if texts:
            parts += [gpu_heading(c), ""] + [x for t in texts for x in (t, "")]
    return wrap("\n".join(parts), width)


def experiments_only(c: Context, pages: dict[str, str]) -> str:
    """REPORT.md's lines for a GPU without harness rows: its files, and the pages that show them."""
    shown = [f"[{p.title}]({PAGES_DIR}/{p.slug}.md)" for p in PAGES if f"(`results/{c.gpu}/`)" in pages[p.slug]]
    files = ", ".join(f"`{f.name}`" for f in experiment_files(c))
    return (f"No harness rows; experiments only ({files}), shown on: {', '.join(shown) or 'no page yet'}. "
            f"Nothing in the sections above pools them.")


def results_text(ctxs: list[Context], pages: dict[str, str], width: int | None = WRAP) -> str:
    parts = ["# Report: every table, from results/", "",
             "Generated by `invoke report` from `results/` alone (do not edit by hand); the article's numbers (RTX 4070 "
             "SUPER, Ada) are transcribed in `results/reference/`.", ""]
    for c in ctxs:
        body = [s(c) for s in SECTIONS] if c.summary is not None else [experiments_only(c, pages)]
        parts += [gpu_heading(c), ""] + [x for t in body for x in (t, "")]
    parts += ["## Experiments and detail tables, one page each", ""]
    for page in PAGES:
        pending = f" ({NOT_YET})" if NOT_YET in pages[page.slug] and "|" not in pages[page.slug] else ""
        parts.append(f"- [{page.title}]({PAGES_DIR}/{page.slug}.md): {page.question}{pending}.")
    parts.append("")
    for c in ctxs:
        if c.summary is not None:
            parts += [section_pending(c.gpu, c.root), ""]
    return wrap("\n".join(parts), width)


def build_all(root=None, width: int | None = WRAP) -> dict[str, str]:
    """Every generated file: {path relative to the repository: text}, REPORT.md first; prose wrapped at `width`
    characters (None: one line per paragraph)."""
    ctxs = contexts(root)
    pages = {p.slug: page_text(p, ctxs, width) for p in PAGES}
    out = {"REPORT.md": results_text(ctxs, pages, width)}
    out.update({f"{PAGES_DIR}/{slug}.md": text for slug, text in pages.items()})
    return out


def build(root=None, width: int | None = WRAP) -> str:
    """REPORT.md's text."""
    return build_all(root, width)["REPORT.md"]


def write(root=None, out_dir: Path = REPO, readme_path: Path | None = None) -> dict[str, str]:
    """Write REPORT.md and every page under out_dir (removing pages no longer generated), and README.md's block
    when readme_path is given (a missing marker is a ReadmeError naming it). Returns what was written."""
    files = build_all(root)
    out_dir = Path(out_dir)
    pages_dir = out_dir / PAGES_DIR
    pages_dir.mkdir(parents=True, exist_ok=True)
    for stale in pages_dir.glob("*.md"):
        if f"{PAGES_DIR}/{stale.name}" not in files:
            stale.unlink()
    for rel_path, text in files.items():
        (out_dir / rel_path).write_text(text)
    if readme_path is not None:
        readme.write(Path(readme_path), root)
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=None, help="results folder (default: $FA2_RESULTS or results/)")
    ap.add_argument("--out-dir", default=str(REPO), help="where REPORT.md and docs/report/ go")
    ap.add_argument("--out", default=None, help="write REPORT.md's text alone to this file instead")
    ap.add_argument("--readme", default=None, help="rewrite this README's generated block (between its markers)")
    args = ap.parse_args(argv)
    try:
        if args.out:
            text = build(args.results)
            Path(args.out).write_text(text)
            print(f"wrote {args.out} ({len(text.splitlines())} lines)")
        else:
            files = write(args.results, Path(args.out_dir), None)
            print(f"wrote {len(files)} files under {args.out_dir} (REPORT.md: "
                  f"{len(files['REPORT.md'].splitlines())} lines)")
        if args.readme:
            readme.write(Path(args.readme), args.results)
            print(f"rewrote the generated block of {args.readme}")
    except (data.ResultsError, readme.ReadmeError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 1
    return 0
