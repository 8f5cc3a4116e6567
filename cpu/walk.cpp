// The online-softmax walk (see walk.h): one query row through update_tile, the CPU fused kernel's
// per-tile step, with the state read back after every tile; and the checks of its output against
// the staged chain, fp64 and the kernel itself on the one-row problem.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/walk.h"

#include "core/messages.h"
#include "cpu/cpu_backend.h"
#include "cpu/decode.h"
#include "cpu/online_softmax.h"
#include "core/modify.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using namespace cpu::online;

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_row_args(const Problem& p, int head, int query) {
  if (head < 0 || head >= p.heads)
    throw InputError("head must be between 0 and " + std::to_string(p.heads - 1) + ", got " +
                     std::to_string(head));
  if (query < 0 || query >= p.n())
    throw InputError("query must be between 0 and " + std::to_string(p.n() - 1) + ", got " +
                     std::to_string(query));
}

std::vector<double> row_of(const MatrixF& m, Index r) {
  std::vector<double> v(static_cast<std::size_t>(m.cols()));
  for (Index c = 0; c < m.cols(); ++c) v[c] = m(r, c);
  return v;
}

}  // namespace

void walk_fill_header(const Problem& p, int head, int query, int tile, float scale, WalkHeader& w) {
  w.query = query;
  w.head = head;
  w.tile = tile;
  w.keys = p.m();
  w.d_k = p.d_k();
  w.d_v = p.d_v();
  w.temperature = p.temperature;
  w.explicit_scale = p.scale;
  w.mask = p.mask;
  w.prefix = p.mods.prefix;
  w.scale = scale;
  w.modifications = modifications_text(p, Lang::En);
  w.modifications_zh = modifications_text(p, Lang::Zh);
  w.source = p.source;
  w.source_zh = p.source_in(Lang::Zh);
  w.score_mods = has_score_mods(p);
  w.query_token = token_label(p.query_tokens(), query);
  w.key_tokens.reserve(p.m());
  for (int j = 0; j < p.m(); ++j) w.key_tokens.push_back(token_label(p.key_tokens(), j));
}

void walk_check_row(const Problem& p, int head, int query) { check_row_args(p, head, query); }

WalkTile::Skip walk_tile_skip(const MaskRule& rule, int query, int j0, int j1) {
  int lo, hi;  // the keys the row may see by the causal, window and prefix rules
  rule.interval(query, lo, hi);
  if (j0 >= hi)
    return rule.window > 0 && hi == query + rule.offset + rule.window ? WalkTile::Skip::Window
                                                                      : WalkTile::Skip::AfterQuery;
  if (j1 <= lo) return WalkTile::Skip::Window;
  if (rule.documents != nullptr) {
    const int doc = rule.documents[query + rule.offset];
    for (int j = j0; j < j1; ++j)
      if (rule.documents[j] == doc) return WalkTile::Skip::None;
    return WalkTile::Skip::Document;
  }
  return WalkTile::Skip::None;
}

