// PLACEHOLDER — replaced by the helper that owns `attnlab bench`. Registers nothing yet.
#include "cli/common.h"

namespace attnlab::cli {
void register_bench(CLI::App&, int&) {}
}  // namespace attnlab::cli
