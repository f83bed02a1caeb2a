"""The registry's round labels: one scheme (fa2triton.versions.ROUNDS) that README, REPORT.md and the figures print."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fa2triton import versions

REPO = Path(__file__).resolve().parent.parent


def test_every_version_has_a_known_round_label_in_the_article_order():
    order = {label: i for i, label in enumerate(versions.ROUND_LABELS)}
    ranks = [order[v.round_label] for v in versions.VERSIONS]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert [v.round_label for v in versions.VERSIONS if not v.beyond_article] == ["0", "1", "3", "4a", "4b", "5"]


def test_round_label_agrees_with_the_integer_round():
    for v in versions.VERSIONS:
        assert v.round_label.removeprefix("beyond: ").rstrip("ab") == str(v.round), v.name


def test_an_unknown_round_label_is_a_clear_error():
    with pytest.raises(ValueError, match="round_label '4c'"):
        replace(versions.get("v4_exp2"), round_label="4c")


def test_list_versions_prints_every_round_and_version():
    out = subprocess.run([sys.executable, "-m", "invoke", "list-versions"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    rows = [line.split()[0] if not line.startswith("beyond") else " ".join(line.split()[:2]) for line in out[1:]]
    assert rows == list(versions.ROUND_LABELS)
    for v in versions.VERSIONS:
        assert any(v.name in line and line.startswith(v.round_label) for line in out), v.name
