"""`python -m spec_sweep ...`: the same as the `spec-sweep` console script."""

from __future__ import annotations

import sys

from spec_sweep.cli import main

if __name__ == "__main__":
    sys.exit(main())
