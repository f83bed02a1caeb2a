"""Issue 48's measurement, on the CPU: profiling/host_steps.py's bwd_* steps (the backward's repeat path piece by
piece) run under the interpreter on a small shape and compute what the whole repeat computes, and the host-path page
shows their rows (synthetic here: a CPU timing would mean nothing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the kernels' import (@triton.jit reads it)

from fa2lab.results import append_rows  # noqa: E402
from fa2triton import flash_backward_triton as fb  # noqa: E402
from fa2triton.reference import attention  # noqa: E402
from profiling import host_steps  # noqa: E402
from report import hostpath  # noqa: E402
from test_figures import GPU, PROV  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
REPO = Path(__file__).resolve().parent.parent


def _inputs(dtype, causal, B=2, N=40, D=16):
    g = torch.Generator().manual_seed(1)
    Q, K, V, dO = (torch.randn(B, N, D, generator=g).to(DEVICE, dtype) for _ in range(4))
    O, L = attention(Q, K, V, causal)
    return Q, K, V, O.to(dtype), L.float(), dO


@pytest.mark.parametrize("dq_mode", fb.DQ_MODES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_repeat_pieces_run_alone_and_add_up_to_the_repeat(dq_mode, dtype):
    """Each bwd_* step runs by itself; run in REPEAT_STEPS order on one set of buffers (the accumulator first
    filled with garbage, so only the Delta launch's zeroing can clear it) they give the repeat's gradients
    bitwise. Atomic bf16 has the zero fill and the cast; fused has no Delta launch."""
    Q, K, V, O, L, dO = _inputs(dtype, True)
    launch = fb._checked_backward(Q, K, V, O, L, dO, True, None, dq_mode, False, True)[-1]
    buffers = launch.buffers(Q, K)
    looked = []
    fns = host_steps.backward_repeat_steps(launch, lambda: looked.append(1), Q, K, V, O, L, dO, buffers)
    cast = dq_mode == "atomic" and dtype != torch.float32
    expected = set(host_steps.REPEAT_STEPS) - ({"bwd_delta"} if dq_mode == "fused" else set()) \
        - (set() if cast else {"bwd_zero_fill", "bwd_cast"})
    assert set(fns) == expected
    buffers[3].fill_(7.0)
    for s in host_steps.REPEAT_STEPS:
        if s in fns and s not in ("bwd_zero_fill", "bwd_repeat"):
            fns[s]()
    whole = launch(Q, K, V, O, L, dO)
    for a, b in zip(buffers[:3], whole):
        assert torch.equal(a, b), dq_mode
    assert looked == [1]
    assert all(t.shape == Q.shape for t in fns["bwd_buffers"]()[:3])
    if cast:
        fns["bwd_zero_fill"]()
        assert not buffers[3].any()


def test_the_steps_are_known_to_the_cli_and_the_page_names_its_command():
    for s in hostpath.BACKWARD_STEPS_TIMED:
        assert s in host_steps.STEPS
    assert set(hostpath.BACKWARD_STEP_COLUMNS) - set(hostpath.BACKWARD_STEPS_TIMED) == {
        *host_steps.SPLIT_PARTS, *host_steps.INSIDE_PARTS}
    assert hostpath.BACKWARD_TASK.split("--steps ")[1].split(",") == list(hostpath.BACKWARD_STEPS_TIMED)


def test_the_page_shows_the_backward_pieces_per_commit_apart_from_the_forward_table(tmp_path):
    """Rows of two commits, the later one under two Tritons: the page has one row per commit and Triton (latest
    first) with autograd's own share, and the forward's step table leaves the bwd_* steps out; with no bwd_* row the
    section says what to run."""
    path = tmp_path / GPU / "hostpath" / "steps.csv"
    assert "invoke host-steps --kernel v7_hopper" in hostpath.section_backward_steps(GPU, tmp_path)

    def rows(commit, date, times, triton="3.6.0"):
        return [{"version": "v7_hopper", "N": 1024, "causal": 0, "step": s, "us_median": m, "us_min": m - 1,
                 "us_max": m + 1, "repeats": 3, "calls_each": 200, "date": date,
                 **{k: v for k, v in PROV.items() if k not in ("date", "git_commit", "triton")}, "git_commit": commit,
                 "triton": triton}
                for s, m in times.items()]

    append_rows(path, rows("aaaaaaa1", "2026-12-01T00:00:00", {"sdpa_backward": 30.0, "backward": 90.0}))
    append_rows(path, rows("bbbbbbb2", "2026-12-02T00:00:00", {"sdpa_backward": 31.0, "backward": 60.0,
                                                               "bwd_buffers": 5.0, "bwd_repeat": 40.0}))
    append_rows(path, rows("bbbbbbb2", "2026-12-02T01:00:00", {"sdpa_backward": 32.0, "backward": 64.0,
                                                               "bwd_repeat": 44.0}, triton="3.9.0"))
    text = hostpath.section_backward_steps(GPU, tmp_path)
    skipped = "– | " * (4 + len(host_steps.INSIDE_PARTS) + 1)   # backward_nop, the split's and bwd_inside's, bwd_key
    assert ("| v7_hopper | 1024 | no | bbbbbbb | 3.6.0 | 31.0 (30.0–32.0) | 60.0 (59.0–61.0) | " + skipped
            + "5.0 (4.0–6.0) |") in text
    assert "| 40.0 (39.0–41.0) | 1.94 | +20.0 |" in text   # backward ÷ sdpa_backward: 60 / 31
    assert "| v7_hopper | 1024 | no | bbbbbbb | 3.9.0 | 32.0 (31.0–33.0) | 64.0 (63.0–65.0) |" in text
    assert "| 44.0 (43.0–45.0) | 2.00 | +20.0 |" in text
    before = "| v7_hopper | 1024 | no | aaaaaaa | 3.6.0 | 30.0 (29.0–31.0) | 90.0 (89.0–91.0) | – |"   # whole backward
    assert before in text and text.index("| bbbbbbb |") < text.index(before)
    assert "bwd_buffers" not in hostpath.section_host_steps(GPU, tmp_path)


def test_the_split_cuts_each_backward_at_its_stamps_and_adds_up_to_the_call():
    """bwd_split on a toy Function (CPU autograd): three non-negative parts per call whose sum is the call's time, the
    gradient that of the Function itself; a call that never reaches the backward is an error, not a wrong split."""
    import time

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            time.sleep(0.001)   # the body is the part that holds this millisecond
            return 2 * ctx.saved_tensors[0] * g

    stamps = []
    x = torch.randn(8, requires_grad=True)
    y = host_steps.stamped(Square, stamps).apply(x)
    assert torch.equal(torch.autograd.grad(y.sum(), x, retain_graph=True)[0], 2 * x.detach())
    parts = host_steps.split_us_per_call(lambda: torch.autograd.grad(y.sum(), x, retain_graph=True), stamps, calls=5)
    assert list(parts) == list(host_steps.SPLIT_PARTS)
    assert all(v >= 0 for v in parts.values()) and parts["bwd_body"] >= 1000
    with pytest.raises(RuntimeError, match="stamps for 5 calls"):
        host_steps.split_us_per_call(lambda: x * 2, stamps, calls=5)


@pytest.mark.parametrize("dq_mode", ["atomic", "fused"])
def test_bwd_inside_cuts_the_body_at_the_recorded_launchs_pieces(dq_mode):
    """bwd_inside on a Function whose backward runs a recorded BackwardLaunch (the interpreter's repeat, on the CPU):
    five non-negative parts per call adding up to the same calls' bodies, no Delta part without a Delta launch, the
    launch's methods as they were afterwards; a backward without a recorded launch is an error."""
    Q, K, V, O, L, dO = _inputs(torch.float32, True)
    launch = fb._checked_backward(Q, K, V, O, L, dO, True, None, dq_mode, False, True)[-1]

    def through(body):   # an autograd.Function whose backward is body(g)
        class Toy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q):
                return q * 1

            @staticmethod
            def backward(ctx, g):
                return body(g)
        return Toy

    methods = {n: fb.BackwardLaunch.__dict__[n] for n in ("buffers", "run_delta", "run_main")}
    stamps = []
    q = Q.clone().requires_grad_()
    y = host_steps.stamped(through(lambda g: launch(Q, K, V, O, L, dO)[0]), stamps).apply(q)
    grad = lambda: torch.autograd.grad(y, q, dO, retain_graph=True)   # noqa: E731
    parts = host_steps.inside_us_per_call(grad, stamps, calls=3)
    assert list(parts) == list(host_steps.INSIDE_PARTS) and all(v >= 0 for v in parts.values())
    assert (parts["bwd_in_delta"] > 0) == (dq_mode != "fused") and parts["bwd_in_main"] > 0
    ends = [t for tag, t in stamps if tag in ("enter", "exit")]   # the same calls' bodies: the parts cut them
    assert sum(parts.values()) == pytest.approx(sum(b - a for a, b in zip(ends[0::2], ends[1::2])) / 3 / 1e3)
    assert {n: fb.BackwardLaunch.__dict__[n] for n in methods} == methods

    z = host_steps.stamped(through(lambda g: g), stamps).apply(q)
    with pytest.raises(RuntimeError, match="ran no recorded BackwardLaunch"):
        host_steps.inside_us_per_call(lambda: torch.autograd.grad(z, q, dO, retain_graph=True), stamps, calls=2)


def test_compare_trees_host_mode_alternates_trees_and_summarises_per_process(monkeypatch, tmp_path, capsys):
    """compare_trees --mode host: each tree's processes get the steps and repeats, their rows land in host_trees.csv
    with the tree's label, and --summary gives each tree's median (min-max) per step and of each process's
    backward ÷ sdpa_backward. --D other than the harness's and unknown steps are refused."""
    import importlib.util
    import json
    import subprocess

    import fa2lab.provenance
    import fa2lab.results

    spec = importlib.util.spec_from_file_location("ct_host", REPO / "scripts" / "compare_trees.py")
    ct = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ct)
    seen, us = [], {"before": (200.0, 100.0), "after": (150.0, 100.0)}   # (backward, sdpa_backward) per tree

    def fake_run(cmd, capture_output, text, cwd, env):
        label = "before" if len(seen) in (0, 3) else "after"   # rounds alternate: before, after | after, before
        seen.append((cmd[cmd.index("--steps") + 1], cmd[cmd.index("--repeats") + 1]))
        N = int(cmd[cmd.index("--shapes") + 1].split(",")[0])
        scale = 1.0 + 0.1 * (len(seen) > 2)   # the second round's host is 10% slower for both steps
        lines = [json.dumps(dict(version="v7_hopper", mode="host", N=N, D=64, causal=0, step=step,
                                 us_median=v * scale, us_min=v, us_max=v, repeats=3, switches="",
                                 child_torch="2.11.0", child_triton="3.9.0"))
                 for step, v in zip(("backward", "sdpa_backward"), us[label])]
        return subprocess.CompletedProcess(cmd, 0, "\n".join("ROW " + line for line in lines), "")

    monkeypatch.setattr(ct.subprocess, "run", fake_run)
    monkeypatch.setattr(fa2lab.provenance, "environment", lambda: {"git_commit": "c0ffee", "gpu": "Test GPU"})
    monkeypatch.setattr(fa2lab.results, "gpu_dir", lambda: tmp_path / "nvidia-h200")
    monkeypatch.setattr(fa2lab.results, "RESULTS", tmp_path)
    trees = ["--tree", f"before={REPO}", "--tree", f"after={REPO}"]
    assert ct.main(["--mode", "host", *trees, "--rounds", "2", "--N", "1024", "--causal", "0", "--repeats", "3",
                    "--steps", "sdpa_backward,backward"]) == 0
    assert seen == [("sdpa_backward,backward", "3")] * 4
    rows = (tmp_path / "nvidia-h200" / "experiments" / "host_trees.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 2 and "c0ffee" in rows[1]
    capsys.readouterr()
    assert ct.main(["--mode", "host", "--summary"]) == 0
    out = capsys.readouterr().out
    assert "| `v7_hopper` | 1024 | no | backward ÷ sdpa_backward | 2 (2–2), n = 2 | 1.5 (1.5–1.5), n = 2 |" in out
    assert "| `v7_hopper` | 1024 | no | backward | 210 (200–220), n = 2 | 158 (150–165), n = 2 |" in out
    for bad in (["--D", "128"], ["--steps", "backward,no_such_step"]):
        with pytest.raises(SystemExit):
            ct.main(["--mode", "host", *trees, *bad])
