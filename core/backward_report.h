// Renderings of a backward run (Problem + GradTrace) for people and tools, in the style of `run`'s
// (core/report.h, whose tables, header lines and JSON layout they share through
// core/report_parts.h); nothing here computes a gradient, everything is read from the GradTrace.
//   text      the forward matrices the formulas read (Q, K, V, RoPE's, P, O), then every gradient
//             as a labelled table in the order the chain runs back, titled by its formula in the
//             chosen language (a table of small values shows them × a power of ten, said in its
//             title); dT; the selected query's gradient figures; a description; with a check, its
//             report last
//   markdown  the same as GitHub markdown
//   csv       long form `stage,row,col,row_token,col_token,value`: every forward stage, every
//             gradient, then dT (and the loss) as one-value rows
//   json      the run's keys (tokens, shapes, temperature, mask, mods, backend, ...), "upstream"
//             (kind, seed or file), "loss" (with a loss), "dT", "stages" (the forward, as run's),
//             "gradients" (dO dV dP D dlogits [dcapped dbiased] dscaled dscores [dQ_rot dK_rot] dQ
//             dK: matrices, rows as the forward's), "check" (with --check), "timings_ms"
#pragma once

#include "core/backward.h"
#include "core/backward_check.h"
#include "core/report.h"

#include <string>

namespace attnlab {

// `query` is the selected query row (0 <= query < n); `check` (may be null) is appended.
std::string render_backward(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang, Format f,
                            const BackwardCheck* check = nullptr);

// A few sentences on the selected query's row of dlogits: which key gradient descent would raise
// and lower most, that the row sums to zero, and what dO was.
std::string describe_backward(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang);

}  // namespace attnlab
