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

namespace pyg_dist {
namespace {

// Smallest amount of work, in (entries + rows) * features, that is worth a
// task of its own (and so a thread). Measured on 2 cores (AVX2, sum, graphs of
// 10 entries per row, F = 16 and 128, median of 200 calls): with 1 << 14, two
// threads were slower than one below ~100K units of work (90K: 21 us against
// 11 us); with 1 << 16 two threads first split the work at 131K units and were
// faster from there on (180K: 22 us against 29 us; 1.4M: 107 us against 223 us).
constexpr int64_t kGrainWork = int64_t{1} << 16;

// At most this many tasks per thread. Measured (2 threads, 1M entries, F = 128,
// median of 15): 1, 2, 8 and 32 tasks per thread were within 2% of each other
// on the uniform and the power-law graph, since tasks are balanced by work
// already; 8 lets the other threads take over the tasks of a thread that the
// OS preempts on a busy machine, at no measurable cost.
constexpr int64_t kTasksPerThread = 8;

// Feature tiles: a row is accumulated kTile features at a time, in registers
// (64 floats = 8 AVX2 registers), re-reading the row's indices once per tile.
// Measured on a uniform graph (100K rows, 1M entries, F = 128, 1 thread):
// a float32 buffer of F accumulators took 3.5x as long as 64-wide register
// tiles; 32-, 64- and 128-wide tiles were within noise of each other, and
// software prefetching of upcoming source rows gave no measurable gain.
// Narrower tiles (32, 16, 8, then a partial 8) cover the rest of F.
constexpr int64_t kTile = 64;
constexpr int64_t kMinTile = 8;
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

// Set by any task that meets a column index outside [x ; x_halo].
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

  float value_at(int64_t e) const { return value ? value[e] : 1.f; }
};

// The source rows s = [x ; x_halo], read in place.
template <typename scalar_t>
struct Source {
  const scalar_t* x;
  const scalar_t* halo;
  int64_t num_owned;
  int64_t num_src;
  int64_t feats;

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

// Whether every column of entries [begin, end) indexes a source row.
template <typename index_t>
bool columns_valid(const index_t* col, int64_t begin, int64_t end, int64_t num_src) {
  bool ok = true;
  for (int64_t e = begin; e < end; ++e) {
    ok &= static_cast<uint64_t>(static_cast<int64_t>(col[e])) < static_cast<uint64_t>(num_src);
  }
  return ok;
}

// Runs fn(row_begin, row_end) on tasks of about equal (entries + rows); tasks
// are handed out to the threads one by one, so a thread that the OS preempts,
// or whose rows miss the cache more, takes fewer. A task whose columns are not
// all valid sets `bad` and is skipped.
template <typename index_t, typename Fn>
void parallel_over_rows(const Csr<index_t>& a, int64_t feats, int64_t num_src, BadIndexFlag& bad,
                        const Fn& fn) {
  const int64_t total = a.nnz + a.num_rows;
  const int64_t work = total * std::max<int64_t>(feats, 1);
  const int64_t threads = std::max<int64_t>(at::get_num_threads(), 1);
  const int64_t tasks = std::clamp<int64_t>(work / kGrainWork, 1, threads * kTasksPerThread);
  auto run_task = [&](int64_t t) {
    const int64_t row_begin = row_at_work(a.rowptr, a.num_rows, total * t / tasks);
    const int64_t row_end = row_at_work(a.rowptr, a.num_rows, total * (t + 1) / tasks);
    if (!columns_valid(a.col, a.rowptr[row_begin], a.rowptr[row_end], num_src)) {
      bad.set();
      return;
    }
    fn(row_begin, row_end);
  };
  if (tasks == 1) {
    run_task(0);
    return;
  }
  std::atomic<int64_t> next_task{0};
  at::parallel_for(0, std::min(threads, tasks), 1, [&](int64_t, int64_t) {
    for (int64_t t = next_task++; t < tasks; t = next_task++) run_task(t);
  });
}

// Calls fn(std::integral_constant<int64_t, T>, full, f0, width) over
// [0, feats) in tiles of T = Widest, Widest / 2, ..., kMinTile features: full
// tiles (full = std::true_type, width = T) and at most one narrower last tile
// (full = std::false_type, width < T = kMinTile). Kernels loop over
// `full ? T : width` features, a compile-time count for full tiles.
template <int64_t Widest, int64_t T = Widest, typename Fn>
inline void for_each_tile(int64_t f0, int64_t feats, const Fn& fn) {
  using Tile = std::integral_constant<int64_t, T>;
  if constexpr (T == Widest) {
    for (; f0 + T <= feats; f0 += T) fn(Tile{}, std::true_type{}, f0, T);
  } else if (f0 + T <= feats) {
    fn(Tile{}, std::true_type{}, f0, T);
    f0 += T;
  }
  if constexpr (T > kMinTile) {
    for_each_tile<Widest, T / 2>(f0, feats, fn);
  } else if (f0 < feats) {
    fn(Tile{}, std::false_type{}, f0, feats - f0);
  }
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

// <a, b> over n features in kLanes partial sums (one AVX2 register), added up
// as a tree: a sequential sum over the lanes would make every entry wait for
// kLanes dependent additions.
template <typename scalar_t>
inline float dot(const float* __restrict a, const scalar_t* __restrict b, int64_t n) {
  constexpr int64_t kLanes = 8;
  float part[kLanes] = {};
  int64_t f = 0;
  for (; f + kLanes <= n; f += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] += a[f + j] * static_cast<float>(b[f + j]);
  }
  for (int64_t j = 0; f < n; ++f, ++j) part[j] += a[f] * static_cast<float>(b[f]);
  return ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
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

// rowptr[0] == 0, non-decreasing, rowptr[-1] == nnz: makes every row range
// safe to read. Returns the largest row length.
template <typename index_t>
int64_t check_rowptr(const char* op, const index_t* rowptr, int64_t num_rows, int64_t nnz) {
  bool ok = rowptr[0] == 0 && static_cast<int64_t>(rowptr[num_rows]) == nnz;
  int64_t longest = 0;
  for (int64_t i = 0; ok && i < num_rows; ++i) {
    const int64_t length = static_cast<int64_t>(rowptr[i + 1]) - static_cast<int64_t>(rowptr[i]);
    ok = length >= 0;
    longest = std::max(longest, length);
  }
  TORCH_CHECK(ok, op, " expects rowptr to start at 0, never decrease and end at col.numel() = ",
              nnz, " (got rowptr[-1] = ", static_cast<int64_t>(rowptr[num_rows]),
              "); build the CSR with pyg_dist.ops.to_csr");
  return longest;
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
