"""fa2triton.buckets: the bucket of a length, the pick cache in memory and on disk, pinning an autotuner."""

import json
import os
import warnings

import pytest
import torch
import triton

from fa2lab import shapes
from fa2triton import buckets
from fa2triton.buckets import BucketKey, PickCache, PickCacheWarning, bucket, bucket_key


def key(n_q=300, n_k=None, D=64, causal=False, dtype="bfloat16"):
    n_k = n_q if n_k is None else n_k
    return BucketKey(dtype, D, causal, bucket(n_q), bucket(n_k), (), (n_q, n_k))


@pytest.fixture
def kernel_file(tmp_path):
    f = tmp_path / "kernel.py"
    f.write_text("# a kernel\n")
    return f


def cache(tmp_path, kernel_file, name="v5_final"):
    return PickCache(name, files=(kernel_file,), cache_dir=tmp_path / "picks")


# ------------------------------------------------------------------------------------------------ buckets

@pytest.mark.parametrize("n, b", [(1, 1), (2, 2), (3, 4), (257, 512), (300, 512), (512, 512), (513, 1024),
                                  (4097, 8192), (8192, 8192)])
def test_a_length_falls_in_the_smallest_power_of_two_at_or_above_it(n, b):
    assert bucket(n) == b


@pytest.mark.parametrize("bad", [0, -4, 1.5, "512", True, None])
def test_a_length_that_is_not_a_positive_integer_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="positive integer"):
        bucket(bad)


def test_each_harness_length_is_the_top_of_a_bucket_of_its_own():
    tops = [bucket(n) for n in shapes.SEQ_LENS]
    assert tops == list(shapes.SEQ_LENS) and len(set(tops)) == len(tops)
    for n in shapes.SEQ_LENS:
        assert key(n).at_top and not key(n - 1).at_top and bucket(n + 1) == 2 * n


def test_the_key_of_a_call_names_dtype_D_mask_and_both_buckets_but_not_the_lengths():
    Q, K = torch.empty(2, 300, 64, dtype=torch.bfloat16), torch.empty(2, 1500, 64, dtype=torch.bfloat16)
    k = bucket_key(Q, K, True)
    assert (k.dtype, k.D, k.causal, k.q_bucket, k.k_bucket, k.lengths) == ("bfloat16", 64, True, 512, 2048, (300, 1500))
    assert k == bucket_key(torch.empty(1, 400, 64, dtype=torch.bfloat16), torch.empty(1, 1025, 64,
                                                                                       dtype=torch.bfloat16), True)
    assert k != bucket_key(Q, K, False) and k != bucket_key(Q.float(), K.float(), True)
    assert k.text == "bfloat16,D=64,causal=1,Nq<=512,Nk<=2048"


# ------------------------------------------------------------------------------------------------ in memory

def test_the_first_length_of_a_bucket_is_tuned_and_later_ones_reuse_its_pick(tmp_path, kernel_file):
    picks = PickCache("v", files=(kernel_file,), cache_dir="off")
    tuned = []

    def tune(n):
        def run():
            tuned.append(n)
            return f"tuned {n}", {"pick": n}
        return run

    reuse = lambda value: f"reused {value['pick']}"  # noqa: E731
    assert picks.choose(key(300), tune(300), reuse) == "tuned 300" and picks.last == "tuned"
    assert picks.choose(key(400), tune(400), reuse) == "reused 300" and picks.last == "reused"
    assert picks.choose(key(600), tune(600), reuse) == "tuned 600"                  # another bucket
    assert picks.choose(key(400, causal=True), tune(401), reuse) == "tuned 401"    # another mask
    assert tuned == [300, 600, 401] and picks.stats == {"tuned": 3, "reused": 1}


def test_a_buckets_top_is_tuned_at_itself_and_its_pick_then_serves_the_bucket(kernel_file):
    picks = PickCache("v", files=(kernel_file,), cache_dir="off")
    reuse = lambda value: value  # noqa: E731
    picks.choose(key(300), lambda: ("t300", 300), reuse)
    assert picks.choose(key(512), lambda: ("t512", 512), reuse) == "t512"   # 300's pick is not the harness's
    assert picks.choose(key(512), lambda: ("again", 0), reuse) == 512       # tuned at 512: reused there
    assert picks.choose(key(301), lambda: ("t301", 301), reuse) == 512


