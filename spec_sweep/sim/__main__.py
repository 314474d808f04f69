"""Entry point of ``python -m spec_sweep.sim``: run the simulated SGLang node (see ``server``)."""

from __future__ import annotations

from spec_sweep.sim.server import main

if __name__ == "__main__":
    raise SystemExit(main())
