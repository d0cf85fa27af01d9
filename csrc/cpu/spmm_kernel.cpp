// CPU kernels of pyg_dist::spmm_forward and pyg_dist::sddmm (schemas in ../spmm.cpp).
//
// Sparse rows are split into tasks of about equal work (entries + rows), so
// power-law graphs balance, and each task's rows are computed by one thread:
// every output element is written once, with no atomics, and the result does
// not depend on the number of threads. Columns below x.size(0) read x, the
// others x_halo (no concatenation). Accumulation is float32 for every input
// dtype; the output has the dtype of x.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common.h"

namespace pyg_dist {
namespace {

using namespace cpu;  // the shared helpers of common.h

// The max kernel keeps a float and an int32 per feature: 32-wide tiles fill 8
// registers with both.
constexpr int64_t kMaxTile = 32;

enum class Reduce { kSum, kMean, kMax };

Reduce parse_reduce(c10::string_view reduce) {
  if (reduce == "sum" || reduce == "add") return Reduce::kSum;
  if (reduce == "mean") return Reduce::kMean;
  if (reduce == "max") return Reduce::kMax;
  TORCH_CHECK(false, "pyg_dist::spmm_forward got reduce='", std::string(reduce),
              "'; use one of sum, mean, max");
}

// --------------------------------------------------------------- row kernels

// out[i] = scale_i * sum_e value[e] * s[col[e]], one feature tile at a time.
template <int64_t T, bool Full, typename scalar_t, typename index_t>
inline void sum_tile(const Csr<index_t>& a, const Source<scalar_t>& s, int64_t begin, int64_t end,
                     int64_t f0, int64_t width, float scale, scalar_t* __restrict out_row) {
  const int64_t n = Full ? T : width;
  float acc[T] = {};
  for (int64_t e = begin; e < end; ++e) {
    const scalar_t* __restrict src = s.row(a.col[e]) + f0;
    const float v = a.value_at(e);
#pragma GCC unroll 64
    for (int64_t f = 0; f < n; ++f) acc[f] += v * static_cast<float>(src[f]);
  }
  for (int64_t f = 0; f < n; ++f) out_row[f0 + f] = static_cast<scalar_t>(acc[f] * scale);
}

template <typename scalar_t, typename index_t>
void sum_rows(const Csr<index_t>& a, const Source<scalar_t>& s, bool mean, scalar_t* out,
              int64_t row_begin, int64_t row_end) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1];
    const float scale = (mean && end > begin) ? 1.f / static_cast<float>(end - begin) : 1.f;
    for_each_tile<kTile>(0, s.feats, [&](auto tile, auto full, int64_t f0, int64_t width) {
      sum_tile<tile(), full()>(a, s, begin, end, f0, width, scale, out + i * s.feats);
    });
  }
}

// Element-wise max of value[e] * s[col[e]] and the first entry attaining it;
// empty rows give 0 and position nnz. The winner is tracked as an int32 offset
// into the row, so that the comparison and both selects vectorise in 8 lanes
// (rows have fewer than 2^31 entries, see check_rowptr); GCC builds this with
// -fno-loop-unroll-and-jam (see pyg_dist/ops/cpu.py), which keeps it vectorised.
template <int64_t T, bool Full, typename scalar_t, typename index_t>
inline void max_tile(const Csr<index_t>& a, const Source<scalar_t>& s, int64_t begin, int64_t end,
                     int64_t f0, int64_t width, scalar_t* __restrict out_row,
                     int64_t* __restrict arg_row) {
  const int64_t n = Full ? T : width;
  float best[T] = {};
  int32_t offset[T] = {};
  if (begin < end) {  // the first entry wins even if it is -inf
    const scalar_t* __restrict src = s.row(a.col[begin]) + f0;
    const float v = a.value_at(begin);
    for (int64_t f = 0; f < n; ++f) best[f] = v * static_cast<float>(src[f]);
  }
  for (int64_t e = begin + 1; e < end; ++e) {
    const scalar_t* __restrict src = s.row(a.col[e]) + f0;
    const float v = a.value_at(e);
    const auto here = static_cast<int32_t>(e - begin);
    for (int64_t f = 0; f < n; ++f) {  // selects as bit masks: no branches
      const float msg = v * static_cast<float>(src[f]);
      const int32_t wins = -static_cast<int32_t>(msg > best[f]);
      offset[f] = (here & wins) | (offset[f] & ~wins);
      best[f] = std::max(best[f], msg);
    }
  }
  for (int64_t f = 0; f < n; ++f) {
    out_row[f0 + f] = static_cast<scalar_t>(best[f]);
    arg_row[f0 + f] = begin < end ? begin + offset[f] : a.nnz;
  }
}

