// The backend registry (see engine/registry.h).
#include "engine/registry.h"

#include "core/messages.h"
#include "cpu/cpu_backend.h"

#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

#include <iostream>

namespace attnlab {

bool cuda_available(std::string* reason) {
#ifdef ATTNLAB_HAVE_CUDA
  return cuda::device_available(reason);
#else
  if (reason) *reason = render_message(Msg::CudaNotBuilt, {}, Lang::En);
  return false;
#endif
}

void check_backend_name(const std::string& name) {
  if (name != "auto" && name != "cpu" && name != "cuda")
    throw InputError(Msg::UnknownBackend, {name});
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  check_backend_name(name);
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
#ifdef ATTNLAB_HAVE_CUDA
    return cuda::make_backend();
#else
    throw NoDeviceError(Msg::NoDevice, {render_message(Msg::CudaNotBuilt, {}, Lang::En)});
#endif
  }
  if (cuda_available()) return make_backend("cuda");  // "auto"
  return make_cpu_backend();
}

void run_backend_into(const std::string& name, const Problem& p, const RunOptions& opt, Trace& out, Lang lang) {
  std::unique_ptr<Backend> backend = make_backend(name);
  if (name != "auto" || backend->name() == "cpu") return backend->run_into(p, opt, out);
  try {
    return backend->run_into(p, opt, out);
  } catch (const DeviceError& e) {
    std::cerr << "attnlab: " << render_message(Msg::CudaFallback, {message_of(e).text(lang)}, lang) << "\n";
  } catch (const ResourceError& e) {
    std::cerr << "attnlab: " << render_message(Msg::CudaRefusedFallback, {message_of(e).text(lang)}, lang) << "\n";
  }
  // The CPU runs the requested precision (bf16 included: the CUDA bf16 kernel's arithmetic).
  make_cpu_backend()->run_into(p, opt, out);
}

GradTrace run_cuda_backward(const Problem& p, const MatrixF& dout, Precision precision) {
#ifdef ATTNLAB_HAVE_CUDA
  return cuda::fused_backward(p, dout, precision);
#else
  (void)p;
  (void)dout;
  (void)precision;
  throw NoDeviceError(Msg::NoDevice, {render_message(Msg::CudaNotBuilt, {}, Lang::En)});
#endif
}

Trace run_backend(const std::string& name, const Problem& p, const RunOptions& opt, Lang lang) {
  Trace t;
  run_backend_into(name, p, opt, t, lang);
  return t;
}

}  // namespace attnlab
