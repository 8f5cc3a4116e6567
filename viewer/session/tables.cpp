// The numeric tables' list and column labels (see tables.h).
#include "viewer/session/tables.h"

namespace attnlab::viewer {

std::vector<NumericTable> numeric_tables(const Problem& p, const Trace& t) {
  std::vector<NumericTable> out = {
      {"tq", S::TableQ, &p.q(), true, false, 0},
      {"tk", S::TableK, &p.k(), false, false, 0},
      {"tv", S::TableV, &p.v(), false, false, 4},
  };
  // RoPE: Q and K as QKᵀ multiplied them.
  if (t.q_rot.size() > 0) {
    out.push_back({"tqr", S::TableQRot, &t.q_rot, true, false, 1});
    out.push_back({"tkr", S::TableKRot, &t.k_rot, false, false, 1});
  }
  out.push_back({"ts", S::TableScores, &t.scores, true, true, 1});
  out.push_back({"tsc", S::TableScaled, &t.scaled, true, true, 2});
  // The score mods' stages, in the chain's order.
  if (t.biased.size() > 0) out.push_back({"tb", S::TableBiased, &t.biased, true, true, 2});
  if (t.capped.size() > 0) out.push_back({"tc", S::TableCapped, &t.capped, true, true, 2});
  out.push_back({"tm", S::TableMask, &t.mask, true, true, 2});
  out.push_back({"tl", S::TableLogits, &t.logits, true, true, 2});
  out.push_back({"tw", S::TableWeights, &t.weights, true, true, 3});
  out.push_back({"to", S::TableOutput, &t.output, true, false, 4});
  return out;
}

std::vector<std::string> feature_labels(int d) {
  std::vector<std::string> out;
  out.reserve(d > 0 ? d : 0);
  for (int j = 1; j <= d; ++j) out.push_back(std::to_string(j));
  return out;
}

std::vector<std::string> table_column_labels(const Problem& p, const NumericTable& tb) {
  if (tb.key_cols) return p.key_tokens();
  return feature_labels(tb.m ? static_cast<int>(tb.m->cols()) : 0);
}

}  // namespace attnlab::viewer
