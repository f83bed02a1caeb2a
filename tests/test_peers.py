"""fa2lab.peers and the harnesses' peer columns (issue 38), on the CPU without flash-attn-4: the registry's
statuses, the layout conversion, and both harnesses' measure/make_row with stand-in peers (SDPA on the CPU),
stand-in kernels and stand-in timings."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fa2lab import peers, shapes

REPO = Path(__file__).resolve().parent.parent
B, H, D = 1, 2, 16


# ------------------------------------------------------------------------------------------- stand-ins

def sdpa_bnhd(q, k, v, causal=False):
    """A peer's function: SDPA on (B, N, H, D), returning (out, lse) like recent flash-attn-4 releases."""
    out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal).transpose(1, 2)
    return out, torch.zeros(out.shape[:3])


def stand_in(fn=sdpa_bnhd, name="fa4", **kw) -> peers.Peer:
    return peers.Peer(name, "stand-in", lambda: fn, arch=None, **kw)


class FakeKernel:
    """The version's FlashAttentionTriton: SDPA on our layout (B*H, N, D), differentiable."""

    @staticmethod
    def apply(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


# Stand-in timings, told apart by the shape of what the timed call returns: ours (B*H, N, D), SDPA (B, H, N, D),
# the peer (B, N, H, D) (a backward returns a tuple of gradients: the first one's shape).
def fake_ms(out) -> float:
    first = out[0] if isinstance(out, tuple) else out
    return {3: 1.0, 4: 1.5 if first.shape[1] == H else 0.8}[first.dim()]


def fake_timer(fail_graph_for_peer=False):
    def bench(fn):
        return fake_ms(fn())

    def graph(fn):
        out = fn()
        if fail_graph_for_peer and fake_ms(out) == 0.8:
            raise RuntimeError("capture failed\nsecond line")
        return fake_ms(out) / 2

    return types.SimpleNamespace(bench_ms=bench, bench_graph_ms=graph, bench_noflush_ms=bench,
                                 host_us_per_call=lambda fn: 1000 * bench(fn))


def load_harness(monkeypatch, file: str):
    monkeypatch.setitem(sys.modules, "flashattention_autograd_function_triton",
                        types.SimpleNamespace(FlashAttentionTriton=FakeKernel))
    spec = importlib.util.spec_from_file_location(f"harness_under_test_{Path(file).stem}", REPO / "harness" / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shape(N, causal):
    return shapes.Shape(N=N, causal=causal, B=B, H=H, D=D)


# ------------------------------------------------------------------------------------------- the registry

def test_flash_attn_4_is_registered_and_reports_not_installed_without_the_package(monkeypatch):
    fa4 = peers.REGISTRY["fa4"]
    assert (fa4.name, fa4.label, fa4.arch) == ("fa4", "flash-attn-4 sm90", "sm_90")
    assert fa4.distributions == ("flash-attn-4", "nvidia-cutlass-dsl")
    fresh = dataclasses.replace(fa4)   # the registered entry with its status not worked out yet
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("flash_attn") else real_find_spec(name, *a))
    assert fresh.status() == peers.NOT_INSTALLED and not fresh.enabled
    with pytest.raises(RuntimeError, match="peer fa4 .*not installed"):
        fresh.function()
    if importlib.util.find_spec("flash_attn") is None:   # this machine: the real registry says so too
        assert fa4.status() == peers.NOT_INSTALLED and peers.HAS_FA4 is False


def test_has_flags_read_the_registry_lazily(monkeypatch):
    monkeypatch.setitem(peers.REGISTRY, "fa4", stand_in())
    assert peers.HAS_FA4 is True
    monkeypatch.setitem(peers.REGISTRY, "fa4", stand_in(packages=("no_such_module_for_fa2lab",)))
    assert peers.HAS_FA4 is False
    with pytest.raises(AttributeError):
        peers.HAS_NOPE  # noqa: B018


def test_import_of_the_module_imports_no_peer():
    out = subprocess.run([sys.executable, "-c", "import sys, fa2lab.peers as p; "
                          "print(sorted(m for m in sys.modules if m.startswith(('flash_attn', 'cutlass'))), "
                          "p.REGISTRY['fa4']._status)"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "None"]


def test_statuses_name_what_is_missing(monkeypatch):
    def missing_dependency():
        raise ModuleNotFoundError("No module named 'cutlass'", name="cutlass")

    def missing_self():
        raise ModuleNotFoundError("No module named 'fake_peer'", name="fake_peer")

    def broken():
        raise OSError("libcuda.so.1: cannot open shared object file\nmore")

    assert peers.Peer("x", "x", missing_dependency, arch=None).status() == \
        "import failed: ModuleNotFoundError: No module named 'cutlass'"
    assert peers.Peer("x", "x", missing_self, packages=("fake_peer",), arch=None).status() == peers.NOT_INSTALLED
    assert peers.Peer("x", "x", broken, arch=None).status() == \
        "import failed: OSError: libcuda.so.1: cannot open shared object file"
    needs_gpu = peers.Peer("x", "x", lambda: sdpa_bnhd)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert needs_gpu.status() == "no CUDA GPU"
    needs_gpu.reset()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 9))
    assert needs_gpu.status() == "needs sm_90 (this GPU is sm_89)"
    needs_gpu.reset()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert needs_gpu.status() == peers.OK


