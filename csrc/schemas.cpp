// Schemas of pyg_dist's ops, in one file: torch/library.h is most of a
// schema file's compile time (one file: about 7 s of CPU less per build). The
// CPU kernels live in cpu/spmm_kernel.cpp and cpu/gat_kernel.cpp; the autograd
// formulas are composed in Python (pyg_dist/ops/spmm.py, pyg_dist/ops/gat.py).
#include <torch/library.h>

TORCH_LIBRARY(pyg_dist, m) {
  // SpMM: out [M, F] (dtype of x) and, for reduce="max", arg [M, F] int64: the CSR
  // position of the first maximal entry of each row, nnz for empty rows. For
  // "sum" and "mean", arg is an empty int64 tensor.
  m.def(
      "spmm_forward(Tensor rowptr, Tensor col, Tensor? value, Tensor x, "
      "Tensor? x_halo, str reduce) -> (Tensor, Tensor)");
  // out[e] = <a[row(e)], s[col[e]]> as float32 [nnz], s = [x ; x_halo].
  m.def("sddmm(Tensor rowptr, Tensor col, Tensor a, Tensor x, Tensor? x_halo) -> Tensor");

  // GAT attention: x and x_halo are [N, H, C] and [Hh, H, C], the scores [*, H]
  // in any float dtype, edge_scale [nnz, H]; every score, sum and gradient of a
  // score is float32. out [M, H, C] (dtype of x): per row and head, the softmax over the row's
  // entries of leaky_relu(alpha_src[col] + alpha_dst[row] + alpha_edge) times
  // edge_scale, weighting s[col] = [x ; x_halo][col]; lse [M, H] float32, each
  // row's log-sum-exp of its scores (0 for empty rows).
  m.def(
      "gat_forward(Tensor rowptr, Tensor col, Tensor x, Tensor? x_halo, Tensor alpha_src, "
      "Tensor? alpha_src_halo, Tensor alpha_dst, Tensor? alpha_edge, Tensor? edge_scale, "
      "float negative_slope) -> (Tensor out, Tensor lse)");
  // The row-side backward pass: the gradient of each entry's score before the
  // leaky ReLU, dz [nnz, H], and its row sums, grad_alpha_dst [M, H].
  m.def(
      "gat_backward_rows(Tensor rowptr, Tensor col, Tensor x, Tensor? x_halo, Tensor alpha_src, "
      "Tensor? alpha_src_halo, Tensor alpha_dst, Tensor? alpha_edge, Tensor? edge_scale, "
      "Tensor lse, Tensor grad_out, float negative_slope) -> (Tensor dz, Tensor grad_alpha_dst)");
  // The source-side backward pass over the transposed graph (colptr, row, perm
  // of pyg_dist.ops.csr_transpose): grad_src [N + Hh, H, C] (dtype of grad_out;
  // empty unless need_src) and, when dz is given, its column sums
  // grad_alpha_src [N + Hh, H] (else empty).
  m.def(
      "gat_backward_sources(Tensor colptr, Tensor row, Tensor perm, Tensor alpha_src, "
      "Tensor? alpha_src_halo, Tensor alpha_dst, Tensor? alpha_edge, Tensor? edge_scale, "
      "Tensor lse, Tensor grad_out, Tensor? dz, bool need_src, float negative_slope) "
      "-> (Tensor grad_src, Tensor grad_alpha_src)");
}
