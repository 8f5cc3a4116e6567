// A problem's inputs as the user names them (the CLI's --q/--k/--v, --mask, --tokens and
// --tokens-file, the viewer's flags and its load fields), read and applied in one place: both
// faces give the same problem and the same messages for the same files.
#pragma once

#include "core/problem.h"

#include <string>

namespace attnlab {

// Q, K and V from CSV or .npy files (core/io.h), labelled 0, 1, ...; all three paths or
// InputError ("--q, --k and --v must be given together (missing --v)").
Problem problem_from_files(const std::string& q_file, const std::string& k_file, const std::string& v_file);

// The mask as named: "none", "causal", or a mask file (0 / -inf). A word that is neither a mask
// name nor an existing file is refused naming both possibilities.
void apply_mask_spec(Problem& p, const std::string& mask);

// Token labels from a comma list or a file (at most one of the two non-empty): n labels (queries,
// and keys when m == n) or n + m (queries first). The shapes are validated before the count is.
void apply_token_spec(Problem& p, const std::string& tokens, const std::string& tokens_file);

}  // namespace attnlab
