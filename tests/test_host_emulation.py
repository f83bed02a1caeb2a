"""profiling/host_emulation.py on this machine's CPU: each recorded launch of v7 (the tl and Gluon forwards, the
warp-specialized Gluon backward), its kernels compiled for sm_90 and launched through this Triton's own launcher over
the stub libcuda, gets its DirectLauncher, and a repeat whose tensors take freed buffers' places encodes no
descriptor (a descriptor that kept its base made every tl repeat encode O again)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: invoke host-steps times it")]


def _run(tmp_path, *extra):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # a compiled kernel, not the interpreter
    return subprocess.run([sys.executable, "profiling/host_emulation.py", "--N", "128", "--heads", "2", "--calls",
                           "200", "--rounds", "1", "--stub-dir", str(tmp_path), *extra],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


@pytest.mark.parametrize("path", ["tl", "gluon", "bwd-ws"])
def test_a_repeat_launches_directly_and_encodes_no_descriptor(tmp_path, path):
    out = _run(tmp_path, "--path", path, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("{")))
    assert row["path"] == path and row["label"]
    assert row["direct"], f"the {path} launch fell back to Triton's launcher"
    assert row["encodes_per_repeat"] == 0
    assert row["us_median"] > 0 and row["triton"]


def test_a_wrong_label_is_one_line_naming_the_candidates(tmp_path):
    out = _run(tmp_path, "--label", "1,2,3,4")
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("host emulation: --label '1,2,3,4'")
    assert "64,64,4,3/p0" in out.stderr


def test_a_tree_without_fa2triton_is_one_line(tmp_path):
    out = _run(tmp_path, "--tree", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"host emulation: --tree {tmp_path / 'nowhere'} has no fa2triton/lean_path.py"]


HOOKED = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
import profiling.host_emulation as he
he.activate(he.build_stub(Path({stub!r})))
from triton import knobs
for path in ("tl", "gluon", "bwd-ws"):
    repeat = he.REPEATS[path](128, 64, True, None, 2, True)[0]
    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        for _ in range(3):
            repeat()
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    print(path, len(seen))
"""


def test_with_a_launch_hook_each_repeat_goes_through_tritons_launcher(tmp_path):
    """A registered launch hook (a profiler's) sends every recorded launch through Triton's own launcher, which
    reads each descriptor's base: the templates' copies over the call's tensors must launch, and the hook must see
    each repeat."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", HOOKED.format(repo=str(REPO), stub=str(tmp_path))],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [ln for ln in out.stdout.splitlines() if ln[:1].isalpha()] == ["tl 3", "gluon 3", "bwd-ws 3"]
