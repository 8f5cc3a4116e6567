// The language a command line's refusal prints in, for attnlab and attnlab-view alike.
#pragma once

#include "core/types.h"

namespace attnlab {

// The value of the arguments' --lang (either form) when it names a language, even where the
// refusal is of another option, else lang_from_env() (core/types.cpp).
Lang lang_from_args(int argc, const char* const* argv);

}  // namespace attnlab
