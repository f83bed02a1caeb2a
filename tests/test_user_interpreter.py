"""Every version run the way a new user runs it on a machine without a GPU (README): TRITON_INTERPRET=1,
PYTHONPATH=fa2triton/kernels/<version>, `import flashattention_autograd_function_triton`, then
`FlashAttentionTriton.apply(Q, K, V, causal)` on CPU tensors, in fp32, fp16 and bf16, both masks.

Each version runs in a fresh interpreter started with `python -c` (no pytest, no conftest, nothing
imported or patched by a test), so what passes here is what fa2lab does by itself when it sees it is
interpreting (fa2triton.interpret: the bf16 tl.dot fix, one untimed autotune candidate). O is compared
with SDPA in float64 within the harness test file's tolerances (read from that file), and a meta-device
tensor must get a ValueError naming the device.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fa2lab.paths import REPO
from fa2triton.versions import KERNELS, NAMES

HARNESS_TEST = REPO / "harness" / "test_flashattention_triton.py"

# (dtype, B, N_q, N_k, D, causal): every dtype with both masks; ragged lengths (48 is no multiple of
# 32 or 64), N_q != N_k both ways, D = 32 and 64. Small: the interpreter runs each program in numpy.
CASES = [
    ("float32", 2, 64, 64, 32, False), ("float32", 1, 48, 64, 64, True),
    ("float16", 1, 64, 48, 64, False), ("float16", 2, 48, 48, 32, True),
    ("bfloat16", 2, 48, 64, 32, False), ("bfloat16", 1, 64, 48, 64, True),
]

# What the user's process runs. argv[1]: {"cases": CASES, "tol": {dtype: [rel, abs]}}; prints one JSON line.
USER_SCRIPT = r"""
import json, sys, warnings
# numpy >= 2.5 refuses what older numpy only deprecates (a one-element array to a scalar): fail here as there
warnings.filterwarnings("error", message="Conversion of an array with ndim > 0", category=DeprecationWarning)
import torch
import torch.nn.functional as F
import flashattention_autograd_function_triton as m

spec = json.loads(sys.argv[1])
out = {"cases": [], "meta": None}
for dtype, B, n_q, n_k, D, causal in spec["cases"]:
    row = {"case": [dtype, B, n_q, n_k, D, causal]}
    g = torch.Generator().manual_seed(n_q * 7 + n_k + D)
    Q, K, V = (torch.randn(B, n, D, generator=g).to(getattr(torch, dtype)) for n in (n_q, n_k, n_k))
    try:
        O = m.FlashAttentionTriton.apply(Q, K, V, causal)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        out["cases"].append(row)
        continue
    ref = F.scaled_dot_product_attention(*(t.double()[:, None] for t in (Q, K, V)), is_causal=causal)[:, 0]
    rel_tol, abs_tol = spec["tol"][dtype]
    o = O.double()
    row.update(shape_ok=tuple(O.shape) == tuple(Q.shape), dtype_ok=O.dtype == Q.dtype,
               finite=bool(torch.isfinite(o).all()),
               rel=float((o - ref).norm() / ref.norm()),
               close=bool(torch.allclose(o, ref, atol=abs_tol, rtol=abs_tol)),
               max_abs=float((o - ref).abs().max()))
    out["cases"].append(row)
q = torch.empty(1, 64, 32, device="meta")
try:
    m.FlashAttentionTriton.apply(q, q, q, False)
    out["meta"] = "no error"
except Exception as e:
    out["meta"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def harness_tolerances() -> dict:
    """REL_TOL and ABS_TOL of the harness test file, {dtype name: [rel, abs]}, read without importing it
    (importing it imports a kernel version)."""
    import torch

    found = {}
    for node in ast.parse(HARNESS_TEST.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", "") in (
                "REL_TOL", "ABS_TOL"):
            found[node.targets[0].id] = eval(compile(ast.Expression(node.value), str(HARNESS_TEST), "eval"),
                                             {"torch": torch})
    assert set(found) == {"REL_TOL", "ABS_TOL"}, f"REL_TOL and ABS_TOL not found in {HARNESS_TEST}"
    return {str(dt).removeprefix("torch."): [found["REL_TOL"][dt], found["ABS_TOL"][dt]] for dt in found["REL_TOL"]}


def run_as_user(name: str, tol: dict, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(PYTHONPATH=f"{KERNELS / name}{os.pathsep}{REPO}", TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", USER_SCRIPT, json.dumps({"cases": CASES, "tol": tol})],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name}: the user's process failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def user_runs(tmp_path_factory):
    """All versions' user processes, two at a time (each is single-threaded numpy, mostly)."""
    tol = harness_tolerances()
    cwd = tmp_path_factory.mktemp("user")   # not the repository: PYTHONPATH is the only way in
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run_as_user, name, tol, cwd) for name in NAMES}
    return {name: f for name, f in futures.items()}, tol


@pytest.mark.parametrize("name", NAMES)
def test_apply_on_cpu_tensors_matches_sdpa_as_a_user_runs_it(name, user_runs):
    futures, tol = user_runs
    out = futures[name].result()
    assert [r["case"] for r in out["cases"]] == [list(c) for c in CASES]
    bad = []
    for r in out["cases"]:
        dtype = r["case"][0]
        if "error" in r:
            bad.append(f"{r['case']}: raised {r['error']}")
        elif not (r["shape_ok"] and r["dtype_ok"] and r["finite"] and r["rel"] < tol[dtype][0] and r["close"]):
            bad.append(f"{r['case']}: rel {r['rel']:.2e} (< {tol[dtype][0]:.0e}), max |O - ref| {r['max_abs']:.2e} "
                       f"(allclose {tol[dtype][1]:.0e}: {r['close']}), shape {r['shape_ok']}, "
                       f"dtype {r['dtype_ok']}, finite {r['finite']}")
    assert not bad, f"{name} under TRITON_INTERPRET=1, as a user calls it:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", NAMES)
def test_a_meta_tensor_gets_a_value_error_naming_the_device(name, user_runs):
    meta = user_runs[0][name].result()["meta"]
    assert meta.startswith("ValueError: ") and "meta" in meta and "\n" not in meta, meta


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_validate_qkv_names_a_device_that_is_neither_cuda_nor_the_interpreters_cpu(interpret, monkeypatch):
    import torch

    from fa2triton.inputs import validate_qkv

    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    q = torch.empty(2, 64, 32, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="on device 'meta'"):
        validate_qkv(q, q, q)
