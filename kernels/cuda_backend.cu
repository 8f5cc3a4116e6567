// The CUDA backend (kernels/cuda_backend.h): the only file that mixes attnlab types (Problem,
// Trace) with device memory and Thrust. It uploads the inputs, runs the staged chain
// (kernels/stages.h: qk -> scale_mask -> softmax -> pv) or a fused kernel (kernels/fused.h), times
// every stage with CUDA events and brings the stages back into a Trace shaped exactly like the CPU
// backend's. Device buffers are RAII (DeviceBuffer below), so an exception mid-run leaks nothing.
//
// Before allocating, the run's memory need is estimated (inputs, every N x N stage buffer, output;
// with keep_stages also the host copies) and compared with cudaMemGetInfo's free memory and the
// host's MemAvailable; a problem that does not fit is refused with ResourceError naming both.
//
// Fault injection, for the fallback and refusal tests on machines without a GPU. The environment
// variable ATTNLAB_CUDA_FAULT, read on every call:
//   nodevice  device_available() is false with reason "forced by ATTNLAB_CUDA_FAULT=nodevice"
//   launch    device_available() is true and make_backend() succeeds even without a device, but
//             run(), bench() and copy_bandwidth_gbs() throw DeviceError("... forced launch failure
//             (ATTNLAB_CUDA_FAULT=launch)") before touching the device
//   oom       like launch for availability, but the memory estimate compares with a free-memory
//             limit of 1 MiB, so a problem of a few MiB is refused with ResourceError
// Any other value (or unset/empty) means no fault.
#include "kernels/cuda_check.h"

#include "kernels/cuda_backend.h"
#include "kernels/fused.h"
#include "kernels/stages.h"
#include "kernels/tile_config.h"

#include "core/format.h"
#include "core/problem.h"

#include <cuda_bf16.h>
#include <thrust/execution_policy.h>
#include <thrust/system/system_error.h>
#include <thrust/transform.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::cuda {
namespace {

// ---- fault injection -------------------------------------------------------------------------

enum class Fault { None, NoDevice, Launch, Oom };

Fault fault_from_env() {
  const char* e = std::getenv("ATTNLAB_CUDA_FAULT");
  if (e == nullptr) return Fault::None;
  const std::string v = e;
  if (v == "nodevice") return Fault::NoDevice;
  if (v == "launch") return Fault::Launch;
  if (v == "oom") return Fault::Oom;
  return Fault::None;
}

constexpr std::size_t kOomFaultFreeBytes = std::size_t{1} << 20;  // 1 MiB

void throw_if_launch_fault(const char* where) {
  if (fault_from_env() == Fault::Launch)
    throw DeviceError(std::string(where) +
                      ": forced launch failure (ATTNLAB_CUDA_FAULT=launch)");
}

// ---- RAII for device resources -------------------------------------------------------------------

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) ATTNLAB_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  // A destructor may run while an exception from a failed launch unwinds: its error is not ours
  // to report (the first one already is), so cudaFree's result is deliberately ignored.
  ~DeviceBuffer() { release(); }

  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

 private:
  void release() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