namespace {

Walk walk_row_once(const Problem& p, int head, int query, int tile) {
  if (tile < 1) throw InputError("tile must be a whole number of keys >= 1, got " + std::to_string(tile));
  check_row_args(p, head, query);
  const int n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  // The kernel's rules and scale, made as cpu_fused makes them (cpu/fused.cpp).
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MaskRule rule = mask_rule(p);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(p, slopes);
  const float score_scale = static_cast<float>(p.scale_value());
  const float scale = online_scale(p);

  Walk w;
  walk_fill_header(p, head, query, tile, scale, w);

  // The row is lane 0 of one tile of kTileCols queries; the other lanes hold a zero query (their
  // scores are 0, their state stays finite and is never read). Row stride of every buffer: ld.
  constexpr Index ld = kTileCols;
  const int block = std::min(tile, m);
  std::vector<float> qt(static_cast<std::size_t>(d_k) * ld, 0.f);    // Q^T (d_k, kTileCols)
  std::vector<float> st(static_cast<std::size_t>(block) * ld, 0.f);  // S^T, then P^T (keys, kTileCols)
  std::vector<float> acct(static_cast<std::size_t>(d_v) * ld, 0.f);  // acc^T (d_v, kTileCols)
  std::vector<float> ms(ld, kNegInf), ls(ld, 0.f), alphas(ld, 0.f);
  const SoftmaxState state{ms.data(), ls.data(), alphas.data()};
  const Index qrow = static_cast<Index>(head) * n + query;
  const Index krow = p.kv_row(head);
  for (int k = 0; k < d_k; ++k) qt[static_cast<std::size_t>(k) * ld] = kernel_q(p, rot.get())(qrow, k);
  auto logit = [&](float raw) { return std::isinf(raw) ? -kInf : static_cast<double>(raw) * scale; };
  const int count = walk_tile_count(m, tile);
  w.tiles.reserve(count);
  for (int t = 0; t < count; ++t) {
    WalkTile r;
    r.index = t;
    r.j0 = t * tile;
    r.j1 = std::min(m, r.j0 + tile);
    r.m_prev = logit(ms[0]);
    const int keys = r.j1 - r.j0;
    // As in the kernel's block mask: a tile outside the row's keys (after the query when causal,
    // outside its window) or whose keys all belong to other documents is never loaded (a mask
    // file's tiles are loaded and masked per key).
    r.skip = walk_tile_skip(rule, query, r.j0, r.j1);
    if (r.skip != WalkTile::Skip::None) {
      r.skipped = true;
      r.tile_max = -kInf;
      r.alpha = std::numeric_limits<double>::quiet_NaN();
      r.masked = keys;
    } else {
      const float* kb = kernel_k(p, rot.get()).data() + (krow + r.j0) * d_k;  // K_blk (keys, d_k)
      const float* vb = p.v().data() + (krow + r.j0) * d_v;                  // V_blk (keys, d_v)
      rows_madd(keys, kb, d_k, 1, qt.data(), ld, d_k, st.data(), ld, nullptr);
      if (score.any()) modify_tile(score, score_scale, st.data(), ld, head, query, 1, r.j0, keys);
      mask_tile(rule, st.data(), ld, query, 1, r.j0, keys);
      r.logits.resize(keys);
      float tile_max = kNegInf;
      for (int j = 0; j < keys; ++j) {
        const float raw = st[static_cast<std::size_t>(j) * ld];
        r.logits[j] = logit(raw);
        r.masked += std::isinf(raw) ? 1 : 0;
        tile_max = std::max(tile_max, raw);
      }
      r.tile_max = logit(tile_max);
      update_tile(st.data(), ld, keys, vb, d_v, acct.data(), scale, state, r.j0);
      r.alpha = alphas[0];
      r.weights.resize(keys);
      for (int j = 0; j < keys; ++j) r.weights[j] = st[static_cast<std::size_t>(j) * ld];
    }
    r.m = logit(ms[0]);
    r.l = ls[0];
    r.acc.resize(d_v);
    for (int c = 0; c < d_v; ++c) r.acc[c] = acct[static_cast<std::size_t>(c) * ld];
    if (ls[0] > 0.f) {
      r.output.resize(d_v);
      // The kernel's final step, in fp32: acc times 1 / l.
      const float inv_l = 1.f / ls[0];
      for (int c = 0; c < d_v; ++c) r.output[c] = acct[static_cast<std::size_t>(c) * ld] * inv_l;
    }
    w.tiles.push_back(std::move(r));
  }
  bool acc_finite = true;
  for (int c = 0; c < d_v; ++c) acc_finite = acc_finite && std::isfinite(acct[static_cast<std::size_t>(c) * ld]);
  const cpu::online::RowOverflow what = cpu::online::row_overflow(ms[0], ls[0], acc_finite, scale);
  if (what != cpu::online::RowOverflow::None)  // as the fused kernel says it
    cpu::online::throw_overflow(what, head, query, Precision::FP32);
  w.output = w.tiles.back().output;
  return w;
}

// An output row of the walk times 2^e; a value beyond fp32's range refuses the row, as
// scale_values_back refuses a matrix's.
void scale_row_back(std::vector<double>& row, int e, int head, int query) {
  const double back = std::ldexp(1.0, e);
  for (double& x : row) {
    x *= back;
    if (!(std::abs(x) <= std::numeric_limits<float>::max())) refuse_output_row(head, query, Precision::FP32);
  }
}

}  // namespace

