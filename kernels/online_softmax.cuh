// The running (max, sum of exponentials) of a row's softmax, device side: the row-wise softmax
// (kernels/softmax.cu) and the streamed pooled stages (kernels/stream_pool.cu) both accumulate
// it. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

namespace attnlab::cuda {

// Adds x to the running (mx, s): s is the sum of exp(x_i - mx) over the elements seen.
__device__ __forceinline__ void online_add(float& mx, float& s, float x) {
  if (x == -INFINITY) return;  // masked: contributes nothing (and -inf - -inf would be NaN)
  if (x > mx) {
    s = s * expf(mx - x) + 1.f;  // mx == -inf on the first element: expf(-inf) = 0, s becomes 1
    mx = x;
  } else {
    s += expf(x - mx);
  }
}

// Merges (omx, os) into (mx, s).
__device__ __forceinline__ void online_merge(float& mx, float& s, float omx, float os) {
  if (omx == -INFINITY) return;
  if (mx == -INFINITY) {
    mx = omx;
    s = os;
    return;
  }
  const float nm = fmaxf(mx, omx);
  s = s * expf(mx - nm) + os * expf(omx - nm);
  mx = nm;
}

}  // namespace attnlab::cuda
