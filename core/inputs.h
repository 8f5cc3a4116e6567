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

// The modifications as named (core/modifications.h), the CLI's and the viewer's flags:
//   apply_rope_spec       "" or "none": no RoPE; a number: RoPE with that base θ.
//   apply_score_mod_spec  items joined by ',' or '+': alibi (standard slopes), alibi:S (one slope
//                         for every head), alibi:S1/S2/... (one per head), softcap:C, bias:FILE (an
//                         (n, m) or (heads n, m) matrix, CSV or .npy); "none" or "" clears them.
//   apply_mask_mod_spec   items joined by ',' or '+': none, causal, window:W, document:FILE (one
//                         whole number per position, CSV or .npy), prefix:P.
// Each replaces the modifications of its kind (a spec is the whole set); `causal` sets the mask
// kind and is not undone by a later spec (the mask is --mask's). Unknown items, bad numbers and
// repeated items are refused with a catalogued message; the values themselves are checked by
// validate() (validate_modifications). SpecFiles::NamesOnly checks a spec's form and keeps the
// files' names (bias_name, documents_name) without reading them: the viewer's flags, whose files
// are read once, with the inputs (a pipe can be read only once).
enum class SpecFiles { Read, NamesOnly };
void apply_rope_spec(Problem& p, const std::string& theta);
void apply_score_mod_spec(Problem& p, const std::string& spec, SpecFiles files = SpecFiles::Read);
void apply_mask_mod_spec(Problem& p, const std::string& spec, SpecFiles files = SpecFiles::Read);

// Token labels from a comma list or a file (at most one of the two non-empty): n labels (queries,
// and keys when m == n) or n + m (queries first). The shapes are validated before the count is;
// without labels nothing is done (the caller validates the whole problem once it is made).
void apply_token_spec(Problem& p, const std::string& tokens, const std::string& tokens_file);

}  // namespace attnlab
