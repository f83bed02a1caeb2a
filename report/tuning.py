"""Round 3: what autotuning costs (compile time per configuration) and whether the autotuner picks right after
an idle GPU."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from figures import compile_cost as compile_cost_fig
from figures import data
from report.tables import fmt, latest_rows, md_table, not_yet, numeric, optional, rel, span


# ---------------------------------------------------------------- Round 3: compile cost, autotune bias

ARTICLE_PER_CONFIG_S = 0.18 + 0.11   # compiling + timing one configuration (the article, Round 3)
ARTICLE_STARTUP_S = 0.47             # the first Triton call with an empty cache


def compile_cost_table(gpu, root):
    """(the figure's lines of the latest row per process kind, the file), or (None, path) if not measured."""
    path = data.root(root) / gpu / "tuning" / "compile_cost.csv"
    if not path.exists():
        return None, path
    df, path = data.compile_cost(gpu, root)
    df = numeric(df, path, data.COMPILE_COST_COLUMNS[:2] + data.COMPILE_COST_COLUMNS[3:])
    return compile_cost_fig.lines(df), path


def line_text(slope: float, intercept: float) -> str:
    return f"{slope:.3f} s per configuration {'+' if intercept >= 0 else '−'} {abs(intercept):.3f} s"


def marginal_costs(series, cache: str = "empty", cache_results: int = 0) -> list[tuple[int, int, float]]:
    """(from, to, seconds per added configuration) between consecutive counts of the first call."""
    first = series.get((cache, cache_results, "first_4096"))
    if first is None:
        return []
    m = first["median"].astype(float)
    ks = [int(k) for k in m.index]
    return [(a, b, (m[b] - m[a]) / (b - a)) for a, b in zip(ks, ks[1:])]


def compile_fit(series, cache: str = "empty", cache_results: int = 0):
    """(slope in s per configuration, intercept in s, the configuration counts) of a least-squares line
    through the first call (N = 4096) against the number of configurations; None with fewer than 2 counts."""
    first = series.get((cache, cache_results, "first_4096"))
    if first is None or len(first) < 2:
        return None
    slope, intercept = np.polyfit(first.index.astype(float), first["median"].astype(float), 1)
    return float(slope), float(intercept), [int(k) for k in first.index]


def section_compile_cost(gpu, root, ref_root) -> str:
    title = "### What autotuning costs (Round 3)"
    series, path = compile_cost_table(gpu, root)
    if series is None:
        return not_yet(title, "invoke compile-cost", path)
    try:
        ref, ref_path = compile_cost_fig.article(ref_root)
    except data.ResultsError:
        ref, ref_path = None, None
    ada_col = {"empty": "first_call_empty_cache_s", "on_disk": "first_call_cache_on_disk_s"}
    kinds = sorted({(c, cr) for c, cr, _ in series}, key=lambda k: (data.CACHES.index(k[0]), k[1]))
    counts = sorted({int(k) for t in series.values() for k in t.index})
    rows = []
    for k in counts:
        for cache, cr in kinds:
            def v(measure, col="median"):
                t = series.get((cache, cr, measure))
                return float(t[col].get(k, float("nan"))) if t is not None else float("nan")
            a = (ref[ada_col[cache]].get(k, float("nan")) if ref is not None and cr == 0 else float("nan"))
            rows.append([k, cache.replace("_", " "), cr, fmt(v("first_4096"), ".3f"),
                         span(v("new_N"), v("new_N", "min"), v("new_N", "max"), ".3f"),
                         fmt(v("first_causal_4096"), ".3f"), fmt(float(a))])
    text = [title,
            f"Seconds per call in fresh processes, the latest row per process kind; source: `{rel(path)}`"
            + (f", Ada's first calls from `{rel(ref_path)}`" if ref_path else "") + ". cache: the Triton cache "
            "directory empty, or as the first process left it; cache_results: `@triton.autotune(cache_results=...)`. "
            "New N: the median (min–max) of the first calls at N = 2048, 1024 and 512 in the same process.", "",
            md_table(["configs", "cache", "cache_results", "first call (N = 4096)", "each new N",
                      "first causal call (N = 4096)", "Ada: first call"], rows)]
    fits = [(cache, compile_fit(series, cache, 0)) for cache in data.CACHES]
    lines = [f"{'empty cache' if cache == 'empty' else 'cache on disk'}: {line_text(f[0], f[1])}"
             for cache, f in fits if f]
    steps = marginal_costs(series)
    if lines:
        text += ["", "Least-squares line (numpy.polyfit, degree 1) through the first call against the number of "
                 "configurations, cache_results=0: " + "; ".join(lines) + f". The article's model: "
                 f"{ARTICLE_PER_CONFIG_S:.2f} s per configuration (0.18 compiling + 0.11 timing) + "
                 f"{ARTICLE_STARTUP_S:.2f} s of start-up with an empty cache."
                 + (" Seconds per added configuration between consecutive counts (empty cache): "
                    + ", ".join(f"{a}→{b}: {c:.2f}" for a, b, c in steps) + "." if steps else "")]
    return "\n".join(text)


BIAS_COLUMNS = ("setting", "process", "N", "causal", "configs", "picked")
CAREFUL = "careful"


@dataclass
class Bias:
    setting: str
    processes: int
    picks: dict            # configuration -> how many processes picked it
    last: int              # processes that picked the last candidate in the list
    careful: int           # processes that picked the careful timing's best
    slowdown: float        # mean of the picks' careful time over the careful best's, minus 1 (NaN without timings)
    pause_s: float


def autotune_bias(gpu, root):
    """(per setting a Bias, the careful pick, the careful row, the file) or (None, None, None, path)."""
    path = data.root(root) / gpu / "tuning" / "autotune_bias.csv"
    df = optional(path, BIAS_COLUMNS)
    if df is None:
        return None, None, None, path
    df = latest_rows(df, ("setting", "process", "N", "causal"))
    careful = df[df.setting == CAREFUL]
    if careful.empty:
        raise data.ResultsError(f"results file {path} has no '{CAREFUL}' row (the careful timing of the candidates)")
    c = careful.iloc[-1]
    timings = {}
    if "timings_ms" in df.columns and pd.notna(c["timings_ms"]):
        try:
            timings = {str(k): float(v) for k, v in json.loads(c["timings_ms"]).items()}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as e:
            raise data.ResultsError(f"results file {path}: the careful row's timings_ms is not a JSON object "
                                    f"of times: {e}") from None
    best = str(c["picked"])
    out = []
    for setting, g in df[df.setting != CAREFUL].groupby("setting", sort=False):
        last = g["configs"].astype(str).str.split(";").str[-1]
        picked = g["picked"].astype(str)
        slow = [timings[p] / timings[best] - 1 for p in picked if p in timings and best in timings]
        pause = pd.to_numeric(g["pause_s"], errors="coerce").median() if "pause_s" in g else float("nan")
        out.append(Bias(str(setting), len(g), picked.value_counts().to_dict(), int((picked == last).sum()),
                        int((picked == best).sum()), float(np.mean(slow)) if slow else float("nan"), float(pause)))
    return out, best, c, path


def section_autotune_bias(gpu, root) -> str:
    title = "### Does the autotuner pick right after an idle GPU? (Round 3)"
    stats, best, c, path = autotune_bias(gpu, root)
    if stats is None:
        return not_yet(title, "invoke autotune-bias", path)
    cands = str(c["configs"]).split(";")
    rows = [[b.setting, b.processes, fmt(b.pause_s, ".0f"),
             ", ".join(f"`{k}` ×{n}" for k, n in b.picks.items()), f"{b.last} of {b.processes}",
             f"{b.careful} of {b.processes}", fmt(100 * b.slowdown, "+.1f", "%")] for b in stats]
    return "\n".join([
        title,
        f"Fresh processes, each autotuning v5's {len(cands)} candidates once at N = {int(c['N'])}, "
        f"{data.mask_name(c['causal'])}; the last candidate in the list is `{cands[-1]}`, and the careful timing "
        f"of every candidate picks `{best}`. Slower: the picks' mean time over the careful best's, by the careful "
        f"timings. Source: `{rel(path)}`.", "",
        md_table(["setting", "processes", "pause before (s)", "picks", "picked the last candidate",
                  "picked the careful best", "slower than the careful best"], rows)])
