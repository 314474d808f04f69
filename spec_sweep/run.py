"""`python -m spec_sweep.run SWEEP.yaml [options]`: the same as `spec-sweep run`.

A thin entry point: everything lives in `spec_sweep.cli`.
"""

from __future__ import annotations

import sys

from spec_sweep.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
