// CPU kernels of pyg_dist::spmm_forward and pyg_dist::sddmm (schemas in ../spmm.cpp).
//
// Sparse rows are split into tasks of about equal work (entries + rows), one
// per thread, so power-law graphs balance; every output row is written by the
// one thread that owns it, so no atomics are needed. Columns below
// x.size(0) read x, the others x_halo (no concatenation). Accumulation is
// float32 for every input dtype; the output has the dtype of x.
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

namespace pyg_dist {
namespace {

// Smallest amount of work, in (entries + rows) * features, that is worth a
// thread of its own.
constexpr int64_t kGrainWork = int64_t{1} << 16;

// How many entries ahead the gather loop prefetches a source row.
constexpr int64_t kPrefetchDistance = 8;

constexpr int64_t kCacheLine = 64;

enum class Reduce { kSum, kMean, kMax };

Reduce parse_reduce(c10::string_view reduce) {
  if (reduce == "sum" || reduce == "add") return Reduce::kSum;
  if (reduce == "mean") return Reduce::kMean;
  if (reduce == "max") return Reduce::kMax;
  TORCH_CHECK(false, "pyg_dist::spmm_forward got reduce='", std::string(reduce),
              "'; use one of sum, mean, max");
}

// Set by any thread that meets a column index outside [x ; x_halo].
struct BadIndexFlag {
  std::atomic<bool> seen{false};
  void set() { seen.store(true, std::memory_order_relaxed); }
};

// The CSR matrix A: row pointers, column indices and (optional) float32 values.
template <typename index_t>
struct Csr {
  const index_t* rowptr;
  const index_t* col;
  const float* value;  // nullptr: every entry is 1
  int64_t num_rows;
  int64_t nnz;
};

// The source rows s = [x ; x_halo], read in place.
template <typename scalar_t>
struct Source {
  const scalar_t* x;
  const scalar_t* halo;
  int64_t num_owned;
  int64_t num_src;
  int64_t feats;

  bool valid(int64_t c) const {
    return static_cast<uint64_t>(c) < static_cast<uint64_t>(num_src);
  }
  const scalar_t* row(int64_t c) const {
    return c < num_owned ? x + c * feats : halo + (c - num_owned) * feats;
  }
};

// ---------------------------------------------------------------- scheduling

// Smallest row i in [0, num_rows] with rowptr[i] + i >= target.
template <typename index_t>
int64_t row_at_work(const index_t* rowptr, int64_t num_rows, int64_t target) {
  int64_t lo = 0, hi = num_rows;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(rowptr[mid]) + mid < target) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Runs fn(row_begin, row_end) on tasks of about equal (entries + rows), in
// parallel when there is enough work (see kGrainWork).
template <typename index_t, typename Fn>
void parallel_over_rows(const Csr<index_t>& a, int64_t feats, const Fn& fn) {
  const int64_t total = a.nnz + a.num_rows;
  const int64_t work = total * std::max<int64_t>(feats, 1);
  const int64_t tasks =
      std::clamp<int64_t>(work / kGrainWork, 1, std::max(at::get_num_threads(), 1));
  if (tasks == 1) {
    fn(int64_t{0}, a.num_rows);
    return;
  }
  at::parallel_for(0, tasks, 1, [&](int64_t task_begin, int64_t task_end) {
    for (int64_t t = task_begin; t < task_end; ++t) {
      fn(row_at_work(a.rowptr, a.num_rows, total * t / tasks),
         row_at_work(a.rowptr, a.num_rows, total * (t + 1) / tasks));
    }
  });
}

// ------------------------------------------------------------- row helpers

template <typename scalar_t, typename index_t>
inline void prefetch_source_row(const Source<scalar_t>& s, const index_t* col, int64_t e,
                                int64_t e_end) {
#if defined(__GNUC__) || defined(__clang__)
  if (e >= e_end) return;
  const int64_t c = col[e];
  if (!s.valid(c)) return;
  const char* p = reinterpret_cast<const char*>(s.row(c));
  const int64_t bytes = s.feats * static_cast<int64_t>(sizeof(scalar_t));
  for (int64_t b = 0; b < bytes; b += kCacheLine) __builtin_prefetch(p + b, 0, 3);
#endif
}

// acc[f] += v * src[f]
template <typename scalar_t>
inline void axpy(float* __restrict acc, float v, const scalar_t* __restrict src, int64_t n) {
  for (int64_t f = 0; f < n; ++f) acc[f] += v * static_cast<float>(src[f]);
}

// out[f] = acc[f] * scale, in the output dtype
template <typename scalar_t>
inline void store_scaled(scalar_t* __restrict out, const float* __restrict acc, float scale,
                         int64_t n) {
  for (int64_t f = 0; f < n; ++f) out[f] = static_cast<scalar_t>(acc[f] * scale);
}

// sum_f a[f] * b[f] with kLanes independent partial sums (vectorises without
// -ffast-math).
template <typename scalar_t>
inline float dot(const float* __restrict a, const scalar_t* __restrict b, int64_t n) {
  constexpr int64_t kLanes = 16;
  float part[kLanes] = {};
  int64_t f = 0;
  for (; f + kLanes <= n; f += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] += a[f + j] * static_cast<float>(b[f + j]);
  }
  float sum = 0.f;
  for (; f < n; ++f) sum += a[f] * static_cast<float>(b[f]);
  for (int64_t j = 0; j < kLanes; ++j) sum += part[j];
  return sum;
}

// --------------------------------------------------------------- row kernels

template <typename scalar_t, typename index_t>
void sum_rows(const Csr<index_t>& a, const Source<scalar_t>& s, bool mean, scalar_t* out,
              int64_t row_begin, int64_t row_end, BadIndexFlag& bad) {
  const int64_t feats = s.feats;
  std::vector<float> acc_buffer(feats);
  float* acc = acc_buffer.data();
  const int64_t e_end = a.rowptr[row_end];
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1];
    std::fill(acc, acc + feats, 0.f);
    for (int64_t e = begin; e < end; ++e) {
      prefetch_source_row(s, a.col, e + kPrefetchDistance, e_end);
      const int64_t c = a.col[e];
      if (!s.valid(c)) {
        bad.set();
        continue;
      }
      axpy(acc, a.value ? a.value[e] : 1.f, s.row(c), feats);
    }
    const float scale = (mean && end > begin) ? 1.f / static_cast<float>(end - begin) : 1.f;
    store_scaled(out + i * feats, acc, scale, feats);
  }
}

