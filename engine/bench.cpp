// The benchmark engine (see bench.h): the sweep's cases, their rules, the loop that times them with
// the backends' bench() and checks them against fp64, and the machine probes. Moved here
// from cli/cmd_bench.cpp so that `attnlab bench` and the viewer's Performance view run the same
// code; the reports are bench_report.cpp's, the CLI keeps only its options.
#include "core/gcc12_avx512.h"  // first: see there

#include "engine/bench.h"

#include "core/inputs.h"
#include "core/modify.h"

#include "core/backend.h"
#include "core/format.h"
#include "core/memory.h"
#include "core/problem.h"
#include "core/stats.h"
#include "core/verify.h"
#include "cpu/backward.h"
#include "cpu/cpu_backend.h"
#include "cpu/fused_backward.h"
#include "cpu/online_softmax.h"
#include "core/parallel.h"
#include "kernels/decode.h"       // plain C++: the decode kernel's shapes
#include "kernels/tile_config.h"  // plain C++: the bf16 kernel's head dims
#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cublas_probe.h"
#include "kernels/cuda_backend.h"
#endif

#include <Eigen/Dense>

#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>
#include <tuple>

namespace attnlab::bench {
namespace {

constexpr double kFullReferenceLimit = 4194304.0;  // heads * N^2 above this: sampled rows
constexpr int kSampleRows = 64;
constexpr int kRowReferenceRows = 64;  // query rows in all up to which every row gets the row reference
// The backward's rel err bound in fp32: each gradient sums over every key (dQ) or every query
// (dK, dV) and through the softmax's Jacobian; the staged check's derived bounds (core/
// backward_check.h) reach about 1e-4 of the largest gradient at the bench's sizes.
constexpr double kBackwardRtolFp32 = 1e-4;
// bf16 (CUDA): Q, K, V and dO rounded to bf16, twice verify's bf16 tolerance (error_bound).
// Rough sustained rates of the CPU paths on a small machine, only to refuse cases that would
// take far too long; deliberately pessimistic.
constexpr double kCpuStagedFlops = 8e9;
constexpr double kCpuFusedFlops = 40e9;

// A bench problem and its fp64 reference output, built once per (mask, heads, d, n) and shared by
// every backend / variant / precision timed on it. The reference is every row through the fp64
// row reference (reference_fp64_row) for at most kRowReferenceRows query rows in all, the full fp64 chain
// (reference_fp64) up to kFullReferenceLimit head·N² entries; above that, `rows` (64 query rows of
// head 0, evenly spread) through reference_fp64 of the sub-problem holding just those rows, their
// mask rows as a custom mask.
struct BenchProblem {
  Problem p;
  std::vector<int> rows;  // empty: ref covers every row
  MatrixD ref;
  // max_weighted_abs_v over the rows ref covers: the size of the sums behind the output, what the
  // error is taken relative to (check_error).
  double magnitude = 0;
  Message which;          // "fp64 full" or "fp64 64 rows of head 0"
  double rope_ms = 0;     // RoPE: the once-per-problem rotation of Q and K (rotated_qk), timed
  // The backward's fp64 reference, made on the shape's first backward case (grad_reference).
  struct Grads {
    MatrixD dq, dk, dv;  // dk, dv empty when only head 0's dQ is covered
    Message which;       // "fp64 backward full", "fp64 backward, dQ of head 0", or why none
  };
  std::optional<Grads> grads;
};

// The random upstream gradient of every backward case (the same dO in each repetition).
Upstream bench_upstream(std::uint64_t seed) { return upstream_random(seed); }

// The fp64 staged backward (reference_backward_fp64) while heads·n·m stays within
// kFullReferenceLimit; above that, head 0 alone (one_head, its rows of dO given as a file) while its
// n·m stays within 4 times that (N = 4096), which checks dQ of head 0; beyond, none (the error is then not a number and not held
// against the case).
const BenchProblem::Grads& grad_reference(BenchProblem& b, std::uint64_t seed) {
  if (b.grads) return *b.grads;
  const Problem& p = b.p;
  BenchProblem::Grads g;
  if (static_cast<double>(p.heads) * p.n() * p.m() <= kFullReferenceLimit) {
    GradTraceD r = reference_backward_fp64(p, bench_upstream(seed));
    g.dq = std::move(r.dq);
    g.dk = std::move(r.dk);
    g.dv = std::move(r.dv);
    g.which = message_of(Msg::BenchRefBackwardFull, {});
  } else if (static_cast<double>(p.n()) * p.m() <= 4 * kFullReferenceLimit) {
    Upstream u;
    u.kind = UpstreamKind::File;
    u.file = "dO of head 0";
    u.data = random_dout(static_cast<Eigen::Index>(p.heads) * p.n(), p.d_v(), seed).topRows(p.n());
    g.dq = reference_backward_fp64(one_head(p, 0), u).dq;
    g.which = message_of(Msg::BenchRefBackwardDq, {});
  } else {
    g.which = message_of(Msg::BenchRefBackwardNone, {});
  }
  b.grads = std::move(g);
  return *b.grads;
}

// max |x - ref| / max |ref| over the gradients the reference covers (dQ's first rows only when
// it covers head 0 alone); NaN without a reference.
double grad_error(const BenchProblem::Grads& ref, const GradTrace& g) {
  if (ref.dq.size() == 0) return std::numeric_limits<double>::quiet_NaN();
  double err = 0, scale = 0;
  const auto add = [&](const MatrixF& x, const MatrixD& want) {
    err = std::max(err, (x.topRows(want.rows()).cast<double>() - want).cwiseAbs().maxCoeff());
    scale = std::max(scale, want.cwiseAbs().maxCoeff());
  };
  add(g.dq, ref.dq);
  if (ref.dk.size() > 0) add(g.dk, ref.dk);
  if (ref.dv.size() > 0) add(g.dv, ref.dv);
  return err / std::max(scale, 1e-300);
}

// A backward case: each repetition runs the variant's forward (which keeps what the backward
// needs: every stage for the staged one, m and l for the fused one on the CPU; the output, from
// which the row statistics are recomputed, on CUDA) and its backward; only the backward is timed
// (GradTrace::backward_ms: the steady clock on the CPU, CUDA events around its kernels).
BenchSample bench_backward(const Case& c, const Problem& p, const Upstream& u, int warmup, int repeat,
                           const std::atomic<bool>* cancel, GradTrace& last) {
  BenchSample s;
  const bool fused = c.variant == "fused", cuda = c.backend == "cuda";
  const ProblemSize size = size_of(p);
  const double need = fused ? fused_backward_bytes(size) : backward_bytes(size);
  if (!cuda) check_host_memory(need, fused ? "the fused backward" : "the staged backward", "try a smaller N or fewer heads");
  const MatrixF dout = cuda ? random_dout(static_cast<Eigen::Index>(p.heads) * p.n(), p.d_v(), u.seed) : MatrixF();
  for (int i = 0; i < warmup + repeat; ++i) {
    if (cancel && cancel->load()) throw Cancelled();
    GradTrace g = cuda    ? run_cuda_backward(p, dout, parse_precision(c.precision))
                  : fused ? cpu_fused_backward(p, u)
                          : cpu_backward(p, u);
    if (i >= warmup) s.ms.push_back(g.backward_ms);
    s.kernel = g.kernel;
    if (i + 1 == warmup + repeat) last = std::move(g);
  }
  s.peak_bytes = cuda ? last.device_bytes : static_cast<std::size_t>(need);
  return s;
}

// The case's modifications applied to its problem (the specs of core/inputs.h).
void apply_case_mods(const Case& c, Problem& p) {
  if (!c.rope.empty()) apply_rope_spec(p, c.rope);
  if (c.score_mod != "none") apply_score_mod_spec(p, c.score_mod);
  if (c.mask_mod != "none") apply_mask_mod_spec(p, c.mask_mod);
}

// Query `query` of head `head` through the fp64 row reference into row `at` of b.ref, the size of
// its sums (Σ_j w_j |V_jc|) into b.magnitude.
void reference_row(BenchProblem& b, int head, int query, Eigen::Index at) {
  const RowReference row = reference_fp64_row(b.p, head, query, 0, true);
  b.ref.row(at) = Eigen::Map<const Eigen::RowVectorXd>(row.output.data(), b.p.d_v());
  b.magnitude = std::max(b.magnitude, *std::max_element(row.weighted_abs_v.begin(), row.weighted_abs_v.end()));
}

BenchProblem make_bench_problem(const Case& c, std::uint64_t seed) {
  BenchProblem b;
  b.p = random_problem(c.q(), c.n, c.d, c.d, seed, c.heads, c.g());
  b.p.mask = c.mask == "causal" ? MaskKind::Causal : MaskKind::None;
  apply_case_mods(c, b.p);
  validate(b.p);
  if (b.p.mods.rope_theta > 0) {
    // RoPE's cost: the kernels multiply Q and K rotated once per problem (kept with its inputs,
    // so the timed repetitions reuse them); that one rotation, timed here on the fresh problem.
    const auto t0 = std::chrono::steady_clock::now();
    rotated_qk(b.p);
    b.rope_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  const Problem& p = b.p;
  if (static_cast<long long>(p.heads) * p.n() <= kRowReferenceRows) {
    // Few query rows (decode shapes): every one through the fp64 row reference, which streams the
    // keys in blocks. The chain below would first copy all of K and V to double, twice the cache's
    // bytes, for a handful of rows.
    b.ref.resize(static_cast<Eigen::Index>(p.heads) * p.n(), p.d_v());
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.n(); ++i)
        reference_row(b, h, i, static_cast<Eigen::Index>(h) * p.n() + i);
    b.which = message_of(Msg::BenchRefFull, {});
    return b;
  }
  if (static_cast<double>(p.heads) * p.n() * p.m() <= kFullReferenceLimit) {
    const TraceD ref = reference_fp64(p);
    b.ref = ref.output;
    b.magnitude = max_weighted_abs_v(p, ref);
    b.which = message_of(Msg::BenchRefFull, {});
    return b;
  }
  const int count = std::min(kSampleRows, p.n());
  for (int r = 0; r < count; ++r)
    b.rows.push_back(count == 1 ? 0 : static_cast<int>((static_cast<long long>(r) * (p.n() - 1)) /
                                                       (count - 1)));
  if (has_modifications(p)) {
    // Each sampled row through the fp64 row reference, which knows every modification at the
    // row's own position (a sub-problem of the rows would move them).
    b.ref.resize(count, p.d_v());
    for (int r = 0; r < count; ++r) reference_row(b, 0, b.rows[r], r);
    b.which = message_of(Msg::BenchRefRows, {std::to_string(count)});
    return b;
  }
  Problem sub;
  ProblemInputs& in = sub.edit();
  in.q.resize(count, p.d_k());
  // The sampled rows of the mask, built row by row: the whole (N, N) mask would be 4 N^2 bytes.
  in.custom_mask = MatrixF::Zero(count, p.m());
  for (int r = 0; r < count; ++r) {
    in.q.row(r) = p.q().row(b.rows[r]);
    if (p.mask == MaskKind::Causal)
      in.custom_mask.row(r).tail(p.m() - 1 - b.rows[r] - p.causal_offset()).setConstant(-std::numeric_limits<float>::infinity());
    in.query_tokens.push_back(p.query_tokens().at(b.rows[r]));
  }
  in.k = p.k().topRows(p.m());
  in.v = p.v().topRows(p.m());
  in.key_tokens = p.key_tokens();
  sub.temperature = p.temperature;
  sub.mask = MaskKind::Custom;
  const TraceD ref = reference_fp64(sub);
  b.ref = ref.output;
  b.magnitude = max_weighted_abs_v(sub, ref);
  b.which = message_of(Msg::BenchRefRows, {std::to_string(count)});
  return b;
}

// max |out - ref| over the rows the reference covers, relative to the size of the sums behind
// them (b.magnitude, at least max |ref|): where V's terms cancel the output is near 0 while every
// rounding still scales with the sum of |terms|.
double check_error(const BenchProblem& b, const MatrixF& out) {
  double err = 0;
  if (b.rows.empty()) {
    err = (out.cast<double>() - b.ref).cwiseAbs().maxCoeff();
  } else {
    for (std::size_t r = 0; r < b.rows.size(); ++r)
      err = std::max(err, (out.row(b.rows[r]).cast<double>() - b.ref.row(static_cast<Eigen::Index>(r)))
                              .cwiseAbs()
                              .maxCoeff());
  }
  // In exact arithmetic max |ref| <= b.magnitude; the max guards the two roundings.
  return err / std::max({b.magnitude, b.ref.cwiseAbs().maxCoeff(), 1e-300});
}

// The --baseline row: cpu_staged_plain timed as the CPU backend's bench() times the staged chain
// (steady clock around each whole run, `warmup` untimed runs first), its own stage timings kept.
// Each run allocates its stages afresh (and validates the problem, O(N d)): that is the baseline.
BenchSample bench_plain(const Problem& p, int warmup, int repeat, const std::atomic<bool>* cancel) {
  RunOptions o;
  o.variant = Variant::Staged;
  o.keep_stages = true;
  BenchSample s;
  const double need = host_working_set_bytes(p, o);
  check_host_memory(need, "the plain staged chain", "try a smaller N or fewer heads");
  s.peak_bytes = static_cast<std::size_t>(need);
  const auto stop = [cancel] {
    if (cancel && cancel->load()) throw Cancelled();
  };
  for (int i = 0; i < warmup; ++i) {
    stop();
    cpu_staged_plain(p);
  }
  for (int i = 0; i < repeat; ++i) {
    stop();
    const auto t0 = std::chrono::steady_clock::now();
    Trace t = cpu_staged_plain(p);
    s.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    s.stages.push_back(t.timings);
    if (i + 1 == repeat) s.output = std::move(t.output);
  }
  return s;
}

RunOptions case_options(const Case& c, const std::atomic<bool>* cancel) {
  RunOptions opt;
  opt.variant = c.variant == "plain" ? Variant::Staged : parse_variant(c.variant);
  opt.precision = parse_precision(c.precision);
  opt.keep_stages = false;
  opt.splits = c.splits;
  opt.cancel = cancel;  // the CPU backend's bench() checks it between repetitions
  return opt;
}

// `warmup` untimed then `repeat` timed runs of the case on its problem (the backward's last
// gradients in `grads`).
BenchSample time_case(const Case& c, const Spec& a, Backend& backend, const BenchProblem& b, int warmup, int repeat,
                      const std::atomic<bool>* cancel, GradTrace& grads) {
  const Problem& p = b.p;
  return c.backward()            ? bench_backward(c, p, bench_upstream(a.seed), warmup, repeat, cancel, grads)
         : c.variant == "plain" ? bench_plain(p, warmup, repeat, cancel)
                                : backend.bench(p, case_options(c, cancel), warmup, repeat);
}

// The result of a case from its timed runs: the spread, the rates, the error against the shape's
// reference, the staged stage times.
void finish_case(Result& r, const Spec& a, BenchProblem& b, const BenchSample& s, const GradTrace& grads) {
  const Case& c = r.c;
  const RunOptions opt = case_options(c, nullptr);
  r.rope_ms = b.rope_ms;
  if (s.ms.empty()) throw InputError("the backend returned no timings");
  r.ran = true;
  r.ms = s.ms;
  r.repeats = static_cast<int>(s.ms.size());
  r.median_ms = median_of(s.ms);
  r.min_ms = *std::min_element(s.ms.begin(), s.ms.end());
  r.max_ms = *std::max_element(s.ms.begin(), s.ms.end());
  r.peak_bytes = s.peak_bytes;
  r.tflops = r.flops / (r.median_ms * 1e-3) / 1e12;
  r.gbs = r.moved_bytes / (r.median_ms * 1e-3) / 1e9;
  r.kv_gbs = r.kv_bytes / (r.median_ms * 1e-3) / 1e9;
  r.kernel = s.kernel;
  r.splits = s.splits;
  if (c.backward()) {
    const BenchProblem::Grads& ref = grad_reference(b, a.seed);
    r.rel_err = grad_error(ref, grads);
    r.reference = ref.which;
    r.inaccurate = ref.dq.size() > 0 && !(r.rel_err <= error_bound(c));
    return;
  }
  r.rel_err = check_error(b, s.output);
  r.reference = b.which;
  r.inaccurate = !(r.rel_err <= error_bound(c));
  if (opt.variant == Variant::Staged) {
    // Per-stage times from the same timed repetitions (CUDA events between the stages on the
    // GPU, the steady clock on the CPU): the median of each stage.
    if (s.stages.size() != s.ms.size())
      throw DeviceError("the backend returned no stage timings for a staged run");
    r.stages = staged_stage_bytes(c);
    const auto median_stage = [&s](double StageTimings::*field) {
      std::vector<double> v;
      for (const StageTimings& t : s.stages) v.push_back(t.*field);
      return median_of(v);
    };
    r.stages[0].ms = median_stage(&StageTimings::qk_ms);
    r.stages[1].ms = median_stage(&StageTimings::scale_mask_ms);
    r.stages[2].ms = median_stage(&StageTimings::softmax_ms);
    r.stages[3].ms = median_stage(&StageTimings::pv_ms);
  }
}

void run_case(Result& r, const Spec& a, Backend& backend, BenchProblem& b, const std::atomic<bool>* cancel) {
  GradTrace grads;
  const BenchSample s = time_case(r.c, a, backend, b, a.warmup, a.repeat, cancel, grads);
  finish_case(r, a, b, s, grads);
}

// A value given twice would time the same case twice: refused.
template <class T>
void refuse_repeats(const char* name, const std::vector<T>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::find(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v[i]) != v.begin() + static_cast<std::ptrdiff_t>(i)) {
      std::ostringstream o;
      o << v[i];
      throw InputError(std::string(name) + " lists " + o.str() + " twice");
    }
}

// Buffers both written before the clock starts (untouched pages would read as the one zero page,
// and fault inside the timing); one untimed copy, then the best of the repeats. `threads` copy
// their own contiguous slice at the same time.
constexpr std::size_t kHostCopyBytes = std::size_t{256} << 20;
constexpr int kHostCopyRepeats = 5;

double timed_copy(unsigned threads) {
  check_host_memory(2.0 * kHostCopyBytes, "the host copy probe", "the copy rate is left out");
  std::vector<unsigned char> src(kHostCopyBytes), dst(kHostCopyBytes);
  const std::size_t slice = kHostCopyBytes / threads;
  // Each slice is first written by the thread that will copy it (first touch puts its pages on
  // that thread's memory node).
  const auto each = [&](auto&& body) {
    parallel_items(threads, threads, [&](unsigned, std::size_t item) {
      const std::size_t lo = item * slice, len = item + 1 == threads ? kHostCopyBytes - lo : slice;
      body(lo, len);
    });
  };
  each([&](std::size_t lo, std::size_t len) {
    std::memset(src.data() + lo, 0x5a, len);
    std::memset(dst.data() + lo, 0, len);
  });
  volatile unsigned char sink = 0;  // a read of each copy, so none of them can be dropped
  each([&](std::size_t lo, std::size_t len) { std::memcpy(dst.data() + lo, src.data() + lo, len); });
  sink = dst[kHostCopyBytes / 3];
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kHostCopyRepeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    each([&](std::size_t lo, std::size_t len) { std::memcpy(dst.data() + lo, src.data() + lo, len); });
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink = dst[(kHostCopyBytes / 7) * static_cast<std::size_t>(i)];
  }
  static_cast<void>(sink);
  return best > 0 ? 2.0 * static_cast<double>(kHostCopyBytes) / best / 1e9 : 0;
}

unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

// The machine probes' clock: one untimed call of f, then the best of 5 timed calls, in seconds.
template <class F>
double best_of_5_seconds(F&& f) {
  f();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Vector code of the read and FMA probes, in Eigen's packets (AVX-512 or AVX2 as the build's -march).
using VecF = Eigen::internal::packet_traits<float>::type;
constexpr int kVecLanes = Eigen::internal::packet_traits<float>::size;
constexpr int kFmaChains = 12;  // enough independent chains to cover the FMA latency on 2 ports

// The sum of count floats (a multiple of kVecLanes) with 8 independent vector sums.
float sum_floats(const float* x, std::size_t count) {
  namespace ei = Eigen::internal;
  VecF acc[8];
  for (auto& a : acc) a = ei::pset1<VecF>(0.f);
  std::size_t i = 0;
  for (; i + 8 * kVecLanes <= count; i += 8 * kVecLanes)
    for (int c = 0; c < 8; ++c) acc[c] = ei::padd(acc[c], ei::ploadu<VecF>(x + i + c * kVecLanes));
  for (; i < count; i += kVecLanes) acc[0] = ei::padd(acc[0], ei::ploadu<VecF>(x + i));
  for (int c = 1; c < 8; ++c) acc[0] = ei::padd(acc[0], acc[c]);
  return ei::predux(acc[0]);
}

