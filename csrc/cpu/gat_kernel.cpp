// CPU kernels of pyg_dist::gat_forward, gat_backward_rows and
// gat_backward_sources (schemas in ../gat.cpp).
//
// Rows are scheduled as the SpMM kernels schedule them (common.h): tasks of
// about equal work, each row computed by one thread, every output written
// once, no atomics. Per row, the scores of its entries (H per entry) go into a
// thread-local buffer once; the softmax is taken there in float32 (maximum,
// exponentials, sum), and the features are then aggregated in register tiles
// (several narrow heads, or C features of one head, at a time). Columns below
// x.size(0) read x and alpha_src, the others x_halo and alpha_src_halo, in
// place.
//
// Backward recomputes each coefficient as exp(z - lse) from the saved per-row
// log-sum-exp. The row pass computes g = edge_scale * <grad_out_i, s_col> per
// entry and head, then dz = a (g - sum_row a g) times the leaky ReLU's slope
// (two sweeps over the row, g kept in dz meanwhile) and the row sums of dz.
// The source pass walks the transposed graph: per source, the sum of dz over
// its out-edges and the sum of a * edge_scale * grad_out of their targets.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "common.h"

namespace pyg_dist {
namespace {

using namespace cpu;  // the shared helpers of common.h

// exp(x) in float32 without a library call, so that the loops over heads
// vectorise (glibc's expf is one call per element, and 8M calls took about as
// long as the rest of a forward pass with 8 heads): x = n ln2 + r with
// |r| <= ln2 / 2, exp(r) by Cephes' polynomial (relative error below 2e-7),
// 2^n through the exponent bits. Arguments are clamped to [-87, 88], so a
// coefficient more than 87 below its row's maximum score weighs 1.6e-38
// instead of less.
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  x = std::min(std::max(x, -87.f), 88.f);
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float leaky_relu(float z, float negative_slope) { return z > 0.f ? z : z * negative_slope; }

// The scores as float32, the halo's read in place.
struct Scores {
  Source<float> src;   // [num_src, H]: alpha_src ; alpha_src_halo
  const float* dst;    // [M, H]
  const float* edge;   // [nnz, H], or nullptr
  const float* scale;  // [nnz, H], or nullptr (all ones)
  int64_t heads;
  float slope;

  // The score of entry e (target i, source c) before the leaky ReLU, per head.
  void pre(int64_t i, int64_t c, int64_t e, float* __restrict out) const {
    const float* s = src.row(c);
    const float* d = dst + i * heads;
    for (int64_t h = 0; h < heads; ++h) out[h] = s[h] + d[h];
    if (edge != nullptr) {
      for (int64_t h = 0; h < heads; ++h) out[h] += edge[e * heads + h];
    }
  }
  // pre() of the entries [begin, end) of row i, into out[(e - begin) * heads + h].
  template <typename index_t>
  void pre_row(int64_t i, const index_t* col, int64_t begin, int64_t end,
               float* __restrict out) const {
    for (int64_t e = begin; e < end; ++e) pre(i, col[e], e, out + (e - begin) * heads);
  }
  // out = exp(leaky(pre) - lse_row) for the H scores of one entry of a row
  // whose log-sum-exp is lse_row: its coefficients, recomputed.
  void coefficients(const float* __restrict pre, const float* __restrict lse_row,
                    float* __restrict out) const {
    const float negative_slope = slope;  // a local: out might alias a member otherwise
    for (int64_t h = 0, n = heads; h < n; ++h) {
      out[h] = fast_exp(leaky_relu(pre[h], negative_slope) - lse_row[h]);
    }
  }
  // Multiplies the H values of entry e by its edge_scale.
  void apply_scale(int64_t e, float* __restrict values) const {
    if (scale == nullptr) return;
    for (int64_t h = 0; h < heads; ++h) values[h] *= scale[e * heads + h];
  }
  float slope_at(float z) const { return z > 0.f ? 1.f : slope; }
};

// Asks for the feature rows that row i + 1 of the CSR a reads (and, for the
// first row of a task, row i's own), while row i is computed: the loops that
// read them do enough arithmetic per entry (scores, exponentials, dot products
// per head) that the processor does not look far enough ahead to overlap
// their cache misses by itself.
template <typename scalar_t, typename index_t>
inline void prefetch_next_row(const Csr<index_t>& a, const Source<scalar_t>& s, int64_t i,
                              int64_t row_begin, int64_t row_end) {
  constexpr int64_t kLine = 64;
  const int64_t bytes = s.feats * static_cast<int64_t>(sizeof(scalar_t));
  const int64_t first = i == row_begin ? i : i + 1, last = std::min(i + 2, row_end);
  if (first >= last) return;
  for (int64_t e = a.rowptr[first]; e < a.rowptr[last]; ++e) {
    const char* row = reinterpret_cast<const char*>(s.row(a.col[e]));
    for (int64_t offset = 0; offset < bytes; offset += kLine) __builtin_prefetch(row + offset);
  }
}

// Softmax of each column h of z [degree, heads] (scores after the leaky
// ReLU), in place: best[h] is the column's maximum, z becomes exp(z - best)
// and total[h] its column sum. Each loop keeps its running value in a
// register (a maximum or sum indexed by h through memory would chain every
// entry to the previous one).
inline void exp_columns(float* __restrict z, int64_t degree, int64_t heads, float* best,
                        float* total) {
  for (int64_t h = 0; h < heads; ++h) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < degree; ++k) m = std::max(m, z[k * heads + h]);
    best[h] = m;
  }
  for (int64_t k = 0; k < degree; ++k) {
    for (int64_t h = 0; h < heads; ++h) z[k * heads + h] = fast_exp(z[k * heads + h] - best[h]);
  }
  for (int64_t h = 0; h < heads; ++h) {
    float sum = 0.f;
    for (int64_t k = 0; k < degree; ++k) sum += z[k * heads + h];
    total[h] = sum;
  }
}

