// The CUDA backend (kernels/cuda_backend.h): the only file that mixes attnlab types (Problem,
// Trace) with device memory and Thrust. It uploads the inputs, runs the staged chain
// (kernels/stages.h: qk -> scale_mask -> softmax -> pv) or a fused kernel (kernels/fused.h), times
// every stage with CUDA events and brings the stages back into a Trace shaped exactly like the CPU
// backend's. Device buffers are RAII (DeviceBuffer below), so an exception mid-run leaks nothing.
//
// Streaming (RunOptions::pool / rows, run_streamed below): the staged chain's pooled views and
// exact rows for problems whose (n, m) stages cannot be held, through kernels/stream_pool.h, with
// the output (when asked) from the fused fp32 kernel. Device memory is the inputs plus O(rows +
// pixels); launches are of bounded work, with progress and cancel between them.
//
// Before allocating, the run's memory need is estimated (inputs, every N x N stage buffer, output;
// with keep_stages also the host copies) and compared with cudaMemGetInfo's free memory and the
// host's MemAvailable; a problem that does not fit is refused with ResourceError naming both.
//
// Modifications (core/modify.h): RoPE is the host's rotation (rotated_qk, made once per problem),
// uploaded in place of Q and K. Every other modification, and a causal mask over fewer queries
// than keys, runs the kernels "with rules" (kernels/rules.h): the problem's MaskRule and ScoreRule
// with device copies of the slopes, the bias, the document ids and a custom mask, and for a fused
// kernel the block mask of its own tile grid (one byte per tile, and each query tile's range of
// non-empty key tiles), computed on the host once per run. The staged chain's scale_mask stage
// applies them and writes the biased and capped stages a run brings back; the fused, decode and
// streaming kernels apply them per element. Problems without them run the code of before.
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

#include "kernels/backward.h"
#include "kernels/cuda_backend.h"
#include "kernels/decode.h"
#include "kernels/fused.h"
#include "kernels/stages.h"
#include "kernels/stream_pool.h"
#include "kernels/tile_config.h"

#include "core/format.h"
#include "core/memory.h"
#include "core/modify.h"
#include "core/output_range.h"
#include "core/problem.h"
#include "core/parallel.h"

#include <cuda_bf16.h>
#include <thrust/execution_policy.h>
#include <thrust/system/system_error.h>
#include <thrust/transform.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
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

