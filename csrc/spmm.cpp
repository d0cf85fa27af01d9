// Schemas of pyg_dist's sparse ops. The CPU kernels live in cpu/spmm_kernel.cpp;
// the autograd formulas are composed in Python (pyg_dist/ops/spmm.py).
#include <torch/library.h>

TORCH_LIBRARY(pyg_dist, m) {
  // out [M, F] (dtype of x) and, for reduce="max", arg [M, F] int64: the CSR
  // position of the first maximal entry of each row, nnz for empty rows. For
  // "sum" and "mean", arg is an empty int64 tensor.
  m.def(
      "spmm_forward(Tensor rowptr, Tensor col, Tensor? value, Tensor x, "
      "Tensor? x_halo, str reduce) -> (Tensor, Tensor)");
  // out[e] = <a[row(e)], s[col[e]]> as float32 [nnz], s = [x ; x_halo].
  m.def("sddmm(Tensor rowptr, Tensor col, Tensor a, Tensor x, Tensor? x_halo) -> Tensor");
}