template <typename scalar_t, typename index_t>
void max_rows(const Csr<index_t>& a, const Source<scalar_t>& s, scalar_t* out, int64_t* arg,
              int64_t row_begin, int64_t row_end) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1];
    for_each_tile<kMaxTile>(0, s.feats, [&](auto tile, auto full, int64_t f0, int64_t width) {
      max_tile<tile(), full()>(a, s, begin, end, f0, width, out + i * s.feats,
                               arg + i * s.feats);
    });
  }
}
// out[e] = <a[i], s[col[e]]> for the entries e of rows [row_begin, row_end).
template <typename scalar_t, typename index_t>
void sddmm_rows(const Csr<index_t>& a, const scalar_t* dense, const Source<scalar_t>& s,
                float* out, int64_t row_begin, int64_t row_end) {
  const int64_t feats = s.feats;
  std::vector<float> row_buffer(std::is_same_v<scalar_t, float> ? 0 : feats);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const float* lhs;
    if constexpr (std::is_same_v<scalar_t, float>) {
      lhs = dense + i * feats;
    } else {
      for (int64_t f = 0; f < feats; ++f) row_buffer[f] = static_cast<float>(dense[i * feats + f]);
      lhs = row_buffer.data();
    }
    for (int64_t e = a.rowptr[i]; e < a.rowptr[i + 1]; ++e) {
      out[e] = dot(lhs, s.row(a.col[e]), feats);
    }
  }
}

void check_sources(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& x_halo) {
  TORCH_CHECK(x.dim() == 2, op, " expects x of shape [N, F] (got ", x.sizes(), ")");
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), op,
              " expects a floating-point x (got ", x.scalar_type(), "); cast it with .float()");
  TORCH_CHECK(x.device().is_cpu(), op, " (CPU kernel) got x on ", x.device(),
              "; move it to the CPU");
  if (!x_halo.has_value()) return;
  TORCH_CHECK(x_halo->dim() == 2 && x_halo->size(1) == x.size(1), op,
              " expects x_halo of shape [H, ", x.size(1), "] like x (got ", x_halo->sizes(), ")");
  TORCH_CHECK(x_halo->scalar_type() == x.scalar_type(), op, " got x of ", x.scalar_type(),
              " but x_halo of ", x_halo->scalar_type(), "; cast one to the other's dtype");
  TORCH_CHECK(x_halo->device().is_cpu(), op, " (CPU kernel) got x_halo on ", x_halo->device(),
              "; move it to the CPU");
}

// The values as contiguous float32, or an undefined tensor for "all ones".
at::Tensor float_values(const char* op, const std::optional<at::Tensor>& value,
                        const at::Tensor& col) {
  if (!value.has_value()) return at::Tensor();
  TORCH_CHECK(value->dim() == 1 && value->numel() == col.numel(), op,
              " expects value of shape [", col.numel(), "] like col (got ", value->sizes(), ")");
  TORCH_CHECK(at::isFloatingType(value->scalar_type()) && value->device().is_cpu(), op,
              " expects a floating-point CPU value tensor (got ", value->scalar_type(), " on ",
              value->device(), ")");
  return value->to(at::kFloat).contiguous();
}
// ------------------------------------------------------------------- ops

