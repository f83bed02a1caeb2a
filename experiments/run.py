"""Run one experiment by name: `python experiments/run.py NAME [its options]` (`NAME --help` for them).

The experiments (experiments/__init__.py's registry; each is also experiments/<module>.py with its own main):
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":   # run as a script: the repository, not experiments/, first on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import experiments  # noqa: E402
from fa2lab.provenance import git_commit  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__ + experiments.describe())
        return 0 if argv else 2
    try:
        module = experiments.module_of(argv[0])
        git_commit()   # a malformed FA2_GIT_COMMIT stops here, not after the measurement (its rows stamp it)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return module.main(argv[1:])


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
