"""The CI subset of the non-square causal check, for every version (issue 6)."""

import pytest

from fa2lab.nonsquare import cases, check_version, explicit_configs
from fa2lab.versions import NAMES, get


@pytest.mark.parametrize("name", NAMES)
def test_nonsquare_causal_quick_subset(name):
    counts, rows = check_version(name, quick=True)
    expected = len(cases(True)) * (1 + len(explicit_configs(get(name).round >= 4, True)))
    assert len(rows) == expected
    assert counts["failed"] == 0, [r for r in rows if r["status"] == "failed"]
    assert counts["passed"] == expected   # the subset fits any GPU's shared memory, and the interpreter has none
