"""fa2triton.launch.pin_config: the sweep and the profile drivers launch exactly the configuration asked for."""

import types


from fa2triton import launch
from fa2triton.budget import Config
from fa2triton.lean_path import LaunchCache


class FakeAutotuner:   # what pin_config looks at in a triton Autotuner: .configs, .cache, .fn
    def __init__(self, configs):
        self.configs, self.cache, self.fn = list(configs), {"key": "tuned"}, object()


def _module(kernel, cls_attrs=None, config_kwargs=None):
    cls = type("FlashAttentionTriton", (), dict(cls_attrs or {}, launches=LaunchCache()))
    cls.launches.entries[("sig",)] = "a launch recorded for another configuration"
    m = types.SimpleNamespace(flash_fwd_kernel=kernel, FlashAttentionTriton=cls)
    if config_kwargs:
        m.config_kwargs = config_kwargs
    return m


def test_an_autotuned_version_gets_one_candidate_with_its_extra_constexprs_and_gets_them_back():
    own = ["candidate A", "candidate B"]
    m = _module(FakeAutotuner(own), config_kwargs=lambda cfg, D: {"PIPELINE_QK": int(cfg.num_warps >= 4)})
    how = launch.pin_config(m, Config(128, 64, 8, 3))
    (c,) = m.flash_fwd_kernel.configs
    assert c.kwargs == {"Q_TILE_SIZE": 128, "K_TILE_SIZE": 64, "PIPELINE_QK": 1}
    assert (c.num_warps, c.num_stages) == (8, 3) and "PIPELINE_QK=1" in how
    assert m.flash_fwd_kernel.cache == {} and m.FlashAttentionTriton.launches.entries == {}
    launch.pin_config(m, Config(32, 32, 1, 2))          # a second pin keeps the version's own list to restore
    launch.unpin_config(m)
    assert m.flash_fwd_kernel.configs == own and m.flash_fwd_kernel.cache == {"key": "tuned"}


def test_a_fixed_version_gets_class_attributes_and_strict_mode_until_unpinned():
    m = _module(object(), {"Q_TILE_SIZE": 16, "K_TILE_SIZE": 16, "NUM_WARPS": 4, "NUM_STAGES": 3})
    launch.pin_config(m, Config(64, 32, 4, 5))
    cls = m.FlashAttentionTriton
    assert (cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES) == (64, 32, 4, 5)
    assert launch._strict is True and cls.launches.entries == {}
    launch.unpin_config(m)
    assert (cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES) == (16, 16, 4, 3)
    assert launch._strict is False


def test_the_sweep_compiles_v7s_own_signature_for_sm90_without_a_gpu():
    """In a subprocess without TRITON_INTERPRET (this one imported the kernels for the interpreter)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    code = """
import json
from fa2lab import forward_sweep as sweep
from fa2triton.budget import Config
from fa2triton.versions import load
m = load("v7_hopper")
out = []
for cfg in (Config(128, 64, 8, 3), Config(64, 32, 4, 2)):
    c = sweep.compile_own_signature(m, cfg, True, 4096, 64, "bfloat16", 90)
    out.append([c.metadata.num_warps, c.metadata.shared, m.config_kwargs(cfg, 64)["PIPELINE_QK"],
                int(m.pipelining_applies(cfg, 64))])
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(repo)
    p = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (w1, smem1, pipe1, rule1), (w2, smem2, pipe2, rule2) = json.loads(p.stdout.strip().splitlines()[-1])
    assert (w1, w2) == (8, 4) and smem1 > smem2 > 0
    assert (pipe1, pipe2) == (rule1, rule2)
