"""The CI subset of the non-square causal check, for every version (issue 6)."""

import pytest

from fa2lab.nonsquare import cases, check_version, explicit_configs
from fa2triton.versions import NAMES, get


@pytest.mark.parametrize("name", NAMES)
def test_nonsquare_causal_quick_subset(name):
    counts, rows = check_version(name, quick=True)
    expected = len(cases(True)) * (1 + len(explicit_configs(get(name).round >= 4, True)))
    assert len(rows) == expected
    assert counts["failed"] == 0, [r for r in rows if r["status"] == "failed"]
    assert counts["passed"] == expected   # the subset fits any GPU's shared memory, and the interpreter has none


def test_brief_autotuning_swaps_the_benchmark_only_while_checking():
    """The check times an autotuned version's candidates briefly (correctness, not selection), and gives
    the autotuner its own benchmark back afterwards, also when a case raises."""
    import pytest

    from fa2triton.interpret import autotuner_of
    from fa2lab.nonsquare import brief_autotuning
    from fa2triton.versions import load

    tuner = autotuner_of(load("v5_final"))
    kept = tuner.__dict__.pop("do_bench", None)   # another test in this process may have autotuned v5 already
    try:
        with brief_autotuning(tuner):
            brief = tuner.do_bench                    # what Autotuner._bench calls
            assert callable(brief) and tuner.__dict__["do_bench"] is brief
        assert "do_bench" not in tuner.__dict__       # unset again: the first real autotuning fills it
        own = object()
        tuner.__dict__["do_bench"] = own              # as after an autotuning (functools.cached_property)
        with pytest.raises(RuntimeError):
            with brief_autotuning(tuner):
                assert tuner.do_bench is not own
                raise RuntimeError("a case crashed")
        assert tuner.do_bench is own
    finally:
        tuner.__dict__.pop("do_bench", None)
        if kept is not None:
            tuner.__dict__["do_bench"] = kept
    with brief_autotuning(None):   # a version without an autotuner: nothing to swap
        pass


def test_shards_partition_the_cases_and_skip_resumes():
    """check_version's shards cover every case exactly once, and the keys in `skip` are not run
    again (how --jobs splits a version and how a cut run resumes)."""
    from fa2lab.nonsquare import case_key

    _, full = check_version("v0_baseline", quick=True)
    parts = [check_version("v0_baseline", quick=True, shard=(i, 3))[1] for i in range(3)]
    keys = [case_key(r) for p in parts for r in p]
    assert sorted(keys) == sorted(case_key(r) for r in full) and len(set(keys)) == len(keys)
    skip = frozenset(case_key(r) for r in full[:5])
    counts, rest = check_version("v0_baseline", quick=True, skip=skip)
    assert len(rest) == len(full) - 5 and not skip & {case_key(r) for r in rest}
    assert sum(counts.values()) == len(rest)
