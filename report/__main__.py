"""`python -m figures.report`: write RESULTS.md and docs/results/ (and README's block with --readme)."""

import sys

from figures.report.build import main

sys.exit(main())