// The device's free memory, which every memory estimate is held to: kOomFaultFreeBytes under
// ATTNLAB_CUDA_FAULT=oom.
std::size_t device_free_bytes() {
  if (fault_from_env() == Fault::Oom) return kOomFaultFreeBytes;
  std::size_t free_bytes = 0, total = 0;
  ATTNLAB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

// ResourceError `id` ({0} need, {1} free) where `need` bytes exceed the device's free memory.
void refuse_unless_it_fits(std::size_t need, Msg id) {
  if (const std::size_t free_bytes = device_free_bytes(); need > free_bytes)
    throw ResourceError(id, {format_bytes(static_cast<double>(need)), format_bytes(static_cast<double>(free_bytes))});
}

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

// ---- device -> host copies ------------------------------------------------------------------------

// Page-locked host memory, kept by a backend between runs: two staging slots, so that the copy
// engine fills one while the host copies the other out into the (pageable) Trace.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging() { release(); }
  // False when the page-locked memory cannot be had: the caller copies into pageable memory then.
  bool reserve(std::size_t slot_bytes) {
    if (slot_bytes <= slot_) return true;
    release();
    void* p = nullptr;
    if (cudaMallocHost(&p, 2 * slot_bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the run goes on with pageable copies
      return false;
    }
    base_ = static_cast<char*>(p);
    slot_ = slot_bytes;
    return true;
  }
  char* slot(int i) const { return base_ + static_cast<std::size_t>(i) * slot_; }
  std::size_t slot_bytes() const { return slot_; }

 private:
  void release() {
    if (base_ != nullptr) cudaFreeHost(base_);
    base_ = nullptr;
    slot_ = 0;
  }
  char* base_ = nullptr;
  std::size_t slot_ = 0;
};

// One staging slot: large enough that a (4096, 4096) stage is two pieces, small enough that the
// pipeline below overlaps the copy engine and the host.
constexpr std::size_t kStagingSlotBytes = std::size_t{32} << 20;

// True unless ATTNLAB_CUDA_DOWNLOAD=pageable (read on every run): the redraw benchmark times both.
bool pinned_downloads() {
  const char* e = std::getenv("ATTNLAB_CUDA_DOWNLOAD");
  return e == nullptr || std::string(e) != "pageable";
}

struct Download {
  void* dst;
  const void* src;
  std::size_t bytes;
};

// dst[0, bytes) = src, on every host core for large copies (1 MiB items).
void host_copy(char* dst, const char* src, std::size_t bytes) {
  constexpr std::size_t kItem = std::size_t{1} << 20;
  const std::size_t items = (bytes + kItem - 1) / kItem;
  const unsigned workers = bytes >= 4 * kItem ? worker_count(items, 1e9) : 1;
  parallel_items(items, workers, [&](unsigned, std::size_t i) {
    const std::size_t off = i * kItem;
    std::memcpy(dst + off, src + off, std::min(kItem, bytes - off));
  });
}

// The device -> host copies of `jobs` on stream s, after everything queued on it before, done on
// return. With `pinned`, the jobs are cut into slot-sized pieces that alternate between its two
// slots: piece k+1 is in flight on the copy engine while the host copies piece k out. Without,
// one pageable cudaMemcpyAsync each (the driver then stages through its own small buffers).
void download_all(const std::vector<Download>& jobs, cudaStream_t s, PinnedStaging* pinned) {
  if (pinned == nullptr) {
    for (const Download& j : jobs)
      if (j.bytes > 0) ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(j.dst, j.src, j.bytes, cudaMemcpyDeviceToHost, s));
    ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  struct Piece {
    char* dst;
    const char* src;
    std::size_t bytes;
  };
  std::vector<Piece> pieces;
  const std::size_t slot = pinned->slot_bytes();
  for (const Download& j : jobs)
    for (std::size_t off = 0; off < j.bytes; off += slot)
      pieces.push_back({static_cast<char*>(j.dst) + off, static_cast<const char*>(j.src) + off,
                        std::min(slot, j.bytes - off)});
  Event filled[2];
  for (std::size_t k = 0; k <= pieces.size(); ++k) {
    // Slot k % 2 held piece k - 2, already copied out in the previous iteration.
    if (k < pieces.size()) {
      ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(pinned->slot(k % 2), pieces[k].src, pieces[k].bytes,
                                         cudaMemcpyDeviceToHost, s));
      filled[k % 2].record(s);
    }
    if (k > 0) {
      const std::size_t prev = k - 1;
      ATTNLAB_CUDA_CHECK(cudaEventSynchronize(filled[prev % 2].get()));
      host_copy(pieces[prev].dst, pinned->slot(static_cast<int>(prev % 2)), pieces[prev].bytes);
    }
  }
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

// Whether a prefill run (staged, fused, streamed) goes through the kernels' rules
// (kernels/rules.h): a score or mask mod, a causal mask over fewer queries than keys (MaskRule
// places the queries at the end), and for the fused bf16 kernel a custom mask (its rule-free code
// reads none). RoPE alone needs none: the kernels multiply the rotated Q and K.
bool uses_rules(const Problem& p, const RunOptions& opt) {
  return has_score_mods(p) || has_mask_mods(p) || (p.mask == MaskKind::Causal && p.n() != p.m()) ||
         (opt.variant == Variant::Fused && opt.precision == Precision::BF16 && p.mask == MaskKind::Custom);
}

// The fused kernel's tile a run with rules launches, whose block mask it uploads. The backend's
// buffers come from cudaMalloc, aligned as the 3xTF32 kernel needs.
FusedTile rules_tile(const Problem& p, const RunOptions& opt) {
  return opt.precision == Precision::BF16 ? fused_bf16_rules_tile(p.d_k())
                                          : fused_fp32_rules_tile(p.d_k(), p.d_v(), /*aligned=*/true);
}

// Device bytes of a fused kernel's block mask (one byte per tile, a key-tile range per query tile)
// and its tile counter.
std::size_t block_mask_bytes(int n, int m, FusedTile t) {
  const std::size_t qb = static_cast<std::size_t>((n + t.q_tile - 1) / t.q_tile);
  const std::size_t kb = static_cast<std::size_t>((m + t.k_tile - 1) / t.k_tile);
  return qb * kb + 2 * qb * sizeof(int) + sizeof(unsigned long long);
}

// The device buffers a run allocates, in elements: what allocate() creates and what the memory
// estimate adds up, decided in this one place. (A fused run's block mask depends on the mask's
// contents, not only the shapes: it is allocated with its upload, and counted in `blocks`.)
struct BufferPlan {
  std::size_t q = 0, k = 0, v = 0, out = 0;  // fp32
  std::size_t mask = 0;   // (n, m) fp32: a custom mask, or the staged mask a run shows
  std::size_t stage = 0;  // each of the kStagedBuffers staged matrices
  bool bf16 = false;      // bf16 copies of q, k and v (fused bf16)
  // Rules: the ALiBi slopes (one per head), the bias, the document ids (ints); the biased and
  // capped stages a staged run brings back (or exact rows of); the fused kernel's block mask
  // (bytes, allocated with its upload).
  std::size_t slopes = 0, bias = 0, documents = 0, biased = 0, capped = 0, blocks = 0;

  bool operator==(const BufferPlan&) const = default;
  std::size_t device_bytes() const {
    return (q + k + v + out + mask + kStagedBuffers * stage + slopes + bias + biased + capped) * sizeof(float) +
           documents * sizeof(int) + blocks + (bf16 ? (q + k + v) * sizeof(std::uint16_t) : 0);
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
  if (uses_rules(p, opt)) {
    b.slopes = p.mods.alibi ? static_cast<std::size_t>(p.heads) : 0;
    b.bias = static_cast<std::size_t>(p.bias().size());
    b.documents = p.documents().size();
    // A score mods' stage has a device buffer when the run brings it back, or exact rows of it.
    const unsigned mods = problem_stages(p), wanted = opt.rows.empty() ? opt.stages : kAllStages;
    if (shows_stages(opt, bench)) {
      if (mods & wanted & kStageBiased) b.biased = d.stage();
      if (mods & wanted & kStageCapped) b.capped = d.stage();
    }
    if (opt.variant == Variant::Fused) b.blocks = block_mask_bytes(d.n, d.m, rules_tile(p, opt));
  }
  return b;
}

// How many (heads*n, m) stages a run brings back (RunOptions::stages): of the kStagedBuffers,
// and the biased and capped stages where the problem has them.
int stages_brought_back(const RunOptions& opt, const Problem& p) {
  int k = 0;
  for (unsigned bit : {kStageScores, kStageScaled, kStageLogits, kStageWeights})
    if (opt.stages & bit) ++k;
  for (unsigned bit : {kStageBiased, kStageCapped})
    if (opt.stages & problem_stages(p) & bit) ++k;
  return k;
}

// Host bytes the Trace needs beyond the Problem already in memory.
std::size_t host_bytes_needed(const Dims& d, const Problem& p, const RunOptions& opt, bool bench) {
  const std::size_t f = sizeof(float);
  std::size_t bytes = d.out() * f;
  if (shows_stages(opt, bench))
    bytes += (stages_brought_back(opt, p) * d.stage() + (opt.stages & kStageMask ? d.nm() : 0)) * f;
  return bytes;
}

// `held`: device bytes this backend already holds for exactly this plan (its resident buffers),
// which the run reuses instead of allocating.
void check_memory(const Problem& p, const RunOptions& opt, bool bench, std::size_t held = 0) {
  const Dims d = dims_of(p);
  const BufferPlan plan = plan_buffers(d, p, opt, bench);
  const std::size_t need = plan.device_bytes();
  const std::size_t free_bytes = device_free_bytes() + held;
  const std::string fb = format_bytes(static_cast<double>(free_bytes));
  if (need > free_bytes) {
    if (opt.variant == Variant::Staged)
      throw ResourceError(plan.mask != 0 ? Msg::GpuMemoryStagedMask : Msg::GpuMemoryStaged,
                          {format_bytes(static_cast<double>(need)), std::to_string(d.heads), std::to_string(d.n),
                           std::to_string(d.m), fb});
    throw ResourceError(Msg::GpuMemoryFused, {format_bytes(static_cast<double>(need)), fb});
  }
  const std::size_t host_need = host_bytes_needed(d, p, opt, bench);
  check_host_memory(static_cast<double>(host_need), Msg::HostMemoryStages,
                    {std::to_string(stages_brought_back(opt, p)), std::to_string(d.heads), std::to_string(d.n),
                     std::to_string(d.m)});
}

// ---- option checks ---------------------------------------------------------------------------------

// (A causal mask over fewer queries than keys and a custom mask in bf16 run with rules.)
void check_options(const Problem& p, const RunOptions& opt) {
  if (opt.precision == Precision::FP64)
    throw InputError("the CUDA backend computes in fp32 (or bf16 with --variant fused); "
                     "fp64 is the CPU reference");
  if (opt.precision == Precision::BF16 && opt.variant == Variant::Staged)
    throw InputError("bf16 is only available with --variant fused");
  // What the launchers would refuse, refused here before anything is uploaded: the head dims and
  // the configuration switch that applies (each fused precision has its own configurations).
  if (opt.variant == Variant::Staged) {
    staged_config();
    return;
  }
  const bool bf16 = opt.precision == Precision::BF16;
  const std::string why =
      bf16 ? fused_bf16_shape_error(p.d_k(), p.d_v()) : fused_fp32_shape_error(p.d_k(), p.d_v());
  if (!why.empty()) throw InputError(why);
  const int head_dim = std::max(p.d_k(), p.d_v());
  bf16 ? fused_bf16_config(head_dim) : fused_fp32_config(head_dim);
}

// What run_into and bench check before touching the device, in this order: the problem, the
// option combination (shapes and configuration switches included), an injected fault, the memory
// estimate (with `held` as check_memory's).
void check_before_run(const Problem& p, const RunOptions& opt, bool bench, std::size_t held = 0) {
  validate(p);
  check_options(p, opt);
  throw_if_launch_fault(bench ? "cuda bench" : "cuda run");
  check_memory(p, opt, bench, held);
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

// ---- the modifications on the device -------------------------------------------------------------

// Q and K as the kernels multiply them: the problem's own, or RoPE's rotation of the problem as
// given (rotated_qk: made once per problem and kept with its inputs), whose K is copied per query
// head where the prefill kernels run an expanded copy of a grouped problem (expand_kv_heads).
struct KernelQK {
  std::shared_ptr<const RotatedQK> rot;  // null without RoPE
  MatrixF k_expanded;                    // RoPE on a grouped problem: rot->k, one copy per query head

  // `p` is what the kernels run: the problem as given or its expanded copy.
  const MatrixF& q(const Problem& p) const { return rot ? rot->q : p.q(); }
  const MatrixF& k(const Problem& p) const { return !rot ? p.k() : k_expanded.size() > 0 ? k_expanded : rot->k(); }
};

// grouped (heads n, ...) as given; expanded: what the kernels run (expand_kv_heads(grouped), or
// grouped itself for the decode kernel, which reads the grouped cache).
KernelQK kernel_qk(const Problem& grouped, const Problem& expanded) {
  KernelQK r;
  r.rot = rotated_qk(grouped);
  if (r.rot && expanded.kv_heads() != grouped.kv_heads()) {
    const Eigen::Index m = grouped.m();
    r.k_expanded.resize(static_cast<Eigen::Index>(grouped.heads) * m, grouped.d_k());
    for (int h = 0; h < grouped.heads; ++h)
      r.k_expanded.middleRows(h * m, m) = r.rot->k().middleRows(grouped.kv_row(h), m);
  }
  return r;
}

// Device copies of what the rules point at (the slopes, the bias, the document ids; a custom mask
// lives in the caller's mask buffer), and the rules themselves pointing at them.
struct DeviceRules {
  DeviceBuffer<float> slopes, bias;
  DeviceBuffer<int> documents;
  KernelRules rules;
  std::size_t device_bytes() const { return slopes.bytes() + bias.bytes() + documents.bytes(); }
};

// Uploads p's modifications' data into `dr` (allocated here unless already of the right sizes)
// and points dr.rules at them; `custom`: the device copy of p's custom mask (null without one).
// rules.scale is the softmax scale rounded once to fp32.
void upload_rules(DeviceRules& dr, const Problem& p, const float* custom, cudaStream_t s) {
  std::vector<float> slopes;
  ScoreRule score = score_rule<float>(p, slopes);
  MaskRule mask = mask_rule(p);
  const auto fill = [&](auto& buf, const auto* src, std::size_t count) {
    using T = std::remove_pointer_t<decltype(buf.get())>;
    if (buf.size() != count) buf = DeviceBuffer<T>(count);
    if (count > 0) ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(buf.get(), src, count * sizeof(T), cudaMemcpyHostToDevice, s));
    return count > 0 ? buf.get() : nullptr;
  };
  // Pageable copies return once the source is read, so the local `slopes` may go.
  score.slopes = fill(dr.slopes, slopes.data(), slopes.size());
  score.bias = fill(dr.bias, p.bias().data(), static_cast<std::size_t>(p.bias().size()));
  mask.documents = fill(dr.documents, p.documents().data(), p.documents().size());
  mask.custom = p.mask == MaskKind::Custom ? custom : nullptr;
  dr.rules = KernelRules{};
  dr.rules.mask = mask;
  dr.rules.score = score;
  dr.rules.scale = static_cast<float>(p.scale_value());
}

// A fused kernel's block mask on the device: BlockMask's bytes and each query tile's range.
struct DeviceBlocks {
  DeviceBuffer<std::uint8_t> kind;
  DeviceBuffer<int> range;
  DeviceBuffer<unsigned long long> visits;  // the kernel's tile counter
  long long planned = 0, total = 0;         // non-empty and all tiles, over the heads
  std::size_t device_bytes() const { return kind.bytes() + range.bytes() + visits.bytes(); }
};

// block_mask(p, tile) uploaded into `db` and described in `out` (rules.blocks); with `count`, a
// zeroed tile counter in out.visits.
void upload_blocks(DeviceBlocks& db, const Problem& p, FusedTile tile, bool count, KernelRules& out,
                   cudaStream_t s) {
  const BlockMask b = block_mask(p, tile.q_tile, tile.k_tile);
  const std::vector<int> range = key_tile_ranges(b);
  static_assert(sizeof(BlockKind) == 1, "the kernels read one byte per tile");
  if (db.kind.size() != b.kind.size()) db.kind = DeviceBuffer<std::uint8_t>(b.kind.size());
  if (db.range.size() != range.size()) db.range = DeviceBuffer<int>(range.size());
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(db.kind.get(), b.kind.data(), b.kind.size(), cudaMemcpyHostToDevice, s));
  ATTNLAB_CUDA_CHECK(
      cudaMemcpyAsync(db.range.get(), range.data(), range.size() * sizeof(int), cudaMemcpyHostToDevice, s));
  db.planned = static_cast<long long>(b.visited()) * p.heads;
  db.total = static_cast<long long>(b.total()) * p.heads;
  out.blocks = {b.q_tile, b.k_tile, b.q_blocks, b.k_blocks, db.kind.get(), db.range.get()};
  out.visits = nullptr;
  if (count) {
    if (db.visits.size() != 1) db.visits = DeviceBuffer<unsigned long long>(1);
    ATTNLAB_CUDA_CHECK(cudaMemsetAsync(db.visits.get(), 0, sizeof(unsigned long long), s));
    out.visits = db.visits.get();
  }
}

// What last_fused_tiles() reports: one record per host thread, as last_fused_kernel().
thread_local FusedTiles last_tiles;

// ---- the device-side state of one problem --------------------------------------------------------

// Inputs and every buffer the chosen variant writes, allocated once (run and bench alike).
struct DeviceProblem {
  Dims d;
  MaskCode code = MaskCode::None;
  float sqrt_dk = 1, temperature = 1;
  float fused_scale = 1;  // 1 / (sqrt(d_k) T), for the fused kernels
  // With rules: the fused kernels' factor from the modified score to the logit, 1 / T.
  bool with_rules = false;
  float inv_temperature = 1;
  // P V may skip the key tiles right of a row block: a causal mask over as many queries as keys
  // and no prefix (window and documents only hide more keys).
  bool pv_causal = false;
  DeviceBuffer<float> q, k, v, out;
  DeviceBuffer<float> mask;  // (n, m): a custom mask, or the staged mask a run shows; else empty
  DeviceBuffer<float> scores, scaled, logits, weights;  // staged only
  DeviceBuffer<float> biased, capped;                   // staged with rules, when brought back
  DeviceBuffer<std::uint16_t> q16, k16, v16;            // fused bf16 only
  DeviceRules rules;                                    // with rules
  DeviceBlocks blocks;                                  // fused with rules

  std::size_t device_bytes() const {
    return q.bytes() + k.bytes() + v.bytes() + out.bytes() + mask.bytes() + scores.bytes() +
           scaled.bytes() + logits.bytes() + weights.bytes() + biased.bytes() + capped.bytes() + q16.bytes() +
           k16.bytes() + v16.bytes() + rules.device_bytes() + blocks.device_bytes();
  }
};

// The problem's shape and constants in dp (its buffers untouched: a reused DeviceProblem keeps
// them for the next problem of the same plan).
void set_constants(DeviceProblem& dp, const Problem& p, const RunOptions& opt) {
  dp.d = dims_of(p);
  dp.code = mask_code(p.mask);
  // sqrt and 1/T are taken in double, then rounded once, as the CPU chain's constants are.
  // An explicit scale s gives the divisor 1/s and the fused constant s / T (core/problem.h).
  dp.sqrt_dk = scale_divisor<float>(p);
  dp.temperature = static_cast<float>(p.temperature);
  dp.fused_scale = fused_scale(p);
  dp.with_rules = uses_rules(p, opt);
  dp.inv_temperature = static_cast<float>(1.0 / p.temperature);
  dp.pv_causal = p.mask == MaskKind::Causal && p.n() == p.m() && p.mods.prefix == 0;
}

DeviceProblem allocate(const Problem& p, const RunOptions& opt, bool bench) {
  DeviceProblem dp;
  set_constants(dp, p, opt);
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
  dp.biased = DeviceBuffer<float>(b.biased);
  dp.capped = DeviceBuffer<float>(b.capped);
  if (b.bf16) {
    dp.q16 = DeviceBuffer<std::uint16_t>(b.q);
    dp.k16 = DeviceBuffer<std::uint16_t>(b.k);
    dp.v16 = DeviceBuffer<std::uint16_t>(b.v);
  }
  return dp;
}

// Host -> device copies of the inputs (Q and K as the kernels multiply them, a custom mask, the
// rules' data and a fused kernel's block mask), plus the bf16 conversion. `count_tiles`: the fused
// kernel counts the tiles it computes (a run, not bench).
void upload_inputs(DeviceProblem& dp, const Problem& p, const KernelQK& qk, const RunOptions& opt,
                   bool count_tiles, cudaStream_t s) {
  upload(dp.q.get(), qk.q(p), s);
  upload(dp.k.get(), qk.k(p), s);
  upload(dp.v.get(), p.v(), s);
  if (p.mask == MaskKind::Custom) upload(dp.mask.get(), p.custom_mask(), s);
  if (dp.with_rules) {
    upload_rules(dp.rules, p, dp.mask.get(), s);
    if (opt.variant == Variant::Fused)
      upload_blocks(dp.blocks, p, rules_tile(p, opt), count_tiles, dp.rules.rules, s);
  }
  if (opt.variant == Variant::Fused && opt.precision == Precision::BF16) {
    to_bf16(dp.q.get(), dp.q16.get(), dp.q.size(), s);
    to_bf16(dp.k.get(), dp.k16.get(), dp.k.size(), s);
    to_bf16(dp.v.get(), dp.v16.get(), dp.v.size(), s);
  }
}

// Staged chain, stage by stage; `marks` (when given) are recorded after each stage:
// [0] after qk, [1] after scale_mask, [2] after softmax, [3] after pv. With `build_mask` the
// (n, m) mask matrix the Trace shows is built first in the scale_mask stage (only runs that keep
// their stages need it: scale_mask computes None and Causal from (row, col)). With rules,
// scale_mask is its rules form (and writes the biased and capped stages a run brings back).
void run_staged(const DeviceProblem& dp, cudaStream_t s, Event* marks, bool build_mask) {
  const Dims& d = dp.d;
  launch_qk(dp.q.get(), dp.k.get(), dp.scores.get(), dp.scaled.get(), d.heads, d.n, d.m, d.d_k,
            dp.sqrt_dk, s);
  if (marks) marks[0].record(s);
  if (dp.with_rules) {
    // In place over a custom mask: the rules read element (i, j) of it only to write (i, j).
    if (build_mask) launch_build_mask_rules(dp.mask.get(), dp.rules.rules.mask, d.n, d.m, s);
    launch_scale_mask_rules(dp.scaled.get(), dp.biased.get(), dp.capped.get(), dp.logits.get(), dp.rules.rules,
                            d.heads, d.n, d.m, dp.temperature, s);
  } else {
    if (build_mask) launch_build_mask(dp.mask.get(), dp.code, d.n, d.m, s);
    launch_scale_mask(dp.scaled.get(), dp.mask.get(), dp.logits.get(), dp.code, d.heads, d.n, d.m,
                      dp.temperature, s);
  }
  if (marks) marks[1].record(s);
  launch_softmax(dp.logits.get(), dp.weights.get(), static_cast<std::int64_t>(d.heads) * d.n, d.m,
                 s);
  if (marks) marks[2].record(s);
  launch_pv(dp.weights.get(), dp.v.get(), dp.out.get(), d.heads, d.n, d.m, d.d_v, dp.pv_causal, s);
  if (marks) marks[3].record(s);
}

void run_fused(const DeviceProblem& dp, const RunOptions& opt, cudaStream_t s) {
  const Dims& d = dp.d;
  // With rules the kernels take 1 / T (their scores are the modified scaled ones) and the rules'
  // mask; without, the folded constant and the mask kind.
  const KernelRules* rules = dp.with_rules ? &dp.rules.rules : nullptr;
  const float scale = rules ? dp.inv_temperature : dp.fused_scale;
  const bool causal = !rules && dp.code == MaskCode::Causal;
  if (opt.precision == Precision::BF16) {
    fused_attention_bf16(dp.q16.get(), dp.k16.get(), dp.v16.get(), dp.out.get(), d.heads, d.n, d.m,
                         d.d_k, scale, causal, s, rules);
  } else {
    fused_attention_fp32(dp.q.get(), dp.k.get(), dp.v.get(), dp.out.get(), d.heads, d.n, d.m,
                         d.d_k, d.d_v, scale, causal,
                         !rules && dp.code == MaskCode::Custom ? dp.mask.get() : nullptr, s, rules);
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

// ---- streaming: pooled views and exact rows (RunOptions::pool / rows) ----------------------------

// A staged run that keeps no (n, m) stage and asks for a pooled view, exact rows or no output at
// all: it goes through the streaming kernels (kernels/stream_pool.h). A staged run that only drops
// its stages (keep_stages false, output wanted, nothing else) runs the staged chain as before.
bool streams(const RunOptions& opt) {
  if (opt.variant != Variant::Staged) return false;
  if (opt.pool) return true;  // a pooled view never keeps the stages (as on the CPU)
  return !opt.keep_stages && (!opt.rows.empty() || !opt.output);
}


// Pixel columns per chunk grow until the chunk holds this many flat columns (or
// kPoolChunkPixels pixels): a block then has a few tiles of 64 columns to walk.
constexpr int kChunkFlatColumns = 1024;
// FMAs per launch: about 2^38 keeps a launch in the tens of milliseconds on an H200's CUDA cores,
// so that cancel and progress have that granularity at a million tokens.
constexpr double kLaunchFma = 274877906944.0;

// What a streaming run computes, laid out on the host: the rows whose statistics are needed, the
// pixel-row groups, the flattened pixel columns and their chunks.
struct StreamPlan {
  std::vector<int> rows;  // sorted, distinct stacked rows: the view's rows and the exact rows
  std::vector<int> group_begin, group_end, group_stat, group_py0, group_py1;
  std::vector<int> px_flat, flat_col, chunk_px;  // see PoolLayout
  std::vector<int> exact_stat;                   // per opt.rows entry, its index in `rows`
  int width = 0, height = 0;                     // pixels of the view (0 without one)
  // The pooling's design (kernels/stream_onepass.h): 1 or 2 passes; its launches, runs of groups
  // [launch_g[i], launch_g[i + 1]); with one pass the most state rows a launch holds.
  int passes = 2;
  std::vector<int> launch_g;
  long state_rows = 0;
  // Per entry of `rows`: whether the statistics pass computes it (with one pass the pooling
  // computes the statistics of the view's rows, so only exact rows outside it are left).
  std::vector<char> needs_stats;
  int groups() const { return static_cast<int>(group_begin.size()); }
  int chunks() const { return chunk_px.empty() ? 0 : static_cast<int>(chunk_px.size()) - 1; }
};

// ATTNLAB_STREAM_PASSES=1 or 2 (read on every run) forces the pooling's design where one pass is
// possible (the tests and gpu-check run both); unset, choose_passes picks by the cells computed.
int stream_passes_from_env() {
  const char* e = std::getenv("ATTNLAB_STREAM_PASSES");
  if (e == nullptr) return 0;
  const std::string v(e);
  return v == "1" ? 1 : v == "2" ? 2 : 0;
}

// The pooling's design and launches: runs of groups of about kLaunchFma each and, with one pass,
// of at most onepass::kStateBytesCap of states.
void plan_pool_launches(const Problem& p, StreamPlan& sp) {
  namespace op = onepass;
  const bool possible = op::one_pass_possible(p.m(), sp.flat_col, sp.group_begin, sp.group_end, sp.width);
  sp.passes = op::choose_passes(
      possible,
      op::pass_cells(static_cast<long>(sp.rows.size()), p.m(), sp.group_begin, sp.group_end, sp.px_flat, sp.chunk_px),
      stream_passes_from_env());
  const double flat_cols = static_cast<double>(sp.flat_col.size());
  const auto group_work = [&](int g) {
    return static_cast<double>(sp.group_end[g] - sp.group_begin[g]) * flat_cols * p.d_k();
  };
  const auto state_rows = [&](int a, int b) {  // stats indices spanned by groups [a, b)
    return static_cast<long>(sp.group_stat[b - 1]) + (sp.group_end[b - 1] - sp.group_begin[b - 1]) - sp.group_stat[a];
  };
  const double cap_rows = static_cast<double>(op::kStateBytesCap) / (sizeof(op::PixelState) * std::max(sp.width, 1));
  sp.launch_g.assign(1, 0);
  for (int g0 = 0; g0 < sp.groups();) {
    int g1 = g0 + 1;
    double work = group_work(g0);
    while (g1 < sp.groups() && work < kLaunchFma &&
           (sp.passes == 2 || static_cast<double>(state_rows(g0, g1 + 1)) <= cap_rows)) {
      work += group_work(g1);
      ++g1;
    }
    sp.launch_g.push_back(g1);
    if (sp.passes == 1) sp.state_rows = std::max(sp.state_rows, state_rows(g0, g1));
    g0 = g1;
  }
  if (sp.passes == 1)
    for (int g = 0; g < sp.groups(); ++g)
      for (int k = sp.group_stat[g]; k < sp.group_stat[g] + (sp.group_end[g] - sp.group_begin[g]); ++k)
        sp.needs_stats[k] = 0;
}

StreamPlan plan_stream(const Problem& p, const RunOptions& opt) {
  StreamPlan sp;
  const int n = p.n();
  std::vector<int> exact(opt.rows.begin(), opt.rows.end());
  std::sort(exact.begin(), exact.end());
  exact.erase(std::unique(exact.begin(), exact.end()), exact.end());
  if (opt.pool) {
    const PoolRequest& r = *opt.pool;
    const PoolAxis& ra = r.rows;
    sp.height = ra.size();
    sp.width = r.cols.size();
    // Consecutive pixel rows of the same interval (a magnified view) are computed once.
    for (int py = 0; py < ra.size();) {
      int py1 = py + 1;
      while (py1 < ra.size() && ra.begin[py1] == ra.begin[py] && ra.end[py1] == ra.end[py]) ++py1;
      sp.group_begin.push_back(ra.begin[py]);
      sp.group_end.push_back(ra.end[py]);
      sp.group_py0.push_back(py);
      sp.group_py1.push_back(py1);
      py = py1;
    }
    // The union of the groups' rows (begins are non-decreasing), then the exact rows merged in.
    const long base = static_cast<long>(r.head) * n;
    int covered = 0;  // rows [0, covered) of the head are in the list
    for (int gi = 0; gi < sp.groups(); ++gi) {
      for (int i = std::max(covered, sp.group_begin[gi]); i < sp.group_end[gi]; ++i)
        sp.rows.push_back(static_cast<int>(base + i));
      covered = std::max(covered, sp.group_end[gi]);
    }
    const std::size_t mid = sp.rows.size();
    sp.rows.insert(sp.rows.end(), exact.begin(), exact.end());
    std::inplace_merge(sp.rows.begin(), sp.rows.begin() + static_cast<std::ptrdiff_t>(mid), sp.rows.end());
    sp.rows.erase(std::unique(sp.rows.begin(), sp.rows.end()), sp.rows.end());
    for (int gi = 0; gi < sp.groups(); ++gi)
      sp.group_stat.push_back(static_cast<int>(
          std::lower_bound(sp.rows.begin(), sp.rows.end(), static_cast<int>(base + sp.group_begin[gi])) -
          sp.rows.begin()));

    long flat = 0;
    for (int px = 0; px < r.cols.size(); ++px) flat += r.cols.end[px] - r.cols.begin[px];
    if (flat > std::numeric_limits<int>::max())
      throw InputError("pooled columns: the pixels cover " + std::to_string(flat) +
                       " cells in all, more than the 2^31 - 1 a view may cover");
    sp.px_flat.reserve(static_cast<std::size_t>(sp.width) + 1);
    sp.flat_col.reserve(static_cast<std::size_t>(flat));
    sp.px_flat.push_back(0);
    for (int px = 0; px < r.cols.size(); ++px) {
      for (int j = r.cols.begin[px]; j < r.cols.end[px]; ++j) sp.flat_col.push_back(j);
      sp.px_flat.push_back(static_cast<int>(sp.flat_col.size()));
    }
    sp.chunk_px.push_back(0);
    for (int px = 0; px < sp.width; ++px) {
      const int start = sp.chunk_px.back();
      if (px > start && (px - start == kPoolChunkPixels ||
                         sp.px_flat[px] - sp.px_flat[start] >= kChunkFlatColumns))
        sp.chunk_px.push_back(px);
    }
    sp.chunk_px.push_back(sp.width);
    sp.needs_stats.assign(sp.rows.size(), 1);
    plan_pool_launches(p, sp);
  } else {
    sp.rows = exact;
    sp.needs_stats.assign(sp.rows.size(), 1);
  }
  for (int g : opt.rows)
    sp.exact_stat.push_back(
        static_cast<int>(std::lower_bound(sp.rows.begin(), sp.rows.end(), g) - sp.rows.begin()));
  return sp;
}

// The (m) vectors an exact row of a streamed run holds on the device: scores, scaled, logits,
// weights, and the biased and capped stages where the problem has them.
std::size_t exact_row_stages(const Problem& p) {
  const unsigned mods = problem_stages(p);
  return 4 + (mods & kStageBiased ? 1 : 0) + (mods & kStageCapped ? 1 : 0);
}

// Device bytes of a streaming run: the inputs it reads (V and the output only with opt.output),
// a custom mask, the rules' data (and with the output the fused kernel's block mask), the row list
// and its statistics, the layout, the grids of the three stages and the exact rows. No (n, m)
// stage.
std::size_t stream_device_bytes(const Dims& d, const Problem& p, const RunOptions& opt,
                                const StreamPlan& sp) {
  const std::size_t f = sizeof(float), i = sizeof(int);
  std::size_t bytes = (d.q() + d.k()) * f;
  if (opt.output) bytes += (d.v() + d.out()) * f;
  if (p.mask == MaskKind::Custom) bytes += d.nm() * f;
  bytes += (static_cast<std::size_t>(p.bias().size()) + (p.mods.alibi ? p.heads : 0)) * f + p.documents().size() * i;
  if (opt.output && uses_rules(p, opt))
    bytes += block_mask_bytes(d.n, d.m, fused_fp32_rules_tile(d.d_k, d.d_v, /*aligned=*/true));
  bytes += sp.rows.size() * (i + 2 * f);
  bytes += (3 * sp.group_begin.size() + sp.px_flat.size() + sp.flat_col.size() + sp.chunk_px.size()) * i;
  bytes += 3 * static_cast<std::size_t>(sp.groups()) * sp.width * (f + 1);
  bytes += static_cast<std::size_t>(sp.state_rows) * sp.width * sizeof(onepass::PixelState);
  bytes += opt.rows.size() * (2 * i + exact_row_stages(p) * static_cast<std::size_t>(d.m) * f);
  bytes += 6 * i + 2 * sizeof(unsigned long long);
  return bytes;
}

// Host bytes the streamed Trace needs: the pooled grids (and their download staging), the exact
// rows, the output.
std::size_t stream_host_bytes(const Dims& d, const Problem& p, const RunOptions& opt, const StreamPlan& sp) {
  const std::size_t px = static_cast<std::size_t>(sp.width) * sp.height;
  return 3 * px * sizeof(PooledCell) + 3 * static_cast<std::size_t>(sp.groups()) * sp.width * 5 +
         opt.rows.size() * (exact_row_stages(p) + 1) * static_cast<std::size_t>(d.m) * sizeof(float) +
         (opt.output ? d.out() * sizeof(float) : 0);
}

void check_stream_memory(const Problem& p, const RunOptions& opt, const StreamPlan& sp) {
  const Dims d = dims_of(p);
  const std::size_t need = stream_device_bytes(d, p, opt, sp);
  const std::size_t free_bytes = device_free_bytes();
  if (need > free_bytes)
    throw ResourceError(Msg::GpuMemoryStreamed,
                        {format_bytes(static_cast<double>(need)), std::to_string(sp.rows.size()),
                         std::to_string(opt.rows.size()), std::to_string(d.m),
                         format_bytes(static_cast<double>(free_bytes))});
  const std::size_t host_need = stream_host_bytes(d, p, opt, sp);
  check_host_memory(static_cast<double>(host_need), Msg::HostMemoryStreamed, {});
}

void check_cancel(const RunOptions& opt) {
  if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

// Paces a run of many launches: after each launch it waits for the one before (so at most two
// are queued and the device never idles between them), then reports progress and honours cancel.
// On cancel the stream is drained first: the buffers it uses are freed while the exception
// unwinds.
class Pacer {
 public:
  Pacer(const RunOptions& opt, cudaStream_t s, double total_work)
      : opt_(opt), s_(s), total_(std::max(total_work, 1.0)) {}

  // Call after enqueuing a launch of `work` units.
  void launched(double work) {
    const int k = count_ % 2;
    ev_[k].record(s_);
    pending_[k] = work;
    if (count_ > 0) {
      ATTNLAB_CUDA_CHECK(cudaEventSynchronize(ev_[1 - k].get()));
      advance(pending_[1 - k]);
    }
    ++count_;
  }
  // Waits for everything enqueued; progress reaches 1 once the caller is done.
  void finish() {
    ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s_));
    if (opt_.progress) opt_.progress->store(1.f);
  }

 private:
  void advance(double work) {
    done_ += work;
    if (opt_.progress) opt_.progress->store(static_cast<float>(std::min(done_ / total_, 1.0)));
    if (opt_.cancel && opt_.cancel->load(std::memory_order_relaxed)) {
      cudaStreamSynchronize(s_);  // its own failure would only hide the cancellation
      throw Cancelled();
    }
  }

  const RunOptions& opt_;
  cudaStream_t s_;
  double total_, done_ = 0;
  Event ev_[2];
  double pending_[2] = {0, 0};
  int count_ = 0;
};

template <class T>
DeviceBuffer<T> upload_vector(const std::vector<T>& v, cudaStream_t s) {
  DeviceBuffer<T> b(v.size());
  if (!v.empty())
    ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  return b;
}

// The first unmasked cell whose score or logit overflowed, refused as the CPU chain does.
void throw_if_overflow(const unsigned long long (&cells)[2], int n, int m) {
  for (int k = 0; k < 2; ++k) {
    if (cells[k] == kNoCell) continue;
    const auto row = static_cast<long long>(cells[k] / static_cast<unsigned long long>(m));
    const auto col = static_cast<long long>(cells[k] % static_cast<unsigned long long>(m));
    throw InputError(k == 0 ? Msg::OverflowScores : Msg::OverflowLogits,
                     {std::to_string(row % n), std::to_string(col)});
  }
}

int sm_count() {
  int dev = 0, sms = 0;
  ATTNLAB_CUDA_CHECK(cudaGetDevice(&dev));
  ATTNLAB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return std::max(sms, 1);
}

// The streaming run: (1) row statistics of every listed row over all m keys, in launches of a
// bounded number of rows; (2) the pooled grids, a launch per run of pixel-row groups of bounded
// work (with one pass, kernels/stream_onepass.h, these also give the view's rows' statistics, and
// (1) covers only exact rows outside the view); (3) the exact rows; (4) the output from the fused
// fp32 kernel (it never holds an (n, m) matrix either). Between launches: progress and cancel. Then the grids, rows and output come
// back and are laid out as the CPU chain lays them out.
// A CUDA fp32 run of `variant` that keeps no (n, m) stage: its name, and every stage emptied.
void name_fp32_output_run(Trace& t, Variant variant) {
  t.backend = "cuda";
  t.variant = variant;
  t.precision = Precision::FP32;
  t.has_stages = false;
  t.scores = t.scaled = t.biased = t.capped = t.mask = t.logits = t.weights = MatrixF();
  t.q_rot = t.k_rot = MatrixF();
  t.pooled = PooledStages{};
}

// With modifications every streaming kernel reads the mask through MaskRule and the logits
// through ScoreRule (kernels/stream_pool.h), and the output comes from the fused fp32 kernel with
// rules, launched by whole heads (its block mask is of the problem's rows).
// `grouped`: the problem as given, p its expanded copy (RoPE's rotation is kept with the former).
void run_streamed(const Problem& grouped, const Problem& p, const RunOptions& opt, Trace& t) {
  const auto wall0 = std::chrono::steady_clock::now();
  validate(p);
  check_options(p, opt);
  check_stream_request(p, opt);
  if (opt.output)
    if (const std::string why = fused_fp32_shape_error(p.d_k(), p.d_v()); !why.empty())
      throw InputError("a streamed run computes the output with the fused fp32 kernel: " + why +
                       "; ask for no output");
  throw_if_launch_fault("cuda run");
  const StreamPlan sp = plan_stream(p, opt);
  check_stream_memory(p, opt, sp);
  check_cancel(opt);
  const KernelQK qk = kernel_qk(grouped, p);

  const Dims d = dims_of(p);
  Stream stream;
  const cudaStream_t s = stream.get();
  Event ev[6];  // start, uploaded, stats, pooled + rows, output, downloaded
  ev[0].record(s);
  DeviceBuffer<float> q(d.q()), k(d.k()), v(opt.output ? d.v() : 0), out(opt.output ? d.out() : 0);
  DeviceBuffer<float> mask(p.mask == MaskKind::Custom ? d.nm() : 0);
  upload(q.get(), qk.q(p), s);
  upload(k.get(), qk.k(p), s);
  if (opt.output) upload(v.get(), p.v(), s);
  if (p.mask == MaskKind::Custom) upload(mask.get(), p.custom_mask(), s);
  DeviceRules dr;  // for every problem: MaskRule says what the mask kind says
  upload_rules(dr, p, mask.get(), s);
  DeviceBuffer<int> rows = upload_vector(sp.rows, s);
  DeviceBuffer<float> row_max(sp.rows.size()), row_sum(sp.rows.size());
  DeviceBuffer<int> g_begin = upload_vector(sp.group_begin, s), g_end = upload_vector(sp.group_end, s),
                    g_stat = upload_vector(sp.group_stat, s), px_flat = upload_vector(sp.px_flat, s),
                    flat_col = upload_vector(sp.flat_col, s), chunk_px = upload_vector(sp.chunk_px, s);
  const std::size_t cells = 3 * static_cast<std::size_t>(sp.groups()) * sp.width;
  DeviceBuffer<float> grid_value(cells);
  DeviceBuffer<std::uint8_t> grid_masked(cells);
  const int r_count = static_cast<int>(opt.rows.size());
  const std::size_t row_cells = static_cast<std::size_t>(r_count) * d.m;
  DeviceBuffer<int> exact_rows = upload_vector(opt.rows, s), exact_stat = upload_vector(sp.exact_stat, s);
  DeviceBuffer<float> e_scores(row_cells), e_scaled(row_cells), e_logits(row_cells), e_weights(row_cells);
  const unsigned mods = problem_stages(p);
  DeviceBuffer<float> e_biased(mods & kStageBiased ? row_cells : 0), e_capped(mods & kStageCapped ? row_cells : 0);
  // The overflow records and the range keys start at "none found" / (+inf, -inf).
  const unsigned long long no_cells[2] = {kNoCell, kNoCell};
  const int range_init[6] = {float_order_key(INFINITY), float_order_key(-INFINITY),
                             float_order_key(INFINITY), float_order_key(-INFINITY),
                             float_order_key(INFINITY), float_order_key(-INFINITY)};
  DeviceBuffer<unsigned long long> overflow(2);
  DeviceBuffer<int> range(6);
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(overflow.get(), no_cells, sizeof no_cells, cudaMemcpyHostToDevice, s));
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(range.get(), range_init, sizeof range_init, cudaMemcpyHostToDevice, s));
  ev[1].record(s);

  StreamInputs in;
  in.q = q.get();
  in.k = k.get();
  in.n = d.n;
  in.m = d.m;
  in.d_k = d.d_k;
  in.rule = dr.rules.mask;
  in.score = dr.rules.score;
  in.sqrt_dk = scale_divisor<float>(p);  // sqrt(d_k), or 1 / an explicit scale
  in.temperature = static_cast<float>(p.temperature);
  in.exp_cutoff = std::log(std::numeric_limits<float>::min()) + std::log(static_cast<float>(d.m));

  // Work in FMAs, for the progress and the launch sizes.
  const double row_work = static_cast<double>(d.m) * d.d_k;
  const double flat_cols = static_cast<double>(sp.flat_col.size());
  double pool_work = 0;
  for (int gi = 0; gi < sp.groups(); ++gi)
    pool_work += static_cast<double>(sp.group_end[gi] - sp.group_begin[gi]) * flat_cols * d.d_k;
  const double out_work = opt.output ? static_cast<double>(d.heads) * d.n * d.m * (d.d_k + d.d_v) : 0;
  const double stat_rows = static_cast<double>(std::count(sp.needs_stats.begin(), sp.needs_stats.end(), 1));
  Pacer pacer(opt, s, stat_rows * row_work + pool_work + r_count * row_work + out_work);

  // (1) statistics: a launch per run of rows of one head, at least two blocks per SM each (with
  // one pass only the exact rows outside the view: the pooling computes the view's rows').
  const long min_rows = 2L * 64 * sm_count();
  const long per_launch = std::max(min_rows, static_cast<long>(kLaunchFma / std::max(row_work, 1.0)));
  for (std::size_t a = 0; a < sp.rows.size();) {
    if (!sp.needs_stats[a]) {
      ++a;
      continue;
    }
    const int head = sp.rows[a] / d.n;
    std::size_t b = a;
    while (b < sp.rows.size() && sp.needs_stats[b] && sp.rows[b] / d.n == head &&
           static_cast<long>(b - a) < per_launch)
      ++b;
    launch_row_stats(in, rows.get() + a, static_cast<int>(b - a), head, row_max.get() + a,
                     row_sum.get() + a, overflow.get(), s);
    pacer.launched(static_cast<double>(b - a) * row_work);
    a = b;
  }
  ev[2].record(s);

  // (2) the pooled grids, a launch per run of groups (plan_pool_launches); with one pass each
  // launch also writes its rows' statistics.
  DeviceBuffer<onepass::PixelState> states(static_cast<std::size_t>(sp.state_rows) * sp.width);
  if (opt.pool) {
    PoolLayout lay;
    lay.row_begin = g_begin.get();
    lay.row_end = g_end.get();
    lay.stat = g_stat.get();
    lay.px_flat = px_flat.get();
    lay.flat_col = flat_col.get();
    lay.chunk_px = chunk_px.get();
    lay.groups = sp.groups();
    lay.width = sp.width;
    lay.chunks = sp.chunks();
    const bool mean = opt.pool->mode == PoolMode::Mean;
    for (std::size_t li = 0; li + 1 < sp.launch_g.size(); ++li) {
      const int g0 = sp.launch_g[li], g1 = sp.launch_g[li + 1];
      double work = 0;
      for (int g = g0; g < g1; ++g)
        work += static_cast<double>(sp.group_end[g] - sp.group_begin[g]) * flat_cols * d.d_k;
      if (sp.passes == 1)
        launch_pool_one_pass(in, opt.pool->head, lay, g0, g1, sp.group_stat[g0], states.get(), row_max.get(),
                             row_sum.get(), mean, grid_value.get(), grid_masked.get(), range.get(),
                             overflow.get(), s);
      else
        launch_pool(in, opt.pool->head, lay, g0, g1, row_max.get(), row_sum.get(), mean, grid_value.get(),
                    grid_masked.get(), range.get(), s);
      pacer.launched(work);
    }
  }
  // (3) the exact rows.
  if (r_count > 0) {
    launch_exact_rows(in, exact_rows.get(), exact_stat.get(), r_count, row_max.get(), row_sum.get(),
                      e_scores.get(), e_scaled.get(), e_biased.get(), e_capped.get(), e_logits.get(),
                      e_weights.get(), s);
    pacer.launched(r_count * row_work);
  }
  ev[3].record(s);

  // (4) the output: the fused kernel on runs of query rows of about kLaunchFma (at least 256 rows
  // per SM, so that a launch fills the device), or on runs of whole heads where a head is less.
  // Causal runs go by whole heads: the kernel's mask is j > i counted from the head's first row;
  // so do runs with rules, whose block mask covers a head's rows (each launch names its first
  // head for ScoreRule).
  DeviceBlocks blocks;
  if (opt.output) {
    const bool with_rules = uses_rules(p, opt);
    KernelRules rules = dr.rules;
    if (with_rules)
      upload_blocks(blocks, p, fused_fp32_rules_tile(d.d_k, d.d_v, /*aligned=*/true), false, rules, s);
    const float scale = with_rules ? static_cast<float>(1.0 / p.temperature) : fused_scale(p);
    const bool causal = !with_rules && p.mask == MaskKind::Causal;
    const double per_row = static_cast<double>(d.m) * (d.d_k + d.d_v);
    const long rows_per = std::max(static_cast<long>(kLaunchFma / per_row), 256L * sm_count());
    if (causal || with_rules || rows_per >= d.n) {
      const int heads_per = static_cast<int>(std::clamp(rows_per / d.n, 1L, static_cast<long>(d.heads)));
      for (int h = 0; h < d.heads; h += heads_per) {
        const int hc = std::min(heads_per, d.heads - h);
        const std::size_t hs = h;
        rules.head0 = h;
        fused_attention_fp32(q.get() + hs * d.n * d.d_k, k.get() + hs * d.m * d.d_k,
                             v.get() + hs * d.m * d.d_v, out.get() + hs * d.n * d.d_v, hc, d.n, d.m,
                             d.d_k, d.d_v, scale, causal, with_rules ? nullptr : mask.get(), s,
                             with_rules ? &rules : nullptr);
        ATTNLAB_CUDA_CHECK(cudaGetLastError());
        pacer.launched(static_cast<double>(hc) * d.n * per_row);
      }
    } else {
      for (int h = 0; h < d.heads; ++h)
        for (int r0 = 0; r0 < d.n; r0 += static_cast<int>(rows_per)) {
          const int rc = static_cast<int>(std::min<long>(rows_per, d.n - r0));
          const std::size_t row = static_cast<std::size_t>(h) * d.n + r0, hs = h;
          // A custom mask is (n, m) for every head: the chunk's rows start at row r0 of it.
          const float* mrows = mask.get() ? mask.get() + static_cast<std::size_t>(r0) * d.m : nullptr;
          fused_attention_fp32(q.get() + row * d.d_k, k.get() + hs * d.m * d.d_k,
                               v.get() + hs * d.m * d.d_v, out.get() + row * d.d_v, 1, rc, d.m, d.d_k,
                               d.d_v, scale, false, mrows, s);
          ATTNLAB_CUDA_CHECK(cudaGetLastError());
          pacer.launched(rc * per_row);
        }
    }
  }
  ev[4].record(s);

  // Downloads: into staging for the grids (expanded to pixel rows below), straight into the Trace
  // for the rows and the output.
  std::vector<float> values(cells);
  std::vector<std::uint8_t> masked(cells);
  unsigned long long bad[2] = {kNoCell, kNoCell};
  int range_keys[6];
  if (cells > 0) {
    ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(values.data(), grid_value.get(), cells * sizeof(float), cudaMemcpyDeviceToHost, s));
    ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(masked.data(), grid_masked.get(), cells, cudaMemcpyDeviceToHost, s));
  }
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(bad, overflow.get(), sizeof bad, cudaMemcpyDeviceToHost, s));
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(range_keys, range.get(), sizeof range_keys, cudaMemcpyDeviceToHost, s));
  t.rows.assign(opt.rows.size(), RowStages{});
  for (int r = 0; r < r_count; ++r) {
    RowStages& rs = t.rows[r];
    rs.row = opt.rows[r];
    const std::size_t off = static_cast<std::size_t>(r) * d.m;
    const float* src[6] = {e_scores.get() + off, e_scaled.get() + off, e_logits.get() + off, e_weights.get() + off,
                           e_biased.get() ? e_biased.get() + off : nullptr, e_capped.get() ? e_capped.get() + off : nullptr};
    std::vector<float>* dst[6] = {&rs.scores, &rs.scaled, &rs.logits, &rs.weights, &rs.biased, &rs.capped};
    for (int st = 0; st < 6; ++st) {
      if (src[st] == nullptr) continue;  // a score mods' stage the problem does not have
      dst[st]->resize(d.m);
      ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(dst[st]->data(), src[st], d.m * sizeof(float), cudaMemcpyDeviceToHost, s));
    }
  }
  if (opt.output) download(t.output, out.get(), static_cast<Eigen::Index>(d.heads) * d.n, d.d_v, s);
  else t.output = MatrixF();
  ev[5].record(s);
  pacer.finish();
  throw_if_overflow(bad, d.n, d.m);

  name_fp32_output_run(t, Variant::Staged);
  if (opt.pool) {
    PooledGrid* grids[3] = {&t.pooled.scores, &t.pooled.logits, &t.pooled.weights};
    for (int st = 0; st < 3; ++st) {
      PooledGrid& g = *grids[st];
      g.rows = sp.height;
      g.cols = sp.width;
      g.cells.assign(static_cast<std::size_t>(g.rows) * g.cols, PooledCell{});
      for (int gi = 0; gi < sp.groups(); ++gi) {
        const std::size_t src = (static_cast<std::size_t>(st) * sp.groups() + gi) * sp.width;
        for (int py = sp.group_py0[gi]; py < sp.group_py1[gi]; ++py)
          for (int px = 0; px < sp.width; ++px)
            g.cells[static_cast<std::size_t>(py) * g.cols + px] = {values[src + px], masked[src + px] != 0};
      }
      const float lo = float_from_order_key(range_keys[2 * st]);
      const float hi = float_from_order_key(range_keys[2 * st + 1]);
      g.has_range = lo <= hi;
      g.lo = g.has_range ? lo : 0;
      g.hi = g.has_range ? hi : 0;
    }
  }
  const MaskRule rule = mask_rule(p);  // host pointers
  for (RowStages& rs : t.rows) {
    const int i = rs.row % d.n;
    rs.mask.assign(d.m, 0.f);
    for (int j = 0; j < d.m; ++j)
      if (!rule.visible(i, j)) rs.mask[j] = -std::numeric_limits<float>::infinity();
  }

  // The streaming passes compute every stage of a cell together: the statistics pass stands for
  // the softmax's reductions, the pooling and exact-row passes for the scores and everything
  // derived from them, the fused kernel for the output. With one pass the pooling holds the view's
  // statistics too, and the statistics pass only the exact rows outside the view.
  StageTimings& tm = t.timings;
  tm = StageTimings{};
  tm.upload_ms = elapsed_ms(ev[0], ev[1]);
  tm.softmax_ms = elapsed_ms(ev[1], ev[2]);
  tm.qk_ms = elapsed_ms(ev[2], ev[3]);
  tm.fused_ms = elapsed_ms(ev[3], ev[4]);
  tm.download_ms = elapsed_ms(ev[4], ev[5]);
  tm.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
}

