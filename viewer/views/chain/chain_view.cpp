// The chain view (see chain_view.h).
#include "viewer/views/chain/chain_view.h"

#include "core/backend.h"
#include "core/modify.h"
#include "viewer/draw/strings.h"
#include "viewer/session/session.h"

#include <algorithm>

namespace attnlab::viewer {

namespace {

// Q or K of the problem on screen (one head: n x d_k, m x d_k) as given, and as rotated; null
// without RoPE.
const MatrixF* given_of(const Session& s, bool keys) {
  if (!s.rotated()) return nullptr;
  return keys ? &s.problem().k() : &s.problem().q();
}
const MatrixF* rotated_of(const Session& s, bool keys) {
  const RotatedQK* r = s.rotated();
  if (!r) return nullptr;
  return keys ? &r->k() : &r->q;
}

ValueRange range_of(const MatrixF& m) {
  return finite_range(m.data(), static_cast<int>(m.rows()), static_cast<int>(m.cols()), nullptr, 0);
}

}  // namespace

const char* ChainView::label(Lang lang) { return tr(lang, S::ViewChain); }

const char* chain_rope_word(ChainRope r) {
  switch (r) {
    case ChainRope::QK: return "qk";
    case ChainRope::Q: return "q";
    case ChainRope::QRot: return "q-rot";
    case ChainRope::QDiff: return "q-diff";
    case ChainRope::K: return "k";
    case ChainRope::KRot: return "k-rot";
    case ChainRope::KDiff: return "k-diff";
  }
  return "qk";
}

std::optional<ChainRope> chain_rope_of(const std::string& word) {
  for (ChainRope r : kChainRopes)
    if (word == chain_rope_word(r)) return r;
  return std::nullopt;
}

const char* ChainView::sub_word(Sub sub) {
  switch (sub) {
    case Sub::Scaled: return "scaled";
    case Sub::Biased: return "biased";
    case Sub::Capped: return "capped";
    case Sub::Logits: break;
  }
  return "logits";
}

bool ChainView::parse_flag(const std::string& flag, const FlagValue& value, Options& o) {
  if (flag == "--chain-sub") {
    const std::string& v = value();
    for (Sub s : {Sub::Logits, Sub::Scaled, Sub::Biased, Sub::Capped})
      if (v == sub_word(s)) {
        o.sub = static_cast<int>(s);
        return true;
      }
    throw InputError(Msg::OptionWords, {flag, "logits, scaled, biased, capped", v});
  }
  if (flag != "--chain-rope") return false;
  const std::string& v = value();
  o.rope = chain_rope_of(v);
  if (!o.rope) throw InputError(Msg::OptionWords, {flag, "qk, q, q-rot, q-diff, k, k-rot, k-diff", v});
  return true;
}

std::string ChainView::usage() {
  return "  --view chain: [--chain-rope qk|q|q-rot|q-diff|k|k-rot|k-diff]\n"
         "                 (with --rope: what step 1's heatmap shows: QK^T of the rotated Q and K (qk, the\n"
         "                 default), Q or K as given, rotated by RoPE, or rotated minus given)\n"
         "               [--chain-sub logits|scaled|biased|capped]\n"
         "                 (with score mods: which of step 2's stages its heatmap shows: the logits (the\n"
         "                 default), the scaled scores, with ALiBi's or the bias's term added, soft-capped;\n"
         "                 add --step 2 to open there)\n";
}

ChainView::ChainView(const ViewContext& ctx, const Options& o) {
  if (o.sub) {
    const Sub want = static_cast<Sub>(*o.sub);
    const Problem& p = ctx.session.problem();
    const unsigned stages = problem_stages(p);  // the core's rule of which stages a problem has
    const bool biased = stages & kStageBiased, capped = stages & kStageCapped;
    const char* needs = nullptr;
    if (want == Sub::Biased && !biased) needs = "--score-mod alibi | bias:FILE";
    if (want == Sub::Capped && !capped) needs = "--score-mod softcap:C";
    if (want == Sub::Scaled && !biased && !capped) needs = "--score-mod alibi | softcap:C | bias:FILE";
    if (needs)
      throw InputError(Msg::ChainSubNeeds, {sub_word(want), needs});
    sub = want;
  }
  if (!o.rope) return;
  if (*o.rope != ChainRope::QK && !ctx.session.rotated())
    throw InputError(Msg::ChainRopeNeeds, {chain_rope_word(*o.rope)});
  rope = *o.rope;
}

void ChainView::prepare(Session& s, int step) {
  s.set_step(step);
  if (!s.rotated()) rope = ChainRope::QK;
}

ChainRope ChainView::shown_rope(const Session& s) const { return s.rotated() ? rope : ChainRope::QK; }

const MatrixF* ChainView::rope_matrix(const Session& s, ChainRope r) const {
  if (r == ChainRope::QK || !s.rotated()) return nullptr;
  const bool keys = chain_rope_keys(r);
  if (r == ChainRope::Q || r == ChainRope::K) return given_of(s, keys);
  if (r == ChainRope::QRot || r == ChainRope::KRot) return rotated_of(s, keys);
  if (cache_.revision != s.revision() || cache_.diff_of != r) {
    cache_.diff = *rotated_of(s, keys) - *given_of(s, keys);
    cache_.revision = s.revision();
    cache_.diff_of = r;
  }
  return &cache_.diff;
}

ValueRange ChainView::rope_range(const Session& s, ChainRope r) const {
  const MatrixF* m = rope_matrix(s, r);
  if (!m) return {};
  if (cache_.range_revision == s.revision() && cache_.range_of == r) return cache_.range;
  ValueRange range = range_of(*m);
  if (r != ChainRope::QDiff && r != ChainRope::KDiff) {
    const bool keys = chain_rope_keys(r);
    const ValueRange a = range_of(*given_of(s, keys)), b = range_of(*rotated_of(s, keys));
    range = ValueRange{std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
  }
  cache_.range = range;
  cache_.range_of = r;
  cache_.range_revision = s.revision();
  return range;
}

std::optional<RopeCell> ChainView::rope_cell(const Session& s, ChainRope r, int row, int col) const {
  const MatrixF* m = rope_matrix(s, r);
  if (!m || row < 0 || col < 0 || row >= m->rows() || col >= m->cols()) return std::nullopt;
  const Problem& p = s.problem();
  const bool keys = chain_rope_keys(r);
  const int d = static_cast<int>(m->cols()), half = d / 2;
  RopeCell c;
  // Key j sits at position j, query i at i + m - n (the queries are the last n positions).
  c.pos = keys ? row : row + p.causal_offset();
  c.pair = col % half;
  c.partner = col < half ? col + half : col - half;
  c.frequency = rope_frequency(p.mods.rope_theta, c.pair, d);
  c.angle = c.pos * c.frequency;
  c.before = (*given_of(s, keys))(row, col);
  c.after = (*rotated_of(s, keys))(row, col);
  c.diff = c.after - c.before;
  return c;
}

const std::vector<std::string>& ChainView::dim_labels(int d) const { return index_labels(dims_, d); }

const MatrixF* chain_sub_matrix(const Session& s, ChainView::Sub sub) {
  const Trace& t = s.trace();
  const MatrixF* m = sub == ChainView::Sub::Scaled   ? &t.scaled
                     : sub == ChainView::Sub::Biased ? &t.biased
                     : sub == ChainView::Sub::Capped ? &t.capped
                                                     : &t.logits;
  return t.has_stages && m->size() > 0 ? m : nullptr;
}

bool ChainView::has_subs(const Session& s, int step) {
  return step == 2 && !s.streaming() &&
         (chain_sub_matrix(s, Sub::Biased) != nullptr || chain_sub_matrix(s, Sub::Capped) != nullptr);
}

ChainView::Sub ChainView::shown_sub(const Session& s, int step) const {
  return has_subs(s, step) && chain_sub_matrix(s, sub) != nullptr ? sub : Sub::Logits;
}

View::Shown ChainView::shown_matrix(const Session& s, int step) const {
  if (step == 1) {
    const ChainRope r = shown_rope(s);
    if (const MatrixF* m = rope_matrix(s, r)) return {m, chain_rope_word(r)};  // --chain-rope's words
  }
  if (step == 2) {
    const Sub shown = shown_sub(s, step);
    if (shown != Sub::Logits)
      return {chain_sub_matrix(s, shown), sub_word(shown)};  // --chain-sub's words
  }
  return {};
}

void ChainView::dump(nlohmann::json& j, const Session& s) const {
  j["chain"]["sub"] = sub_word(sub);
  // Step 1's choice as shown (qk without RoPE), and the matrix and colour scale it draws.
  const ChainRope r = shown_rope(s);
  j["chain"]["rope"] = chain_rope_word(r);
  const auto boxes = [](const std::vector<LabelBox>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const LabelBox& b : v) a.push_back({b.x, b.y, b.w, b.h});
    return a;
  };
  j["chain"]["row_chart"] = {{"x", chart.x},         {"w", chart.w},
                             {"first", chart.first}, {"end", chart.end},
                             {"own_axis", chart.own_axis}, {"title", chart.title},
                             {"ranks", boxes(chart.ranks)}, {"legend", boxes(chart.legend)}, {"bars", boxes(chart.bars)}};
  j["chain"]["col_labels"] = {{"stride", col_labels.stride}, {"lines", col_labels.lines}, {"max_w", col_labels.max_w}};
  j["chain"]["value_px"] = value_px;
  j["chain"]["chooser"] = {{"rect", chooser}, {"items", chooser_items}};
  j["chain"]["status"] = status;
  if (const MatrixF* m = rope_matrix(s, r)) {
    const ValueRange range = rope_range(s, r);
    j["chain"]["rope_rows"] = m->rows();
    j["chain"]["rope_cols"] = m->cols();
    j["chain"]["rope_range"] = {range.lo, range.hi};
  }
}

std::string ChainView::broken(const Session&) const {
  const HeatView& z = zoom;
  if (!(z.x0 >= 0 && z.x0 < z.x1 && z.x1 <= 1 && z.y0 >= 0 && z.y0 < z.y1 && z.y1 <= 1))
    return "the heatmap's window lies outside the matrix";
  return {};
}

}  // namespace attnlab::viewer