def test_peers_option():
    assert peers.chosen("none") == [] and peers.chosen("all") == list(peers.REGISTRY.values())
    assert peers.chosen("fa4,fa4") == [peers.REGISTRY["fa4"]]
    with pytest.raises(ValueError, match="unknown peer.*fa3.*registered: fa4"):
        peers.chosen("fa4,fa3")
    with pytest.raises(ValueError, match="registered already"):
        peers.register(stand_in())


def test_versions_name_the_installed_distributions():
    p = stand_in(distributions=("torch", "no-such-distribution-fa2lab"))
    assert p.versions() == f"torch=={importlib.metadata.version('torch')}"
    assert peers.versions_column([p, stand_in(name="other")]) == f"fa4: torch=={importlib.metadata.version('torch')}"


# ------------------------------------------------------------------------------------------- layouts

def test_layout_conversion_is_exact_both_ways():
    x = torch.randn(3 * 4, 5, 8, dtype=torch.bfloat16)
    y = peers.to_bnhd(x, 3, 4)
    assert y.shape == (3, 5, 4, 8) and y.is_contiguous()
    assert all(torch.equal(y[b, :, h], x[b * 4 + h]) for b in range(3) for h in range(4))
    back = peers.from_bnhd(y)
    assert back.shape == x.shape and back.is_contiguous() and torch.equal(back, x)
    with pytest.raises(ValueError, match="not B \\* H = 2 \\* 4"):
        peers.to_bnhd(x, 2, 4)


def test_peer_forward_and_backward_in_our_layout_match_sdpa():
    q, k, v, dO = (torch.randn(B * H, 32, D) for _ in range(4))
    p = stand_in()
    for causal in (False, True):
        assert torch.allclose(p.forward(q, k, v, causal, B, H), FakeKernel.apply(q, k, v, causal), atol=1e-6)
        O, *grads = p.forward_backward(q, k, v, dO, causal, B, H)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = torch.autograd.grad(FakeKernel.apply(*leaves, causal), leaves, dO)
        assert all(torch.allclose(g, r, atol=1e-5) for g, r in zip(grads, ref))


# ------------------------------------------------------------------------------------------- the forward harness

def test_forward_harness_gives_the_peer_columns(monkeypatch):
    harness = load_harness(monkeypatch, "bench_flashattention.py")
    p = stand_in(distributions=("torch",))
    s = shape(32, True)
    m = harness.measure(s, graphs=True, peers=[p], device="cpu", timer=fake_timer())
    row = harness.make_row("v_test", "run", s, m, {}, [p])
    assert row["fa4_status"] == peers.OK and row["ms"] == 1.0 and row["sdpa_ms"] == 1.5
    assert (row["fa4_ms"], row["fa4_graph_ms"], row["fa4_noflush_ms"], row["fa4_host_us"]) == (0.8, 0.4, 0.8, 800.0)
    assert row["pct_of_fa4"] == pytest.approx(80.0) and row["graph_pct_of_fa4"] == pytest.approx(80.0)
    assert row["fa4_tflops"] == pytest.approx(s.flops / 0.8e-3 / 1e12)
    assert row["fa4_max_abs_err_vs_sdpa"] < 1e-2
    assert row["peer_versions"].startswith("fa4: torch==")
    assert "fa4 ms" in harness.table_header([p]) and "80%" in harness.table_line(row, [p])
    # --peers none: no peer column at all
    bare = harness.make_row("v_test", "run", s, harness.measure(s, graphs=False, device="cpu", timer=fake_timer()), {})
    assert not [c for c in bare if "fa4" in c or c == "peer_versions"]