def test_a_pick_that_does_not_apply_is_tuned_again(kernel_file):
    picks = PickCache("v", files=(kernel_file,), cache_dir="off")
    picks.choose(key(300), lambda: ("t", "old"), lambda v: v)

    def stale(value):
        raise buckets.StalePick("gone")

    with pytest.warns(PickCacheWarning, match="gone"):
        assert picks.choose(key(400), lambda: ("tuned again", "new"), stale) == "tuned again"
    assert picks.lookup(key(400))["value"] == "new"


# ------------------------------------------------------------------------------------------------ on disk

def test_a_second_process_finds_the_picks_on_disk(tmp_path, kernel_file):
    first = cache(tmp_path, kernel_file)
    first.choose(key(300), lambda: ("t", {"q": 64}), lambda v: v)
    first.choose(key(3000, D=128, causal=True), lambda: ("t", {"q": 128}), lambda v: v)
    (path,) = (tmp_path / "picks").iterdir()
    assert path == first.path() and path.name.startswith("picks-v5_final-")
    data = json.loads(path.read_text())
    assert data["format"] == buckets.FORMAT and data["environment"]["files"] == {"kernel.py": buckets.file_hash(kernel_file)}
    assert data["picks"]["bfloat16,D=64,causal=0,Nq<=512,Nk<=512"] == {"value": {"q": 64}, "tuned_at": [300, 300]}

    second = cache(tmp_path, kernel_file)     # a fresh cache object: what a new process has
    never = lambda: pytest.fail("a bucket seen before was tuned again")  # noqa: E731
    assert second.choose(key(450), never, lambda v: v) == {"q": 64} and second.last == "reused_disk"
    assert second.choose(key(2500, D=128, causal=True), never, lambda v: v) == {"q": 128}
    second.choose(key(1000), lambda: ("t", {"q": 32}), lambda v: v)   # a new bucket: merged into the file
    assert len(json.loads(path.read_text())["picks"]) == 3


def test_the_environment_names_gpu_versions_and_the_kernel_files_content(tmp_path, kernel_file, monkeypatch):
    env, h = cache(tmp_path, kernel_file).environment()
    assert {"gpu", "arch", "torch", "triton", "version", "files"} <= set(env)
    assert env["torch"] == torch.__version__ and env["triton"] == triton.__version__
    kernel_file.write_text("# the kernel, edited\n")
    assert cache(tmp_path, kernel_file).environment()[1] != h
    monkeypatch.setattr(buckets, "device_identity", lambda device_index=None: {"gpu": "Other GPU", "arch": "sm_80"})
    other_gpu = cache(tmp_path, kernel_file)
    assert other_gpu.environment()[0]["gpu"] == "Other GPU"
    assert other_gpu.path() != cache(tmp_path, kernel_file).path() or other_gpu.environment()[1] != h
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert cache(tmp_path, kernel_file).environment()[1] != other_gpu.environment()[1]


def test_picks_made_on_another_gpu_or_version_are_not_reused(tmp_path, kernel_file, monkeypatch):
    cache(tmp_path, kernel_file).choose(key(300), lambda: ("t", "here"), lambda v: v)
    monkeypatch.setattr(buckets, "device_identity", lambda device_index=None: {"gpu": "Other GPU", "arch": "sm_80"})
    elsewhere = cache(tmp_path, kernel_file)
    assert elsewhere.lookup(key(400)) is None
    monkeypatch.undo()
    monkeypatch.setattr(triton, "__version__", "9.9.9")
    assert cache(tmp_path, kernel_file).lookup(key(400)) is None