// out[offset + f] = sum_e coef[(e - begin) * heads + h] * s[col[e]][offset + f]
// for the n features of one tile of head h (offset = h * C + f0).
template <int64_t T, bool Full, typename scalar_t, typename index_t>
inline void weighted_tile(const index_t* col, const Source<scalar_t>& s, int64_t begin,
                          int64_t end, const float* coef, int64_t heads, int64_t h,
                          int64_t offset, int64_t width, scalar_t* __restrict out_row) {
  const int64_t n = Full ? T : width;
  float acc[T] = {};
  for (int64_t e = begin; e < end; ++e) {
    const scalar_t* __restrict src = s.row(col[e]) + offset;
    const float w = coef[(e - begin) * heads + h];
#pragma GCC unroll 64
    for (int64_t f = 0; f < n; ++f) acc[f] += w * static_cast<float>(src[f]);
  }
  for (int64_t f = 0; f < n; ++f) out_row[offset + f] = static_cast<scalar_t>(acc[f]);
}

// The same for the kTile / C heads [h0, h0 + kTile / C) of width C at once:
// one walk over the row fills a register tile of kTile features, each entry's
// coefficient broadcast over its head's C features.
template <int64_t C, typename scalar_t, typename index_t>
inline void head_group_tile(const index_t* col, const Source<scalar_t>& s, int64_t begin,
                            int64_t end, const float* coef, int64_t heads, int64_t h0,
                            scalar_t* __restrict out_row) {
  constexpr int64_t kHeads = kTile / C;
  float acc[kTile] = {};
  for (int64_t e = begin; e < end; ++e) {
    const scalar_t* __restrict src = s.row(col[e]) + h0 * C;
    const float* w = coef + (e - begin) * heads + h0;
#pragma GCC unroll 8
    for (int64_t g = 0; g < kHeads; ++g) {
#pragma GCC unroll 64
      for (int64_t c = 0; c < C; ++c) acc[g * C + c] += w[g] * static_cast<float>(src[g * C + c]);
    }
  }
  for (int64_t f = 0; f < kTile; ++f) out_row[h0 * C + f] = static_cast<scalar_t>(acc[f]);
}

// head_group_tile over as many whole groups of heads as fit; returns the
// first head left over.
template <int64_t C, typename scalar_t, typename index_t>
inline int64_t aggregate_head_groups(const index_t* col, const Source<scalar_t>& s,
                                     int64_t begin, int64_t end, const float* coef,
                                     int64_t heads, scalar_t* out_row) {
  int64_t h0 = 0;
  for (; h0 + kTile / C <= heads; h0 += kTile / C) {
    head_group_tile<C>(col, s, begin, end, coef, heads, h0, out_row);
  }
  return h0;
}

