// Schemas of pyg_dist's GAT attention kernels. The CPU kernels live in
// cpu/gat_kernel.cpp; the autograd formulas are composed in Python
// (pyg_dist/ops/gat.py). x and x_halo are [N, H, C] and [Hh, H, C], the scores
// [*, H] in any float dtype, edge_scale [nnz, H]; every score, sum and
// gradient of a score is float32.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_dist, m) {
  // out [M, H, C] (dtype of x): per row and head, the softmax over the row's
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
