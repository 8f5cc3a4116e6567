// The backend registry, the layer above cpu/ and kernels/: which backends this build offers
// (core/backend.h is their interface), "auto" = CUDA when a device answers, else the CPU, and the
// one place where a CUDA failure under "auto" becomes a CPU run with one line on stderr.
//   "cpu"  — Eigen (cpu/): staged chain, fused blockwise kernel and split-KV decode, fp32 and bf16
//   "cuda" — CUDA kernels (kernels/): staged (fp32), fused and decode (fp32 and bf16); only when compiled in
//   "auto" — cuda when a device answers, else cpu
// The fp64 reference (reference_fp64 in cpu/cpu_backend.h) is not a registry backend: it is what
// every backend is checked against.
#pragma once

#include "core/backend.h"
#include "core/backward.h"

#include <memory>
#include <string>

namespace attnlab {

// True when the CUDA backend is compiled in and at least one device answers; otherwise false and
// *reason (if given) says why ("attnlab was built without CUDA", "cudaGetDeviceCount: ...").
bool cuda_available(std::string* reason = nullptr);

// Throws InputError(Msg::UnknownBackend: "unknown backend '<name>' (use auto, cpu or cuda)") for any other name: the
// CLI checks its --backend with it before reading inputs, make_backend before choosing.
void check_backend_name(const std::string& name);

// "cpu" | "cuda" | "auto". "cuda" without a device throws NoDeviceError (Msg::NoDevice: "no CUDA device: ...").
// Unknown names throw InputError (check_backend_name).
std::unique_ptr<Backend> make_backend(const std::string& name);

// Runs the problem on the named backend. Under "auto", a DeviceError from CUDA (out of memory,
// launch failure) or its refusal of the problem makes it print one line on stderr, in `lang`, and
// run on the CPU instead.
Trace run_backend(const std::string& name, const Problem& p, const RunOptions& opt = {}, Lang lang = Lang::En);
// The same through Backend::run_into (same fallback rule).
void run_backend_into(const std::string& name, const Problem& p, const RunOptions& opt, Trace& out,
                      Lang lang = Lang::En);

// The CUDA fused backward (kernels/cuda_backend.h cuda::fused_backward) for a given dO, fp32 or
// bf16: what `attnlab backward --backend cuda` and bench's CUDA backward cases run. NoDeviceError
// where CUDA is not compiled in or no device answers.
GradTrace run_cuda_backward(const Problem& p, const MatrixF& dout, Precision precision);

}  // namespace attnlab