// Row i of the output: sum_e coef[e, h] * s[col[e], h, :] for every head.
// Narrow heads (C = 8, 16, 32) are aggregated several at a time, so that a
// row is walked once per kTile features as in the SpMM kernel; the others
// (and heads left over) one at a time.
template <typename scalar_t, typename index_t>
inline void aggregate_heads(const index_t* col, const Source<scalar_t>& s, int64_t begin,
                            int64_t end, const float* coef, int64_t heads, int64_t channels,
                            scalar_t* out_row) {
  int64_t first = 0;
  if (channels == 8) {
    first = aggregate_head_groups<8>(col, s, begin, end, coef, heads, out_row);
  } else if (channels == 16) {
    first = aggregate_head_groups<16>(col, s, begin, end, coef, heads, out_row);
  } else if (channels == 32) {
    first = aggregate_head_groups<32>(col, s, begin, end, coef, heads, out_row);
  }
  for (int64_t h = first; h < heads; ++h) {
    for_each_tile<kTile>(0, channels, [&](auto tile, auto full, int64_t f0, int64_t width) {
      weighted_tile<tile(), full()>(col, s, begin, end, coef, heads, h, h * channels + f0, width,
                                    out_row);
    });
  }
}

// ------------------------------------------------------------------ forward

template <typename scalar_t, typename index_t>
void forward_rows(const Csr<index_t>& a, const Source<scalar_t>& s, const Scores& sc,
                  int64_t channels, scalar_t* out, float* lse, int64_t row_begin,
                  int64_t row_end) {
  const int64_t heads = sc.heads;
  std::vector<float> coef, best(heads), total(heads);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1], degree = end - begin;
    coef.resize(degree * heads);
    prefetch_next_row(a, s, i, row_begin, row_end);
    sc.pre_row(i, a.col, begin, end, coef.data());
    for (int64_t k = 0; k < degree * heads; ++k) coef[k] = leaky_relu(coef[k], sc.slope);
    exp_columns(coef.data(), degree, heads, best.data(), total.data());
    for (int64_t h = 0; h < heads; ++h) {
      lse[i * heads + h] = degree > 0 ? best[h] + std::log(total[h]) : 0.f;
      total[h] = degree > 0 ? 1.f / total[h] : 0.f;  // now the normaliser
    }
    for (int64_t k = 0; k < degree; ++k) {
      for (int64_t h = 0; h < heads; ++h) coef[k * heads + h] *= total[h];
      sc.apply_scale(begin + k, coef.data() + k * heads);
    }
    aggregate_heads(a.col, s, begin, end, coef.data(), heads, channels,
                    out + i * heads * channels);
  }
}

// ----------------------------------------------------------------- backward

// dz [nnz, H] and grad_dst [M, H] for rows [row_begin, row_end).
template <typename scalar_t, typename index_t>
void score_grad_rows(const Csr<index_t>& a, const Source<scalar_t>& s, const Scores& sc,
                     int64_t channels, const float* lse, const scalar_t* grad_out, float* dz,
                     float* grad_dst, int64_t row_begin, int64_t row_end) {
  const int64_t heads = sc.heads, feats = heads * channels;
  std::vector<float> pre, coef, go(feats);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1], degree = end - begin;
    pre.resize(degree * heads);
    coef.resize(degree * heads);
    prefetch_next_row(a, s, i, row_begin, row_end);
    sc.pre_row(i, a.col, begin, end, pre.data());
    for (int64_t k = 0; k < degree; ++k) {
      sc.coefficients(pre.data() + k * heads, lse + i * heads, coef.data() + k * heads);
    }
    for (int64_t f = 0; f < feats; ++f) go[f] = static_cast<float>(grad_out[i * feats + f]);
    float* __restrict g = dz + begin * heads;  // g, until the second sweep
    for (int64_t k = 0; k < degree; ++k) {
      const scalar_t* src = s.row(a.col[begin + k]);
      for (int64_t h = 0; h < heads; ++h) {
        g[k * heads + h] = dot(go.data() + h * channels, src + h * channels, channels);
      }
      sc.apply_scale(begin + k, g + k * heads);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float weighted = 0.f;  // sum_row a g
      for (int64_t k = 0; k < degree; ++k) weighted += coef[k * heads + h] * g[k * heads + h];
      float sum_dz = 0.f;
      for (int64_t k = 0; k < degree; ++k) {
        const int64_t kh = k * heads + h;
        g[kh] = coef[kh] * (g[kh] - weighted) * sc.slope_at(pre[kh]);
        sum_dz += g[kh];
      }
      grad_dst[i * heads + h] = sum_dz;
    }
  }
}

