// wgmma.mma_async (sm_90a) with bf16 inputs and fp32 accumulators, the shapes the fused kernel
// uses (kernels/sm90a/fused_wgmma.cu): S = Q Kᵀ with both operands in shared memory (N = the key
// tile, 64 or 128) and O += P V with P in registers and V MN-major (N = the head dim, 64 or 128),
// and the fences and waits around them. Layouts and descriptors: kernels/wgmma_layout.h. Device
// code for sm_90a only (__CUDA_ARCH_FEAT_SM90_ALL).
//
// Operands after the registers: the descriptors, then scale-d (a predicate: false writes d = A B,
// true adds), imm-scale-a and imm-scale-b (1), and the transpose flags (imm-trans-a, imm-trans-b:
// 0 = K-major; only imm-trans-b with A from registers).
#pragma once

#include <cstdint>

namespace attnlab::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Before the first wgmma of a batch, and whenever registers it reads or accumulates into were
// written by other instructions since the last one.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory writes of the generic proxy (cp.async, st.shared) made visible to the async
// proxy, through which wgmma reads its operands: after the writes, before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving reads or writes of `r` across this point (after a wait, before
// a fence): wgmma's registers change behind its back.
template <int R>
__device__ __forceinline__ void wgmma_hold(float (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for A fragments in registers (R k-steps of four .b32).
template <int R>
__device__ __forceinline__ void wgmma_hold(std::uint32_t (&r)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
  }
}

// The accumulators of a warpgroup product as asm operands and in its template: 32 (N = 64) or 64
// (N = 128) fp32 registers a thread, %0 ... in order.
#define ATTNLAB_WGMMA_D8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define ATTNLAB_WGMMA_D32(d) ATTNLAB_WGMMA_D8(d, 0), ATTNLAB_WGMMA_D8(d, 8), ATTNLAB_WGMMA_D8(d, 16), ATTNLAB_WGMMA_D8(d, 24)
#define ATTNLAB_WGMMA_D64(d) \
  ATTNLAB_WGMMA_D32(d), ATTNLAB_WGMMA_D8(d, 32), ATTNLAB_WGMMA_D8(d, 40), ATTNLAB_WGMMA_D8(d, 48), ATTNLAB_WGMMA_D8(d, 56)
#define ATTNLAB_WGMMA_REGS_0_31                                                                            \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define ATTNLAB_WGMMA_R32 "{" ATTNLAB_WGMMA_REGS_0_31 "}"
#define ATTNLAB_WGMMA_R64                                                                                          \
  "{" ATTNLAB_WGMMA_REGS_0_31 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x 64, fp32; 32 per thread) = or += A (64 x 16, from the descriptor) Bᵀ (B 64 x 16, K-major).
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], std::uint64_t a, std::uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      ATTNLAB_WGMMA_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : ATTNLAB_WGMMA_D32(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// d (64 x 128, fp32; 64 per thread) = or += A (64 x 16, from the descriptor) Bᵀ (B 128 x 16, K-major).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], std::uint64_t a, std::uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      ATTNLAB_WGMMA_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : ATTNLAB_WGMMA_D64(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// d (64 x 64, fp32) += A (64 x 16 bf16, mma.m16n8k16 A fragments in registers) B (16 x 64, MN-major).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      ATTNLAB_WGMMA_R32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : ATTNLAB_WGMMA_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

// d (64 x 128, fp32) += A (64 x 16 bf16, mma.m16n8k16 A fragments in registers) B (16 x 128, MN-major).
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      ATTNLAB_WGMMA_R64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : ATTNLAB_WGMMA_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace attnlab::cuda
