import os
import sys

import torch

# Without CUDA, Triton kernels run on the CPU through Triton's interpreter. The
# flag must be set before pyg_dist (and with it Triton's kernels) is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))
