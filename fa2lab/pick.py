"""From a sweep CSV to the configurations the tuned versions use (nothing picked by hand).

- the single winner: the configuration with the best geometric mean of (best time / its time)
  over every shape, among those that ran correctly at all of them (v1, and v3/v4, which keep it);
- the per-shape winners: each shape's fastest configuration, deduplicated (v2);
- the greedy short list: add, one at a time, the configuration that most raises the worst
  shape's ratio to its best, until every shape is within `within` of its best (v5).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from fa2triton.budget import Config
from fa2triton.configs import arch_number, load_table

SHAPE = ["N", "causal"]
CFG = ["q_tile", "k_tile", "num_warps", "num_stages"]


def missing_rows(df, configs=None) -> int:
    """How many (configuration, harness shape) rows a sweep DataFrame still lacks, whatever their status."""
    from . import shapes
    from .forward_sweep import ALL_CONFIGS

    have = {(int(r.N), int(r.causal), int(r.q_tile), int(r.k_tile), int(r.num_warps), int(r.num_stages))
            for r in df.itertuples()}
    want = {(sh.N, int(sh.causal), c.q_tile, c.k_tile, c.num_warps, c.num_stages)
            for sh in shapes.harness_shapes() for c in (configs or ALL_CONFIGS)}
    return len(want - have)


def kernel_ms(df):
    """The time to rank by: CUDA-graph replay where the sweep recorded it (small N, where do_bench
    times the host), else the harness's do_bench median."""
    ms = df["ms"].astype(float)
    if "graph_ms" in df.columns:
        ms = df["graph_ms"].astype(float).where(df["graph_ms"].notna(), ms)
    return ms


def ratio_table(df):
    """Rows: configurations that ran OK at every shape; columns: shapes; values: best_ms / ms (<= 1)."""
    ok = df[df["status"] == "ok"].copy()
    if ok.empty:
        raise ValueError("the sweep has no successful configuration")
    ok["ms"] = kernel_ms(ok)
    ok = ok.groupby(SHAPE + CFG, as_index=False)["ms"].min()  # a re-measured row keeps its best
    best = ok.groupby(SHAPE)["ms"].transform("min")
    ok["ratio"] = best / ok["ms"]
    table = ok.pivot_table(index=CFG, columns=SHAPE, values="ratio")
    return table.dropna()


def _cfg(index) -> Config:
    return Config(*(int(x) for x in index))


def single_winner(df) -> tuple[Config, float]:
    table = ratio_table(df)
    geo = table.apply(lambda r: math.exp(sum(math.log(x) for x in r) / len(r)), axis=1)
    best = geo.idxmax()
    return _cfg(best), float(geo[best])


def per_shape_winners(df) -> list[tuple[tuple[int, int], Config, float]]:
    ok = df[df["status"] == "ok"].copy()
    ok["ms"] = kernel_ms(ok)
    out = []
    for (N, causal), g in ok.groupby(SHAPE):
        r = g.loc[g["ms"].idxmin()]
        out.append(((int(N), int(causal)), Config(*(int(r[c]) for c in CFG)), float(r["tflops"])))
    return out


def greedy_shortlist(df, within: float = 0.01, max_size: int = 8) -> tuple[list[Config], float]:
    """Returns the list and the worst shape's ratio to its best that it achieves."""
    table = ratio_table(df)
    chosen: list = []
    cover = None
    while len(chosen) < max_size:
        if cover is not None and cover.min() >= 1 - within:
            break
        best_idx, best_worst, best_cover = None, -1.0, None
        for idx, row in table.iterrows():
            if idx in chosen:
                continue
            new = row if cover is None else cover.combine(row, max)
            worst = float(new.min())
            if worst > best_worst + 1e-12:
                best_idx, best_worst, best_cover = idx, worst, new
        if best_idx is None:
            break
        chosen.append(best_idx)
        cover = best_cover
    return [_cfg(i) for i in chosen], float(cover.min()) if cover is not None else float("nan")


def dedupe(configs: list[Config]) -> list[Config]:
    return list(dict.fromkeys(configs))


def write_entry(path: str | Path, arch: str, configs: list[Config], *, gpu: str, source: str,
                provisional: bool = False, note: str = "") -> dict:
    """Replace one architecture's entry of a table, keeping the others, and keeping any keys of its
    own beyond the standard ones (v7's pipeline_qk choices)."""
    path = Path(path)
    table = load_table(path)
    standard = {
        "gpu": gpu,
        "source": source,
        "provisional": provisional,
        "note": note,
        "configs": [[c.q_tile, c.k_tile, c.num_warps, c.num_stages] for c in configs],
    }
    extra = {k: v for k, v in table["arches"].get(arch, {}).items() if k not in standard}
    table["arches"][arch] = {**standard, **extra}
    table["arches"] = dict(sorted(table["arches"].items(), key=lambda kv: arch_number(kv[0])))
    path.write_text(json.dumps(table, indent=2) + "\n")
    return table
