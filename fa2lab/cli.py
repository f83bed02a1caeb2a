"""The lab's command-line entry: a script's main() run so that an expected failure reads as one line, not a traceback.

    if __name__ == "__main__":
        from fa2lab import cli
        cli.run(main)

Expected failures are what a user's input or the state of results/ causes: ValueError (a bad option, shape or
configuration: the runtime's own checks raise it) and OSError (a results file not written yet, a folder not
writable). Each exits 2 with `<script>: <message> (<file>:<line>)`, the place the error was raised, so a
developer still knows where to look. Ctrl-C exits 130 with one line. Anything else keeps Python's traceback: it is a
bug, and the traceback is what fixes it. A script whose main() returns an exit code keeps it.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Callable, NoReturn

EXPECTED = (ValueError, OSError)
USAGE_EXIT, INTERRUPT_EXIT = 2, 130


def one_line(error: BaseException) -> str:
    """The error's message on one line, with the file and line where it was raised (its innermost frame)."""
    message = " ".join(str(error).split()) or type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        message += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return message


def run(main: Callable[[], int | None]) -> NoReturn:
    """sys.exit(main()), with the expected failures as one line on stderr (exit 2) and Ctrl-C as one (exit 130)."""
    prog = Path(sys.argv[0]).name
    try:
        code = main()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(INTERRUPT_EXIT)
    except EXPECTED as e:
        print(f"{prog}: {one_line(e)}", file=sys.stderr)
        sys.exit(USAGE_EXIT)
    sys.exit(code)
