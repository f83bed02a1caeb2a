"""The commit a row carries when the tree has no .git (the lent GPU machine's copies): FA2_GIT_COMMIT and compare_trees'
FA2_TREE_COMMIT_<LABEL> must be git rev-parse's form, checked before anything is measured (two stops lost rows to a
mistyped one)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from fa2lab import provenance

REPO = Path(__file__).resolve().parent.parent
FULL = "08a21f52462b2f2cb1773c8f3340a0ee8d2fc0c6"


def _compare_trees():
    spec = importlib.util.spec_from_file_location("compare_trees_commit", REPO / "scripts" / "compare_trees.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value", [FULL, FULL[:12], FULL[:12] + "-dirty"])
def test_a_commit_in_git_rev_parse_form_is_taken(monkeypatch, value):
    monkeypatch.setenv("FA2_TREE_COMMIT_X", value)
    assert provenance.commit_from_env("FA2_TREE_COMMIT_X") == value


@pytest.mark.parametrize("value", ["08a21f5c", "9d7eabc0000", FULL.upper(), FULL + "0", "08a21f5-dirty", "HEAD"])
def test_a_short_or_mistyped_commit_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("FA2_TREE_COMMIT_X", value)
    with pytest.raises(ValueError, match=r"^FA2_TREE_COMMIT_X=.* is not a commit"):
        provenance.commit_from_env("FA2_TREE_COMMIT_X")


def test_unset_or_empty_gives_none(monkeypatch):
    monkeypatch.delenv("FA2_TREE_COMMIT_X", raising=False)
    assert provenance.commit_from_env("FA2_TREE_COMMIT_X") is None
    monkeypatch.setenv("FA2_TREE_COMMIT_X", " ")
    assert provenance.commit_from_env("FA2_TREE_COMMIT_X") is None


def test_git_commit_takes_a_passed_commit_and_refuses_a_bad_one(monkeypatch):
    try:
        monkeypatch.setenv("FA2_GIT_COMMIT", FULL)
        provenance.git_commit.cache_clear()
        assert provenance.git_commit() == FULL
        monkeypatch.setenv("FA2_GIT_COMMIT", "08a21f5c")
        provenance.git_commit.cache_clear()
        with pytest.raises(ValueError, match="FA2_GIT_COMMIT"):
            provenance.git_commit()
    finally:
        provenance.git_commit.cache_clear()


def test_a_tree_commit_comes_from_its_variable_this_checkout_or_its_own_git(monkeypatch, tmp_path):
    ct = _compare_trees()
    monkeypatch.delenv("FA2_TREE_COMMIT_OLD", raising=False)
    assert ct.tree_commit("old", REPO, "c0ffeec0ffee") == "c0ffeec0ffee"
    copy = tmp_path / "copy"   # a git archive's copy: no .git, so its commit must be named
    copy.mkdir()
    with pytest.raises(ValueError, match="give its commit as FA2_TREE_COMMIT_OLD"):
        ct.tree_commit("old", copy, "c0ffeec0ffee")
    monkeypatch.setenv("FA2_TREE_COMMIT_OLD", FULL)
    assert ct.tree_commit("old", copy, "c0ffeec0ffee") == FULL
    monkeypatch.delenv("FA2_TREE_COMMIT_OLD")
    checkout = tmp_path / "checkout"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(checkout)]
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert ct.tree_commit("old", checkout, "c0ffeec0ffee") == head[:12]


def test_compare_trees_stops_on_a_bad_tree_commit_before_running_anything(monkeypatch, tmp_path):
    import fa2lab.results

    ct = _compare_trees()
    monkeypatch.setattr(ct.subprocess, "run", lambda *a, **k: pytest.fail("a tree ran"))
    monkeypatch.setattr(provenance, "environment", lambda: {"git_commit": "c0ffeec0ffee", "gpu": "Test GPU"})
    monkeypatch.setattr(fa2lab.results, "gpu_dir", lambda: tmp_path)
    monkeypatch.setenv("FA2_TREE_COMMIT_B", "08a21f5c")
    with pytest.raises(SystemExit, match=r"^compare_trees: FA2_TREE_COMMIT_B='08a21f5c' is not a commit"):
        ct.main(["--tree", f"a={REPO}", "--tree", f"b={REPO}", "--rounds", "1", "--N", "512", "--D", "64"])
    assert not list(tmp_path.rglob("*.csv"))


def test_experiments_and_the_device_batch_refuse_a_bad_commit_first(monkeypatch):
    import experiments
    from experiments import run

    class Never:
        @staticmethod
        def main(argv):
            pytest.fail("the experiment ran")

    monkeypatch.setattr(experiments, "module_of", lambda name: Never)
    monkeypatch.setenv("FA2_GIT_COMMIT", "9d7eabc0000")
    provenance.git_commit.cache_clear()
    try:
        assert run.main(["timing"]) == 2
    finally:
        provenance.git_commit.cache_clear()
    done = subprocess.run(["bash", "scripts/device_batch.sh", "no-such-step"], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ, FA2_GIT_COMMIT="08a21f5c"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "FA2_GIT_COMMIT='08a21f5c' is not a commit: give `git rev-parse HEAD` (40 hex digits, or its first 12 or more)"]


def test_a_measuring_task_refuses_a_bad_commit_before_it_starts(monkeypatch):
    from invoke import Exit

    import tasks

    monkeypatch.setattr(tasks, "has_gpu", lambda: True)
    monkeypatch.setenv("FA2_GIT_COMMIT", "08a21f5c")
    with pytest.raises(Exit, match=r"^invoke bench: FA2_GIT_COMMIT='08a21f5c' is not a commit"):
        tasks._need_gpu("invoke bench", "-")
    monkeypatch.setenv("FA2_GIT_COMMIT", FULL)
    tasks._need_gpu("invoke bench", "-")
