// The session's limits (see options.h).
#include "viewer/session/options.h"

#include "core/format.h"
#include "core/messages.h"

#include <string>

namespace attnlab::viewer {

void check_random_inputs(int n, int d_k, int d_v, int heads) {
  const double bytes = static_cast<double>(n) * heads * (2.0 * d_k + d_v) * sizeof(float);
  if (bytes > kMaxRandomInputBytes)
    throw InputError(Msg::RandomInputsTooLarge, {std::to_string(n), std::to_string(d_k), std::to_string(d_v),
                                                 std::to_string(heads), format_bytes(bytes),
                                                 format_bytes(kMaxRandomInputBytes)});
}

}  // namespace attnlab::viewer