def test_forward_harness_checks_the_peers_output(monkeypatch):
    """A peer that ignores the mask is caught by its error column (the check compares, it does not copy)."""
    harness = load_harness(monkeypatch, "bench_flashattention.py")
    wrong = stand_in(lambda q, k, v, causal: sdpa_bnhd(q, k, v, False))
    m = harness.measure(shape(32, True), graphs=False, peers=[wrong], device="cpu", timer=fake_timer())
    assert m["fa4_max_abs_err_vs_sdpa"] > 0.1 and m["max_abs_err_vs_sdpa"] < 1e-2


def test_a_peer_failing_at_one_shape_gives_its_reason_and_the_run_goes_on(monkeypatch):
    harness = load_harness(monkeypatch, "bench_flashattention.py")

    def picky(q, k, v, causal=False):
        if q.shape[1] == 48:
            raise RuntimeError("no tile for seqlen 48\ntraceback detail")
        return sdpa_bnhd(q, k, v, causal)

    p = stand_in(picky)
    rows = [harness.make_row("v_test", "run", s, harness.measure(s, True, [p], "cpu", fake_timer()), {}, [p])
            for s in (shape(48, False), shape(32, False))]
    failed, fine = rows
    assert failed["fa4_status"] == "forward failed: RuntimeError: no tile for seqlen 48"
    assert all(math.isnan(failed[c]) for c in ("fa4_ms", "fa4_graph_ms", "fa4_tflops", "pct_of_fa4",
                                                "fa4_max_abs_err_vs_sdpa"))
    assert failed["ms"] == 1.0 and failed["pct_of_sdpa"] == 150.0   # ours and SDPA measured all the same
    assert "(fa4: forward failed" in harness.table_line(failed, [p])
    assert fine["fa4_status"] == peers.OK and fine["fa4_ms"] == 0.8


def test_a_failed_timing_keeps_what_was_measured_before_it(monkeypatch):
    harness = load_harness(monkeypatch, "bench_flashattention.py")
    m = harness.measure(shape(32, False), True, [stand_in()], "cpu", fake_timer(fail_graph_for_peer=True))
    assert m["fa4_status"] == "graph_ms failed: RuntimeError: capture failed"
    assert m["fa4_ms"] == 0.8 and math.isnan(m["fa4_graph_ms"]) and math.isnan(m["fa4_host_us"])
    assert m["graph_ms"] == 0.5   # ours' graph time is unaffected


def test_a_peer_that_cannot_run_gives_nan_and_its_status(monkeypatch):
    harness = load_harness(monkeypatch, "bench_flashattention.py")
    p = stand_in(packages=("no_such_module_for_fa2lab",))
    s = shape(32, False)
    row = harness.make_row("v_test", "run", s, harness.measure(s, True, [p], "cpu", fake_timer()), {}, [p])
    assert row["fa4_status"] == peers.NOT_INSTALLED and row["peer_versions"] == ""
    assert all(math.isnan(row[c]) for c in ("fa4_ms", "fa4_graph_ms", "fa4_tflops", "pct_of_fa4"))


# ------------------------------------------------------------------------------------------- the backward harness