// A 1 GiB fp32 buffer, each hardware thread's slice first touched by that thread (its pages on
// that thread's memory node), and one pass of every thread summing its slice at once.
class HostReadProbe {
 public:
  static constexpr std::size_t kBytes = std::size_t{1} << 30;
  HostReadProbe() : threads_(hardware_threads()), buf_(kBytes / sizeof(float)), sums_(threads_) {
    each([this](std::size_t, std::size_t lo, std::size_t hi) { std::fill(buf_.begin() + lo, buf_.begin() + hi, 1.f); });
  }
  void pass() {
    each([this](std::size_t item, std::size_t lo, std::size_t hi) { sums_[item] = sum_floats(buf_.data() + lo, hi - lo); });
    volatile float sink = sums_[0];  // the sums are read, so no pass can be dropped
    static_cast<void>(sink);
  }
  // One pass, timed: GB/s.
  double pass_gbs() {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s > 0 ? static_cast<double>(kBytes) / s / 1e9 : 0;
  }

 private:
  template <class Body>
  void each(Body&& body) {
    const std::size_t count = buf_.size(), slice = count / threads_ / kVecLanes * kVecLanes;
    parallel_items(threads_, threads_, [&](unsigned, std::size_t item) {
      const std::size_t lo = item * slice, hi = item + 1 == threads_ ? count : lo + slice;
      body(item, lo, hi);
    });
  }
  unsigned threads_;
  std::vector<float> buf_;
  std::vector<float> sums_;
};

