"""Run one Gluon forward configuration once on a small ragged shape, both masks, and exit 0 if it
finished with finite outputs: the guard `invoke experiment gluon` batches run first, under `timeout`,
so that a configuration whose barriers deadlock costs seconds, not the call (scripts/smoke_labels.sh runs it
for each label of a device_batch step with SMOKE=1).

    timeout 120 python scripts/gluon_smoke.py LABEL [D]
"""
import argparse
import sys
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("label", help="a Gluon configuration's label (gluon_configs.EXPERIMENT_CONFIGS)")
ap.add_argument("D", nargs="?", type=int, default=64, choices=(64, 128), help="head dimension (default 64)")
args = ap.parse_args()

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run as a script: the repository first

from fa2triton.gluon import gluon_forward_hopper as G  # noqa: E402

if not torch.cuda.is_available():
    sys.exit("gluon_smoke.py: no CUDA GPU here; the smoke run launches the kernel")
cfg = G.configs_named([args.label])[0]
D = args.D
# the second shape has more tiles than an H200 has SMs: a persistent program takes several work items
for heads, n_q, n_k in ((2, 1000, 777), (32, 1000, 1000)):
    q, k, v = (torch.randn(heads, n, D, device="cuda", dtype=torch.bfloat16) for n in (n_q, n_k, n_k))
    for causal in (False, True):
        O, L, _ = G.forward(q, k, v, causal, cfg)
        torch.cuda.synchronize()
        assert torch.isfinite(O).all() and torch.isfinite(L).all(), cfg.label
print("smoke ok", cfg.label)
