"""scripts/device_batch.sh's steps for issues 47 and 49 (api-host, table-vs-race) run the commands the report's pages
name, under the call's deadline; a stand-in python3 records them instead of measuring (no GPU here)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from report import hostpath, no_regression

REPO = Path(__file__).resolve().parent.parent


def recorded(tmp_path, *phases, **env) -> list[list[str]]:
    """The python3 command lines that `device_batch.sh phases` ran (python3 -c, its arithmetic, runs for real)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {sys.executable} "$@"\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    p = subprocess.run(["bash", "scripts/device_batch.sh", *phases], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                                         "OUT": str(tmp_path / "out"), **env})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "not run:" not in p.stdout
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    return [c for c in calls if c[:2] != ["-m", "pip"]]   # a checkout with .whl/ installs its wheels first


def test_the_two_steps_run_the_pages_commands(tmp_path):
    api_host, table_vs_race = recorded(tmp_path, "api-host", "table-vs-race")
    assert api_host == ["profiling/host_steps.py", "--kernel", "v7_hopper", "--N", "512", "1024", "2048", "4096",
                        "--steps", "sdpa,apply,attention,flash_attn_func", "--repeats", "7"]
    # what the host-path page asks for (through invoke), and the no-regression page's command as it is
    task = shlex.split(hostpath.API_TASK)
    assert task[task.index("--steps") + 1] == api_host[api_host.index("--steps") + 1]
    assert table_vs_race == shlex.split(no_regression.LAUNCH_TASK)[1:] + ["--first-round", "1"]


def test_the_steps_take_their_settings(tmp_path):
    api_host, table_vs_race = recorded(tmp_path, "api-host,table-vs-race", API_HOST_NS="512", API_HOST_REPEATS="9",
                                       TABLE_RACE_ROUNDS="1", TABLE_RACE_FIRST="3")
    assert api_host[api_host.index("--N") + 1:api_host.index("--steps")] == ["512"] and api_host[-1] == "9"
    assert table_vs_race[-4:] == ["--rounds", "1", "--first-round", "3"]


def test_bwd_host_runs_the_backward_page_s_command(tmp_path):
    """Issue 48's step: the host-path page's backward command (through invoke), and its settings."""
    (tmp_path / "b").mkdir()
    (bwd,), (short,) = recorded(tmp_path, "bwd-host"), recorded(tmp_path / "b", "bwd-host", BWD_HOST_NS="1024",
                                                                BWD_HOST_REPEATS="3")
    task = shlex.split(hostpath.BACKWARD_TASK)
    assert bwd[bwd.index("--steps") + 1] == task[task.index("--steps") + 1]
    assert bwd[bwd.index("--N") + 1:bwd.index("--steps")] == task[task.index("--N") + 1].split(",")
    assert bwd[:3] == ["profiling/host_steps.py", "--kernel", "v7_hopper"] and bwd[-2:] == ["--repeats", "7"]
    assert short[short.index("--N") + 1:short.index("--steps")] == ["1024"] and short[-1] == "3"


def test_host_trees_compares_an_older_checkout_by_host_steps(tmp_path):
    """Issue 48's before/after step: compare_trees --mode host against the folder HOST_TREES_BEFORE names, with its
    commit for the rows; without a folder it is refused by name, not run."""
    before = tmp_path / "old"
    before.mkdir()
    (cmd,) = recorded(tmp_path, "host-trees", HOST_TREES_BEFORE=str(before), HOST_TREES_NS="1024",
                      HOST_TREES_ROUNDS="2")
    assert cmd == ["scripts/compare_trees.py", "--mode", "host", "--tree", f"before={before}", "--tree", "after=.",
                   "--N", "1024", "--rounds", "2"]
    (tmp_path / "b").mkdir()
    p = subprocess.run(["bash", "scripts/device_batch.sh", "host-trees"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OUT": str(tmp_path / "b"), "HOST_TREES_BEFORE": ""})
    assert "step host-trees not run" in p.stdout and "HOST_TREES_BEFORE must name" in p.stderr
