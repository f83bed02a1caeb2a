"""Run one Gluon forward configuration once on a small ragged shape, both masks, and exit 0 if it
finished with finite outputs: the guard `invoke experiment gluon` batches run first, under `timeout`,
so that a configuration whose barriers deadlock costs seconds, not the call (scripts/smoke_labels.sh runs it
for each label of a device_batch step with SMOKE=1).

    timeout 120 python scripts/gluon_smoke.py LABEL [D]
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run as a script: the repository first

from fa2triton.gluon import gluon_forward_hopper as G  # noqa: E402

cfg = G.configs_named(sys.argv[1:2])[0]
D = int(sys.argv[2]) if len(sys.argv) > 2 else 64
# the second shape has more tiles than an H200 has SMs: a persistent program takes several work items
for heads, n_q, n_k in ((2, 1000, 777), (32, 1000, 1000)):
    q, k, v = (torch.randn(heads, n, D, device="cuda", dtype=torch.bfloat16) for n in (n_q, n_k, n_k))
    for causal in (False, True):
        O, L, _ = G.forward(q, k, v, causal, cfg)
        torch.cuda.synchronize()
        assert torch.isfinite(O).all() and torch.isfinite(L).all(), cfg.label
print("smoke ok", cfg.label)