class Stream {
 public:
  Stream() { ATTNLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(s_); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { ATTNLAB_CUDA_CHECK(cudaEventCreate(&e_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(e_); }
  void record(cudaStream_t s) { ATTNLAB_CUDA_CHECK(cudaEventRecord(e_, s)); }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

double elapsed_ms(const Event& a, const Event& b) {
  float ms = 0;
  ATTNLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return ms;
}

// ---- sizes and the memory estimate ---------------------------------------------------------------

struct Dims {
  int heads, n, m, d_k, d_v;
  std::size_t nm() const { return static_cast<std::size_t>(n) * m; }              // one mask
  std::size_t stage() const { return static_cast<std::size_t>(heads) * n * m; }   // one N x N stage
  std::size_t q() const { return static_cast<std::size_t>(heads) * n * d_k; }
  std::size_t k() const { return static_cast<std::size_t>(heads) * m * d_k; }
  std::size_t v() const { return static_cast<std::size_t>(heads) * m * d_v; }
  std::size_t out() const { return static_cast<std::size_t>(heads) * n * d_v; }
};

Dims dims_of(const Problem& p) { return {p.heads, p.n(), p.m(), p.d_k(), p.d_v()}; }

// The staged chain keeps four (heads*n, m) stages (scores, scaled, logits, weights) on the device.
constexpr int kStagedBuffers = 4;

// True when the run brings every stage back (bench never does): only then is the staged (n, m)
// mask matrix built, because scale_mask computes None and Causal from (row, col).
bool shows_stages(const RunOptions& opt, bool bench) {
  return !bench && opt.variant == Variant::Staged && opt.keep_stages;
}

// The device buffers a run allocates, in elements: what allocate() creates and what the memory
// estimate adds up, decided in this one place.
struct BufferPlan {
  std::size_t q = 0, k = 0, v = 0, out = 0;  // fp32
  std::size_t mask = 0;   // (n, m) fp32: a custom mask, or the staged mask a run shows
  std::size_t stage = 0;  // each of the kStagedBuffers staged matrices
  bool bf16 = false;      // bf16 copies of q, k and v (fused bf16)

  std::size_t device_bytes() const {
    return (q + k + v + out + mask + kStagedBuffers * stage) * sizeof(float) +
           (bf16 ? (q + k + v) * sizeof(std::uint16_t) : 0);
  }
};

BufferPlan plan_buffers(const Dims& d, const Problem& p, const RunOptions& opt, bool bench) {
  BufferPlan b;
  b.q = d.q();
  b.k = d.k();
  b.v = d.v();
  b.out = d.out();
  if (p.mask == MaskKind::Custom || shows_stages(opt, bench)) b.mask = d.nm();
  if (opt.variant == Variant::Staged) b.stage = d.stage();
  b.bf16 = opt.variant == Variant::Fused && opt.precision == Precision::BF16;
  return b;
}

// Host bytes the Trace needs beyond the Problem already in memory.
std::size_t host_bytes_needed(const Dims& d, const RunOptions& opt, bool bench) {
  const std::size_t f = sizeof(float);
  std::size_t bytes = d.out() * f;
  if (shows_stages(opt, bench)) bytes += (kStagedBuffers * d.stage() + d.nm()) * f;
  return bytes;
}

void check_memory(const Problem& p, const RunOptions& opt, bool bench) {
  const Dims d = dims_of(p);
  const BufferPlan plan = plan_buffers(d, p, opt, bench);
  const std::size_t need = plan.device_bytes();
  std::size_t free_bytes = kOomFaultFreeBytes;
  if (fault_from_env() != Fault::Oom) {
    std::size_t total = 0;
    ATTNLAB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  }
  if (need > free_bytes) {
    std::ostringstream what;
    if (opt.variant == Variant::Staged)
      what << "staged: " << kStagedBuffers << " stages of " << d.heads << " x " << d.n << " x "
           << d.m << " fp32, the inputs"
           << (plan.mask != 0 ? " and the mask" : "");
    else
      what << "fused: inputs and output";
    throw ResourceError("problem needs " + format_bytes(static_cast<double>(need)) +
                        " of GPU memory (" + what.str() + "), " +
                        format_bytes(static_cast<double>(free_bytes)) + " free; " +
                        (opt.variant == Variant::Staged ? "try --variant fused or smaller N"
                                                        : "try smaller N"));
  }
  const std::size_t host_need = host_bytes_needed(d, opt, bench);
  if (const double avail = host_available_bytes(); avail > 0 && static_cast<double>(host_need) > avail) {
    throw ResourceError("problem needs " + format_bytes(static_cast<double>(host_need)) +
                        " of host memory to bring back every stage (" +
                        std::to_string(kStagedBuffers) + " x " + std::to_string(d.heads) + " x " +
                        std::to_string(d.n) + " x " + std::to_string(d.m) + " fp32), " +
                        format_bytes(avail) +
                        " available; try --variant fused or smaller N");
  }
}

// ---- option checks ---------------------------------------------------------------------------------

void check_options(const Problem& p, const RunOptions& opt) {
  if (opt.precision == Precision::FP64)
    throw InputError("the CUDA backend computes in fp32 (or bf16 with --variant fused); "
                     "fp64 is the CPU reference");
  if (opt.precision == Precision::BF16 && opt.variant == Variant::Staged)
    throw InputError("bf16 is only available with --variant fused");
  if (opt.precision == Precision::BF16 && p.mask == MaskKind::Custom)
    throw InputError("bf16 fused attention supports the none and causal masks, not a custom mask");
  // What the launchers would refuse, refused here before anything is uploaded: the head dims and
  // the configuration switch that applies (ATTNLAB_FUSED_CONFIG=6 is valid for fp32, not bf16).
  if (opt.variant == Variant::Staged) {
    staged_config();
    return;
  }
  const bool bf16 = opt.precision == Precision::BF16;
  const std::string why =
      bf16 ? fused_bf16_shape_error(p.d_k(), p.d_v()) : fused_fp32_shape_error(p.d_k(), p.d_v());
  if (!why.empty()) throw InputError(why);
  bf16 ? fused_bf16_config() : fused_fp32_config();
}

// What run_into and bench check before touching the device, in this order: the problem, the
// option combination (shapes and configuration switches included), an injected fault, the memory
// estimate.
void check_before_run(const Problem& p, const RunOptions& opt, bool bench) {
  validate(p);
  check_options(p, opt);
  throw_if_launch_fault(bench ? "cuda bench" : "cuda run");
  check_memory(p, opt, bench);
}

MaskCode mask_code(MaskKind k) {
  switch (k) {
    case MaskKind::Causal: return MaskCode::Causal;
    case MaskKind::Custom: return MaskCode::Custom;
    default: return MaskCode::None;
  }
}

// ---- host <-> device ---------------------------------------------------------------------------

void upload(float* dst, const MatrixF& src, cudaStream_t s) {
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), static_cast<std::size_t>(src.size()) * sizeof(float),
                                     cudaMemcpyHostToDevice, s));
}

void download(MatrixF& dst, const float* src, Eigen::Index rows, Eigen::Index cols,
              cudaStream_t s) {
  dst.resize(rows, cols);
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src,
                                     static_cast<std::size_t>(rows) * cols * sizeof(float),
                                     cudaMemcpyDeviceToHost, s));
}

