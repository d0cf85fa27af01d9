"""``python -m pyg_dist.testing.cluster``."""
from pyg_dist.testing.cluster.cli import main

raise SystemExit(main())