// ---- decode: the split-KV kernel (kernels/decode.h) --------------------------------------------

// The inputs as they are (a grouped cache is read once per key/value head, not expanded; Q and K
// rotated with RoPE), the output and the partial states of every split; with a bf16 cache, bf16
// copies of the inputs (made on the device from the uploaded fp32 ones, as the fused bf16
// kernel's are). With rules (any score or mask mod, a custom mask): their data and a custom mask.
struct DecodeDevice {
  int first = 0;  // the first key the splits cut
  int splits = 1;
  bool bf16 = false;
  bool with_rules = false;
  DeviceBuffer<float> q, k, v, out, partials, custom;
  DeviceBuffer<std::uint16_t> q16, k16, v16;
  DeviceRules rules;
  std::size_t device_bytes() const {
    return q.bytes() + k.bytes() + v.bytes() + out.bytes() + partials.bytes() + custom.bytes() + q16.bytes() +
           k16.bytes() + v16.bytes() + rules.device_bytes();
  }
};

// Whether the decode kernel runs with rules: the none and causal masks have its own code.
bool decode_uses_rules(const Problem& p) {
  return has_score_mods(p) || has_mask_mods(p) || p.mask == MaskKind::Custom;
}

// Everything refused before the device is touched, then the memory estimate and the allocation.
DecodeDevice decode_allocate(const Problem& p, const RunOptions& opt, const char* where) {
  validate(p);
  if (opt.pool || !opt.rows.empty())
    throw InputError("pooled views and exact rows come from the staged chain, not the decode kernel");
  if (opt.precision != Precision::FP32 && opt.precision != Precision::BF16)
    throw InputError("the CUDA decode kernel computes in fp32 or bf16");
  if (const std::string why = decode_shape_error(p.d_k(), p.d_v(), p.kv_group, p.n()); !why.empty())
    throw InputError(why);
  if (opt.splits < 0)
    throw InputError("--split must be a number of key splits >= 1 (0: the machine's choice), got " +
                     std::to_string(opt.splits));
  decode_config();  // ATTNLAB_DECODE_CONFIG out of range: refused before anything is uploaded
  throw_if_launch_fault(where);
  DecodeDevice dd;
  dd.bf16 = opt.precision == Precision::BF16;
  // The machine's plan cuts only the keys some query may see (a window's); a requested one cuts
  // them all, as the CPU's does (cpu/decode.h).
  dd.first = opt.splits == 0 ? decode_first_key(p) : 0;
  dd.splits = decode_splits(p.kv_heads(), p.m() - dd.first, opt.splits);
  const std::size_t part = decode_partials_floats(p.heads, p.n(), p.d_v(), dd.splits);
  const std::size_t inputs = static_cast<std::size_t>(p.q().size() + p.k().size() + p.v().size());
  dd.with_rules = decode_uses_rules(p);
  const std::size_t custom = p.mask == MaskKind::Custom ? static_cast<std::size_t>(p.n()) * p.m() : 0;
  const std::size_t rules = dd.with_rules ? static_cast<std::size_t>(p.bias().size()) + (p.mods.alibi ? p.heads : 0) +
                                                p.documents().size()
                                          : 0;  // floats and ints alike
  const std::size_t need =
      (inputs + static_cast<std::size_t>(p.heads) * p.n() * p.d_v() + part + custom + rules) * sizeof(float) +
      (dd.bf16 ? inputs * sizeof(std::uint16_t) : 0);
  refuse_unless_it_fits(need, Msg::GpuMemoryFused);
  dd.q = DeviceBuffer<float>(static_cast<std::size_t>(p.q().size()));
  dd.k = DeviceBuffer<float>(static_cast<std::size_t>(p.k().size()));
  dd.v = DeviceBuffer<float>(static_cast<std::size_t>(p.v().size()));
  dd.out = DeviceBuffer<float>(static_cast<std::size_t>(p.heads) * p.n() * p.d_v());
  dd.partials = DeviceBuffer<float>(part);
  dd.custom = DeviceBuffer<float>(custom);
  if (dd.bf16) {
    dd.q16 = DeviceBuffer<std::uint16_t>(dd.q.size());
    dd.k16 = DeviceBuffer<std::uint16_t>(dd.k.size());
    dd.v16 = DeviceBuffer<std::uint16_t>(dd.v.size());
  }
  return dd;
}

