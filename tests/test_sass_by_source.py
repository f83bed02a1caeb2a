"""profiling/sass_by_source.py: SASS instructions attributed to the Python function their line info names."""

from collections import Counter

from profiling import sass_by_source as S

SRC = __file__


def _helper():   # a function whose lines the synthetic SASS below points into
    return 1


def test_instructions_go_to_the_function_holding_their_line():
    line = _helper.__code__.co_firstlineno + 1
    sass = "\n".join([
        f'\t//## File "{SRC}", line {line}',
        "        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, R2 ;",
        "        /*0010*/                   UIADD3 UR4, UR4, 0x1, URZ ;",
        '\t//## File "/x/site-packages/triton/language/standard.py", line 287',
        "        /*0020*/               @P0 BAR.SYNC.DEFER_BLOCKING 0x0 ;",
        "        /*0030*/                   R2UR UR5, R3 ;",
    ])
    got = S.attribute(sass)
    mine = got["test_sass_by_source.py:_helper"]
    assert (mine[""], mine["IMAD.MOV"], mine["uniform"], mine["BAR"]) == (2, 1, 1, 0)
    lib = got["triton/standard.py"]
    assert (lib[""], lib["BAR"], lib["uniform"]) == (2, 1, 1)


def test_the_table_shows_a_change_as_an_arrow_and_sums_every_function():
    a = {"f": Counter({"": 10, "IMAD.MOV": 1}), "g": Counter({"": 5})}
    b = {"f": Counter({"": 12, "IMAD.MOV": 3}), "g": Counter({"": 5})}
    text = S.table(a, b, ("3.6", "3.9"), top=5)
    assert "| `f` | 10 → 12 |" in text and "| `g` | 5 |" in text
    assert "| all | 15 → 17 |" in text