template <typename scalar_t, typename index_t>
void max_rows(const Csr<index_t>& a, const Source<scalar_t>& s, scalar_t* out, int64_t* arg,
              int64_t row_begin, int64_t row_end, BadIndexFlag& bad) {
  const int64_t feats = s.feats;
  std::vector<float> acc_buffer(feats);
  float* acc = acc_buffer.data();
  const int64_t e_end = a.rowptr[row_end];
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1];
    int64_t* arg_row = arg + i * feats;
    // -inf with position nnz: the first entry always wins, even if it is -inf.
    std::fill(acc, acc + feats, -std::numeric_limits<float>::infinity());
    std::fill(arg_row, arg_row + feats, a.nnz);
    for (int64_t e = begin; e < end; ++e) {
      prefetch_source_row(s, a.col, e + kPrefetchDistance, e_end);
      const int64_t c = a.col[e];
      if (!s.valid(c)) {
        bad.set();
        continue;
      }
      const scalar_t* __restrict src = s.row(c);
      const float v = a.value ? a.value[e] : 1.f;
      for (int64_t f = 0; f < feats; ++f) {
        const float msg = v * static_cast<float>(src[f]);
        const bool wins = msg > acc[f] || arg_row[f] == a.nnz;
        acc[f] = wins ? msg : acc[f];
        arg_row[f] = wins ? e : arg_row[f];
      }
    }
    if (end == begin) std::fill(acc, acc + feats, 0.f);
    store_scaled(out + i * feats, acc, 1.f, feats);
  }
}