// kFmaChains chains of `steps` dependent FMAs each (x = x * a + b), returned summed so none is dropped.
float fma_chains(long steps) {
  namespace ei = Eigen::internal;
  VecF x[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) x[c] = ei::pset1<VecF>(0.001f * static_cast<float>(c));
  const VecF a = ei::pset1<VecF>(0.999999f), b = ei::pset1<VecF>(1e-7f);
  for (long s = 0; s < steps; ++s)
    for (int c = 0; c < kFmaChains; ++c) x[c] = ei::pmadd(x[c], a, b);
  for (int c = 1; c < kFmaChains; ++c) x[0] = ei::padd(x[0], x[c]);
  return ei::predux(x[0]);
}

// `reps` products c (128, 64) = a (128, 64) b (64, 64) through the kernels' wide register tile,
// operands in cache; returns an entry of c so that none is dropped.
float tile_products(long reps) {
  namespace on = cpu::online;
  constexpr int rows = 128, depth = 64, cols = 64;
  static_assert(cols % on::kWideCols == 0, "whole wide tiles");
  std::vector<float> a(rows * depth, 0.001f), b(depth * cols, 0.002f), c(rows * cols, 0.f);
  for (long r = 0; r < reps; ++r)
    for (int c0 = 0; c0 < cols; c0 += on::kWideCols)
      on::rows_madd<on::kWideVecs>(rows, a.data(), depth, 1, b.data() + c0, cols, depth, c.data() + c0, cols,
                                   nullptr);
  return c[rows * cols / 3];
}
constexpr long kTileReps = 1L << 14;
constexpr double kTileFlops = 2.0 * 128 * 64 * 64;

}  // namespace

std::string Case::label() const {
  return backend + " " + variant + " " + precision + " " + mask + " heads=" + std::to_string(heads) +
         " n=" + std::to_string(n) + " d=" + std::to_string(d) +
         (decode_shape() ? " q=" + std::to_string(q()) + " kv=" + std::to_string(g()) : "") +
         (score_mod != "none" ? " score=" + score_mod : "") + (mask_mod != "none" ? " mask=" + mask_mod : "") +
         (rope.empty() ? "" : " rope=" + rope) + (splits > 0 ? " splits=" + std::to_string(splits) : "") +
         (backward() ? " pass=backward" : "");
}



