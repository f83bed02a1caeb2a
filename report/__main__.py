"""`python -m report`: write REPORT.md and docs/report/ (and README's block with --readme)."""

import sys

from report.build import main

sys.exit(main())