def test_backward_harness_gives_the_peer_columns(monkeypatch):
    harness = load_harness(monkeypatch, "bench_flashattention_backward.py")
    p = stand_in()
    s = shape(32, True)
    m = harness.measure(FakeKernel, s, host=True, peers=[p], device="cpu", timer=fake_timer())
    row = harness.make_row("v_test", "run", s, m, {}, {"backward_impl": "fake"}, [p])
    assert row["fa4_status"] == peers.OK
    assert (row["fa4_bwd_ms"], row["fa4_fwd_bwd_ms"], row["fa4_bwd_host_us"]) == (0.8, 0.8, 800.0)
    assert row["bwd_pct_of_fa4"] == pytest.approx(80.0) and row["fwd_bwd_pct_of_fa4"] == pytest.approx(80.0)
    assert row["fa4_bwd_tflops"] == pytest.approx(shapes.BWD_FLOP_FACTOR * s.flops / 0.8e-3 / 1e12)
    assert all(row[f"fa4_rel_err_d{n}_vs_sdpa"] < 1e-2 for n in "qkv")
    assert "fa4 bwd" in harness.table_header([p]) and "80%" in harness.table_line(row, [p])


def test_backward_harness_checks_the_peers_gradients_and_survives_its_failure(monkeypatch):
    harness = load_harness(monkeypatch, "bench_flashattention_backward.py")

    def doubled_gradients(q, k, v, causal=False):   # the right output, twice the gradients
        out, lse = sdpa_bnhd(q, k, v, causal)
        return out.detach() + 2 * (out - out.detach()), lse

    def forward_only(q, k, v, causal=False):
        out, lse = sdpa_bnhd(q.detach(), k.detach(), v.detach(), causal)
        return out, lse

    s = shape(32, False)
    wrong = harness.measure(FakeKernel, s, True, [stand_in(doubled_gradients)], "cpu", fake_timer())
    assert wrong["fa4_status"] == peers.OK and wrong["fa4_rel_err_dq_vs_sdpa"] > 0.1
    broken = harness.measure(FakeKernel, s, True, [stand_in(forward_only)], "cpu", fake_timer())
    assert broken["fa4_status"].startswith("backward failed: RuntimeError")
    assert math.isnan(broken["fa4_bwd_ms"]) and broken["bwd_ms"] == 1.0


# ------------------------------------------------------------------------------------------- command lines

@pytest.mark.parametrize("file", ["bench_flashattention.py", "bench_flashattention_backward.py"])
def test_harness_help_and_a_bad_peer_name_without_a_gpu(file):
    env_free = {"CUDA_VISIBLE_DEVICES": ""}
    run = lambda *a: subprocess.run([sys.executable, str(REPO / "harness" / file), *a], cwd=REPO,  # noqa: E731
                                    capture_output=True, text=True, timeout=120, env={**__import__("os").environ,
                                                                                      **env_free})
    out = run("--help")
    assert out.returncode == 0, out.stderr
    assert "--peers" in out.stdout and "--D {16,32,64,128}" in out.stdout and "fa4_status" in out.stdout
    bad = run("--peers", "fa3")
    assert bad.returncode == 2 and "unknown peer(s) fa3" in bad.stderr


