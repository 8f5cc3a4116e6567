// Row statistics of the weights (what the page shows under the table) and the description text.
#pragma once

#include "core/problem.h"
#include "core/trace.h"

#include <string>
#include <vector>

namespace attnlab {

struct RowStats {
  double max_weight = 0;  // largest weight in the row (0..1)
  int argmax = 0;         // its key index (first on ties)
  double entropy = 0;     // -sum p ln p over unmasked keys (natural log)
  int unmasked = 0;       // "effective positions": number of unmasked keys
  double perplexity = 0;  // e^entropy
  double weight_sum = 0;  // sum of the row's weights
};

// Row `row` of the weights (0 <= row < heads*n); masked keys come from trace.mask (row % n).
RowStats row_stats(const Trace& t, int row);
// The same of one row given as m weights and its m mask entries (0 / -inf; null: none masked).
RowStats row_stats(const float* weights, const float* mask, int m);

// The median of repeated timings (mean of the middle two for an even count; 0 when empty).
double median_of(std::vector<double> v);

// The description of the current picture (SPEC.md "读取当前图形说明"), regenerated from the state:
// sentence/token count, query, d_k, temperature, the mask sentence, the row's weights (to 3
// decimals, two significant digits below 0.01; a row longer than 16 its 8 largest with their keys
// and their sum), the argmax token, and the caveat.
std::string describe(const Problem& p, const Trace& t, int query, Lang lang);
// The same from the query's row alone: m weights and mask entries (weights null: no row to
// quote, e.g. a fused run; mask null: none masked).
std::string describe(const Problem& p, const float* weights, const float* mask, int query, Lang lang);

// The standing caveat, one sentence.
std::string caveat(Lang lang);

// The mask sentence: "No causal mask is applied; ..." / causal / custom, per language.
std::string mask_sentence(MaskKind m, Lang lang);
// The problem's: the mask kind's sentence (a problem other than the demo, unmasked, is not called
// a demo) with a sentence for each mask modification (prefix-LM,
// the sliding window, packed documents) that says which keys a query reads.
std::string mask_sentence(const Problem& p, Lang lang);
// Every text mask_sentence(Problem) can produce in `lang`, with 1 for its numbers (the viewer's
// glyph atlas).
std::vector<std::string> mask_sentence_texts(Lang lang);

}  // namespace attnlab
