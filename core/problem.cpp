// Problem validation, the page's 5-token demo, seeded random problems and query resolution.
// Validation is the one place that turns a malformed problem into a message a learner can act on;
// every backend calls validate() before computing anything.
#include "core/problem.h"
#include "core/backend.h"

#include "core/messages.h"
#include "core/modify.h"

#include "core/format.h"
#include "core/parallel.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

void check_finite(const MatrixF& a, const char* name) {
  for (Eigen::Index r = 0; r < a.rows(); ++r)
    for (Eigen::Index c = 0; c < a.cols(); ++c)
      if (!std::isfinite(a(r, c)))
        throw InputError(Msg::MatrixNonFinite,
                         {name, format_number("%.9g", a(r, c)), std::to_string(r), std::to_string(c)});
}

}  // namespace

void validate_temperature(double t) {
  if (!std::isfinite(t) || t <= 0)
    throw InputError(Msg::TemperatureInvalid, {format_number("%.9g", t)});
  // The fp32 chains divide by T as a float: above FLT_MAX it is infinity and every logit 0.
  if (t > std::numeric_limits<float>::max()) throw InputError(Msg::TemperatureFp32, {format_number("%.9g", t)});
}

std::string source_line(const std::string& source, const std::string& source_zh, Lang lang) {
  if (source.empty()) return {};
  return lang == Lang::Zh ? "来源：" + (source_zh.empty() ? source : source_zh) : "source: " + source;
}

bool scale_fits(double s) {
  return std::isfinite(s) && s > 0 && s <= std::numeric_limits<float>::max();
}

ProblemInputs& Problem::edit() {
  // A problem that shares its inputs gets its own copy first. Copies are made on one thread at a
  // time (the viewer builds a run's problem on its worker and never edits one it has shared).
  if (in_.use_count() != 1) in_ = std::make_shared<ProblemInputs>(*in_);
  std::lock_guard<std::mutex> lk(in_->derived.mu);
  in_->derived.items.clear();  // Q, K or V may change
  return *in_;
}

ProblemInputs& Problem::edit_keeping_kv() {
  if (in_.use_count() != 1) in_ = std::make_shared<ProblemInputs>(*in_);
  std::lock_guard<std::mutex> lk(in_->derived.mu);
  std::erase_if(in_->derived.items, [](const auto& kv) { return kv.first.rfind("kv/", 0) != 0; });
  return *in_;
}

MatrixF& Problem::edit_q() { return edit_keeping_kv().q; }

MatrixF& Problem::edit_bias() { return edit_keeping_kv().bias; }

void Problem::set_inputs(ProblemInputs in) { in_ = std::make_shared<ProblemInputs>(std::move(in)); }

float fused_scale(const Problem& p) {
  if (p.scale) return static_cast<float>(*p.scale / p.temperature);
  return static_cast<float>(1.0 / (std::sqrt(static_cast<double>(p.d_k())) * p.temperature));
}

std::string token_label(const std::vector<std::string>& tokens, int i) {
  return i >= 0 && i < static_cast<int>(tokens.size()) ? tokens[i] : std::to_string(i);
}

std::string indexed_label(const std::vector<std::string>& tokens, int i) {
  return token_label(tokens, i) + " (#" + std::to_string(i) + ")";
}