// The inputs to the device (Q and K as the kernel multiplies them, the rules' data, and bf16
// copies for a bf16 cache).
void decode_upload(DecodeDevice& dd, const Problem& p, cudaStream_t s) {
  const KernelQK qk = kernel_qk(p, p);
  upload(dd.q.get(), qk.q(p), s);
  upload(dd.k.get(), qk.k(p), s);
  upload(dd.v.get(), p.v(), s);
  if (dd.custom.size() > 0) upload(dd.custom.get(), p.custom_mask(), s);
  if (dd.with_rules) upload_rules(dd.rules, p, dd.custom.get(), s);
  if (dd.bf16) {
    to_bf16(dd.q.get(), dd.q16.get(), dd.q.size(), s);
    to_bf16(dd.k.get(), dd.k16.get(), dd.k.size(), s);
    to_bf16(dd.v.get(), dd.v16.get(), dd.v.size(), s);
  }
}

// With rules the kernel takes 1 / T (its scores are the modified scaled ones) and the rules' mask.
void decode_launch(const DecodeDevice& dd, const Problem& p, cudaStream_t s) {
  const KernelRules* rules = dd.with_rules ? &dd.rules.rules : nullptr;
  const float scale = rules ? static_cast<float>(1.0 / p.temperature) : fused_scale(p);
  const bool causal = !rules && p.mask == MaskKind::Causal;
  if (dd.bf16)
    decode_attention_bf16(dd.q16.get(), dd.k16.get(), dd.v16.get(), dd.out.get(), dd.partials.get(), p.heads,
                          p.kv_group, p.n(), p.m(), p.d_k(), dd.first, dd.splits, scale, causal, s, rules);
  else
    decode_attention_fp32(dd.q.get(), dd.k.get(), dd.v.get(), dd.out.get(), dd.partials.get(), p.heads,
                          p.kv_group, p.n(), p.m(), p.d_k(), dd.first, dd.splits, scale, causal, s, rules);
}