std::vector<std::string> split_list(const char* name, const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (items.back().empty())
      throw InputError(std::string(name) + " has an empty item in '" + text +
                       "' (give values separated by single commas)");
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::vector<int> int_list(const char* name, const std::string& text, int hi) {
  std::vector<int> out;
  for (const std::string& s : split_list(name, text)) {
    const bool digits = s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
    const long long x = digits ? std::stoll(s) : -1;
    if (x < 1 || x > hi)
      throw InputError(std::string(name) + " values must be whole numbers between 1 and " +
                       std::to_string(hi) + ", got '" + s + "'");
    out.push_back(static_cast<int>(x));
  }
  refuse_repeats(name, out);
  return out;
}

std::vector<std::string> word_list(const char* name, const std::string& text) {
  std::vector<std::string> out = split_list(name, text);
  refuse_repeats(name, out);
  return out;
}

std::vector<std::string> parse_passes(const std::string& flag, const std::string& text) {
  if (text == "forward" || text == "backward") return {text};
  if (text == "both") return {"forward", "backward"};
  throw InputError(flag + " takes forward, backward or both, got '" + text + "'");
}

std::string passes_name(const std::vector<std::string>& passes) {
  return passes.size() == 1 ? passes[0] : "both";
}

void check_spec(const Spec& a) {
  for (const auto& b : a.backends)
    if (b != "cpu" && b != "cuda")
      throw InputError("--backend takes cpu and/or cuda, got '" + b + "'");
  for (const auto& v : a.variants) {
    if (v == "plain")
      throw InputError("--variant takes staged, fused and/or decode; the plain chain is timed with "
                       "--baseline, beside every CPU staged case");
    parse_variant(v);
  }
  for (const auto& p : a.precisions)
    if (parse_precision(p) == Precision::FP64)
      throw InputError("--precision takes fp32 and/or bf16 (fp64 is the reference), got 'fp64'");
  for (const auto& m : a.masks)
    if (m != "none" && m != "causal")
      throw InputError("--mask takes none and/or causal, got '" + m + "'");
  for (const auto& p : a.passes)
    if (p != "forward" && p != "backward")
      throw InputError("--pass takes forward, backward or both, got '" + p + "'");
  // The modifications: parsed on a small problem (unknown items and bad numbers refused with
  // their catalogued messages); files are not taken (they fit one problem, not a sweep).
  for (const auto& s : a.score_mods) {
    if (s.find("bias:") != std::string::npos)
      throw InputError("--score-mod in bench takes alibi, alibi:S, alibi:S1/S2/... and softcap:C; a bias FILE "
                       "fits one problem: time it with `attnlab run --score-mod bias:FILE`");
    Problem p = random_problem(2, 2, 2, 0);
    apply_score_mod_spec(p, s);
  }
  for (const auto& s : a.mask_mods) {
    if (s.find("document:") != std::string::npos)
      throw InputError("--mask-mod in bench takes causal, window:W and prefix:P joined by '+'; a document "
                       "FILE fits one problem: time it with `attnlab run --mask-mod document:FILE`");
    Problem p = random_problem(2, 2, 2, 0);
    apply_mask_mod_spec(p, s);
  }
  if (!a.rope.empty()) {
    Problem p = random_problem(2, 2, 2, 0);
    apply_rope_spec(p, a.rope);
  }
  // Only the split-KV kernel cuts the keys: elsewhere --split would be silently ignored.
  if (!a.splits.empty() && std::find(a.variants.begin(), a.variants.end(), "decode") == a.variants.end()) {
    std::string variants;
    for (const auto& v : a.variants) variants += (variants.empty() ? "" : ",") + v;
    throw InputError("--split goes with --variant decode (the split-KV kernel), got --variant " + variants);
  }
  // The plain chain is timed beside each CPU fp32 staged forward case: a sweep without one would
  // time nothing and say nothing.
  const auto has = [](const std::vector<std::string>& list, const char* x) {
    return std::find(list.begin(), list.end(), x) != list.end();
  };
  if (a.baseline && !(has(a.backends, "cpu") && has(a.variants, "staged") && has(a.precisions, "fp32") &&
                      has(a.passes, "forward")))
    throw InputError("--baseline times the plain chain beside the CPU fp32 staged forward cases, and this sweep "
                     "has none: it needs --backend cpu, --variant staged, --precision fp32 and --pass forward or "
                     "both among its lists");
  if (a.repeat < 1) throw InputError("--repeat must be >= 1, got " + std::to_string(a.repeat));
  if (a.warmup < 0) throw InputError("--warmup must be >= 0, got " + std::to_string(a.warmup));
  if (!(a.max_seconds > 0))
    throw InputError("--max-seconds must be > 0, got " + format_number("%g", a.max_seconds));
}

// The bound a case's error is held to: verify's fp32 or bf16 tolerance, the backward's own.
double error_bound(const Case& c) {
  if (c.backward()) return c.precision == "bf16" ? 2 * kBf16Tol : kBackwardRtolFp32;
  return c.precision == "bf16" ? kBf16Tol : kRtolFp32;
}

namespace {

// One head of the case's shape with its mask and mask mods, d = 1 (bench's mask mods have no
// files: intervals only): what the rules are asked about.
Problem mask_shape(const Case& c) {
  Problem shape;
  shape.edit().q = MatrixF(c.q(), 1);
  shape.edit().k = MatrixF(c.n, 1);
  shape.edit().v = MatrixF(c.n, 1);
  shape.mask = c.mask == "causal" ? MaskKind::Causal : MaskKind::None;
  if (c.mask_mod != "none") apply_mask_mod_spec(shape, c.mask_mod);
  return shape;
}

}  // namespace

// 4 d per visible (query, key) pair per query head (QK^T and PV, 2 flops per multiply-add each),
// times the backward's factor.
double case_flops(const Case& c) {
  const double q = c.q(), n = c.n;
  double pairs = c.mask == "causal" ? q * n - q * q / 2 : q * n;
  // The pairs the mask's rule lets through.
  if (c.mask_mod != "none") pairs = static_cast<double>(visible_pairs(mask_shape(c)));
  return 4.0 * c.heads * pairs * c.d * backward_flop_factor(c);
}

double case_kv_bytes(const Case& c) {
  double keys = c.n;
  if (c.mask_mod != "none") {
    const Problem shape = mask_shape(c);
    int lo, hi;
    mask_rule(shape).union_interval(shape.n(), lo, hi);
    keys = std::max(0, hi - lo);
  }
  return (c.precision == "bf16" ? 2.0 : 4.0) * c.g() * keys * 2.0 * c.d;
}

double backward_flop_factor(const Case& c) {
  if (!c.backward()) return 1.0;
  return c.variant == "staged" ? 2.0 : 2.5;
}

const char* const kBackwardFlopRule =
    "backward FLOPs: the forward's 4 d per visible pair times 2.5 for the fused backward (five "
    "products: S again, dP, dV, dK, dQ; the forward's two) and 2 for the staged one (S and P kept)";

// The fewest bytes each staged kernel must move in fp32, each input read once and each output
// written once (heads*q query rows against n keys of kv_heads key/value heads, d = d_k = d_v):
//   qk          Q, K read; scores and scaled written
//   scale_mask  scaled read; logits written (bench masks are none or causal, which the kernels
//               compute from (row, col) rather than read)
//   softmax     logits read; weights written
//   pv          weights and V read; output written
std::vector<Stage> staged_stage_bytes(const Case& c) {
  const double hq = static_cast<double>(c.heads) * c.q(), kv = static_cast<double>(c.g()) * c.n;
  const double qn = hq * c.n, f = 4.0;  // the score matrices' entries
  return {{"qk", 0, f * ((hq + kv) * c.d + 2 * qn)},
          {"scale_mask", 0, f * 2 * qn},
          {"softmax", 0, f * 2 * qn},
          {"pv", 0, f * (qn + (kv + hq) * c.d)}};
}

double staged_backward_bytes(const Case& c) {
  const double hq = static_cast<double>(c.heads) * c.q(), kv = static_cast<double>(c.g()) * c.n, d = c.d;
  const bool capped = c.score_mod.find("softcap") != std::string::npos;
  const bool biased = c.score_mod.find("alibi") != std::string::npos || c.score_mod.find("bias") != std::string::npos;
  // Passes over the score-sized matrices: dV/dP 2, dlogits 4, / T 2, / divisor 2, dQ/dK 2 and the
  // finite check's read of dP, dlogits, dscaled, dscores: 16; the cap 5 and its check 1; the bias's
  // copy 2 and its check 1.
  const double score_passes = 16 + (capped ? 6 : 0) + (biased ? 3 : 0);
  const double vectors = (2 + 1) * hq * d + 2 * kv * d  // dV/dP: dO twice, dQ/dK: Q; V and K
                         + 2 * hq * d + hq              // D
                         + hq * d + 2 * kv * d          // dQ, dV, dK written
                         + (c.rope.empty() ? 0 : 4 * (hq + kv) * d);
  return 4.0 * (score_passes * hq * c.n + vectors);
}

void case_bytes(const Case& c, double& min_bytes, double& moved_bytes) {
  const double in_elem = c.precision == "bf16" ? 2.0 : 4.0;
  const double hq = static_cast<double>(c.heads) * c.q();
  const double kv = case_kv_bytes(c);  // the keys some query may see (a decode window's only)
  min_bytes = in_elem * hq * c.d + kv + 4.0 * hq * c.d;
  moved_bytes = min_bytes;
  if (c.backward()) {  // Q, K, V, O, dO read once; dQ, dK, dV written once (O and the gradients fp32)
    min_bytes = moved_bytes = in_elem * 2.0 * hq * c.d + kv + 4.0 * (2.0 * hq * c.d + 2.0 * static_cast<double>(c.g()) * c.n * c.d);
    if (c.variant == "staged") moved_bytes = staged_backward_bytes(c);
    return;
  }
  if (c.variant == "staged" || c.variant == "plain") {  // plain: the same four stages
    moved_bytes = 0;
    for (const auto& st : staged_stage_bytes(c)) moved_bytes += st.bytes;
  }
}

double cpu_rate_guess(const std::string& variant) {
  return variant == "staged" || variant == "plain" ? kCpuStagedFlops : kCpuFusedFlops;
}

Message skip_reason(const Case& c, const Spec& a, bool cuda_ok, const std::string& cuda_reason) {
  const auto said = [](Msg id, std::vector<std::string> args = {}) { return message_of(id, std::move(args)); };
  const auto kernel = [](const std::string& why) { return Message{Msg::None, {}, why}; };  // the kernels' own words
  // bf16: the CPU runs it staged, fused and decode at any head dim; CUDA with its fused and
  // decode kernels.
  if (c.precision == "bf16" && c.backend == "cuda" && c.variant != "fused" && c.variant != "decode")
    return said(Msg::BenchSkipBf16Cuda);
  if (c.precision == "bf16" && c.backend == "cuda" && c.variant == "fused")
    if (std::string why = cuda::fused_bf16_shape_error(c.d, c.d); !why.empty()) return kernel(why);
  if (c.q() > c.n) return said(Msg::BenchSkipQueries);
  if (c.backward()) {
    if (c.variant == "decode") return said(Msg::BenchSkipBackwardDecode);
    if (c.backend == "cpu" && c.precision == "bf16") return said(Msg::BenchSkipCpuBackwardBf16);
    if (c.backend == "cuda") {
#ifndef ATTNLAB_HAVE_CUDA
      return said(Msg::BenchSkipCudaBackwardBuild);
#endif
      if (c.variant != "fused") return said(Msg::BenchSkipCudaBackwardFused);
      if (c.precision == "bf16" && c.d != 64 && c.d != 128) return said(Msg::BenchSkipCudaBackwardBf16D);
      if (c.precision == "fp32" && c.d > 256) return said(Msg::BenchSkipCudaBackwardFp32D);
    }
  }
  if (c.heads % c.g() != 0) return said(Msg::BenchSkipKvHeads, {std::to_string(c.g()), std::to_string(c.heads)});
  // Never clamped without a word, as run and walk refuse it: a case runs the count it names.
  if (c.splits > c.n) return said(Msg::BenchSkipSplits, {std::to_string(c.splits), std::to_string(c.n)});
  if (c.backend == "cuda" && c.variant == "decode")
    if (std::string why = cuda::decode_shape_error(c.d, c.d, c.heads / c.g(), c.q()); !why.empty()) return kernel(why);
  if (c.backend == "cuda" && !cuda_ok) return said(Msg::NoDevice, {cuda_reason});
  if (c.backend == "cpu") {
    // Every run counts, warm-up ones too: they take as long as the timed ones.
    const double seconds = case_flops(c) / cpu_rate_guess(c.variant) * (a.repeat + a.warmup);
    if (seconds > a.max_seconds)  // two digits below 10 s, where "%.0f" would print "~0 s"
      return said(Msg::BenchSkipBudget, {format_number(seconds < 10 ? "%.2g" : "%.0f", seconds), a.max_seconds_flag,
                                         format_number("%g", a.max_seconds)});
  }
  return {};
}

std::vector<Result> plan(const Spec& a) {
  std::vector<Result> results;
  for (const auto& b : a.backends)
    for (const auto& v : a.variants)
      for (const auto& pr : a.precisions)
        for (const auto& mk : a.masks)
          for (const auto& sm : a.score_mods)
          for (const auto& mm : a.mask_mods)
          for (int h : a.heads)
            for (int g : a.kv_heads.empty() ? std::vector<int>{0} : a.kv_heads)
              for (int d : a.ds)
                for (int q : a.queries.empty() ? std::vector<int>{0} : a.queries)
                  for (int n : a.ns)
                  for (int sp : v == "decode" && !a.splits.empty() ? a.splits : std::vector<int>{0}) {
                    Result r;
                    for (const auto& pass : a.passes) {
                    r.c = Case{b, v, pr, mk, h, n, d, q == n ? 0 : q, g == h ? 0 : g, sp, sm, mm, a.rope, pass};
                    r.flops = case_flops(r.c);
                    case_bytes(r.c, r.min_bytes, r.moved_bytes);
                    r.kv_bytes = case_kv_bytes(r.c);
                    results.push_back(r);
                    // The baseline row right after its staged case: CPU, fp32, staged forward only.
                    if (a.baseline && b == "cpu" && v == "staged" && pr == "fp32" && !r.c.backward()) {
                      r.c.variant = "plain";
                      case_bytes(r.c, r.min_bytes, r.moved_bytes);
                      results.push_back(r);
                    }
                    }
                  }
  return results;
}

// What makes two cases share one problem and its reference.
auto shape_of(const Case& c) { return std::make_tuple(c.mask, c.score_mod, c.mask_mod, c.heads, c.g(), c.d, c.q(), c.n); }

// The median over rounds of x[k] / y[k]: two cases timed in turn, round by round.
double paired_ratio(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> r;
  for (std::size_t k = 0; k < std::min(x.size(), y.size()); ++k)
    if (y[k] > 0) r.push_back(x[k] / y[k]);
  return r.empty() ? 0 : median_of(r);
}

// Spec::interleave: every problem built first (held together), each case's warm-up and one more
// run (untimed: it shows the case runs), then `repeat` rounds in each of which every case runs
// once, in the lists' order. A machine whose speed drifts over seconds then slows every case of a
// round alike, and the ratio of two cases is taken round by round (Result::paired_ratio, against
// the first case that ran). With CPU decode cases each round starts with one pass of the host read
// probe, and their K+V read rate is taken against it round by round (kv_read_fraction_paired).
Outcome run_interleaved(std::vector<Result>& results, const Spec& a, bool cuda_ok, const std::string& cuda_reason,
                        const Hooks& hooks) {
  std::ostream* log = hooks.log;
  const auto cancelled = [&hooks] { return hooks.cancel && hooks.cancel->load(); };
  std::unique_ptr<Backend> cpu, gpu;
  std::map<decltype(shape_of(Case{})), std::unique_ptr<BenchProblem>> problems;
  struct Active {
    std::size_t i;
    Backend* backend;
    BenchProblem* problem;
    BenchSample sample;
    GradTrace grads;
  };
  std::vector<Active> active;
  Outcome out;
  const std::size_t total = results.size();
  std::size_t done = 0;
  double held = 0;  // the inputs of every problem built so far, in bytes
  const auto left_out = [&](std::size_t i, const Message& reason, bool failed) {
    Result& r = results[i];
    r.ran = false;
    r.failed = failed;
    r.reason = reason;
    if (failed) out.device_failure = true;
    if (log) *log << "[" << r.c.label() << "] " << (failed ? "FAILED (" : "skipped (") << reason.en << ")\n";
    if (hooks.on_case) hooks.on_case(i, ++done, total, true);
  };
  // Every case's problem, then its warm-up and one untimed run (a case that cannot run is left out
  // here, before the rounds).
  for (std::size_t i = 0; i < total && !cancelled(); ++i) {
    Result& r = results[i];
    if (hooks.on_case) hooks.on_case(i, done, total, false);
    const Message why = skip_reason(r.c, a, cuda_ok, cuda_reason);
    if (!why.empty()) {
      left_out(i, why, false);
      continue;
    }
    try {
      std::unique_ptr<Backend>& be = r.c.backend == "cpu" ? cpu : gpu;
      if (!be) be = make_backend(r.c.backend);
      std::unique_ptr<BenchProblem>& b = problems[shape_of(r.c)];
      if (!b) {
        held += 4.0 * (2.0 * r.c.heads * r.c.q() + 2.0 * r.c.g() * r.c.n) * r.c.d;
        check_host_memory(held, "the inputs and outputs of every interleaved case", "try fewer cases or a smaller N");
        b = std::make_unique<BenchProblem>(make_bench_problem(r.c, a.seed));
      }
      Active x{i, be.get(), b.get(), {}, {}};
      time_case(r.c, a, *x.backend, *x.problem, a.warmup, 1, hooks.cancel, x.grads);
      active.push_back(std::move(x));
      if (log) *log << "[" << r.c.label() << "] warmed up\n" << std::flush;
    } catch (const Cancelled&) {
      break;
    } catch (const InputError& e) {  // ResourceError (does not fit) included
      left_out(i, message_of(e), false);
    } catch (const std::bad_alloc&) {
      left_out(i, message_of(Msg::BenchSkipHostMemory, {}), false);
    } catch (const DeviceError& e) {
      left_out(i, message_of(Msg::BenchDeviceError, {e.what()}), true);
    }
  }
  // The read probe's buffer, where a CPU decode case ran (its K+V rate is read against it).
  std::optional<HostReadProbe> probe;
  std::vector<double> read_gbs;  // the probe's pass of each round
  for (const Active& x : active) {
    const Case& c = results[x.i].c;
    if (!probe && c.backend == "cpu" && c.decode()) {
      try {
        check_host_memory(static_cast<double>(HostReadProbe::kBytes), "the host read probe",
                          "the decode cases' paired read fraction is left out");
        probe.emplace();
      } catch (const std::exception& e) {
        if (log) *log << e.what() << "\n";
      }
    }
  }
  // The rounds, every case once in each. A device error ends them for every case (what came after
  // would no longer be paired); the rounds before it are kept.
  for (int round = 0; round < a.repeat && !cancelled(); ++round) {
    try {
      if (probe) read_gbs.push_back(probe->pass_gbs());
      for (Active& x : active) {
        GradTrace grads;
        const BenchSample s = time_case(results[x.i].c, a, *x.backend, *x.problem, 0, 1, hooks.cancel, grads);
        x.sample.ms.insert(x.sample.ms.end(), s.ms.begin(), s.ms.end());
        x.sample.stages.insert(x.sample.stages.end(), s.stages.begin(), s.stages.end());
        x.sample.peak_bytes = std::max(x.sample.peak_bytes, s.peak_bytes);
        x.sample.output = s.output;
        x.sample.kernel = s.kernel;
        x.sample.splits = s.splits;
        x.grads = std::move(grads);
      }
      if (log) *log << "interleaved round " << round + 1 << "/" << a.repeat << " done\n" << std::flush;
    } catch (const Cancelled&) {
      break;
    } catch (const DeviceError& e) {
      out.device_failure = true;
      if (log) *log << "interleaved rounds stopped in round " << round + 1 << ": device error: " << e.what() << "\n";
      break;
    } catch (const std::exception& e) {  // host memory, or an input a case took once and not twice
      if (log) *log << "interleaved rounds stopped in round " << round + 1 << ": " << e.what() << "\n";
      break;
    }
  }
  if (cancelled()) {
    // Stopped inside the rounds: no case is reported half-timed (they stay not run, reason "").
    out.cancelled = true;
    if (log) *log << "cancelled\n";
    return out;
  }
  // Every case keeps the rounds every case completed (a device error may have cut the last).
  std::size_t rounds = active.empty() ? 0 : active.front().sample.ms.size();
  for (const Active& x : active) rounds = std::min(rounds, x.sample.ms.size());
  if (rounds == 0) {
    for (const Active& x : active) left_out(x.i, message_of(Msg::BenchSkipNoRound, {}), false);
    return out;
  }
  for (Active& x : active) {
    Result& r = results[x.i];
    x.sample.ms.resize(rounds);
    if (!x.sample.stages.empty()) x.sample.stages.resize(rounds);
    finish_case(r, a, *x.problem, x.sample, x.grads);
    r.paired_ratio = paired_ratio(r.ms, results[active.front().i].ms);
    if (probe && read_gbs.size() >= rounds && r.c.backend == "cpu" && r.c.decode()) {
      std::vector<double> f, g(read_gbs.begin(), read_gbs.begin() + static_cast<std::ptrdiff_t>(rounds));
      for (std::size_t k = 0; k < rounds; ++k)
        if (r.ms[k] > 0 && g[k] > 0) f.push_back(r.kv_bytes / (r.ms[k] * 1e-3) / 1e9 / g[k]);
      if (!f.empty()) {
        r.kv_read_fraction_paired = median_of(f);
        r.read_gbs_rounds = std::move(g);
      }
    }
    if (r.inaccurate) ++out.inaccurate;
    if (log)
      *log << "[" << r.c.label() << "] " << format_number("%.4g", r.median_ms) << " ms median of " << r.repeats
           << " interleaved, " << format_number("%.3g", r.tflops) << " TFLOP/s, rel err "
           << format_number("%.2e", r.rel_err)
           << (r.inaccurate ? " ABOVE THE BOUND " + format_number("%.0e", error_bound(r.c)) : std::string())
           << ", round by round " << format_number("%.4g", r.paired_ratio) << "x the first\n";
    if (hooks.on_case) hooks.on_case(x.i, ++done, total, true);
  }
  return out;
}

Outcome run_sweep(std::vector<Result>& results, const Spec& a, bool cuda_ok,
                  const std::string& cuda_reason, const Hooks& hooks) {
  if (a.interleave) return run_interleaved(results, a, cuda_ok, cuda_reason, hooks);
  // Cases run grouped by shape (mask, heads, d, n): one problem and one fp64 reference per shape,
  // shared by every backend / variant / precision, and only one shape's held at a time (a
  // cache of them all held every input of the sweep until the end). The results keep the
  // lists' order.
  const auto shape = [&results](std::size_t i) { return shape_of(results[i].c); };
  std::vector<std::size_t> order(results.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&shape](std::size_t x, std::size_t y) { return shape(x) < shape(y); });

  std::ostream* log = hooks.log;
  const auto cancelled = [&hooks] { return hooks.cancel && hooks.cancel->load(); };
  std::unique_ptr<Backend> cpu, gpu;
  std::optional<BenchProblem> problem;  // the current shape's
  std::size_t problem_of = results.size();
  Outcome out;
  const std::size_t total = results.size();
  for (std::size_t done = 0; done < total; ++done) {
    const std::size_t i = order[done];
    Result& r = results[i];
    if (cancelled()) {
      out.cancelled = true;
      break;
    }
    if (hooks.on_case) hooks.on_case(i, done, total, false);
    const std::string prefix =
        "[" + std::to_string(done + 1) + "/" + std::to_string(total) + "] " + r.c.label() + ": ";
    r.reason = skip_reason(r.c, a, cuda_ok, cuda_reason);
    if (!r.reason.empty()) {
      if (log) *log << prefix << "skipped (" << r.reason.en << ")\n";
      if (hooks.on_case) hooks.on_case(i, done + 1, total, true);
      continue;
    }
    if (log) *log << prefix << std::flush;
    try {
      std::unique_ptr<Backend>& be = r.c.backend == "cpu" ? cpu : gpu;
      if (!be) be = make_backend(r.c.backend);
      if (!problem || shape(problem_of) != shape(i)) {
        problem.reset();  // the previous shape's inputs go before the next ones are built
        // Q, K, V and the output in fp32, before they are allocated: a size the machine could
        // map but not back would end in the kernel's OOM killer, not in bad_alloc.
        check_host_memory(4.0 * (2.0 * r.c.heads * r.c.q() + 2.0 * r.c.g() * r.c.n) * r.c.d, "the inputs and output",
                          "try a smaller N, d or fewer heads");
        problem = make_bench_problem(r.c, a.seed);
        problem_of = i;
      }
      run_case(r, a, *be, *problem, hooks.cancel);
      if (r.inaccurate) ++out.inaccurate;
      if (log)
        *log << format_number("%.4g", r.median_ms) << " ms median of " << r.repeats << ", "
             << format_number("%.3g", r.tflops) << " TFLOP/s, rel err " << format_number("%.2e", r.rel_err)
             << (r.inaccurate ? " ABOVE THE BOUND " + format_number("%.0e", error_bound(r.c)) : std::string())
             << (r.kernel.empty() ? std::string() : " [" + r.kernel + "]") << "\n";
    } catch (const Cancelled&) {
      // Stopped between two repetitions: the case is left out, not half-timed.
      Result fresh;
      fresh.c = r.c;
      fresh.flops = r.flops;
      fresh.min_bytes = r.min_bytes;
      fresh.moved_bytes = r.moved_bytes;
      r = fresh;
      if (log) *log << "cancelled\n";
      out.cancelled = true;
      break;
    } catch (const InputError& e) {  // ResourceError (does not fit) included
      r.ran = false;
      r.reason = message_of(e);
      if (log) *log << "skipped (" << r.reason.en << ")\n";
    } catch (const std::bad_alloc&) {
      // Host memory ran out building the inputs, the reference or the run: this case does not
      // fit; the sweep goes on with the next (what it held is freed by now).
      r.ran = false;
      r.reason = message_of(Msg::BenchSkipHostMemory, {});
      if (log) *log << "skipped (" << r.reason.en << ")\n";
    } catch (const DeviceError& e) {
      // A device failure is a defect, not a property of the case: list it and exit 1 at the end.
      r.ran = false;
      r.failed = true;
      r.reason = message_of(Msg::BenchDeviceError, {e.what()});
      if (log) *log << "FAILED (" << r.reason.en << ")\n";
      out.device_failure = true;
    }
    if (hooks.on_case) hooks.on_case(i, done + 1, total, true);
  }
  return out;
}

