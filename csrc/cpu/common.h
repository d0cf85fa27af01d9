// What the CPU kernels share: the CSR and source views, the scheduling of rows
// over threads in tasks of equal work, feature tiles, and the argument checks.
// Included by cpu/spmm_kernel.cpp and cpu/gat_kernel.cpp.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace pyg_dist {
namespace cpu {

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

// ------------------------------------------------------------------- checks

inline void check_csr(const char* op, const at::Tensor& rowptr, const at::Tensor& col) {
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

inline void check_no_bad_index(const char* op, const BadIndexFlag& bad, int64_t num_src) {
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

}  // namespace cpu
}  // namespace pyg_dist