std::string decode_kernel_name(const DecodeDevice& dd, const Problem& p) {
  return std::string("split-KV decode ") + (dd.bf16 ? "bf16" : "fp32") + " D=" + std::to_string(p.d_k()) + " rows=" + std::to_string(p.kv_group * p.n()) +
         " splits=" + std::to_string(dd.splits) + (dd.first > 0 ? " from key " + std::to_string(dd.first) : "") +
         (dd.with_rules ? " rules" : "") +
         (decode_rows_grouped(p.kv_group * p.n()) ? " rows-by-four" : "");
}

void run_decode(const Problem& p, const RunOptions& opt, Trace& t) {
  const auto wall0 = std::chrono::steady_clock::now();
  DecodeDevice dd = decode_allocate(p, opt, "cuda run");
  Stream stream;
  const cudaStream_t s = stream.get();
  Event ev[4];  // start, uploaded, kernel done, downloaded
  ev[0].record(s);
  decode_upload(dd, p, s);
  ev[1].record(s);
  decode_launch(dd, p, s);
  ev[2].record(s);
  download(t.output, dd.out.get(), static_cast<Eigen::Index>(p.heads) * p.n(), p.d_v(), s);
  ev[3].record(s);
  ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));
  name_fp32_output_run(t, Variant::Decode);
  t.precision = opt.precision;
  t.rows.clear();
  t.splits = dd.splits;
  t.timings = StageTimings{};
  t.timings.upload_ms = elapsed_ms(ev[0], ev[1]);
  t.timings.fused_ms = elapsed_ms(ev[1], ev[2]);
  t.timings.download_ms = elapsed_ms(ev[2], ev[3]);
  t.timings.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
}