std::string host_cpu() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown CPU";
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto pos = line.find(':');
      if (pos != std::string::npos) model = line.substr(pos + 2);
      break;
    }
  }
  return model + " (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
}

const char* const kHostCopyRule =
    "single-thread memcpy of a 256 MiB buffer (past the last-level cache), one warm-up copy, best "
    "of 5; GB/s = (bytes read + bytes written) / time = 2 x 256 MiB / best time";
const char* const kCpuSgemmRule =
    "Eigen fp32 GEMM C = A B, n = 1024, the rows of A split over every hardware thread, one "
    "warm-up, best of 5; GFLOP/s = 2 n^3 / best time";

const char* const kHostReadRule =
    "every hardware thread sums its own slice of a 1 GiB fp32 buffer at once (8 independent vector "
    "sums each), one warm-up pass, best of 5; GB/s = 1 GiB / best time";
const char* const kCpuTileRule =
    "every hardware thread runs the fused kernels' wide register tile (rows_madd) on a (128, 64) by "
    "(64, 64) fp32 product in its caches, 2^14 times, one warm-up, best of 5; GFLOP/s = 2 x 128 x 64 x "
    "64 x 2^14 x threads / time";
const char* const kCpuFmaRule =
    "every hardware thread runs 12 independent chains of vector fused multiply-adds in registers "
    "at once, 2^24 steps per chain, best of 5; GFLOP/s = 2 x lanes x chains x steps x threads / time";

