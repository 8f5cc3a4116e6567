// What every backend shares beside the interface (see core/backend.h): the names and presence of
// the stages a trace brings back, and the check of a streaming request.
#include "core/backend.h"

#include <string>
#include <vector>

namespace attnlab {

namespace {

// The (n, m) stages of a trace by StageBit, in the order of stage_names.
struct StageEntry {
  unsigned bit;
  const char* name;
  MatrixF Trace::*matrix;
};
constexpr StageEntry kStageEntries[] = {{kStageScores, "scores", &Trace::scores},
                                        {kStageScaled, "scaled", &Trace::scaled},
                                        {kStageBiased, "biased", &Trace::biased},
                                        {kStageCapped, "capped", &Trace::capped},
                                        {kStageMask, "mask", &Trace::mask},
                                        {kStageLogits, "logits", &Trace::logits},
                                        {kStageWeights, "weights", &Trace::weights}};

}  // namespace

std::vector<std::string> stage_names(unsigned stages) {
  std::vector<std::string> out;
  for (const StageEntry& e : kStageEntries)
    if (stages & e.bit) out.emplace_back(e.name);
  return out;
}

unsigned problem_stages(const Problem& p) {
  return kStageScores | kStageScaled | kStageMask | kStageLogits | kStageWeights |
         score_mod_stages(p.mods, p.bias().size() > 0);
}

unsigned score_mod_stages(const Modifications& md, bool bias) {
  return ((md.alibi || bias) ? kStageBiased : 0u) | (md.softcap > 0 ? kStageCapped : 0u);
}

unsigned present_stages(const Trace& t) {
  unsigned s = 0;
  if (t.has_stages)
    for (const StageEntry& e : kStageEntries)
      if ((t.*e.matrix).size() > 0) s |= e.bit;
  return s;
}

void drop_unrequested_stages(const RunOptions& opt, Trace& t) {
  if (!t.has_stages) return;
  for (const StageEntry& e : kStageEntries)
    if (!(opt.stages & e.bit)) t.*e.matrix = MatrixF();
}

void check_stream_request(const Problem& p, const RunOptions& opt) {
  const long total = static_cast<long>(p.heads) * p.n();
  for (int g : opt.rows)
    if (g < 0 || g >= total)
      throw InputError("row " + std::to_string(g) + " is outside 0.." + std::to_string(total - 1));
  if (!opt.pool) return;
  const PoolRequest& r = *opt.pool;
  if (r.head < 0 || r.head >= p.heads)
    throw InputError("pooled head " + std::to_string(r.head) + " is outside 0.." + std::to_string(p.heads - 1));
  const auto check_axis = [](const PoolAxis& a, int total, const char* what) {
    if (a.begin.size() != a.end.size() || a.begin.empty())
      throw InputError(std::string("pooled ") + what + ": no pixels, or begin/end of different lengths");
    for (int i = 0; i < a.size(); ++i)
      if (a.begin[i] < 0 || a.end[i] <= a.begin[i] || a.end[i] > total || (i > 0 && a.begin[i] < a.begin[i - 1]))
        throw InputError(std::string("pooled ") + what + ": pixel " + std::to_string(i) +
                         " covers an empty or out-of-range interval");
  };
  check_axis(r.rows, p.n(), "rows");
  check_axis(r.cols, p.m(), "columns");
}

}  // namespace attnlab
