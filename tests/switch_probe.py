"""A kernel switch read by a fresh process: the lab applies the FA2_V7_* switches when it first loads a version
(fa2lab.switches.load), so the tests that check their defaults and their effect load it again in a new interpreter."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def probe(code: str, **switches: str) -> str:
    """The last line `code` prints, run from the repository root with no FA2_V7_* variable set but `switches`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA2_V7_")}
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, **switches}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (switches, p.stderr[-2000:])
    return p.stdout.strip().splitlines()[-1]