struct ToBf16 {
  __device__ std::uint16_t operator()(float x) const {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};

// dst (count) = src rounded to bf16 (nearest even): element-wise, the natural Thrust fit.
void to_bf16(const float* src, std::uint16_t* dst, std::size_t count, cudaStream_t s) {
  try {
    thrust::transform(thrust::cuda::par_nosync.on(s), src, src + count, dst, ToBf16{});
  } catch (const thrust::system_error& e) {
    throw DeviceError(std::string("thrust::transform (fp32 -> bf16): ") + e.what());
  }
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// ---- the device-side state of one problem --------------------------------------------------------

// Inputs and every buffer the chosen variant writes, allocated once (run and bench alike).
struct DeviceProblem {
  Dims d;
  MaskCode code = MaskCode::None;
  float sqrt_dk = 1, temperature = 1;
  float fused_scale = 1;  // 1 / (sqrt(d_k) T), for the fused kernels
  DeviceBuffer<float> q, k, v, out;
  DeviceBuffer<float> mask;  // (n, m): a custom mask, or the staged mask a run shows; else empty
  DeviceBuffer<float> scores, scaled, logits, weights;  // staged only
  DeviceBuffer<std::uint16_t> q16, k16, v16;            // fused bf16 only

  std::size_t device_bytes() const {
    return q.bytes() + k.bytes() + v.bytes() + out.bytes() + mask.bytes() + scores.bytes() +
           scaled.bytes() + logits.bytes() + weights.bytes() + q16.bytes() + k16.bytes() +
           v16.bytes();
  }
};

DeviceProblem allocate(const Problem& p, const RunOptions& opt, bool bench) {
  DeviceProblem dp;
  dp.d = dims_of(p);
  dp.code = mask_code(p.mask);
  // sqrt and 1/T are taken in double, then rounded once, as the CPU chain's constants are.
  dp.sqrt_dk = static_cast<float>(std::sqrt(static_cast<double>(dp.d.d_k)));
  dp.temperature = static_cast<float>(p.temperature);
  dp.fused_scale =
      static_cast<float>(1.0 / (std::sqrt(static_cast<double>(dp.d.d_k)) * p.temperature));
  const BufferPlan b = plan_buffers(dp.d, p, opt, bench);
  dp.q = DeviceBuffer<float>(b.q);
  dp.k = DeviceBuffer<float>(b.k);
  dp.v = DeviceBuffer<float>(b.v);
  dp.out = DeviceBuffer<float>(b.out);
  dp.mask = DeviceBuffer<float>(b.mask);  // size 0: no allocation, get() is nullptr
  dp.scores = DeviceBuffer<float>(b.stage);
  dp.scaled = DeviceBuffer<float>(b.stage);
  dp.logits = DeviceBuffer<float>(b.stage);
  dp.weights = DeviceBuffer<float>(b.stage);
  if (b.bf16) {
    dp.q16 = DeviceBuffer<std::uint16_t>(b.q);
    dp.k16 = DeviceBuffer<std::uint16_t>(b.k);
    dp.v16 = DeviceBuffer<std::uint16_t>(b.v);
  }
  return dp;
}

// Host -> device copies of the inputs (and the custom mask), plus the bf16 conversion.
void upload_inputs(DeviceProblem& dp, const Problem& p, const RunOptions& opt, cudaStream_t s) {
  upload(dp.q.get(), p.q, s);
  upload(dp.k.get(), p.k, s);
  upload(dp.v.get(), p.v, s);
  if (p.mask == MaskKind::Custom) upload(dp.mask.get(), p.custom_mask, s);
  if (opt.variant == Variant::Fused && opt.precision == Precision::BF16) {
    to_bf16(dp.q.get(), dp.q16.get(), dp.q.size(), s);
    to_bf16(dp.k.get(), dp.k16.get(), dp.k.size(), s);
    to_bf16(dp.v.get(), dp.v16.get(), dp.v.size(), s);
  }
}

// Staged chain, stage by stage; `marks` (when given) are recorded after each stage:
// [0] after qk, [1] after scale_mask, [2] after softmax, [3] after pv. With `build_mask` the
// (n, m) mask matrix the Trace shows is built first in the scale_mask stage (only runs that keep
// their stages need it: scale_mask computes None and Causal from (row, col)).
void run_staged(const DeviceProblem& dp, cudaStream_t s, Event* marks, bool build_mask) {
  const Dims& d = dp.d;
  launch_qk(dp.q.get(), dp.k.get(), dp.scores.get(), dp.scaled.get(), d.heads, d.n, d.m, d.d_k,
            dp.sqrt_dk, s);
  if (marks) marks[0].record(s);
  if (build_mask) launch_build_mask(dp.mask.get(), dp.code, d.n, d.m, s);
  launch_scale_mask(dp.scaled.get(), dp.mask.get(), dp.logits.get(), dp.code, d.heads, d.n, d.m,
                    dp.temperature, s);
  if (marks) marks[1].record(s);
  launch_softmax(dp.logits.get(), dp.weights.get(), static_cast<std::int64_t>(d.heads) * d.n, d.m,
                 s);
  if (marks) marks[2].record(s);
  launch_pv(dp.weights.get(), dp.v.get(), dp.out.get(), d.heads, d.n, d.m, d.d_v,
            dp.code == MaskCode::Causal, s);
  if (marks) marks[3].record(s);
}

void run_fused(const DeviceProblem& dp, const RunOptions& opt, cudaStream_t s) {
  const Dims& d = dp.d;
  const float scale = dp.fused_scale;
  const bool causal = dp.code == MaskCode::Causal;
  if (opt.precision == Precision::BF16) {
    fused_attention_bf16(dp.q16.get(), dp.k16.get(), dp.v16.get(), dp.out.get(), d.heads, d.n, d.m,
                         d.d_k, scale, causal, s);
  } else {
    fused_attention_fp32(dp.q.get(), dp.k.get(), dp.v.get(), dp.out.get(), d.heads, d.n, d.m,
                         d.d_k, d.d_v, scale, causal,
                         dp.code == MaskCode::Custom ? dp.mask.get() : nullptr, s);
  }
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// One pass of the chosen variant, what bench repeats; `marks` as run_staged's (staged only).
void run_chain(const DeviceProblem& dp, const RunOptions& opt, cudaStream_t s,
               Event* marks = nullptr) {
  if (opt.variant == Variant::Staged)
    run_staged(dp, s, marks, /*build_mask=*/false);
  else
    run_fused(dp, opt, s);
}

// ---- the backend ---------------------------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }

  Trace run(const Problem& p, const RunOptions& opt) override {
    Trace t;
    run_into(p, opt, t);
    return t;
  }

  // Downloads into `t`'s matrices, which keep their buffers when the shapes match: a repeated run
  // of the same size (the viewer on every temperature change) touches no fresh host pages.
  void run_into(const Problem& p, const RunOptions& opt, Trace& t) override {
    const auto wall0 = std::chrono::steady_clock::now();
    check_before_run(p, opt, /*bench=*/false);

    Stream stream;
    const cudaStream_t s = stream.get();
    DeviceProblem dp = allocate(p, opt, /*bench=*/false);
    const Dims& d = dp.d;

    // ev[0] start, [1] uploaded, [2..5] after qk / scale_mask / softmax / pv, [6] downloaded.
    Event ev[7];
    ev[0].record(s);
    upload_inputs(dp, p, opt, s);
    ev[1].record(s);

    t.backend = "cuda";
    t.variant = opt.variant;
    t.precision = opt.precision;
    t.timings = StageTimings{};
    if (opt.variant == Variant::Staged) {
      run_staged(dp, s, &ev[2], /*build_mask=*/opt.keep_stages);
      t.has_stages = opt.keep_stages;
      if (opt.keep_stages) {
        const Eigen::Index rows = static_cast<Eigen::Index>(d.heads) * d.n;
        download(t.scores, dp.scores.get(), rows, d.m, s);
        download(t.scaled, dp.scaled.get(), rows, d.m, s);
        download(t.mask, dp.mask.get(), d.n, d.m, s);
        download(t.logits, dp.logits.get(), rows, d.m, s);
        download(t.weights, dp.weights.get(), rows, d.m, s);
      }
    } else {
      // Fused: the one kernel stands for the whole chain; its time is between ev[1] and ev[5].
      run_fused(dp, opt, s);
      for (int i = 2; i <= 5; ++i) ev[i].record(s);
      t.has_stages = false;
    }
    // A reused trace must not keep stages of an earlier run.
    if (!t.has_stages) t.scores = t.scaled = t.mask = t.logits = t.weights = MatrixF();
    download(t.output, dp.out.get(), static_cast<Eigen::Index>(d.heads) * d.n, d.d_v, s);
    ev[6].record(s);
    ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));

    StageTimings& tm = t.timings;
    tm.upload_ms = elapsed_ms(ev[0], ev[1]);
    if (opt.variant == Variant::Staged) {
      tm.qk_ms = elapsed_ms(ev[1], ev[2]);
      tm.scale_mask_ms = elapsed_ms(ev[2], ev[3]);
      tm.softmax_ms = elapsed_ms(ev[3], ev[4]);
      tm.pv_ms = elapsed_ms(ev[4], ev[5]);
    } else {
      tm.fused_ms = elapsed_ms(ev[1], ev[5]);
    }
    tm.download_ms = elapsed_ms(ev[5], ev[6]);
    tm.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                            wall0).count();
  }

  BenchSample bench(const Problem& p, const RunOptions& opt, int warmup, int repeat) override {
    check_before_run(p, opt, /*bench=*/true);

    Stream stream;
    const cudaStream_t s = stream.get();
    DeviceProblem dp = allocate(p, opt, /*bench=*/true);
    upload_inputs(dp, p, opt, s);

    for (int i = 0; i < warmup; ++i) run_chain(dp, opt, s);
    ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));

    BenchSample out;
    out.peak_bytes = dp.device_bytes();
    const bool staged = opt.variant == Variant::Staged;
    // Staged: marks[0..3] after qk / scale_mask / softmax / pv, inside the timed span.
    Event start, stop, marks[4];
    for (int i = 0; i < repeat; ++i) {
      start.record(s);
      run_chain(dp, opt, s, marks);
      stop.record(s);
      ATTNLAB_CUDA_CHECK(cudaEventSynchronize(stop.get()));
      out.ms.push_back(elapsed_ms(start, stop));
      if (staged) {
        StageTimings t;
        t.qk_ms = elapsed_ms(start, marks[0]);
        t.scale_mask_ms = elapsed_ms(marks[0], marks[1]);
        t.softmax_ms = elapsed_ms(marks[1], marks[2]);
        t.pv_ms = elapsed_ms(marks[2], marks[3]);
        out.stages.push_back(t);
      }
    }
    download(out.output, dp.out.get(), static_cast<Eigen::Index>(dp.d.heads) * dp.d.n, dp.d.d_v,
             s);
    ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
  }
};

}  // namespace