def test_a_foreign_file_at_our_path_is_ignored_with_one_line_warning_and_replaced(tmp_path, kernel_file):
    picks = cache(tmp_path, kernel_file)
    path = picks.path()
    env = dict(picks.environment()[0], gpu="Some Other GPU")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": buckets.FORMAT, "environment": env,
                                "picks": {key(300).text: {"value": "theirs", "tuned_at": [300, 300]}}}))
    with pytest.warns(PickCacheWarning) as caught:
        assert picks.lookup(key(400)) is None
    (w,) = caught
    assert "another environment" in str(w.message) and "gpu" in str(w.message) and "\n" not in str(w.message)
    picks.choose(key(400), lambda: ("t", "ours"), lambda v: v)
    data = json.loads(path.read_text())
    assert data["environment"] == picks.environment()[0] and data["picks"][key(300).text]["value"] == "ours"


@pytest.mark.parametrize("content", ["{not json", "[]", json.dumps({"format": "something/else", "picks": {}}),
                                     json.dumps({"format": buckets.FORMAT, "environment": {}, "picks": {"k": 3}})])
def test_a_corrupt_file_is_ignored_with_one_line_warning(tmp_path, kernel_file, content):
    picks = cache(tmp_path, kernel_file)
    picks.path().parent.mkdir(parents=True)
    picks.path().write_text(content)
    with pytest.warns(PickCacheWarning, match="corrupt") as caught:
        assert picks.lookup(key(400)) is None
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once per file: the next lookup says nothing
        assert picks.lookup(key(1000)) is None
    picks.choose(key(400), lambda: ("t", 7), lambda v: v)
    assert json.loads(picks.path().read_text())["picks"][key(400).text]["value"] == 7


def test_the_file_is_written_by_a_temporary_file_and_a_rename(tmp_path, kernel_file, monkeypatch):
    picks = cache(tmp_path, kernel_file)
    picks.choose(key(300), lambda: ("t", "first"), lambda v: v)
    before = picks.path().read_text()
    replaced = []
    real_replace = os.replace

    def failing_replace(src, dst):
        replaced.append((src, dst))
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.warns(PickCacheWarning, match="cannot write"):
        picks.choose(key(1000), lambda: ("t", "second"), lambda v: v)
    (src, dst), = replaced
    assert os.path.dirname(src) == str(picks.path().parent) and dst == picks.path() and src != str(dst)
    assert picks.path().read_text() == before                    # the old file, whole
    assert sorted(p.name for p in picks.path().parent.iterdir()) == [picks.path().name]   # no temporary left
    assert picks.lookup(key(1001))["value"] == "second"         # still kept in memory
    monkeypatch.setattr(os, "replace", real_replace)