// grad_src [num_src, H, C] (if need_src) and grad_alpha_src [num_src, H] (if
// need_alpha_src, from dz) for the sources [row_begin, row_end) of the
// transposed graph t. (Pointers into empty tensors may be null: the flags say
// what to compute.)
template <typename scalar_t, typename index_t>
void source_grad_rows(const Csr<index_t>& t, const int64_t* perm, const Source<scalar_t>& go,
                      const Scores& sc, int64_t channels, const float* lse, const float* dz,
                      bool need_src, bool need_alpha_src, scalar_t* grad_src,
                      float* grad_alpha_src, int64_t row_begin, int64_t row_end) {
  const int64_t heads = sc.heads;
  std::vector<float> pre, coef, sum_dz(heads);
  for (int64_t j = row_begin; j < row_end; ++j) {
    const int64_t begin = t.rowptr[j], end = t.rowptr[j + 1], degree = end - begin;
    if (need_alpha_src) {
      std::fill(sum_dz.begin(), sum_dz.end(), 0.f);
      for (int64_t k = begin; k < end; ++k) {
        for (int64_t h = 0; h < heads; ++h) sum_dz[h] += dz[perm[k] * heads + h];
      }
      std::copy(sum_dz.begin(), sum_dz.end(), grad_alpha_src + j * heads);
    }
    if (!need_src) continue;
    coef.resize(degree * heads);
    pre.resize(degree * heads);
    // Gathers first, arithmetic after: a loop of loads alone keeps many cache
    // misses in flight, one that also computes the exponentials does not.
    prefetch_next_row(t, go, j, row_begin, row_end);
    for (int64_t k = 0; k < degree; ++k) {
      sc.pre(t.col[begin + k], j, perm[begin + k], pre.data() + k * heads);
    }
    for (int64_t k = 0; k < degree; ++k) {
      float* c = coef.data() + k * heads;
      sc.coefficients(pre.data() + k * heads, lse + t.col[begin + k] * heads, c);
      sc.apply_scale(perm[begin + k], c);
    }
    aggregate_heads(t.col, go, begin, end, coef.data(), heads, channels,
                    grad_src + j * heads * channels);
  }
}

// ------------------------------------------------------------------- checks

void check_features(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& x_halo) {
  TORCH_CHECK(x.dim() == 3, op, " expects x of shape [N, H, C] (got ", x.sizes(), ")");
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), op, " expects a floating-point x (got ",
              x.scalar_type(), "); cast it with .float()");
  TORCH_CHECK(x.device().is_cpu(), op, " (CPU kernel) got x on ", x.device(),
              "; move it to the CPU");
  if (!x_halo.has_value()) return;
  TORCH_CHECK(x_halo->dim() == 3 && x_halo->size(1) == x.size(1) && x_halo->size(2) == x.size(2),
              op, " expects x_halo of shape [Hh, ", x.size(1), ", ", x.size(2), "] like x (got ",
              x_halo->sizes(), ")");
  TORCH_CHECK(x_halo->scalar_type() == x.scalar_type(), op, " got x of ", x.scalar_type(),
              " but x_halo of ", x_halo->scalar_type(), "; cast one to the other's dtype");
  TORCH_CHECK(x_halo->device().is_cpu(), op, " (CPU kernel) got x_halo on ", x_halo->device(),
              "; move it to the CPU");
}

// t, checked to be a floating-point CPU matrix [rows, cols], as contiguous float32.
at::Tensor float_matrix(const char* op, const char* name, const at::Tensor& t, int64_t rows,
                        int64_t cols) {
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, op, " expects ", name,
              " of shape [", rows, ", ", cols, "] (got ", t.sizes(), "); check the heads");
  TORCH_CHECK(at::isFloatingType(t.scalar_type()) && t.device().is_cpu(), op,
              " expects a floating-point CPU ", name, " (got ", t.scalar_type(), " on ",
              t.device(), ")");
  return t.to(at::kFloat).contiguous();
}

at::Tensor optional_float_matrix(const char* op, const char* name,
                                 const std::optional<at::Tensor>& t, int64_t rows, int64_t cols) {
  return t.has_value() ? float_matrix(op, name, *t, rows, cols) : at::Tensor();
}