bool device_available(std::string* reason) {
  switch (fault_from_env()) {
    case Fault::NoDevice:
      if (reason) *reason = "forced by ATTNLAB_CUDA_FAULT=nodevice";
      return false;
    case Fault::Launch:
    case Fault::Oom:
      // The forced device "answers", so that the failure comes from run() as a real one would.
      return true;
    case Fault::None: break;
  }
  // cudaGetDeviceCount leaves the count untouched when it fails (no driver, driver too old).
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so that it does not surface at the next unrelated check
    if (reason)
      *reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" +
                cudaGetErrorString(err) + ")";
    return false;
  }
  if (count <= 0) {
    if (reason) *reason = "cudaGetDeviceCount found no device";
    return false;
  }
  return true;
}

std::string device_description() {
  const Fault f = fault_from_env();
  std::string reason;
  const bool real = f == Fault::None && device_available(&reason);
  if (!real) {
    if (f == Fault::None) return "no CUDA device: " + reason;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
      cudaGetLastError();
      const char* v = std::getenv("ATTNLAB_CUDA_FAULT");
      return std::string("forced device (ATTNLAB_CUDA_FAULT=") + (v ? v : "") + ")";
    }
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return "CUDA device 0 (properties unavailable)";
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (%d SMs, %.1f GiB, sm_%d%d)", prop.name,
                prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), prop.major,
                prop.minor);
  return buf;
}

std::unique_ptr<Backend> make_backend() {
  std::string reason;
  if (!device_available(&reason)) throw NoDeviceError("no CUDA device: " + reason);
  return std::make_unique<CudaBackend>();
}

double copy_bandwidth_gbs(std::size_t bytes, int repeat) {
  throw_if_launch_fault("copy_bandwidth_gbs");
  if (bytes == 0 || repeat <= 0) return 0;
  Stream stream;
  const cudaStream_t s = stream.get();
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  // Defined contents, so that a memory checker has nothing to say about the copies.
  ATTNLAB_CUDA_CHECK(cudaMemsetAsync(src.get(), 1, bytes, s));
  ATTNLAB_CUDA_CHECK(
      cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));  // warm-up
  std::vector<double> ms;
  Event start, stop;
  for (int i = 0; i < repeat; ++i) {
    start.record(s);
    ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
    stop.record(s);
    ATTNLAB_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    ms.push_back(elapsed_ms(start, stop));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms.size() % 2 ? ms[ms.size() / 2]
                                      : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  // A copy reads every byte and writes every byte.
  return 2.0 * static_cast<double>(bytes) / (median * 1e6);
}

}  // namespace attnlab::cuda
