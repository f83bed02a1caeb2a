"""The lab's scripts end an expected failure with one line (fa2lab.cli.run), and the tasks add nothing after it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fa2lab import cli

REPO = Path(__file__).resolve().parent.parent
LAB_FOLDERS = ("fa2lab", "harness", "sweeps", "profiling", "figures", "report", "experiments", "scripts")


def _exit(main, capsys):
    with pytest.raises(SystemExit) as e:
        cli.run(main)
    return e.value.code, capsys.readouterr().err


def _bad_config():
    raise ValueError("a configuration is\n  'Q,K,W,S'")


def test_an_expected_error_is_one_line_with_its_place(capsys):
    code, err = _exit(_bad_config, capsys)
    line = f"{Path(sys.argv[0]).name}: a configuration is 'Q,K,W,S' (test_cli.py:"
    assert code == cli.USAGE_EXIT and err.startswith(line) and err.count("\n") == 1


@pytest.mark.parametrize("error,code", [(FileNotFoundError("results/x.csv"), cli.USAGE_EXIT),
                                        (PermissionError("results/"), cli.USAGE_EXIT),
                                        (KeyboardInterrupt(), cli.INTERRUPT_EXIT)])
def test_missing_files_and_ctrl_c_are_one_line(error, code, capsys):
    def main():
        raise error

    got, err = _exit(main, capsys)
    assert got == code and err.count("\n") == 1


def test_a_bug_keeps_its_traceback_and_a_return_code_passes_through(capsys):
    def bug():
        raise RuntimeError("index out of range")

    with pytest.raises(RuntimeError):
        cli.run(bug)
    assert _exit(lambda: 3, capsys)[0] == 3 and _exit(lambda: None, capsys)[0] is None


def _main_blocks():
    """(path, the statements its `if __name__ == "__main__":` blocks run, or a __main__.py's own) for every lab
    file with any."""
    for folder in LAB_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            body = [s for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
                    for s in node.body]
            body += [node for node in tree.body if path.name == "__main__.py" and isinstance(node, ast.Expr)]
            if body:
                yield path, body


def test_every_lab_script_ends_through_cli_run():
    blocks = list(_main_blocks())
    assert len(blocks) >= 40
    bad = [str(p.relative_to(REPO)) for p, body in blocks if "cli.run(main)" not in [ast.unparse(s) for s in body]]
    assert not bad, bad


def test_a_script_and_its_task_name_a_bad_configuration_in_one_line():
    script = subprocess.run([sys.executable, "profiling/inspect_kernel.py", "--kernel", "v1_tiles", "--config", "64,32"],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert script.returncode == cli.USAGE_EXIT, script.stderr
    assert re.fullmatch(r"inspect_kernel\.py: a configuration is 'Q_TILE,K_TILE,WARPS,STAGES', got '64,32' "
                        r"\(budget\.py:\d+\)\n", script.stderr), script.stderr
    task = subprocess.run([sys.executable, "-m", "invoke", "inspect", "--kernel", "v1_tiles", "--config", "64,32"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert task.returncode == cli.USAGE_EXIT
    assert task.stderr == script.stderr and "inspect failed" not in task.stdout + task.stderr