// The score tensors as float32, kept alive for the Scores view of them.
struct ScoreTensors {
  at::Tensor src, halo, dst, edge, scale;

  Scores view(double slope) const {
    const int64_t heads = src.size(1);
    const int64_t num_halo = halo.defined() ? halo.size(0) : 0;
    const Source<float> s{src.data_ptr<float>(), halo.defined() ? halo.data_ptr<float>() : nullptr,
                          src.size(0), src.size(0) + num_halo, heads};
    return {s,
            dst.data_ptr<float>(),
            edge.defined() ? edge.data_ptr<float>() : nullptr,
            scale.defined() ? scale.data_ptr<float>() : nullptr,
            heads,
            static_cast<float>(slope)};
  }
};

ScoreTensors float_scores(const char* op, const at::Tensor& alpha_src,
                          const std::optional<at::Tensor>& alpha_src_halo,
                          const at::Tensor& alpha_dst, const std::optional<at::Tensor>& alpha_edge,
                          const std::optional<at::Tensor>& edge_scale, int64_t num_owned,
                          int64_t heads, int64_t num_rows, int64_t nnz) {
  ScoreTensors t;
  t.src = float_matrix(op, "alpha_src", alpha_src, num_owned, heads);
  if (alpha_src_halo.has_value()) {
    t.halo = float_matrix(op, "alpha_src_halo", *alpha_src_halo, alpha_src_halo->size(0), heads);
  }
  t.dst = float_matrix(op, "alpha_dst", alpha_dst, num_rows, heads);
  t.edge = optional_float_matrix(op, "alpha_edge", alpha_edge, nnz, heads);
  t.scale = optional_float_matrix(op, "edge_scale", edge_scale, nnz, heads);
  return t;
}

void check_halo_pair(const char* op, const std::optional<at::Tensor>& x_halo,
                     const std::optional<at::Tensor>& alpha_src_halo) {
  TORCH_CHECK(x_halo.has_value() == alpha_src_halo.has_value(), op,
              " expects x_halo and alpha_src_halo together (got only ",
              x_halo.has_value() ? "x_halo" : "alpha_src_halo", ")");
  if (x_halo.has_value()) {
    TORCH_CHECK(alpha_src_halo->dim() >= 1 && alpha_src_halo->size(0) == x_halo->size(0), op,
                " expects one row of alpha_src_halo per row of x_halo (got ",
                alpha_src_halo->sizes(), " and ", x_halo->sizes(), ")");
  }
}

// The features [N, H, C] as a source of rows of H * C values.
template <typename scalar_t>
Source<scalar_t> feature_source(const at::Tensor& x, const at::Tensor& x_halo) {
  const int64_t num_halo = x_halo.defined() ? x_halo.size(0) : 0;
  return {x.data_ptr<scalar_t>(), x_halo.defined() ? x_halo.data_ptr<scalar_t>() : nullptr,
          x.size(0), x.size(0) + num_halo, x.size(1) * x.size(2)};
}

// ---------------------------------------------------------------------- ops