template <typename scalar_t, typename index_t>
void sddmm_rows(const Csr<index_t>& a, const scalar_t* dense, const Source<scalar_t>& s,
                float* out, int64_t row_begin, int64_t row_end, BadIndexFlag& bad) {
  const int64_t feats = s.feats;
  std::vector<float> row_buffer(std::is_same_v<scalar_t, float> ? 0 : feats);
  const int64_t e_end = a.rowptr[row_end];
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t begin = a.rowptr[i], end = a.rowptr[i + 1];
    const float* a_row;
    if constexpr (std::is_same_v<scalar_t, float>) {
      a_row = dense + i * feats;
    } else {
      for (int64_t f = 0; f < feats; ++f) row_buffer[f] = static_cast<float>(dense[i * feats + f]);
      a_row = row_buffer.data();
    }
    for (int64_t e = begin; e < end; ++e) {
      prefetch_source_row(s, a.col, e + kPrefetchDistance, e_end);
      const int64_t c = a.col[e];
      if (!s.valid(c)) {
        bad.set();
        out[e] = 0.f;
        continue;
      }
      out[e] = dot(a_row, s.row(c), feats);
    }
  }
}

// ------------------------------------------------------------------- checks

void check_csr(const char* op, const at::Tensor& rowptr, const at::Tensor& col) {
  TORCH_CHECK(rowptr.dim() == 1 && col.dim() == 1, op, " expects 1-D rowptr and col (got shapes ",
              rowptr.sizes(), " and ", col.sizes(), "); build them with pyg_dist.ops.to_csr");
  TORCH_CHECK(rowptr.numel() >= 1, op, " expects rowptr of length num_rows + 1 >= 1 (got an empty "
              "rowptr); build it with pyg_dist.ops.to_csr");
  const auto dtype = rowptr.scalar_type();
  TORCH_CHECK((dtype == at::kInt || dtype == at::kLong) && col.scalar_type() == dtype, op,
              " expects rowptr and col of one dtype, int32 or int64 (got ", rowptr.scalar_type(),
              " and ", col.scalar_type(), "); cast both with .to(torch.int64)");
  TORCH_CHECK(rowptr.device().is_cpu() && col.device().is_cpu(), op,
              " (CPU kernel) got rowptr on ", rowptr.device(), " and col on ", col.device(),
              "; move them to the CPU");
}

// rowptr[0] == 0, non-decreasing, rowptr[-1] == nnz: makes every row range safe to read.
template <typename index_t>
void check_rowptr(const char* op, const index_t* rowptr, int64_t num_rows, int64_t nnz) {
  bool ok = rowptr[0] == 0 && static_cast<int64_t>(rowptr[num_rows]) == nnz;
  for (int64_t i = 0; ok && i < num_rows; ++i) ok = rowptr[i] <= rowptr[i + 1];
  TORCH_CHECK(ok, op, " expects rowptr to start at 0, never decrease and end at col.numel() = ",
              nnz, " (got rowptr[-1] = ", static_cast<int64_t>(rowptr[num_rows]),
              "); build the CSR with pyg_dist.ops.to_csr");
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

void check_no_bad_index(const char* op, const BadIndexFlag& bad, int64_t num_src) {
  TORCH_CHECK(!bad.seen.load(), op, " found a column index outside [0, ", num_src,
              "); every col must index a row of x (col < x.size(0)) or of x_halo");
}

template <typename index_t>
Csr<index_t> make_csr(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value) {
  return {rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(),
          value.defined() ? value.data_ptr<float>() : nullptr, rowptr.numel() - 1, col.numel()};
}

template <typename scalar_t>
Source<scalar_t> make_source(const at::Tensor& x, const at::Tensor& x_halo) {
  const int64_t num_halo = x_halo.defined() ? x_halo.size(0) : 0;
  return {x.data_ptr<scalar_t>(), x_halo.defined() ? x_halo.data_ptr<scalar_t>() : nullptr,
          x.size(0), x.size(0) + num_halo, x.size(1)};
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
      check_rowptr(op, a.rowptr, a.num_rows, a.nnz);
      const auto s = make_source<scalar_t>(x, x_halo);
      num_src = s.num_src;
      auto* out_ptr = out.data_ptr<scalar_t>();
      auto* arg_ptr = arg.data_ptr<int64_t>();
      parallel_over_rows(a, feats, [&](int64_t row_begin, int64_t row_end) {
        if (reduce == Reduce::kMax) {
          max_rows(a, s, out_ptr, arg_ptr, row_begin, row_end, bad);
        } else {
          sum_rows(a, s, reduce == Reduce::kMean, out_ptr, row_begin, row_end, bad);
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
      parallel_over_rows(csr, x.size(1), [&](int64_t row_begin, int64_t row_end) {
        sddmm_rows(csr, dense_ptr, s, out_ptr, row_begin, row_end, bad);
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
