// cp.async helpers shared by the fused tensor-core kernels (kernels/fused_bf16.cu,
// kernels/fused_tf32.cu): 16-byte global -> shared copies that bypass registers (sm_80+), with
// zero fill for rows and columns past the end of the data. Device code only.
#pragma once

#include <cstdint>

namespace attnlab::cuda {

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; with valid == false the 16 bytes are zero-filled (src-size
// 0), and `src` must still be a valid address.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace attnlab::cuda
