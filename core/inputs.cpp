// Reading and applying a problem's named inputs (see inputs.h).
#include "core/inputs.h"

#include "core/io.h"
#include "core/messages.h"

#include <filesystem>
#include <string>
#include <vector>

namespace attnlab {
namespace {

// --tokens / --tokens-file: n labels (queries, and keys when m == n) or n + m labels (queries
// first, then keys).
void apply_tokens(Problem& p, const std::vector<std::string>& tokens, const std::string& opt) {
  const int n = p.n(), m = p.m();
  const int count = static_cast<int>(tokens.size());
  if (count == n && n == m) {
    p.edit().query_tokens = tokens;
    p.edit().key_tokens = tokens;
  } else if (count == n + m) {
    p.edit().query_tokens.assign(tokens.begin(), tokens.begin() + n);
    p.edit().key_tokens.assign(tokens.begin() + n, tokens.end());
  } else {
    throw InputError(Msg::TokenLabelCount,
                     {opt, std::to_string(count), std::to_string(n), std::to_string(m),
                      (n == m ? std::to_string(n) + " or " : std::string()) + std::to_string(n + m)});
  }
}


}  // namespace

Problem problem_from_files(const std::string& q_file, const std::string& k_file, const std::string& v_file) {
  if (q_file.empty() || k_file.empty() || v_file.empty())
    throw InputError(Msg::FilesTogether, {q_file.empty() ? "--q" : k_file.empty() ? "--k" : "--v"});
  Problem p;
  ProblemInputs& in = p.edit();
  in.q = read_matrix(q_file);
  in.k = read_matrix(k_file);
  in.v = read_matrix(v_file);
  in.query_tokens = index_tokens(static_cast<int>(p.q().rows()));
  in.key_tokens = index_tokens(static_cast<int>(p.k().rows()));
  return p;
}

void apply_mask_spec(Problem& p, const std::string& mask) {
  if (mask == "none") {
    p.mask = MaskKind::None;
  } else if (mask == "causal") {
    p.mask = MaskKind::Causal;
  } else if (mask.empty()) {
    throw InputError("--mask needs none, causal or a FILE");
  } else {
    // A word that is not a file is most likely a mistyped mask name: say both possibilities.
    if (!std::filesystem::exists(mask) && mask.find_first_of("/.") == std::string::npos)
      throw InputError(Msg::MaskWord, {mask});
    p.edit().custom_mask = read_mask(mask);
    p.mask = MaskKind::Custom;
  }
}

void apply_token_spec(Problem& p, const std::string& tokens, const std::string& tokens_file) {
  if (!tokens.empty() && !tokens_file.empty())
    throw InputError(Msg::TokensBoth, {});
  // Labels are only checked against the shapes once the shapes themselves are known valid.
  if (!tokens.empty() || !tokens_file.empty()) {
    // The labels are replaced: check the shapes without the old ones, then apply the new ones
    // (apply_tokens checks their count itself).
    p.edit().query_tokens.clear();
    p.edit().key_tokens.clear();
    validate(p);
    if (!tokens.empty())
      apply_tokens(p, split_tokens(tokens), "--tokens");
    else
      apply_tokens(p, read_tokens_file(tokens_file), "--tokens-file");
  } else {
    validate(p);
  }
}

}  // namespace attnlab