std::tuple<at::Tensor, at::Tensor> spmm_forward_cpu(const at::Tensor& rowptr_in,
                                                    const at::Tensor& col_in,
                                                    const std::optional<at::Tensor>& value_in,
                                                    const at::Tensor& x_in,
                                                    const std::optional<at::Tensor>& x_halo_in,
                                                    c10::string_view reduce_name) {
  constexpr const char* op = "pyg_dist::spmm_forward";
  const Reduce reduce = parse_reduce(reduce_name);
  check_csr(op, rowptr_in, col_in);
  check_sources(op, x_in, x_halo_in);
  const auto rowptr = rowptr_in.contiguous();
  const auto col = col_in.contiguous();
  const auto value = float_values(op, value_in, col);
  const auto x = x_in.contiguous();
  const auto x_halo = x_halo_in.has_value() ? x_halo_in->contiguous() : at::Tensor();

  const int64_t num_rows = rowptr.numel() - 1, feats = x.size(1);
  auto out = at::empty({num_rows, feats}, x.options());
  auto arg = at::empty({reduce == Reduce::kMax ? num_rows : 0, feats},
                       x.options().dtype(at::kLong));
  BadIndexFlag bad;
  int64_t num_src = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), op, [&] {
    AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), op, [&] {
      const auto a = make_csr<index_t>(rowptr, col, value);
      const int64_t longest = check_rowptr(op, a.rowptr, a.num_rows, a.nnz);
      TORCH_CHECK(reduce != Reduce::kMax || longest <= std::numeric_limits<int32_t>::max(), op,
                  " with reduce='max' supports rows of up to 2^31 - 1 entries (got ", longest,
                  "); split the row, or use reduce='sum'");
      const auto s = make_source<scalar_t>(x, x_halo);
      num_src = s.num_src;
      auto* out_ptr = out.data_ptr<scalar_t>();
      auto* arg_ptr = arg.data_ptr<int64_t>();
      parallel_over_rows(a, feats, s.num_src, bad, [&](int64_t row_begin, int64_t row_end) {
        if (reduce == Reduce::kMax) {
          max_rows(a, s, out_ptr, arg_ptr, row_begin, row_end);
        } else {
          sum_rows(a, s, reduce == Reduce::kMean, out_ptr, row_begin, row_end);
        }
      });
    });
  });
  check_no_bad_index(op, bad, num_src);
  return {out, arg};
}

at::Tensor sddmm_cpu(const at::Tensor& rowptr_in, const at::Tensor& col_in, const at::Tensor& a_in,
                     const at::Tensor& x_in, const std::optional<at::Tensor>& x_halo_in) {
  constexpr const char* op = "pyg_dist::sddmm";
  check_csr(op, rowptr_in, col_in);
  check_sources(op, x_in, x_halo_in);
  TORCH_CHECK(a_in.dim() == 2 && a_in.size(0) == rowptr_in.numel() - 1 &&
                  a_in.size(1) == x_in.size(1),
              op, " expects a of shape [", rowptr_in.numel() - 1, ", ", x_in.size(1),
              "] (rows of the CSR, features of x), got ", a_in.sizes());
  TORCH_CHECK(a_in.scalar_type() == x_in.scalar_type(), op, " got a of ", a_in.scalar_type(),
              " but x of ", x_in.scalar_type(), "; cast a to x's dtype");
  const auto rowptr = rowptr_in.contiguous();
  const auto col = col_in.contiguous();
  const auto dense = a_in.contiguous();
  const auto x = x_in.contiguous();
  const auto x_halo = x_halo_in.has_value() ? x_halo_in->contiguous() : at::Tensor();

  auto out = at::empty({col.numel()}, x.options().dtype(at::kFloat));
  BadIndexFlag bad;
  int64_t num_src = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), op, [&] {
    AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), op, [&] {
      const auto csr = make_csr<index_t>(rowptr, col, at::Tensor());
      check_rowptr(op, csr.rowptr, csr.num_rows, csr.nnz);
      const auto s = make_source<scalar_t>(x, x_halo);
      num_src = s.num_src;
      const auto* dense_ptr = dense.data_ptr<scalar_t>();
      auto* out_ptr = out.data_ptr<float>();
      parallel_over_rows(csr, x.size(1), s.num_src, bad, [&](int64_t row_begin, int64_t row_end) {
        sddmm_rows(csr, dense_ptr, s, out_ptr, row_begin, row_end);
      });
    });
  });
  check_no_bad_index(op, bad, num_src);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_dist, CPU, m) {
  m.impl("spmm_forward", &spmm_forward_cpu);
  m.impl("sddmm", &sddmm_cpu);
}

}  // namespace pyg_dist
