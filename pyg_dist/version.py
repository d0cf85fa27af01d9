"""The version of pyg_dist (kept equal to ``pyproject.toml``'s)."""

__version__ = "0.1.0"
