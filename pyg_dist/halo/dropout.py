"""The former home of :mod:`pyg_dist.dropout`, kept so that imports written
for it (``from pyg_dist.halo.dropout import ...``) work for one more release.
Users call :func:`pyg_dist.nn.dropout`; the package imports :mod:`pyg_dist.dropout`."""
from pyg_dist.dropout import DropoutState, DroppedInput, dropout, dropped_input, shared_scale

__all__ = ["dropout", "DroppedInput", "dropped_input", "DropoutState", "shared_scale"]