namespace {

// Plain decimal notation only: an optional sign, digits with an optional fraction (at least one
// digit in all), an optional exponent. strtod would also take hex ("0x10"), "inf", "nan" and
// "infinity"; std::from_chars (general format) takes no hex but does take "inf" and "nan", and
// no leading '+', so the grammar is checked here first and the '+' dropped before from_chars.
bool is_plain_decimal(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  std::size_t mantissa = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

}  // namespace

std::string trim_blanks(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

std::optional<double> parse_plain_number(const std::string& text) {
  const std::string s = trim_blanks(text);
  if (s.empty() || !is_plain_decimal(s)) return std::nullopt;
  const std::string_view digits = s[0] == '+' ? std::string_view(s).substr(1) : std::string_view(s);
  double v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, std::chars_format::general);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return v;
}

double parse_temperature(const std::string& text) {
  const std::string s = trim_blanks(text);
  const auto refuse = [&s] {
    return InputError(Msg::TemperatureInvalid, {"'" + s + "'"});
  };
  if (!is_plain_decimal(s)) {
    // strtod's spellings of infinity and NaN keep validate_temperature's sentence ("got inf"),
    // the one the viewer's flag and the CLI gave for them before; everything else names the text.
    char* end = nullptr;
    const double t = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && !std::isfinite(t)) validate_temperature(t);
    throw refuse();
  }
  const std::string_view digits = s[0] == '+' ? std::string_view(s).substr(1) : std::string_view(s);
  double t = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t,
                                 std::chars_format::general);
  // Out of range ("1e999", "1e-999") is refused as typed, like any other unusable text.
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) throw refuse();
  validate_temperature(t);
  return t;
}

void validate(const Problem& p) {
  validate_temperature(p.temperature);
  if (p.scale && !scale_fits(*p.scale)) throw InputError(Msg::ScaleInvalid, {format_number("%.9g", *p.scale)});
  if (p.heads < 1) throw InputError(Msg::HeadsMin, {std::to_string(p.heads)});
  if (p.kv_group < 1 || p.heads % p.kv_group != 0)
    throw InputError(Msg::KvGroupDivide, {std::to_string(p.heads), std::to_string(p.kv_group)});
  if (p.q().size() == 0) throw InputError(Msg::MatrixEmpty, {"Q"});
  if (p.k().size() == 0) throw InputError(Msg::MatrixEmpty, {"K"});
  if (p.v().size() == 0) throw InputError(Msg::MatrixEmpty, {"V"});
  if (p.k().cols() != p.q().cols())
    throw InputError(Msg::ShapeKColumns, {std::to_string(p.k().cols()), std::to_string(p.q().cols())});
  if (p.v().rows() != p.k().rows())
    throw InputError(Msg::ShapeVRows, {std::to_string(p.v().rows()), std::to_string(p.k().rows())});
  if (p.q().rows() % p.heads != 0 || p.k().rows() % p.kv_heads() != 0)
    throw InputError(p.kv_group > 1 ? Msg::RowsOverHeadsKv : Msg::RowsOverHeads,
                     {std::to_string(p.q().rows()), std::to_string(p.k().rows()), std::to_string(p.heads),
                      std::to_string(p.kv_heads())});
  check_finite(p.q(), "Q");
  check_finite(p.k(), "K");
  check_finite(p.v(), "V");
  const int n = p.n(), m = p.m();
  if (n > kMaxTokens) throw InputError(Msg::TokensAbove, {"Q", std::to_string(n), std::to_string(kMaxTokens)});
  if (m > kMaxTokens) throw InputError(Msg::TokensAbove, {"K", std::to_string(m), std::to_string(kMaxTokens)});
  if (!p.query_tokens().empty() && static_cast<int>(p.query_tokens().size()) != n)
    throw InputError(Msg::QueryTokenCount, {std::to_string(p.query_tokens().size()), std::to_string(n)});
  if (!p.key_tokens().empty() && static_cast<int>(p.key_tokens().size()) != m)
    throw InputError(Msg::KeyTokenCount, {std::to_string(p.key_tokens().size()), std::to_string(m)});
  // A causal rule, the causal mask's or a prefix's (mask_rule: a prefix is causal past it), puts
  // the queries at the last positions of the keys.
  if ((p.mask == MaskKind::Causal || p.mods.prefix > 0) && n > m)
    throw InputError(Msg::QueriesOverKeys, {std::to_string(n), std::to_string(m)});
  if (p.mask == MaskKind::Custom) {
    if (p.custom_mask().rows() != n || p.custom_mask().cols() != m)
      throw InputError(Msg::MaskShape, {std::to_string(p.custom_mask().rows()), std::to_string(p.custom_mask().cols()),
                                        std::to_string(n), std::to_string(m)});
    for (int r = 0; r < n; ++r) {
      bool any_open = false;
      for (int c = 0; c < m; ++c) {
        const float x = p.custom_mask()(r, c);
        if (x == 0.0f) {
          any_open = true;
        } else if (!(std::isinf(x) && x < 0)) {
          throw InputError(Msg::MaskEntryAt, {format_number("%.9g", x), std::to_string(r), std::to_string(c)});
        }
      }
      if (!any_open)
        throw InputError(Msg::FullyMaskedRow, {std::to_string(r), token_label(p.query_tokens(), r)});
    }
  }
  validate_modifications(p);
  // The mask mods may leave a row without a key (a window with the mask file, a document that has
  // no key before its first query, ...): refused as the mask file's are.
  if (has_mask_mods(p)) {
    const MaskRule rule = mask_rule(p);
    for (int r = 0; r < n; ++r) {
      int lo, hi;
      rule.interval(r, lo, hi);
      bool any_open = false;
      for (int c = lo; c < hi && !any_open; ++c) any_open = !rule.elementwise() || rule.visible(r, c);
      if (!any_open) throw InputError(Msg::FullyMaskedRow, {std::to_string(r), token_label(p.query_tokens(), r)});
    }
  }
}