BenchSample bench_decode(const Problem& p, const RunOptions& opt, int warmup, int repeat) {
  DecodeDevice dd = decode_allocate(p, opt, "cuda bench");
  Stream stream;
  const cudaStream_t s = stream.get();
  decode_upload(dd, p, s);
  for (int i = 0; i < warmup; ++i) decode_launch(dd, p, s);
  ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));
  BenchSample out;
  out.peak_bytes = dd.device_bytes();
  Event start, stop;
  for (int i = 0; i < repeat; ++i) {
    start.record(s);
    decode_launch(dd, p, s);
    stop.record(s);
    ATTNLAB_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    out.ms.push_back(elapsed_ms(start, stop));
  }
  download(out.output, dd.out.get(), static_cast<Eigen::Index>(p.heads) * p.n(), p.d_v(), s);
  ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));
  out.kernel = decode_kernel_name(dd, p);
  out.splits = dd.splits;
  return out;
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

  // Downloads into `t`'s matrices, which keep their buffers when the shapes match, and keeps its
  // device buffers (and page-locked staging) for the next run of the same plan: a repeated run of
  // the same size (the viewer on every temperature change) allocates nothing, on either side.
  // Only the stages opt.stages asks for come back; exact rows are copied from the device.
  // A row that comes out not finite is named by its cause, or computed again on V scaled
  // (core/output_range.h): the kernels do not say which of their sums overflowed.
  void run_into(const Problem& grouped, const RunOptions& opt, Trace& t) override {
    output_in_range_after(grouped, opt.precision, t,
                          [&](const Problem& q, Trace& out) { run_into_once(q, opt, out); });
  }

  BenchSample bench(const Problem& grouped, const RunOptions& opt, int warmup, int repeat) override {
    BenchSample b = bench_once(grouped, opt, warmup, repeat);
    // The timed runs are the kernel's on the inputs as given; the output checked is the run's.
    if (first_row_not_finite(b.output) >= 0) {
      Trace t;
      run_into(grouped, opt, t);
      b.output = std::move(t.output);
    }
    return b;
  }

 private:
  void run_into_once(const Problem& grouped, const RunOptions& opt, Trace& t) {
    if (opt.variant == Variant::Decode) {  // reads a grouped cache as it is
      release_resident();
      run_decode(grouped, opt, t);
      return;
    }
    // The prefill kernels know one key/value head per query head: a grouped cache is copied per head.
    const Problem p = expand_kv_heads(grouped);
    if (opt.variant == Variant::Fused && (opt.pool || !opt.rows.empty())) {
      validate(p);
      throw InputError("pooled views and exact rows come from the staged chain, not the fused kernel");
    }
    if (streams(opt)) {
      release_resident();  // a streamed problem may need the memory they hold
      run_streamed(grouped, p, opt, t);
      return;
    }
    const auto wall0 = std::chrono::steady_clock::now();
    const BufferPlan plan = plan_buffers(dims_of(p), p, opt, /*bench=*/false);
    const bool reuse = resident_plan_ && *resident_plan_ == plan;
    if (!reuse) release_resident();  // before the estimate: it may need what they hold
    check_before_run(p, opt, /*bench=*/false, reuse ? plan.device_bytes() : 0);
    check_stream_request(p, opt);  // exact rows of a run that keeps its stages
    const KernelQK qk = kernel_qk(grouped, p);
    try {
      if (!reuse) {
        resident_ = allocate(p, opt, /*bench=*/false);
        resident_plan_ = plan;
      }
      set_constants(resident_, p, opt);
      run_resident(p, qk, opt, t, wall0);
    } catch (...) {
      release_resident();  // a failed launch may have left them in any state
      throw;
    }
  }

  BenchSample bench_once(const Problem& grouped, const RunOptions& opt, int warmup, int repeat) {
    if (opt.variant == Variant::Decode) {
      release_resident();
      return bench_decode(grouped, opt, warmup, repeat);
    }
    const Problem p = expand_kv_heads(grouped);  // as in run_into
    release_resident();  // the estimate and the timed runs have the device to themselves
    check_before_run(p, opt, /*bench=*/true);
    const KernelQK qk = kernel_qk(grouped, p);

    Stream stream;
    const cudaStream_t s = stream.get();
    DeviceProblem dp = allocate(p, opt, /*bench=*/true);
    upload_inputs(dp, p, qk, opt, /*count_tiles=*/false, s);

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
    if (!staged) out.kernel = last_fused_kernel();
    return out;
  }

  void release_resident() {
    resident_ = DeviceProblem{};
    resident_plan_.reset();
  }

  // One run on the resident buffers (allocated for this problem's plan, constants set); qk: Q and
  // K as the kernels multiply them (and a kept-stage trace shows, rotated).
  void run_resident(const Problem& p, const KernelQK& qk, const RunOptions& opt, Trace& t,
                    std::chrono::steady_clock::time_point wall0) {
    DeviceProblem& dp = resident_;
    const Dims& d = dp.d;
    Stream stream;
    const cudaStream_t s = stream.get();
    // ev[0] start, [1] uploaded, [2..5] after qk / scale_mask / softmax / pv.
    Event ev[6];
    ev[0].record(s);
    upload_inputs(dp, p, qk, opt, /*count_tiles=*/true, s);
    ev[1].record(s);

    t.backend = "cuda";
    t.variant = opt.variant;
    t.precision = opt.precision;
    t.timings = StageTimings{};
    t.pooled = PooledStages{};
    t.has_stages = opt.variant == Variant::Staged && opt.keep_stages;
    if (opt.variant == Variant::Staged) {
      run_staged(dp, s, &ev[2], /*build_mask=*/opt.keep_stages);
    } else {
      // Fused: the one kernel stands for the whole chain; its time is between ev[1] and ev[5].
      run_fused(dp, opt, s);
      for (int i = 2; i <= 5; ++i) ev[i].record(s);
    }
    ATTNLAB_CUDA_CHECK(cudaEventSynchronize(ev[5].get()));

    // What comes back: the requested stages (a reused trace keeps no stage of an earlier run),
    // the exact rows and the output; the download's time is the host's wall time, copy-out from
    // the staging slots included.
    const auto d0 = std::chrono::steady_clock::now();
    std::vector<Download> jobs;
    const Eigen::Index rows = static_cast<Eigen::Index>(d.heads) * d.n;
    // (biased and capped have a device buffer only where the problem has them and they were asked.)
    const auto bring = [&](unsigned bit, MatrixF& dst, const float* src, Eigen::Index r) {
      if (!t.has_stages || !(opt.stages & bit) || src == nullptr) {
        dst = MatrixF();
        return;
      }
      dst.resize(r, d.m);
      jobs.push_back({dst.data(), src, static_cast<std::size_t>(dst.size()) * sizeof(float)});
    };
    bring(kStageScores, t.scores, dp.scores.get(), rows);
    bring(kStageScaled, t.scaled, dp.scaled.get(), rows);
    bring(kStageBiased, t.biased, dp.biased.get(), rows);
    bring(kStageCapped, t.capped, dp.capped.get(), rows);
    bring(kStageMask, t.mask, dp.mask.get(), d.n);
    bring(kStageLogits, t.logits, dp.logits.get(), rows);
    bring(kStageWeights, t.weights, dp.weights.get(), rows);
    // RoPE: the rotated Q and K the kernels multiplied, with the stages (the host's matrices).
    if (t.has_stages && qk.rot) {
      t.q_rot = qk.rot->q;
      t.k_rot = qk.rot->k();
    } else {
      t.q_rot = t.k_rot = MatrixF();
    }
    // A fused run with rules: the tiles its kernel counted.
    unsigned long long visits = 0;
    const bool counted = opt.variant == Variant::Fused && dp.rules.rules.visits != nullptr && dp.with_rules;
    if (counted) jobs.push_back({&visits, dp.blocks.visits.get(), sizeof visits});
    t.output.resize(rows, d.d_v);
    jobs.push_back({t.output.data(), dp.out.get(), static_cast<std::size_t>(t.output.size()) * sizeof(float)});
    t.rows.assign(t.has_stages ? opt.rows.size() : 0, RowStages{});
    const std::size_t row_bytes = static_cast<std::size_t>(d.m) * sizeof(float);
    for (std::size_t k = 0; k < t.rows.size(); ++k) {
      RowStages& rs = t.rows[k];
      rs.row = opt.rows[k];
      const std::size_t off = static_cast<std::size_t>(rs.row) * d.m;
      const std::size_t moff = static_cast<std::size_t>(rs.row % d.n) * d.m;
      // (biased and capped: where the problem has them, their buffers exist for the exact rows.)
      const std::pair<std::vector<float>*, const float*> parts[] = {
          {&rs.scores, dp.scores.get() + off},
          {&rs.scaled, dp.scaled.get() + off},
          {&rs.biased, dp.biased.get() ? dp.biased.get() + off : nullptr},
          {&rs.capped, dp.capped.get() ? dp.capped.get() + off : nullptr},
          {&rs.logits, dp.logits.get() + off},
          {&rs.weights, dp.weights.get() + off},
          {&rs.mask, dp.mask.get() + moff}};
      for (const auto& [dst, src] : parts) {
        if (src == nullptr) continue;
        dst->resize(d.m);
        jobs.push_back({dst->data(), src, row_bytes});
      }
    }
    std::size_t total = 0;
    for (const Download& j : jobs) total += j.bytes;
    // Page-locked staging pays off for large copies only (and needs the memory).
    const bool pinned = pinned_downloads() && total >= kStagingSlotBytes / 4 &&
                        staging_.reserve(kStagingSlotBytes);
    download_all(jobs, s, pinned ? &staging_ : nullptr);
    if (counted) {
      const DeviceBlockMask& b = dp.rules.rules.blocks;
      last_tiles = {b.q_tile, b.k_tile, static_cast<long long>(visits), dp.blocks.planned, dp.blocks.total};
    }

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
    const auto end = std::chrono::steady_clock::now();
    tm.download_ms = std::chrono::duration<double, std::milli>(end - d0).count();
    tm.total_ms = std::chrono::duration<double, std::milli>(end - wall0).count();
  }

  // The device buffers of the last run (run_into), for the next run of the same plan.
  DeviceProblem resident_;
  std::optional<BufferPlan> resident_plan_;
  PinnedStaging staging_;
};