def test_the_directory_is_read_at_call_time(tmp_path, kernel_file, monkeypatch):
    monkeypatch.setattr("fa2triton.gpu.interpreting", lambda: False)
    monkeypatch.delenv(buckets.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    picks = PickCache("v", files=(kernel_file,))
    assert picks.directory() == tmp_path / "xdg" / "fa2lab"
    monkeypatch.setenv(buckets.ENV_VAR, str(tmp_path / "from-env"))   # set after the cache was made
    assert picks.directory() == tmp_path / "from-env"
    monkeypatch.setenv(buckets.ENV_VAR, "off")
    assert picks.directory() is None and picks.path() is None
    picks.cache_dir = tmp_path / "explicit"
    assert picks.directory() == tmp_path / "explicit"
    picks.cache_dir = "off"
    assert picks.directory() is None


def test_under_the_interpreter_only_an_explicit_directory_is_used(tmp_path, kernel_file, monkeypatch):
    monkeypatch.setattr("fa2triton.gpu.interpreting", lambda: True)
    monkeypatch.setenv(buckets.ENV_VAR, str(tmp_path / "from-env"))
    assert PickCache("v", files=(kernel_file,)).directory() is None
    assert PickCache("v", files=(kernel_file,), cache_dir=tmp_path / "x").directory() == tmp_path / "x"


# ------------------------------------------------------------------------------------------------ autotuners

class FakeAutotuner:
    """What PickCache.autotuned touches: .configs, .best_config; run() 'tunes' when it has several."""

    def __init__(self, configs, best):
        self.configs, self.best, self.tunings, self.launched = list(configs), best, 0, []

    def run(self):
        if len(self.configs) > 1:
            self.tunings += 1
            self.best_config = self.configs[self.best]
        else:
            self.best_config = self.configs[0]
        self.launched.append(self.best_config)
        return "compiled"


def configs():
    return [triton.Config({"Q_TILE_SIZE": q, "K_TILE_SIZE": k}, num_warps=w, num_stages=s)
            for q, k, w, s in ((128, 16, 4, 3), (64, 64, 4, 2), (32, 32, 1, 4))]


def test_an_autotuner_is_pinned_to_its_buckets_pick_for_that_call_only(kernel_file, tmp_path):
    tuner = FakeAutotuner(configs(), best=1)
    picks = cache(tmp_path, kernel_file)
    assert picks.autotuned(tuner, key(300), tuner.run) == "compiled" and tuner.tunings == 1
    assert picks.autotuned(tuner, key(400), tuner.run) == "compiled" and tuner.tunings == 1
    assert tuner.launched[1] == configs()[1] and tuner.configs == configs()     # the list is given back
    fresh = cache(tmp_path, kernel_file)                                        # from disk, as a Config
    tuner2 = FakeAutotuner(configs(), best=2)
    fresh.autotuned(tuner2, key(500), tuner2.run)
    assert tuner2.tunings == 0 and tuner2.launched == [configs()[1]]


def test_an_autotuner_left_one_candidate_is_not_bucketed(kernel_file):
    picks = PickCache("v", files=(kernel_file,), cache_dir="off")
    tuner = FakeAutotuner(configs()[2:], best=0)
    picks.autotuned(tuner, key(300), tuner.run)
    assert picks.last == "pinned" and picks.lookup(key(400)) is None


def test_a_config_survives_json(tmp_path):
    c = triton.Config({"Q_TILE_SIZE": 64, "K_TILE_SIZE": 32, "PIPELINE_QK": 1}, num_warps=8, num_stages=2)
    back = buckets.config_from_json(json.loads(json.dumps(buckets.config_to_json(c))))
    assert back == c and back.kwargs == c.kwargs
    with pytest.raises(ValueError, match="not a configuration"):
        buckets.config_from_json({"kwargs": {}})


# ------------------------------------------------------------------------------------------------ the protocol

def test_the_protocols_processes_get_the_disk_cache_off(monkeypatch):
    """Each fresh process of the protocol tunes for itself (v5's picks): FA2_PICK_CACHE=off, whatever the caller's."""
    from types import SimpleNamespace

    from fa2lab import protocol
    from fa2triton import versions

    monkeypatch.setenv(buckets.ENV_VAR, "/somewhere/the/caller/keeps/picks")
    v = versions.get("v5_final")
    assert protocol.version_env(v)[buckets.ENV_VAR] == "off"
    assert protocol.version_env(v, FA2_RUN_ID="x")[buckets.ENV_VAR] == "off"
    seen = []
    monkeypatch.setattr(protocol.subprocess, "run", lambda cmd, env, cwd: seen.append(env) or SimpleNamespace(
        returncode=0))
    protocol.run_protocol([v, versions.get("v7_hopper")], runs=2, pause_s=0, harness_args=[])
    assert len(seen) == 4 and all(env[buckets.ENV_VAR] == "off" for env in seen)


def test_a_fresh_process_in_the_protocols_environment_has_no_pick_directory(tmp_path):
    import subprocess
    import sys

    from fa2lab import protocol
    from fa2lab.paths import REPO
    from fa2triton import versions

    code = "from fa2triton.buckets import PickCache; print(PickCache('v5_final').directory())"
    env = protocol.version_env(versions.get("v5_final"), TRITON_INTERPRET="0", XDG_CACHE_HOME=str(tmp_path))
    without = {k: v for k, v in env.items() if k != buckets.ENV_VAR}
    out = [subprocess.run([sys.executable, "-c", code], env=e, cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip() for e in (env, without)]
    assert out == ["None", str(tmp_path / "fa2lab")]