double host_read_probe_all_cores() {
  check_host_memory(static_cast<double>(HostReadProbe::kBytes), "the host read probe", "the read rate is left out");
  HostReadProbe probe;
  const double best = best_of_5_seconds([&probe] { probe.pass(); });
  return best > 0 ? static_cast<double>(HostReadProbe::kBytes) / best / 1e9 : 0;
}

double cpu_fma_peak_gflops() {
  constexpr long steps = 1L << 24;
  const unsigned threads = hardware_threads();
  std::vector<float> out(threads);
  const auto run = [&] {
    parallel_items(threads, threads, [&](unsigned, std::size_t item) { out[item] = fma_chains(steps); });
  };
  const double best = best_of_5_seconds(run);
  volatile float sink = out[0];
  static_cast<void>(sink);
  const double flops = 2.0 * kVecLanes * kFmaChains * static_cast<double>(steps) * threads;
  return best > 0 ? flops / best / 1e9 : 0;
}

double cpu_tile_peak_gflops() {
  const unsigned threads = hardware_threads();
  std::vector<float> out(threads);
  const auto run = [&] {
    parallel_items(threads, threads, [&](unsigned, std::size_t item) { out[item] = tile_products(kTileReps); });
  };
  run();  // warm-up
  const double best = best_of_5_seconds(run);
  volatile float sink = out[0];
  static_cast<void>(sink);
  return best > 0 ? kTileFlops * static_cast<double>(kTileReps) * threads / best / 1e9 : 0;
}