// ---- the fused backward (kernels/backward.h) -------------------------------------------------------

// What last_backward_tiles() reports: one record per host thread.
thread_local FusedTiles last_bwd_tiles;

// x copied to the device (fp32), and its bf16 copy when `bf16` (rounded on the device, as the
// forward rounds its inputs).
struct BackwardInput {
  DeviceBuffer<float> f32;
  DeviceBuffer<std::uint16_t> b16;
  const void* kernel_ptr(bool bf16) const { return bf16 ? static_cast<const void*>(b16.get()) : f32.get(); }
};
BackwardInput upload_backward_input(const MatrixF& x, bool bf16, cudaStream_t s) {
  BackwardInput in;
  in.f32 = DeviceBuffer<float>(static_cast<std::size_t>(x.size()));
  upload(in.f32.get(), x, s);
  if (bf16) {
    in.b16 = DeviceBuffer<std::uint16_t>(in.f32.size());
    to_bf16(in.f32.get(), in.b16.get(), in.f32.size(), s);
  }
  return in;
}

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

std::size_t streamed_device_bytes(const Problem& p, const RunOptions& opt) {
  validate(p);
  check_stream_request(p, opt);
  return stream_device_bytes(dims_of(p), p, opt, plan_stream(p, opt));
}

FusedTiles last_fused_tiles() { return last_tiles; }
FusedTiles last_backward_tiles() { return last_bwd_tiles; }