// Where acc overflowed with V as given, the walk of V · 2^-e (cpu/values_range.h): its acc is shown
// as the kernel held it, its outputs multiplied back by 2^e.
Walk walk_row(const Problem& p, int head, int query, int tile) {
  Walk w;
  w.values_exponent = cpu::run_values_in_range(p, [&](const Problem& q) { w = walk_row_once(q, head, query, tile); });
  if (w.values_exponent == 0) return w;
  const double back = std::ldexp(1.0, w.values_exponent);
  for (WalkTile& t : w.tiles)
    for (double& x : t.output) x *= back;
  scale_row_back(w.output, w.values_exponent, head, query);
  return w;
}

Problem row_problem(const Problem& p, int head, int query) {
  check_row_args(p, head, query);
  const int n = p.n(), m = p.m();
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  Problem r;
  ProblemInputs& in = r.edit();
  // RoPE's rotation and ALiBi's distances depend on the query's position, which is not the same
  // in a one-row problem: the row takes Q and K as rotated, and ALiBi as part of its bias.
  in.q = kernel_q(p, rot.get()).row(static_cast<Index>(head) * n + query);
  in.k = kernel_k(p, rot.get()).middleRows(p.kv_row(head), m);
  in.v = p.v().middleRows(p.kv_row(head), m);
  r.temperature = p.temperature;
  r.scale = p.scale;
  in.query_tokens = {token_label(p.query_tokens(), query)};
  in.key_tokens = p.key_tokens();
  std::vector<double> slopes;
  const ScoreRuleT<double> score = score_rule<double>(p, slopes);
  if (score.slopes != nullptr || score.bias != nullptr) {
    in.bias.resize(1, m);
    for (int j = 0; j < m; ++j) in.bias(0, j) = static_cast<float>(score.added(head, query, j));
  }
  r.mods.softcap = p.mods.softcap;
  if (p.mask != MaskKind::None || has_mask_mods(p)) {
    const MaskRule rule = mask_rule(p);
    r.mask = MaskKind::Custom;
    in.custom_mask = MatrixF::Zero(1, m);
    for (int j = 0; j < m; ++j)
      if (!rule.visible(query, j)) in.custom_mask(0, j) = -std::numeric_limits<float>::infinity();
  }
  return r;
}

float walk_record_splits(const Problem& p, const cpu::decode::SplitPlan& plan, int keys,
                        const cpu::decode::Partial* parts, int head, int query, Walk& w) {
  const int r = cpu::decode::partial_row(p, head, query), d_v = p.d_v();
  const float scale = online_scale(p);
  const auto logit = [scale](float raw) { return std::isinf(raw) ? -kInf : static_cast<double>(raw) * scale; };
  w.splits = plan.splits;
  w.split_states.clear();
  w.merges.clear();
  float m = kNegInf, l = 0;
  std::vector<float> acc(d_v, 0.f);
  for (int s = 0; s < plan.splits; ++s) {
    const cpu::decode::Partial& part = parts[s];
    WalkSplit st;
    st.index = s;
    st.j0 = plan.begin(s);
    st.j1 = plan.end(s, keys);
    st.m = logit(part.m[r]);
    st.l = part.l[r];
    st.acc.assign(part.acc.row(r).data(), part.acc.row(r).data() + d_v);
    w.split_states.push_back(st);
    if (s == 0) {  // the first split's state is the merge so far
      m = part.m[r];
      l = part.l[r];
      acc.assign(part.acc.row(r).data(), part.acc.row(r).data() + d_v);
      continue;
    }
    WalkMerge mg;
    mg.index = s;
    const cpu::online::MergeFactors f = cpu::online::merge_factors(m, part.m[r], scale);
    mg.m_a = logit(m);
    mg.m_b = logit(part.m[r]);
    mg.m = logit(f.m);
    mg.a = f.a;
    mg.b = f.b;
    mg.l_a = l;
    mg.l_b = part.l[r];
    cpu::online::merge_states(m, l, acc.data(), part.m[r], part.l[r], part.acc.row(r).data(), d_v, scale);
    mg.l = l;
    mg.acc.assign(acc.begin(), acc.end());
    w.merges.push_back(std::move(mg));
  }
  w.split_output.assign(d_v, 0.0);
  for (int c = 0; c < d_v; ++c) w.split_output[c] = acc[c] / l;  // the combine's fp32 division
  return l;
}

