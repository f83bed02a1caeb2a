"""`python -m report`: write REPORT.md and docs/report/ (and README's block with --readme)."""

from fa2lab import cli
from report.build import main

cli.run(main)
