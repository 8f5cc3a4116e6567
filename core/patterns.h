// Synthetic heads that look like real ones: random problems whose Q and K are built so that the
// attention has a known structure (a local window, an attention sink, the previous token, an
// induction head), for `--random N --pattern P` in attnlab and attnlab-view. The constructions use
// bounded features (unit vectors, cos/sin of position times a frequency), never raw position
// coordinates, so fp32, TF32 and bf16 keep the structure at large N. Every problem says in its
// `source` that it is synthetic; noise (the default) is random_problem unchanged.
//
// Shapes as random_problem: Q (heads*n, d_k), K (heads*n, d_k), V (heads*n, d_v); every head has
// the same Q and K (the pattern), V differs per head.
#pragma once

#include "core/problem.h"

#include <cstdint>
#include <string>

namespace attnlab {

enum class PatternKind { Noise, Local, Sink, Previous, Induction };

struct Pattern {
  PatternKind kind = PatternKind::Noise;
  int window = 0;  // local:W, the half-width W >= 0
  bool operator==(const Pattern&) const = default;
};

// "noise" | "local:W" | "sink" | "previous" | "induction"; anything else is an InputError naming
// the text and the choices ("--pattern must be noise, local:W (W >= 0), sink, previous or
// induction, got 'foo'").
Pattern parse_pattern(const std::string& text);
// The spelling parse_pattern reads back: "local:4", "sink", ...
std::string pattern_name(const Pattern& p);

// The smallest d_k the construction accepts for n positions (1 for noise).
int pattern_min_dk(const Pattern& p, int n);

// Throws InputError when the pattern cannot be built for n positions with d_k: d_k below
// pattern_min_dk, or local's W >= n.
void check_pattern(const Pattern& p, int n, int d_k);

// A problem with the pattern's structure, deterministic per seed; throws InputError when d_k is
// below pattern_min_dk ("--pattern previous needs --dk >= 16, got 8"), local's W >= n, or when
// the exact gap check finds that the structure would not stand out (very large n or W for d_k).
// induction sets the causal mask (the structure needs it). Noise returns random_problem(...).
Problem pattern_problem(const Pattern& pattern, int n, int d_k, int d_v, std::uint64_t seed,
                        int heads = 1);

}  // namespace attnlab
