// PLACEHOLDER — replaced by the helper that owns `attnlab verify`. Registers nothing yet.
#include "cli/common.h"

namespace attnlab::cli {
void register_verify(CLI::App&, int&) {}
}  // namespace attnlab::cli
