"""``python -m pyg_dist.cli``: the ``pyg-dist`` command."""
from pyg_dist.cli import main

raise SystemExit(main())
