"""`invoke report`: REPORT.md, its pages under docs/report/ and README.md's generated block, from results/
alone (nothing here measures).

One module per part: tables (shared helpers), rounds and sweeps, tuning (Round 3), profile (ncu, the compiler's
output), hostpath, experiments and experiments_v7 (one page each), goal (v7 against cuDNN), backward, checks,
ledger (the article's claims), summary (the one-screen summary), readme (README's block) and build (the one list
of sections and pages, and the writer). The names below are re-exported so callers keep `import report;
report.build(...)`.
"""

from __future__ import annotations

from report.tables import (  # noqa: F401
    Claim, NOT_YET, PEER, PEER_OK, REPO, ada, ada_ms, bench_summary, fmt, get, latest_rows, md_table, not_yet,
    numeric, optional, peer_rows, rel, span
)
from report.rounds import (  # noqa: F401
    ROUNDS, configs_note, section_rounds, section_versions, speedup
)
from report.sweep_tables import (  # noqa: F401
    PICK_ROLES, PIPELINE_QK, SMALL_N_NOTE, SWEEPS, ada_winner, config_key, section_budget, section_one_sweep,
    section_sweep, sweep_picks, sweep_winners
)
from report.tuning import (  # noqa: F401
    ARTICLE_PER_CONFIG_S, ARTICLE_STARTUP_S, BIAS_COLUMNS, Bias, CAREFUL, autotune_bias, compile_cost_table,
    compile_fit, line_text, marginal_costs, section_autotune_bias, section_compile_cost
)
from report.hostpath import (  # noqa: F401
    HOST_STEPS_COLUMNS, HOST_STEP_DIFFS, host_step_table, host_steps, hostpath_table, section_host_steps,
    section_hostpath
)
from report.profile import (  # noqa: F401
    HALF, MATMUL_FILE, MATMUL_VARIANTS, NCU_EXTRA, TENSOR_OPS, TENSOR_OP_KIND, WHOLE, inspections, matmul_profile,
    ncu_get, ncu_profile, row_peaks, section_inspect, section_matmul_ncu, section_ncu, section_ncu_source,
    tensor_ops
)
from report.experiment_pages import (  # noqa: F401
    EXPERIMENTS, EXPERIMENT_KEYS, EXPERIMENT_TASK, EXPERIMENT_TEXT, GRID_VARIANTS, by_shape, experiment,
    experiment_not_run, section_exp2_poly, section_grid, section_launch_order, section_pcast, section_timing,
    shape_table
)
from report.experiments_v7 import (  # noqa: F401
    COLDSTART_COLUMNS, DOBENCH_COLUMNS, ITEMS_COLUMNS, TL_PICK_COLUMNS, TL_PICK_TIMES, section_coldstart,
    section_dobench, section_experiments, section_gluon, section_items, section_tl_pick
)
from report.goal import (  # noqa: F401
    GOAL_HEADER, GOAL_KERNELS_SINCE, GOAL_LEVEL, GOAL_MARGIN, NOT_SLOWER, SHAPE_KEYS, V6, V7, _goal_summary,
    _goal_table, goal_pools, goal_rows, goal_verdict, other_shapes, section_goal, section_other_shapes
)
from report.backward import (  # noqa: F401
    BWD_COLUMNS, BWD_DEFAULTS, BWD_FLASH, BWD_HOST, BWD_SWEEP_CONFIG, BWD_SWEEP_KEYS, BWD_SWEEP_MEASURED,
    TOTALS_BWD, UNRANGED_BWD, backward_default, backward_profile, backward_summary, backward_sweep,
    bwd_config_text, section_backward, section_backward_profile, section_backward_sweep,
    section_bwd_gluon_ws, section_bwd_modes
)
from report.checks import (  # noqa: F401
    NONSQUARE_COLUMNS, NONSQUARE_STATUSES, nonsquare, section_nonsquare, section_pending
)
from report.ledger import (  # noqa: F401
    experiment_claims, ledger, matmul_claim, profile_claims, round3_claims, section_ledger
)
from report.summary import (  # noqa: F401
    HEADLINE_N, PEER_GOAL_D, PEER_GOAL_MIN_N, Spread, backward_headline, backward_table, goal_cells, goal_compact,
    backward_goal, headline, peer_goal, peer_goal_rounds, peer_measured, rounds_verdict, section_backward_goal,
    section_peer_goal, section_summary, spread,
    versions_table
)
from report.varlen import section_varlen, varlen_brief, varlen_table  # noqa: F401
from report.no_regression import section_compare_trees, within_count  # noqa: F401
from report.readme import (  # noqa: F401
    BLOCKS, ReadmeError, _span, between, blocks, differences, has_markers, markers, results_block, rewrite,
    versions_block, write
)
from report.build import (  # noqa: F401
    Context, PAGES_DIR, Page, Part, WRAP, build, build_all, contexts, gpu_heading, gpu_part, heading, main,
    page_text, results_text, sweep, wrap, write
)
from figures import data  # noqa: F401,E402
from fa2triton import versions  # noqa: F401,E402