Problem demo_problem() {
  Problem p;
  ProblemInputs& in = p.edit();
  p.sentence = "模型根据上下文分配权重";
  in.query_tokens = {"模型", "根据", "上下文", "分配", "权重"};
  in.key_tokens = p.query_tokens();
  in.q.resize(5, 3);
  in.k.resize(5, 3);
  in.v.resize(5, 2);
  in.q << 1.20f, 0.20f, 0.70f,  //
      0.15f, 1.10f, 0.35f,     //
      0.85f, 0.35f, 1.15f,     //
      0.30f, 1.20f, 0.80f,     //
      1.15f, 0.15f, 0.95f;
  in.k << 1.05f, 0.10f, 0.80f,  //
      0.10f, 1.00f, 0.25f,     //
      0.75f, 0.25f, 1.20f,     //
      0.20f, 1.15f, 0.75f,     //
      1.00f, 0.20f, 1.00f;
  in.v << 0.90f, 0.20f,  //
      0.10f, 0.80f,     //
      0.70f, 0.60f,     //
      0.25f, 0.95f,     //
      0.85f, 0.45f;
  p.temperature = 0.85;
  p.mask = MaskKind::None;
  return p;
}

std::vector<std::string> index_tokens(int count) {
  std::vector<std::string> t;
  t.reserve(count);
  for (int i = 0; i < count; ++i) t.push_back(std::to_string(i));
  return t;
}