namespace {

// Every split's partial state through the decode kernel and their merge, recorded in w; returns
// the merged l.
float walk_splits_once(const Problem& p, const cpu::decode::SplitPlan& plan, Walk& w) {
  const int g = p.kv_head(w.head);
  std::vector<cpu::decode::Partial> parts(plan.splits);
  MatrixF scratch;
  for (int s = 0; s < plan.splits; ++s)
    cpu::decode::split_partial(p, g, plan.begin(s), plan.end(s, p.m()), parts[s], scratch);
  return walk_record_splits(p, plan, p.m(), parts.data(), w.head, w.query, w);
}

}  // namespace

// V as the one-pass walk took it (scaled by 2^-e where its acc overflowed); where the splits' sums
// overflow with V as given, they run on V · 2^-e of their own. Their output is multiplied back.
void walk_splits(const Problem& p, int splits, Walk& w) {
  check_split_count(splits, p.m());
  const cpu::decode::SplitPlan plan = cpu::decode::plan_splits(p, 1, splits);
  int e = w.values_exponent;
  float l = walk_splits_once(e > 0 ? with_values_scaled(p, e) : p, plan, w);
  const auto finite = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
  };
  if (e == 0 && !finite(w.split_output)) {
    e = values_exponent(p);
    l = walk_splits_once(with_values_scaled(p, e), plan, w);
  }
  w.split_values_exponent = e;
  if (e > 0) scale_row_back(w.split_output, e, w.head, w.query);
  w.split_max_abs_diff = walk_max_abs_diff(w.split_output, w.output);
  if (!w.fp64_output.empty()) w.split_fp64_error = walk_max_abs_diff(w.split_output, w.fp64_output);
  const float walk_l = static_cast<float>(w.tiles.back().l);
  const float ulp = std::nextafter(walk_l, std::numeric_limits<float>::infinity()) - walk_l;
  w.split_l_ulps = std::abs(static_cast<double>(l) - walk_l) / ulp;
}

double walk_max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return kInf;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

void throw_for_row(const InputError& e, int head, int query) {
  std::vector<std::string> args = e.args;
  if (e.id == Msg::OverflowScoresRow || e.id == Msg::OverflowLogitsRow) {  // {head, row, precision}
    args.at(0) = std::to_string(head);
    args.at(1) = std::to_string(query);
  } else if (e.id == Msg::OverflowScores || e.id == Msg::OverflowLogits) {  // {row, column}
    args.at(0) = std::to_string(query);
  } else {
    return;
  }
  throw InputError(e.id, std::move(args));
}

void check_walk(const Problem& p, Walk& w) {
  const Problem r = row_problem(p, w.head, w.query);
  on_row_problem(w.head, w.query, [&] {
    w.staged_output = row_of(cpu_staged_output_only(r).output, 0);
    w.cpu_fused_output = row_of(cpu_fused(r).output, 0);
  });
  w.fp64_output = reference_fp64_row(p, w.head, w.query).output;  // RoPE and ALiBi in double, at the row's positions
  w.max_abs_diff = walk_max_abs_diff(w.output, w.staged_output);
  w.fp64_error = walk_max_abs_diff(w.output, w.fp64_output);
  w.cpu_fused_diff = walk_max_abs_diff(w.output, w.cpu_fused_output);
}

}  // namespace attnlab
