"""The experiments beyond the article's harness, one module each (experiments/<module>.py, with main(argv)), and
their one registry: `invoke experiment NAME` (tasks.py), `python experiments/run.py NAME` and
`python experiments/<module>.py` all run what EXPERIMENTS names. Each appends rows with provenance to
results/<gpu>/experiments/<file>.csv (the report, report/, reads those files). GPU only.

RETIRED experiments measured an option that is no longer in the kernels: their code is gone, their committed rows
stay and the report still reads them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# CLI name -> (module under experiments/, what it measures). The rows go to results/<gpu>/experiments/<module>.csv
# (gluon, in gluon_candidates.py: gluon.csv and gluon_check.csv).
EXPERIMENTS = {
    "pcast": ("pcast", "where P is rounded: time at N = 4096 and error against float64 (v6's P_CAST)"),
    "launch-order": ("launch_order", "v6's launch orders with the same configurations pinned"),
    "timing": ("timing", "small N: the harness for v5, v6, v7 (do_bench against CUDA-graph replay, host columns)"),
    "other-shapes": ("other_shapes", "v7 against v6 and SDPA on shapes neither was tuned on (B, H, N, D = 128)"),
    "bwd-modes": ("bwd_modes", "the backward's dQ modes: GPU time (graph replay), host time, do_bench"),
    "bwd-gluon-dkdv": ("bwd_gluon_dkdv", "the Hopper backward's round 1: the Gluon dK/dV kernel against the Triton "
                       "one by graph replay, both checked against float64, cuDNN's backward beside"),
    "bwd-gluon-ws": ("bwd_gluon_ws", "the Hopper backward's round 3: the warp-specialized Gluon backward against v7's "
                     "and cuDNN's, whole backwards by graph replay and do_bench"),
    "gluon": ("gluon_candidates", "the Gluon forward's configurations, checked against float64, timed beside v7 and SDPA"),
    "coldstart": ("coldstart", "what do_bench's flush costs v7 and SDPA: cold inputs or cold kernel code"),
    "dobench": ("dobench", "do_bench's spread at small N over fresh processes, v7 and SDPA in alternating order"),
    "items": ("items", "what a round of work items costs v7's persistent Gluon kernel: equal work, 1-8 rounds per SM"),
    "peer-goal": ("peer_goal", "v7's forward against flash-attn-4 sm90 and cuDNN, interleaved rounds in one process"),
    "tl-pick": ("tl_pick", "what v7's tl autotuner and race timed in fresh processes, each candidate pinned beside"),
}

# CLI name -> what it measured and where its rows are: no longer runnable.
RETIRED = {
    "exp2-poly": "v7 with part of the softmax's exp2 by a polynomial (EXP2_POLY 2, 4): slower in every case; "
                 "rows in results/<gpu>/experiments/exp2_poly.csv",
    "grid": "v7's persistent grid (1 or 2 programs per SM) against one program per tile: slower at every shape; "
            "rows in results/<gpu>/experiments/grid.csv",
}


def module_of(name: str) -> ModuleType:
    """The module of experiment `name` (CLI name, e.g. "tl-pick"); a clear ValueError for a retired or unknown one."""
    if name in RETIRED:
        raise ValueError(f"experiment {name} is retired (its option left the kernels): {RETIRED[name]}")
    if name not in EXPERIMENTS:
        raise ValueError(f"no experiment {name!r}; one of: {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"experiments.{EXPERIMENTS[name][0]}")


def describe() -> str:
    """One line per experiment (and per retired one), for --help."""
    width = max(map(len, [*EXPERIMENTS, *RETIRED]))
    lines = [f"  {n:<{width}}  {what}" for n, (_, what) in EXPERIMENTS.items()]
    lines += [f"  {n:<{width}}  retired: {what}" for n, what in RETIRED.items()]
    return "\n".join(lines)