def test_peers_command_lists_the_statuses():
    out = subprocess.run([sys.executable, "-m", "fa2lab.peers"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:3] == ["fa4", "flash-attn-4", "sm90"]


def test_protocol_summary_takes_the_median_of_per_run_ratios_to_the_peer():
    from fa2lab.protocol import format_summary, summarise

    rows = [{"version": "v7_hopper", "N": 4096, "causal": 1, "run_id": f"p1/{r}", "ms": 0.3, "tflops": 1,
             "sdpa_ms": 0.3, "pct_of_sdpa": 100.0, "pct_of_sdpa_flash": "nan", "pct_of_fa4": pct}
            for r, pct in enumerate(["93.0", "96.5", "95.0", "nan"])]   # csv strings; a run without the peer
    (s,) = summarise(rows, "p1")
    assert (s["pct_of_fa4"], s["fa4_pct_min"], s["fa4_pct_max"]) == (95.0, 93.0, 96.5)
    assert "% fa4" in format_summary([s]) and "93.0-96.5%" in format_summary([s])
    for r in rows:
        r.pop("pct_of_fa4")
    (bare,) = summarise(rows, "p1")
    assert "pct_of_fa4" not in bare and "% fa4" not in format_summary([bare])


# ------------------------------------------------------------------------------------------- profiling (--peer)

def _profiling(script: str, *args: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, f"profiling/{script}", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def test_profile_driver_puts_the_peer_in_its_own_ranges():
    fwd = _profiling("profile_driver.py", "--kernel", "v7_hopper", "--peer", "fa4", "--N", "4096", "--D", "128",
                     "--causal", "1", "--dry-run")
    assert fwd.returncode == 0, fwd.stdout + fwd.stderr
    assert "[v7_hopper N=4096 causal=1, fa4-fwd N=4096 causal=1, sdpa N=4096 causal=1]" in fwd.stdout
    assert "--D 128 --peer fa4" in fwd.stdout
    bwd = _profiling("profile_driver.py", "--kernel", "v7_hopper", "--peer", "fa4", "--mode", "bwd", "--dry-run")
    assert bwd.returncode == 0 and "fa4-bwd N=4096 causal=0, sdpa-bwd N=4096 causal=0" in bwd.stdout, bwd.stderr
    bad = _profiling("profile_driver.py", "--kernel", "v7_hopper", "--peer", "fa3", "--dry-run")
    assert bad.returncode != 0 and "--peer: unknown peer(s) fa3" in bad.stderr


def test_one_profile_call_covers_both_head_dimensions_and_masks():
    out = _profiling("run_profile.py", "--tool", "ncu", "--kernel", "v7_hopper", "--peer", "fa4", "--D", "64", "128",
                     "--causal", "both", "--dry-run")
    assert out.returncode == 0, out.stderr
    reports = [line.split(" -o ")[1].split()[0].rsplit("/", 1)[1] for line in out.stdout.splitlines()
               if line.startswith("+ ncu --set full")]
    assert reports == ["v7_hopper_fa4_N4096_noncausal", "v7_hopper_fa4_N4096_causal",
                       "v7_hopper_fa4_N4096_noncausal_D128", "v7_hopper_fa4_N4096_causal_D128"]
    assert out.stdout.count("--peer fa4") == 4 and "> FUNCTIONS.csv" in out.stdout
    one = _profiling("run_profile.py", "--tool", "ncu", "--kernel", "v7_hopper", "--causal", "--dry-run")
    assert one.returncode == 0 and one.stdout.count("+ ncu --set full") == 1 and "_N4096_causal " in one.stdout
    bad = _profiling("run_profile.py", "--tool", "ncu", "--kernel", "v7_hopper", "--peer", "fa3", "--dry-run")
    assert bad.returncode == 2 and "unknown peer(s) fa3" in bad.stderr


def test_kernel_functions_name_each_kernel_of_a_range():
    from profiling.run_profile import kernel_functions

    raw = ('==PROF== Connected\n"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n"","","","usecond"\n'
           '"0","1","flash_bwd_preprocess","3"\n"1","1","FlashAttentionBackwardSm90","300"\n')
    assert kernel_functions(raw) == {"0": "flash_bwd_preprocess", "1": "FlashAttentionBackwardSm90"}
    assert kernel_functions("not,a,raw,page\n") == {}


def test_the_gpu_smoke_check_passes_a_right_peer_and_fails_a_wrong_one(capsys):
    """python -m fa2lab.peers --check, on the CPU with stand-in peers: one line per (D, causal), exit status 1 for
    a peer that ignores the mask, one that raises, or one that is not installed."""
    small = dict(B=1, H=2, N=32, head_dims=(16,), device="cpu")
    assert peers.check([stand_in()], **small) == 0
    out = capsys.readouterr().out
    assert out.count("(ok)") == 2 and "D=16 causal=1 N=32: forward: max abs err vs SDPA" in out
    assert peers.check([stand_in(lambda q, k, v, causal: sdpa_bnhd(q, k, v, False))], **small) == 1
    assert "WRONG: above 0.02" in capsys.readouterr().out

    def raises(q, k, v, causal=False):
        raise RuntimeError("unsupported head dimension 16")

    assert peers.check([stand_in(raises)], **small) == 1
    assert "check failed: RuntimeError: unsupported head dimension 16" in capsys.readouterr().out
    assert peers.check([stand_in(packages=("no_such_module_for_fa2lab",))], **small) == 1
    assert "fa4 (stand-in): not installed" in capsys.readouterr().out