namespace {

// Pair i of the stream: draws 2i (the radius) and 2i + 1 (the angle), r cos θ and r sin θ.
void box_muller(std::uint64_t radius, std::uint64_t angle, float out[2]) {
  const double u1 = (static_cast<double>(radius >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(angle >> 11) + 0.5) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double th = 2.0 * 3.14159265358979323846 * u2;
  out[0] = static_cast<float>(r * std::cos(th));
  out[1] = static_cast<float>(r * std::sin(th));
}

}  // namespace

void fill_standard_normal(MatrixF& a, Eigen::Index rows, Eigen::Index cols, std::mt19937_64& gen) {
  // Box-Muller on mt19937_64 written out: std::normal_distribution is implementation-defined,
  // and the same seed must give the same numbers with any standard library. Pair i takes draws
  // 2i (the radius) and 2i + 1 (the angle) of the stream and fills elements 2i and 2i + 1 (the
  // last draw of an odd count is drawn and not used). The draws are made in order, a block at a
  // time; the transform, most of the time (a log, a square root, a cosine and a sine in double),
  // runs on every core, each pair on its own, so the numbers do not depend on the thread count.
  a.resize(rows, cols);
  float* d = a.data();
  const Eigen::Index count = a.size(), pairs = (count + 1) / 2;
  constexpr Eigen::Index kBlock = Eigen::Index{1} << 20;  // pairs per block: 16 MiB of draws
  std::vector<std::uint64_t> draws(static_cast<std::size_t>(2 * std::min(pairs, kBlock)));
  const auto transform = [d, count, &draws](Eigen::Index first_pair, Eigen::Index lo, Eigen::Index hi) {
    for (Eigen::Index i = lo; i < hi; ++i) {
      float pair[2];
      box_muller(draws[2 * i], draws[2 * i + 1], pair);
      const Eigen::Index e = 2 * (first_pair + i);
      d[e] = pair[0];
      if (e + 1 < count) d[e + 1] = pair[1];
    }
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (Eigen::Index p0 = 0; p0 < pairs; p0 += kBlock) {
    const Eigen::Index np = std::min(kBlock, pairs - p0);
    for (Eigen::Index i = 0; i < 2 * np; ++i) draws[static_cast<std::size_t>(i)] = gen();
    // Threads only where a block is large enough to pay for them; a slice of the block each.
    const unsigned workers = static_cast<unsigned>(std::min<Eigen::Index>(cores, std::max<Eigen::Index>(1, np / 65536)));
    const Eigen::Index per = (np + workers - 1) / workers;
    parallel_items(workers, workers, [&](unsigned, std::size_t w) {
      const Eigen::Index lo = static_cast<Eigen::Index>(w) * per;
      transform(p0, std::min(np, lo), std::min(np, lo + per));
    });
  }
}

std::vector<float> standard_normal_range(std::mt19937_64 gen, Eigen::Index first, Eigen::Index count) {
  std::vector<float> out(static_cast<std::size_t>(std::max<Eigen::Index>(count, 0)));
  if (count <= 0) return out;
  const Eigen::Index pair0 = first / 2;
  gen.discard(static_cast<unsigned long long>(2 * pair0));
  for (Eigen::Index e = 2 * pair0; e < first + count; e += 2) {
    const std::uint64_t radius = gen(), angle = gen();
    float pair[2];
    box_muller(radius, angle, pair);
    for (int k = 0; k < 2; ++k)
      if (e + k >= first && e + k < first + count) out[static_cast<std::size_t>(e + k - first)] = pair[k];
  }
  return out;
}

Problem random_problem(int n, int d_k, int d_v, std::uint64_t seed, int heads) {
  return random_problem(n, n, d_k, d_v, seed, heads, heads);
}

Problem random_problem(int n, int m, int d_k, int d_v, std::uint64_t seed, int heads, int kv_heads) {
  if (n < 1 || m < 1 || d_k < 1 || d_v < 1 || heads < 1 || kv_heads < 1) throw InputError(Msg::RandomDims, {});
  if (n > m) throw InputError(Msg::QueriesOverKeys, {std::to_string(n), std::to_string(m)});
  if (heads % kv_heads != 0)
    throw InputError(Msg::KvHeads, {std::to_string(heads), std::to_string(kv_heads)});
  std::mt19937_64 gen(seed);
  auto fill = [&gen](MatrixF& a, Eigen::Index rows, Eigen::Index cols) { fill_standard_normal(a, rows, cols, gen); };
  Problem p;
  ProblemInputs& in = p.edit();
  p.heads = heads;
  p.kv_group = heads / kv_heads;
  fill(in.q, static_cast<Eigen::Index>(heads) * n, d_k);
  fill(in.k, static_cast<Eigen::Index>(kv_heads) * m, d_k);
  fill(in.v, static_cast<Eigen::Index>(kv_heads) * m, d_v);
  in.key_tokens = index_tokens(m);
  in.query_tokens.assign(in.key_tokens.end() - n, in.key_tokens.end());
  p.temperature = 1.0;
  return p;
}

ProblemSize size_of(const Problem& p) {
  return {p.heads, p.kv_heads(), p.n(), p.m(), p.d_k(), p.d_v(), p.mods.rope_theta > 0,
          std::popcount(score_mod_stages(p.mods, p.bias().size() > 0))};
}

double input_bytes(const ProblemSize& s) {
  return 4.0 * (static_cast<double>(s.heads) * s.n * s.d_k + static_cast<double>(s.kv_heads) * s.m * (s.d_k + s.d_v));
}

Problem one_head(const Problem& all, int head) {
  if (head < 0 || head >= all.heads)
    throw InputError(Msg::OptionRange, {"--head", "0", std::to_string(all.heads - 1), std::to_string(head)});
  Problem p = all;
  const Eigen::Index n = all.n(), m = all.m();
  ProblemInputs in;
  in.q = all.q().middleRows(head * n, n);
  in.k = all.k().middleRows(all.kv_row(head), m);
  in.v = all.v().middleRows(all.kv_row(head), m);
  in.query_tokens = all.query_tokens();
  in.key_tokens = all.key_tokens();
  in.custom_mask = all.custom_mask();
  const bool bias_per_head = all.bias().size() > 0 && all.bias().rows() != n;
  in.bias = bias_per_head ? MatrixF(all.bias().middleRows(head * n, n)) : all.bias();
  if (bias_per_head) p.mods.bias_head = head;
  in.documents = all.documents();
  p.set_inputs(std::move(in));
  if (p.mods.alibi) p.mods.alibi_slopes = {alibi_slopes(all)[head]};  // the head keeps its own slope
  p.heads = 1;
  p.kv_group = 1;
  p.source = (all.source.empty() ? std::string() : all.source + ", ") + "head " + std::to_string(head) + " of " +
             std::to_string(all.heads);
  p.source_zh = (all.source.empty() ? std::string() : all.source_in(Lang::Zh) + "，") + "头 " +
                std::to_string(head) + "（共 " + std::to_string(all.heads) + " 个）";
  return p;
}

Problem expand_kv_heads(const Problem& p) {
  if (p.kv_heads() == p.heads) return p;  // one each already (or a kv_group validate refuses)
  Problem e = p;
  const Eigen::Index m = p.m();
  ProblemInputs in;
  in.q = p.q();
  in.k.resize(static_cast<Eigen::Index>(p.heads) * m, p.d_k());
  in.v.resize(static_cast<Eigen::Index>(p.heads) * m, p.d_v());
  for (int h = 0; h < p.heads; ++h) {
    in.k.middleRows(h * m, m) = p.k().middleRows(p.kv_row(h), m);
    in.v.middleRows(h * m, m) = p.v().middleRows(p.kv_row(h), m);
  }
  in.query_tokens = p.query_tokens();
  in.key_tokens = p.key_tokens();
  in.custom_mask = p.custom_mask();
  in.bias = p.bias();
  in.documents = p.documents();
  e.set_inputs(std::move(in));
  e.kv_group = 1;
  return e;
}

Problem decode_view(const Problem& p, int queries, int kv_heads) {
  const int n = p.n(), m = p.m(), heads = p.heads;
  if (p.kv_group != 1) throw InputError(Msg::DecodeViewKvHeads, {});
  if (queries < 1 || queries > n) throw InputError(Msg::QueriesOverKeys, {std::to_string(queries), std::to_string(m)});
  if (kv_heads < 1 || heads % kv_heads != 0)
    throw InputError(Msg::KvHeads, {std::to_string(heads), std::to_string(kv_heads)});
  if (queries == n && kv_heads == heads) return p;
  const int group = heads / kv_heads;
  Problem d = p;
  ProblemInputs in;
  in.q.resize(static_cast<Eigen::Index>(heads) * queries, p.d_k());
  for (int h = 0; h < heads; ++h)
    in.q.middleRows(static_cast<Eigen::Index>(h) * queries, queries) =
        p.q().middleRows(static_cast<Eigen::Index>(h) * n + (n - queries), queries);
  in.k.resize(static_cast<Eigen::Index>(kv_heads) * m, p.d_k());
  in.v.resize(static_cast<Eigen::Index>(kv_heads) * m, p.d_v());
  for (int g = 0; g < kv_heads; ++g) {
    in.k.middleRows(static_cast<Eigen::Index>(g) * m, m) = p.k().middleRows(p.kv_row(g * group), m);
    in.v.middleRows(static_cast<Eigen::Index>(g) * m, m) = p.v().middleRows(p.kv_row(g * group), m);
  }
  in.key_tokens = p.key_tokens().empty() ? index_tokens(m) : p.key_tokens();
  if (!p.query_tokens().empty()) in.query_tokens.assign(p.query_tokens().end() - queries, p.query_tokens().end());
  if (p.mask == MaskKind::Custom) in.custom_mask = p.custom_mask().bottomRows(queries);
  if (p.bias().rows() == n) {
    in.bias = p.bias().bottomRows(queries);
  } else if (p.bias().size() > 0) {
    in.bias.resize(static_cast<Eigen::Index>(heads) * queries, m);
    for (int h = 0; h < heads; ++h)
      in.bias.middleRows(static_cast<Eigen::Index>(h) * queries, queries) =
          p.bias().middleRows(static_cast<Eigen::Index>(h) * n + (n - queries), queries);
  }
  in.documents = p.documents();
  d.set_inputs(std::move(in));
  d.kv_group = group;
  return d;
}

void check_split_count(int splits, int keys) {
  if (splits < 1 || splits > keys)
    throw InputError(Msg::SplitRange, {std::to_string(keys), std::to_string(splits)});
}

int resolve_query(const Problem& p, const std::string& typed) {
  const int n = p.n();
  // A label first, then an index: a label that names more than one row picks none of them. The
  // label as typed (a bundle's tokens keep their blanks: " cat"), else with the blanks around it
  // dropped, as around the labels the lab reads itself and the other options' values.
  const std::vector<std::string>& tokens = p.query_tokens();
  const auto label = [&tokens](const std::string& t) {
    const auto count = std::count(tokens.begin(), tokens.end(), t);
    if (count > 1) throw InputError(Msg::LabelAmbiguous, {t, std::to_string(count)});
    return count == 1 ? static_cast<int>(std::find(tokens.begin(), tokens.end(), t) - tokens.begin()) : -1;
  };
  if (const int i = label(typed); i >= 0) return i;
  const std::string token_or_index = trim_blanks(typed);
  if (const int i = label(token_or_index); i >= 0) return i;
  if (!token_or_index.empty() &&
      token_or_index.find_first_not_of("0123456789") == std::string::npos &&
      token_or_index.size() < 10) {
    const int i = std::stoi(token_or_index);
    if (i < n) return i;
    throw InputError(Msg::QueryIndexRange, {token_or_index, std::to_string(n), std::to_string(n - 1)});
  }
  std::string list;
  for (int i = 0; i < static_cast<int>(p.query_tokens().size()) && i < 12; ++i)
    list += (i ? ", " : "") + p.query_tokens()[i];
  if (p.query_tokens().size() > 12) list += ", …";
  throw InputError(Msg::QueryUnknown, {token_or_index, list});
}

MatrixF mask_matrix(const Problem& p) {
  const int n = p.n(), m = p.m();
  if (p.mask == MaskKind::None && !has_mask_mods(p)) return MatrixF::Zero(n, m);
  if (p.mask == MaskKind::Custom && !has_mask_mods(p)) return p.custom_mask();
  const MaskRule rule = mask_rule(p);
  MatrixF mk(n, m);
  for (int r = 0; r < n; ++r) {
    int lo, hi;
    rule.interval(r, lo, hi);
    for (int c = 0; c < m; ++c)
      mk(r, c) = c >= lo && c < hi && (!rule.elementwise() || rule.visible(r, c)) ? 0.f
                                                                                : -std::numeric_limits<float>::infinity();
  }
  return mk;
}

}  // namespace attnlab