std::tuple<at::Tensor, at::Tensor> gat_forward_cpu(
    const at::Tensor& rowptr_in, const at::Tensor& col_in, const at::Tensor& x_in,
    const std::optional<at::Tensor>& x_halo_in, const at::Tensor& alpha_src,
    const std::optional<at::Tensor>& alpha_src_halo, const at::Tensor& alpha_dst,
    const std::optional<at::Tensor>& alpha_edge, const std::optional<at::Tensor>& edge_scale,
    double negative_slope) {
  constexpr const char* op = "pyg_dist::gat_forward";
  check_csr(op, rowptr_in, col_in);
  check_features(op, x_in, x_halo_in);
  check_halo_pair(op, x_halo_in, alpha_src_halo);
  const auto rowptr = rowptr_in.contiguous();
  const auto col = col_in.contiguous();
  const auto x = x_in.contiguous();
  const auto x_halo = x_halo_in.has_value() ? x_halo_in->contiguous() : at::Tensor();
  const int64_t num_rows = rowptr.numel() - 1, heads = x.size(1), channels = x.size(2);
  const auto scores = float_scores(op, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                                   edge_scale, x.size(0), heads, num_rows, col.numel());
  const auto sc = scores.view(negative_slope);

  auto out = at::empty({num_rows, heads, channels}, x.options());
  auto lse = at::empty({num_rows, heads}, x.options().dtype(at::kFloat));
  BadIndexFlag bad;
  int64_t num_src = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), op, [&] {
    AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), op, [&] {
      const auto a = make_csr<index_t>(rowptr, col, at::Tensor());
      check_rowptr(op, a.rowptr, a.num_rows, a.nnz);
      const auto s = feature_source<scalar_t>(x, x_halo);
      num_src = s.num_src;
      auto* out_ptr = out.data_ptr<scalar_t>();
      auto* lse_ptr = lse.data_ptr<float>();
      parallel_over_rows(a, s.feats, s.num_src, bad, [&](int64_t row_begin, int64_t row_end) {
        forward_rows(a, s, sc, channels, out_ptr, lse_ptr, row_begin, row_end);
      });
    });
  });
  check_no_bad_index(op, bad, num_src);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> gat_backward_rows_cpu(
    const at::Tensor& rowptr_in, const at::Tensor& col_in, const at::Tensor& x_in,
    const std::optional<at::Tensor>& x_halo_in, const at::Tensor& alpha_src,
    const std::optional<at::Tensor>& alpha_src_halo, const at::Tensor& alpha_dst,
    const std::optional<at::Tensor>& alpha_edge, const std::optional<at::Tensor>& edge_scale,
    const at::Tensor& lse_in, const at::Tensor& grad_out_in, double negative_slope) {
  constexpr const char* op = "pyg_dist::gat_backward_rows";
  check_csr(op, rowptr_in, col_in);
  check_features(op, x_in, x_halo_in);
  check_halo_pair(op, x_halo_in, alpha_src_halo);
  const auto rowptr = rowptr_in.contiguous();
  const auto col = col_in.contiguous();
  const auto x = x_in.contiguous();
  const auto x_halo = x_halo_in.has_value() ? x_halo_in->contiguous() : at::Tensor();
  const int64_t num_rows = rowptr.numel() - 1, heads = x.size(1), channels = x.size(2);
  const auto scores = float_scores(op, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                                   edge_scale, x.size(0), heads, num_rows, col.numel());
  const auto sc = scores.view(negative_slope);
  const auto lse = float_matrix(op, "lse", lse_in, num_rows, heads);
  TORCH_CHECK(grad_out_in.sizes() == at::IntArrayRef({num_rows, heads, channels}) &&
                  grad_out_in.scalar_type() == x.scalar_type(),
              op, " expects grad_out of shape [", num_rows, ", ", heads, ", ", channels,
              "] in x's dtype (got ", grad_out_in.sizes(), " of ", grad_out_in.scalar_type(), ")");
  const auto grad_out = grad_out_in.contiguous();

  auto dz = at::empty({col.numel(), heads}, x.options().dtype(at::kFloat));
  auto grad_dst = at::empty({num_rows, heads}, x.options().dtype(at::kFloat));
  BadIndexFlag bad;
  int64_t num_src = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), op, [&] {
    AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), op, [&] {
      const auto a = make_csr<index_t>(rowptr, col, at::Tensor());
      check_rowptr(op, a.rowptr, a.num_rows, a.nnz);
      const auto s = feature_source<scalar_t>(x, x_halo);
      num_src = s.num_src;
      const auto* go_ptr = grad_out.data_ptr<scalar_t>();
      auto* dz_ptr = dz.data_ptr<float>();
      auto* dst_ptr = grad_dst.data_ptr<float>();
      const auto* lse_ptr = lse.data_ptr<float>();
      parallel_over_rows(a, s.feats, s.num_src, bad, [&](int64_t row_begin, int64_t row_end) {
        score_grad_rows(a, s, sc, channels, lse_ptr, go_ptr, dz_ptr, dst_ptr, row_begin,
                        row_end);
      });
    });
  });
  check_no_bad_index(op, bad, num_src);
  return {dz, grad_dst};
}