double host_copy_probe() { return timed_copy(1); }


double cpu_sgemm_probe_gflops() {
  constexpr int n = 1024;
  const unsigned threads = hardware_threads();
  const MatrixF a = MatrixF::Random(n, n), b = MatrixF::Random(n, n);
  MatrixF c = MatrixF::Zero(n, n);
  const int rows = (n + static_cast<int>(threads) - 1) / static_cast<int>(threads);
  const auto gemm = [&] {
    parallel_items(threads, threads, [&](unsigned, std::size_t item) {
      const int r0 = static_cast<int>(item) * rows, r1 = std::min(n, r0 + rows);
      if (r0 < r1) c.middleRows(r0, r1 - r0).noalias() = a.middleRows(r0, r1 - r0) * b;
    });
  };
  const double best = best_of_5_seconds(gemm);
  volatile float sink = c(n / 3, n / 5);  // the product is read, so it cannot be dropped
  static_cast<void>(sink);
  return best > 0 ? 2.0 * n * n * static_cast<double>(n) / best / 1e9 : 0;
}

Ceilings cpu_ceilings() {
  Ceilings c;
  c.bandwidth_rule = kHostReadRule;
  c.gemm_rule = kCpuSgemmRule;
  c.peak_rule = kCpuFmaRule;
  try {
    c.bandwidth_gbs = host_read_probe_all_cores();
  } catch (const std::exception& e) {
    c.note = std::string("read probe: ") + e.what();
  }
  c.gemm_gflops = cpu_sgemm_probe_gflops();
  c.peak_gflops = cpu_fma_peak_gflops();
  return c;
}

Ceilings cuda_ceilings() {
  Ceilings c;
  c.bandwidth_rule = "device-to-device cudaMemcpyAsync of 1 GiB, median of 20, timed with events; "
                     "GB/s = 2 x bytes / time";
  c.gemm_rule = "cuBLAS SGEMM (fp32, no tensor cores) n = 4096, one warm-up, best of 5 timed with events";
  std::string why;
  if (!cuda_available(&why)) {
    c.note = "no CUDA device: " + why;
    return c;
  }
#ifdef ATTNLAB_HAVE_CUDA
  try {
    c.bandwidth_gbs = cuda::copy_bandwidth_gbs(std::size_t{1} << 30);
  } catch (const std::exception& e) {
    c.note = std::string("copy probe: ") + e.what();
  }
  try {
    c.gemm_gflops = cuda::cublas_sgemm_gflops(4096);
  } catch (const std::exception& e) {
    c.note += (c.note.empty() ? "" : "; ") + std::string("cuBLAS probe: ") + e.what();
  }
#endif
  return c;
}

}  // namespace attnlab::bench
