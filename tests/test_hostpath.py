"""The lean host path (issue 8): structure, not speed (CPU timings would mean nothing)."""

import pytest
import torch

from fa2lab import versions
from fa2lab.hostpath import LaunchCache


class FakeLaunch:
    def __init__(self):
        self.calls = 0

    def __call__(self, Q, K, V):
        self.calls += 1
        return torch.zeros_like(Q), torch.zeros(Q.shape[:2])


def test_second_call_with_the_same_signature_skips_the_normal_path(monkeypatch):
    monkeypatch.setattr(LaunchCache, "signature", staticmethod(lambda Q, K, V, c: (Q.shape, K.shape, c)))
    cache, launch, slow_calls = LaunchCache(), FakeLaunch(), []

    def slow(Q, K, V, causal):
        slow_calls.append(Q.shape)
        return torch.ones_like(Q), torch.ones(Q.shape[:2]), launch

    q = torch.randn(2, 64, 32)
    O1, _ = cache(q, q, q, False, slow)
    O2, _ = cache(q, q, q, False, slow)
    assert len(slow_calls) == 1 and launch.calls == 1
    assert O1.sum() > 0 and O2.sum() == 0  # the second result came from the cached launch
    cache(q, q, q, True, slow)             # another mask is another signature
    cache(torch.randn(2, 96, 32), q, q, False, slow)
    assert len(slow_calls) == 3
    assert cache.stats == {"slow": 3, "fast": 1}


def test_no_launch_recorded_means_the_normal_path_every_time(monkeypatch):
    monkeypatch.setattr(LaunchCache, "signature", staticmethod(lambda Q, K, V, c: (Q.shape, c)))
    cache, calls = LaunchCache(), []
    slow = lambda Q, K, V, c: (calls.append(1), (Q, Q[..., 0], None))[1]  # noqa: E731
    q = torch.randn(1, 16, 16)
    for _ in range(3):
        cache(q, q, q, False, slow)
    assert len(calls) == 3


def test_signature_refuses_cpu_and_odd_inputs():
    q = torch.randn(1, 32, 64)
    assert LaunchCache.signature(q, q, q, False) is None          # CPU tensors: normal path (and its error)
    assert LaunchCache.signature(q[0], q, "x", False) is None     # not tensors: normal path raises clearly


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the cached launch replays a real binary")
def test_v5_second_call_does_not_autotune_or_bind_again(monkeypatch):
    module = versions.load("v5_final")
    kernel = module.flash_fwd_kernel
    q, k, v = (torch.randn(4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    first = module.FlashAttentionTriton.apply(q, k, v, True)
    runs = []
    original = type(kernel).run
    monkeypatch.setattr(type(kernel), "run", lambda self, *a, **kw: (runs.append(1), original(self, *a, **kw))[1])
    second = module.FlashAttentionTriton.apply(q, k, v, True)
    assert runs == [], "the second call with the same signature went through the autotuner"
    assert torch.equal(first, second)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(second.float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script measures and appends to results/")
def test_host_steps_refuses_without_a_gpu_and_names_the_committed_file():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(repo / "profiling" / "host_steps.py")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "hostpath/steps.csv" in p.stderr