std::tuple<at::Tensor, at::Tensor> gat_backward_sources_cpu(
    const at::Tensor& colptr_in, const at::Tensor& row_in, const at::Tensor& perm_in,
    const at::Tensor& alpha_src, const std::optional<at::Tensor>& alpha_src_halo,
    const at::Tensor& alpha_dst, const std::optional<at::Tensor>& alpha_edge,
    const std::optional<at::Tensor>& edge_scale, const at::Tensor& lse_in,
    const at::Tensor& grad_out_in, const std::optional<at::Tensor>& dz_in, bool need_src,
    double negative_slope) {
  constexpr const char* op = "pyg_dist::gat_backward_sources";
  check_csr(op, colptr_in, row_in);
  const auto colptr = colptr_in.contiguous();
  const auto row = row_in.contiguous();
  const int64_t nnz = row.numel(), num_src = colptr.numel() - 1;
  TORCH_CHECK(grad_out_in.dim() == 3 && at::isFloatingType(grad_out_in.scalar_type()) &&
                  grad_out_in.device().is_cpu(),
              op, " expects a floating-point CPU grad_out of shape [M, H, C] (got ",
              grad_out_in.sizes(), " of ", grad_out_in.scalar_type(), ")");
  const auto grad_out = grad_out_in.contiguous();
  const int64_t num_rows = grad_out.size(0), heads = grad_out.size(1), channels = grad_out.size(2);
  const int64_t num_halo = alpha_src_halo.has_value() ? alpha_src_halo->size(0) : 0;
  TORCH_CHECK(alpha_src.dim() == 2 && alpha_src.size(0) + num_halo == num_src, op,
              " expects alpha_src and alpha_src_halo to have colptr.numel() - 1 = ", num_src,
              " rows together (got ", alpha_src.sizes(), " and ", num_halo, " halo rows)");
  const auto scores = float_scores(op, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                                   edge_scale, alpha_src.size(0), heads, num_rows, nnz);
  const auto sc = scores.view(negative_slope);
  const auto lse = float_matrix(op, "lse", lse_in, num_rows, heads);
  const auto dz = optional_float_matrix(op, "dz", dz_in, nnz, heads);
  TORCH_CHECK(perm_in.dim() == 1 && perm_in.numel() == nnz && perm_in.scalar_type() == at::kLong,
              op, " expects perm as int64 [", nnz, "] (got ", perm_in.sizes(), " of ",
              perm_in.scalar_type(), "); take it from pyg_dist.ops.csr_transpose");
  const auto perm = perm_in.contiguous();
  const auto* perm_ptr = perm.data_ptr<int64_t>();
  const auto in_range = [&](int64_t e) { return e >= 0 && e < nnz; };
  TORCH_CHECK(std::all_of(perm_ptr, perm_ptr + nnz, in_range), op,
              " found a perm entry outside [0, ", nnz,
              "); take it from pyg_dist.ops.csr_transpose");

  auto grad_src = at::empty({need_src ? num_src : 0, heads, channels}, grad_out.options());
  auto grad_alpha_src =
      at::empty({dz.defined() ? num_src : 0, heads}, grad_out.options().dtype(at::kFloat));
  BadIndexFlag bad;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_out.scalar_type(), op, [&] {
    AT_DISPATCH_INDEX_TYPES(colptr.scalar_type(), op, [&] {
      const auto t = make_csr<index_t>(colptr, row, at::Tensor());
      check_rowptr(op, t.rowptr, t.num_rows, t.nnz);
      const Source<scalar_t> go{grad_out.data_ptr<scalar_t>(), nullptr, num_rows, num_rows,
                                heads * channels};
      auto* src_ptr = grad_src.data_ptr<scalar_t>();
      auto* alpha_ptr = grad_alpha_src.data_ptr<float>();
      const auto* dz_ptr = dz.defined() ? dz.data_ptr<float>() : nullptr;
      const auto* lse_ptr = lse.data_ptr<float>();
      const int64_t work_feats = need_src ? heads * channels : heads;
      parallel_over_rows(t, work_feats, num_rows, bad, [&](int64_t row_begin, int64_t row_end) {
        source_grad_rows(t, perm_ptr, go, sc, channels, lse_ptr, dz_ptr, need_src,
                         dz.defined(), src_ptr, alpha_ptr, row_begin, row_end);
      });
    });
  });
  check_no_bad_index(op, bad, num_rows);
  return {grad_src, grad_alpha_src};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_dist, CPU, m) {
  m.impl("gat_forward", &gat_forward_cpu);
  m.impl("gat_backward_rows", &gat_backward_rows_cpu);
  m.impl("gat_backward_sources", &gat_backward_sources_cpu);
}

}  // namespace pyg_dist