GradTrace fused_backward(const Problem& p, const MatrixF& dout, Precision precision) {
  validate(p);
  const int heads = p.heads, kv_heads = p.kv_heads(), n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const Eigen::Index rows = static_cast<Eigen::Index>(heads) * n, kv_rows = static_cast<Eigen::Index>(kv_heads) * m;
  if (dout.rows() != rows || dout.cols() != d_v)
    throw InputError("fused backward: dO must be (heads n, d_v) = (" + std::to_string(rows) + ", " +
                     std::to_string(d_v) + "), got (" + std::to_string(dout.rows()) + ", " +
                     std::to_string(dout.cols()) + ")");
  if (!dout.allFinite()) throw InputError("fused backward: dO has values that are not finite");
  const bool bf16 = precision == Precision::BF16;
  if (!backward_takes(d_k, d_v, bf16))
    throw InputError(std::string("fused backward: ") +
                     (bf16 ? "bf16 takes d_k == d_v in {64, 128} (the fused bf16 forward's)" : "fp32 takes d_k, d_v <= 256") +
                     ", got d_k " + std::to_string(d_k) + ", d_v " + std::to_string(d_v));
  RunOptions fwd;
  fwd.variant = Variant::Fused;
  fwd.precision = precision;
  fwd.keep_stages = false;
  GradTrace g;
  // NoDeviceError without a device; the forward's own checks (an injected fault among them).
  g.forward = make_backend()->run(p, fwd);

  const int config = backward_config(bf16);  // ATTNLAB_BACKWARD_CONFIG, read once
  const bool tensor_cores = config >= 1;
  const FusedTile tile = backward_tile(d_k, d_v, tensor_cores);
  // Every buffer below, refused before the first is allocated, as a forward that does not fit is
  // (the forward's own buffers are freed by now, so these are the run's peak).
  {
    const std::size_t inputs = static_cast<std::size_t>(rows) * (d_k + d_v) + static_cast<std::size_t>(kv_rows) * (d_k + d_v);
    const std::size_t floats = inputs + static_cast<std::size_t>(rows) * (d_v + 2 + d_k) +
                               static_cast<std::size_t>(kv_rows) * (d_k + d_v) +
                               (p.mask == MaskKind::Custom ? static_cast<std::size_t>(p.custom_mask().size()) : 0) +
                               static_cast<std::size_t>(p.bias().size()) + (p.mods.alibi ? p.heads : 0) +
                               p.documents().size();  // floats and ints alike
    const std::size_t need = floats * sizeof(float) + (bf16 ? inputs * sizeof(std::uint16_t) : 0) +
                             block_mask_bytes(n, m, tile) + sizeof(double);
    refuse_unless_it_fits(need, Msg::GpuMemoryBackward);
    g.device_bytes = need;
  }

  // Q and K as QKᵀ multiplies them (RoPE's rotation, made once per problem), the grouped K and V
  // as given: the backward kernels read grouped heads themselves.
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  Stream stream;
  const cudaStream_t s = stream.get();
  const BackwardInput q = upload_backward_input(kernel_q(p, rot.get()), bf16, s);
  const BackwardInput k = upload_backward_input(kernel_k(p, rot.get()), bf16, s);
  const BackwardInput v = upload_backward_input(p.v(), bf16, s);
  const BackwardInput d_out = upload_backward_input(dout, bf16, s);
  DeviceBuffer<float> o(static_cast<std::size_t>(g.forward.output.size()));
  upload(o.get(), g.forward.output, s);
  DeviceBuffer<float> custom(p.mask == MaskKind::Custom ? static_cast<std::size_t>(p.custom_mask().size()) : 0);
  if (p.mask == MaskKind::Custom) upload(custom.get(), p.custom_mask(), s);
  DeviceRules dr;
  DeviceBlocks db;
  upload_rules(dr, p, custom.get(), s);
  upload_blocks(db, p, tile, /*count=*/true, dr.rules, s);
  DeviceBuffer<float> lse2(static_cast<std::size_t>(rows)), dd(static_cast<std::size_t>(rows));
  DeviceBuffer<float> dq(static_cast<std::size_t>(rows) * d_k), dk(static_cast<std::size_t>(kv_rows) * d_k),
      dv(static_cast<std::size_t>(kv_rows) * d_v);
  DeviceBuffer<double> dt(1);
  ATTNLAB_CUDA_CHECK(cudaMemsetAsync(dq.get(), 0, dq.bytes(), s));
  ATTNLAB_CUDA_CHECK(cudaMemsetAsync(dt.get(), 0, dt.bytes(), s));

  // 1 / T and s / T taken in double, rounded once.
  const BackwardArgs a{.q = q.kernel_ptr(bf16), .k = k.kernel_ptr(bf16), .v = v.kernel_ptr(bf16),
                       .dout = d_out.kernel_ptr(bf16), .o = o.get(), .lse2 = lse2.get(), .dd = dd.get(),
                       .dq = dq.get(), .dk = dk.get(), .dv = dv.get(), .dt = dt.get(), .heads = heads,
                       .kv_heads = kv_heads, .n = n, .m = m, .d_k = d_k, .d_v = d_v, .bf16 = bf16, .tensor_cores = tensor_cores, .two_blocks = config == 2,
                       .logit_log2 = static_cast<float>(1.4426950408889634 / p.temperature),
                       .grad_scale = static_cast<float>(p.scale_value() / p.temperature),
                       .rules = dr.rules};

  Event start, stop;
  start.record(s);
  launch_backward_stats(a, s);
  launch_backward(a, s);
  stop.record(s);
  MatrixF dq_h, dk_h, dv_h, d_h;
  download(dq_h, dq.get(), rows, d_k, s);
  download(dk_h, dk.get(), kv_rows, d_k, s);
  download(dv_h, dv.get(), kv_rows, d_v, s);
  download(d_h, dd.get(), rows, 1, s);
  double dt_sum = 0;
  unsigned long long visits = 0;
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(&dt_sum, dt.get(), sizeof(double), cudaMemcpyDeviceToHost, s));
  ATTNLAB_CUDA_CHECK(cudaMemcpyAsync(&visits, db.visits.get(), sizeof(visits), cudaMemcpyDeviceToHost, s));
  ATTNLAB_CUDA_CHECK(cudaStreamSynchronize(s));
  g.backward_ms = elapsed_ms(start, stop);
  g.kernel = last_backward_kernel();
  last_bwd_tiles = {tile.q_tile, tile.k_tile, static_cast<long long>(visits), db.planned, db.total};

  g.dout = dout;
  g.D = std::move(d_h);
  g.dv = std::move(dv_h);
  // Σ dS ∘ (y c − lse2) in log2 units back to −Σ dS ∘ y / T² (kernels/backward.h).
  g.dT = -dt_sum * 0.6931471805599453 / p.temperature + 0.0;  // + 0.0: a sum of 0 is dT = 0, not -0
  // Finite inputs and a finite dO can still overflow fp32 on the way back (a huge dO or V makes D
  // infinite, dP − D NaN): refused as the CPU backward refuses it, never printed.
  if (!std::isfinite(g.dT) || first_row_not_finite(g.D) >= 0 || first_row_not_finite(g.dv) >= 0 ||
      first_row_not_finite(dq_h) >= 0 || first_row_not_finite(dk_h) >= 0)
    throw InputError(Msg::OverflowGradients, {});
  if (rot) {
    // The kernels' gradients are of the rotated Q and K: each pair is turned back in double, per
    // head, from the head's first position (queries at m - n, keys at 0), as the CPU backward does.
    g.dq = dq_h;
    g.dk = dk_h;
    rope_rotate_back_rows(g.dq, heads, n, p.causal_offset(), p.mods.rope_theta);
    rope_rotate_back_rows(g.dk, kv_heads, m, 0, p.mods.rope_theta);
    g.dq_rot = std::move(dq_h);
    g.dk_rot = std::move(dk_h);
  } else {
    g.dq = std::move(dq_h);
    g.dk = std::move(dk_h);
  }
  return g;
}

std::unique_ptr<Backend> make_backend() {
  std::string reason;
  if (!device_available(&reason)) throw NoDeviceError(Msg::NoDevice, {reason});
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
