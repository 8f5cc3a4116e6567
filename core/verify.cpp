// Verification of a Trace against the fp64 reference: per-stage errors and tolerance checks, row
// sums, masked zeros; text and JSON renderings. See core/verify.h for the tolerance rules.
#include "core/verify.h"

#include "core/backend.h"
#include "core/format.h"
#include "core/modify.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

constexpr double kFp32Ulp = 1.1920928955078125e-07;  // 2^-23, the spacing of fp32 at 1.0
constexpr double kLogitUlps = 8;
constexpr double kBf16Unit = 0x1p-8;  // bf16's unit roundoff: half its spacing at 1.0 (8 significant bits)
constexpr double kAtolFraction = 1e-6;
constexpr double kWeightsAtolFloor = 1e-6;
constexpr double kRowSumTolFp32 = 1e-6;  // issue 2: fp32 rows sum to 1 within 1e-6

double max_abs_finite(const MatrixD& a) {
  double mx = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    if (std::isfinite(a.data()[i])) mx = std::max(mx, std::abs(a.data()[i]));
  return mx;
}

double max_abs_finite(const MatrixF& a) {
  double mx = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    if (std::isfinite(a.data()[i])) mx = std::max(mx, std::abs(static_cast<double>(a.data()[i])));
  return mx;
}

// max over the heads of max|q_row| max|k_row|: what bounds every |score| (Cauchy-Schwarz) and
// every sum of |q_i k_i| behind one; an O(N d) pass where the exact sums |q| |k| would be another
// N^2 d product.
double max_norm_product(const Problem& p) {
  double worst = 0;
  for (int h = 0; h < p.heads; ++h) {
    const auto q = p.q().middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n()).cast<double>();
    const auto k = p.k().middleRows(p.kv_row(h), p.m()).cast<double>();
    worst = std::max(worst, q.rowwise().norm().maxCoeff() * k.rowwise().norm().maxCoeff());
  }
  return worst;
}

// bf16 scores: rounding q and k to bf16 (relative error u = 2^-8 each: 8 significant bits) moves a
// product q_i k_i by at most (2u + u^2) |q_i k_i|, and the fp32 sum of d_k exact products adds at
// most about d_k 2^-24 sum |q_i k_i|. By Cauchy-Schwarz sum |q_i k_i| <= |q| |k|, so every score
// of a head is within (2u + u^2 + d_k 2^-24) max|q_row| max|k_row| of the fp64 one: the bound
// returned here (over the heads).
double bf16_score_bound(const Problem& p) {
  const double u = std::ldexp(1.0, -8);
  return (2 * u + u * u + 1.01 * p.d_k() * std::ldexp(1.0, -24)) * max_norm_product(p);
}

// Below fp32's normal range a result's rounding is absolute, up to half of 2^-149 (the smallest
// subnormal), however small the result: atol never drops below that for the operations a stage's
// entry sums (d_k products and sums for a score; two more for the scale and a score mod; one for
// 1/T; the output's m terms, twice for a fused kernel's rescaling), carried by the factors after.
constexpr double kFp32Tiny = 0x1p-149;
double subnormal_floor(const std::string& stage, const Problem& p) {
  const double scores = (p.d_k() + 1) * kFp32Tiny;
  const double scaled = scores * std::max(1.0, p.scale_value()) + 2 * kFp32Tiny;
  if (stage == "scores") return scores;
  if (stage == "scaled" || stage == "biased" || stage == "capped") return scaled;
  if (stage == "logits") return scaled * std::max(1.0, 1.0 / p.temperature) + kFp32Tiny;
  if (stage == "output") return 2.0 * (p.m() + 2) * kFp32Tiny;
  return 0;
}

// The largest logit a chain's rounding is relative to: max|logit|, or with a soft-cap the largest
// score before the cap over T (the scores round in proportion to their own size, and the cap,
// whose slope is at most 1, passes that error on whole while it shrinks the logits themselves),
// over the pairs the mask leaves.
double logit_scale(const TraceD& ref, double temperature) {
  const double logits = max_abs_finite(ref.logits);
  if (ref.capped.size() == 0) return logits;
  const MatrixD& before = ref.biased.size() > 0 ? ref.biased : ref.scaled;
  double top = 0;
  for (Eigen::Index i = 0; i < ref.logits.rows(); ++i)
    for (Eigen::Index j = 0; j < ref.logits.cols(); ++j)
      if (std::isfinite(ref.logits(i, j)) && std::isfinite(before(i, j))) top = std::max(top, std::abs(before(i, j)));
  return std::max(logits, top / temperature);
}

// L of the header comment: the logit error every fp32 chain may carry.
double logit_rounding(const TraceD& ref, double temperature) {
  return kLogitUlps * kFp32Ulp * logit_scale(ref, temperature);
}

// L16 of the header comment: the logit error a bf16 chain may carry. Its scores are products of
// bf16 values, which hold 8 significant bits: a score, and so a logit (the score times
// 1 / (sqrt(d_k) T)), is known to about one bf16 rounding of its own size, u = 2^-8 of
// max|logit| = max|scaled| / T. A low temperature magnifies that error as it magnifies the logits,
// and the weights' error follows |Δlogit|: where L16 passes 2e-2, 2e-2 no longer bounds what bf16
// delivers.
double bf16_logit_rounding(const TraceD& ref, double temperature) { return kBf16Unit * logit_scale(ref, temperature); }

StageCheck compare(const std::string& stage, const MatrixF& x, const MatrixD& ref, Tolerance tol) {
  StageCheck c;
  c.stage = stage;
  c.tol = tol;
  if (x.rows() != ref.rows() || x.cols() != ref.cols()) {
    c.elements = static_cast<std::size_t>(ref.size());
    c.failures = c.elements;
    c.pass = false;
    c.note = "shape (" + std::to_string(x.rows()) + ", " + std::to_string(x.cols()) +
             "), reference (" + std::to_string(ref.rows()) + ", " + std::to_string(ref.cols()) + ")";
    return c;
  }
  c.elements = static_cast<std::size_t>(ref.size());
  double worst_excess = 0;
  for (Eigen::Index r = 0; r < ref.rows(); ++r) {
    for (Eigen::Index col = 0; col < ref.cols(); ++col) {
      const double a = x(r, col), b = ref(r, col);
      bool ok;
      double excess = 0;
      if (std::isinf(b) || std::isinf(a) || std::isnan(a) || std::isnan(b)) {
        // -inf (masked) must be reproduced exactly; anything else non-finite is a failure.
        ok = !std::isnan(a) && !std::isnan(b) && a == b;
        if (!ok) {
          ++c.inf_mismatches;
          excess = std::numeric_limits<double>::infinity();
        }
      } else {
        const double err = std::abs(a - b);
        const double bound = tol.atol + tol.rtol * std::abs(b);
        c.max_abs_err = std::max(c.max_abs_err, err);
        if (std::abs(b) > tol.atol && b != 0) c.max_rel_err = std::max(c.max_rel_err.value_or(0.0), err / std::abs(b));
        ok = err <= bound;
        excess = err - bound;
      }
      if (!ok) {
        ++c.failures;
        if (c.worst_row < 0 || excess > worst_excess) {
          worst_excess = excess;
          c.worst_row = r;
          c.worst_col = col;
        }
      }
    }
  }
  c.pass = c.failures == 0;
  return c;
}

std::string fmt(double v, const char* spec = "%.3g") {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return format_number(spec, v);
}

nlohmann::json num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// fp32's tolerances of the stages from the scores to the logits that p has, in the chain's order:
// each stage's floor (1e-6 of its largest value, the subnormal floor) and at least what the stage
// before it may be off by, carried through the step between them (the scale; an added term or the
// soft-cap, whose slope is at most 1; 1 / T). The scores' own: 8 ulp of the largest |q| |k|, what
// a dot product whose terms cancel (a score far below |q| |k|) still errs by, which 1e-6 of the
// largest score does not cover where every score is small. One pass over each stage.
std::vector<std::pair<std::string, Tolerance>> fp32_chain_tolerances(const Problem& p, const TraceD& ref) {
  const unsigned mods = problem_stages(p);
  std::vector<std::pair<std::string, Tolerance>> out;
  double carried = kLogitUlps * kFp32Ulp * max_norm_product(p);
  const auto next = [&](const char* stage, const MatrixD& own, double factor) {
    carried = std::max({kAtolFraction * max_abs_finite(own), subnormal_floor(stage, p), carried * factor});
    out.emplace_back(stage, Tolerance{carried, kRtolFp32});
  };
  next("scores", ref.scores, 1);
  next("scaled", ref.scaled, p.scale_value());
  if (mods & kStageBiased) next("biased", ref.biased, 1);
  if (mods & kStageCapped) next("capped", ref.capped, 1);
  next("logits", ref.logits, 1 / p.temperature);
  return out;
}

}  // namespace

double max_weighted_abs_v(const Problem& p, const TraceD& ref) {
  double worst = 0;
  for (int h = 0; h < p.heads; ++h) {
    const MatrixD v = p.v().middleRows(p.kv_row(h), p.m()).cast<double>().cwiseAbs();
    const MatrixD s = ref.weights.middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n()) * v;
    worst = std::max(worst, s.maxCoeff());
  }
  return worst;
}

Tolerance default_tolerance(const std::string& stage, const Problem& p, const TraceD& ref,
                            Precision precision) {
  if (stage == "mask") return {0, 0};
  if (precision == Precision::BF16) {
    // Scores, scaled and logits of a staged bf16 chain: 2e-2, or the rounding bound of the bf16
    // scores (bf16_score_bound) carried through 1/sqrt(d_k) and 1/T where that is larger;
    // weights and output (the fused kernels too): 2e-2.
    const double to_scaled = p.scale_value();
    if (stage == "scores") return {std::max(kBf16Tol, bf16_score_bound(p)), kBf16Tol};
    if (stage == "scaled" || stage == "biased" || stage == "capped")
      return {std::max(kBf16Tol, bf16_score_bound(p) * to_scaled), kBf16Tol};
    if (stage == "logits")
      return {std::max(kBf16Tol, bf16_score_bound(p) * to_scaled / p.temperature), kBf16Tol};
    // Weights and output: 2e-2, or what bf16 logits can deliver where that is larger (L16 of the
    // header comment), passed on as fp32's L is: at most half of it to a weight, L16 * max|V| to
    // an output row; the output also carries the rounding of V and of P to bf16, 3u of Σ P |V|
    // (V16 of the header comment), which 2e-2 of |O| misses where the terms cancel.
    const double l16 = bf16_logit_rounding(ref, p.temperature);
    if (stage == "weights") return {std::max(kBf16Tol, 0.5 * l16), kBf16Tol};
    if (stage == "output")
      return {std::max(kBf16Tol, l16 * max_abs_finite(p.v()) + 3 * kBf16Unit * max_weighted_abs_v(p, ref)),
              kBf16Tol};
    return {kBf16Tol, kBf16Tol};
  }
  if (stage == "scores" || stage == "scaled" || stage == "biased" || stage == "capped" || stage == "logits")
    for (const auto& [name, tol] : fp32_chain_tolerances(p, ref))
      if (name == stage) return tol;
  const double l = logit_rounding(ref, p.temperature);
  if (stage == "weights") return {std::max(kWeightsAtolFloor, 0.5 * l), kRtolFp32};
  if (stage == "output")
    return {std::max(kAtolFraction * max_abs_finite(ref.output), subnormal_floor(stage, p)) +
                l * max_abs_finite(p.v()),
            kRtolFp32};
  throw InputError("unknown stage '" + stage + "'");
}

VerifyReport verify_trace(const Problem& p, const Trace& t, const TraceD& ref,
                          const VerifyOptions& opt) {
  VerifyReport r;
  r.backend = t.backend;
  r.variant = t.variant;
  r.precision = t.precision;
  r.heads = p.heads;
  r.kv_heads = p.kv_heads();
  r.splits = t.splits;
  r.n = p.n();
  r.m = p.m();
  r.d_k = p.d_k();
  r.d_v = p.d_v();
  r.temperature = p.temperature;
  r.mask = p.mask;
  r.prefix = p.mods.prefix;
  if (has_modifications(p)) {
    r.modifications = modifications_text(p, Lang::En);
    r.modifications_zh = modifications_text(p, Lang::Zh);
  }
  r.source = p.source;
  r.source_zh = p.source_in(Lang::Zh);
  r.atol_given = opt.atol;
  r.rtol_given = opt.rtol;

  // fp32's chain of stage tolerances, made once (each carries the one before) where stages are kept.
  const auto chain = t.has_stages && t.precision == Precision::FP32 ? fp32_chain_tolerances(p, ref)
                                                                    : std::vector<std::pair<std::string, Tolerance>>{};
  auto tol_of = [&](const std::string& stage) {
    const auto in_chain = std::find_if(chain.begin(), chain.end(), [&](const auto& c) { return c.first == stage; });
    Tolerance tol = in_chain != chain.end() ? in_chain->second : default_tolerance(stage, p, ref, t.precision);
    if (stage != "mask") {
      if (opt.atol) tol.atol = *opt.atol;
      if (opt.rtol) tol.rtol = *opt.rtol;
    }
    return tol;
  };

  if (t.has_stages) {
    const auto check = [&](unsigned bit, const char* stage, const MatrixF& x, const MatrixD& y) {
      if (opt.stages & bit) r.stages.push_back(compare(stage, x, y, tol_of(stage)));
    };
    check(kStageScores, "scores", t.scores, ref.scores);
    check(kStageScaled, "scaled", t.scaled, ref.scaled);
    const unsigned mods = problem_stages(p);
    if (mods & kStageBiased) check(kStageBiased, "biased", t.biased, ref.biased);
    if (mods & kStageCapped) check(kStageCapped, "capped", t.capped, ref.capped);
    check(kStageMask, "mask", t.mask, ref.mask);
    check(kStageLogits, "logits", t.logits, ref.logits);
    check(kStageWeights, "weights", t.weights, ref.weights);
  }
  r.stages.push_back(compare("output", t.output, ref.output, tol_of("output")));
  // What an allowance must stay below to tell a wrong value in range from the right one.
  double v_span = 0;
  for (Eigen::Index c = 0; c < p.v().cols(); ++c)
    if (p.v().rows() > 0) v_span = std::max(v_span, static_cast<double>(p.v().col(c).maxCoeff() - p.v().col(c).minCoeff()));
  for (StageCheck& c : r.stages) {
    if (c.stage != "weights" && c.stage != "output") continue;
    c.range = c.stage == "weights" ? 1.0 : v_span;
    c.informative = !(c.range > 0 && c.tol.atol >= c.range);
  }

  const bool weights_shape_ok =
      t.has_stages && t.weights.rows() == ref.weights.rows() && t.weights.cols() == ref.weights.cols();
  if (weights_shape_ok) {
    r.weights_checked = true;
    r.row_sum_tol = t.precision == Precision::BF16 ? kBf16Tol : kRowSumTolFp32;
    for (Eigen::Index row = 0; row < t.weights.rows(); ++row) {
      double sum = 0;
      for (Eigen::Index c = 0; c < t.weights.cols(); ++c) sum += t.weights(row, c);
      double dev = std::abs(sum - 1.0);
      if (std::isnan(dev)) dev = std::numeric_limits<double>::infinity();  // NaN never passes
      if (r.worst_row_sum_row < 0 || dev > r.worst_row_sum_dev) {
        r.worst_row_sum_dev = dev;
        r.worst_row_sum_row = row;
      }
    }
    r.row_sum_pass = r.worst_row_sum_dev <= r.row_sum_tol;
    // Masked weights: the reference mask is the truth about which pairs are masked.
    const Eigen::Index n = r.n;
    for (Eigen::Index row = 0; row < t.weights.rows(); ++row)
      for (Eigen::Index c = 0; c < t.weights.cols(); ++c)
        if (std::isinf(ref.mask(row % n, c))) {
          ++r.masked_count;
          if (t.weights(row, c) != 0.0f) ++r.masked_nonzero;
        }
    r.masked_zero = r.masked_nonzero == 0;
  }

  r.pass = r.row_sum_pass && r.masked_zero;
  for (const StageCheck& c : r.stages) r.pass = r.pass && c.pass;
  return r;
}

std::vector<std::string> VerifyReport::uninformative() const {
  std::vector<std::string> s;
  for (const StageCheck& c : stages)
    if (!c.informative) s.push_back(c.stage);
  return s;
}

std::string render_verify_text(const VerifyReport& r, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const std::string T = fmt(r.temperature, "%g");
  std::ostringstream o;
  if (zh) {
    o << "验证：后端 " << r.backend << "，" << to_string(r.variant) << "，" << to_string(r.precision)
      << "；" << r.heads << " 个头" << (r.kv_heads < r.heads ? "（共用 " + std::to_string(r.kv_heads) + " 个键/值头）" : "")
      << " × " << r.n << " 个查询 × " << r.m << " 个键" << (r.splits > 0 ? "（分成 " + std::to_string(r.splits) + " 份）" : "")
      << "，d_k " << r.d_k
      << "，d_v " << r.d_v << "，T " << T << "，掩码 " << mask_text(r.mask, r.prefix, Lang::Zh) << "\n";
    if (!r.modifications_zh.empty()) o << "修改：" << r.modifications_zh << "\n";
    if (!r.source.empty()) o << source_line(r.source, r.source_zh, Lang::Zh) << "\n";
    o << "参照：同一组 fp32 输入上的 fp64 CPU 计算链；元素满足 |x - ref| <= atol + rtol * |ref| "
         "即为通过\n\n";
  } else {
    o << "verify: backend " << r.backend << ", " << to_string(r.variant) << ", "
      << to_string(r.precision) << "; " << count_text(r.heads, "head", "heads")
      << (r.kv_heads < r.heads ? " (sharing " + count_text(r.kv_heads, "key/value head", "key/value heads") + ")" : "")
      << " x " << count_text(r.n, "query", "queries") << " x " << count_text(r.m, "key", "keys")
      << (r.splits > 0 ? " (in " + count_text(r.splits, "split", "splits") + ")" : "") << ", d_k " << r.d_k
      << ", d_v " << r.d_v << ", T " << T
      << ", mask " << mask_text(r.mask, r.prefix, Lang::En) << "\n";
    if (!r.modifications.empty()) o << "modifications: " << r.modifications << "\n";
    if (!r.source.empty()) o << source_line(r.source, r.source_zh, Lang::En) << "\n";
    o << "reference: the fp64 CPU chain on the same fp32 inputs; an element passes when "
         "|x - ref| <= atol + rtol * |ref|\n\n";
  }
  // Column headings padded by display width (a CJK character takes two columns), so the zh
  // table lines up like the en one; the figures and stage names are ASCII in both.
  const auto pad = [](const std::string& s, int width, bool left) {
    int w = 0;
    for (unsigned char c : s) w += c < 0x80 ? 1 : (c & 0xC0) == 0xC0 ? 2 : 0;
    const std::string fill(w < width ? width - w : 0, ' ');
    return left ? s + fill : fill + s;
  };
  o << pad(zh ? "阶段" : "stage", 8, true) << " " << pad(zh ? "最大绝对误差" : "max abs err", 12, false)
    << " " << pad(zh ? "最大相对误差" : "max rel err", 12, false) << " " << pad("atol", 11, false)
    << " " << pad("rtol", 9, false) << " " << pad(zh ? "失败数" : "failures", 10, false) << "  "
    << (zh ? "结果" : "result") << "\n";
  const char* pass_word = zh ? "通过" : "pass";
  const char* fail_word = zh ? "未通过" : "FAIL";
  char line[256];
  for (const StageCheck& c : r.stages) {
    std::snprintf(line, sizeof line, "%-8s %12s %12s %11s %9s %10zu  %s", c.stage.c_str(),
                  fmt(c.max_abs_err).c_str(), c.max_rel_err ? fmt(*c.max_rel_err).c_str() : "-",
                  fmt(c.tol.atol).c_str(), fmt(c.tol.rtol).c_str(), c.failures,
                  c.pass ? pass_word : fail_word);
    o << line;
    if (!c.pass && c.worst_row >= 0) {
      if (zh)
        o << "（最差处：行 " << c.worst_row << "、列 " << c.worst_col << "）";
      else
        o << "  (worst at row " << c.worst_row << ", column " << c.worst_col << ")";
    }
    if (c.inf_mismatches > 0) {
      if (zh)
        o << "（" << c.inf_mismatches << " 处 -inf/NaN 不一致）";
      else
        o << "  (" << c.inf_mismatches << " -inf/NaN mismatches)";
    }
    if (!c.informative) {
      if (zh)
        o << "（容差达到该阶段的整个取值范围 " << fmt(c.range) << "：范围内的任何值都会通过）";
      else
        o << "  (the allowance spans the stage's whole range " << fmt(c.range) << ": any value in range passes)";
    }
    // The note (e.g. a shape mismatch) is verify_trace's own English text, as in JSON.
    if (!c.note.empty()) o << (zh ? "（" + c.note + "）" : "  (" + c.note + ")");
    o << "\n";
  }
  o << "\n";
  const char* row_pass = r.row_sum_pass ? pass_word : fail_word;
  if (r.weights_checked) {
    if (zh) {
      o << "行和：最差 |sum - 1| = " << fmt(r.worst_row_sum_dev) << "（行 " << r.worst_row_sum_row
        << "），容差 " << fmt(r.row_sum_tol) << "：" << row_pass << "\n";
      o << "被屏蔽的权重恰为 0：" << (r.masked_zero ? "是" : "否") << "（"
        << r.masked_count << " 个被屏蔽的位置中有 " << (r.masked_count - r.masked_nonzero)
        << " 个为 0）\n";
    } else {
      o << "row sums: worst |sum - 1| = " << fmt(r.worst_row_sum_dev) << " (row "
        << r.worst_row_sum_row << "), tolerance " << fmt(r.row_sum_tol) << ": " << row_pass
        << "\n";
      o << "masked weights exactly 0: " << (r.masked_zero ? "yes" : "no") << " ("
        << (r.masked_count - r.masked_nonzero) << " of " << r.masked_count
        << " masked entries are 0)\n";
    }
  } else {
    o << (zh ? "行和与被屏蔽的权重：未检查（融合或解码计算不保留权重）\n"
             : "row sums and masked weights: not checked (a fused or decode run keeps no weights)\n");
  }
  if (r.atol_given && r.rtol_given)
    o << (zh ? "容差：每个比较的阶段都用给定的 atol = " : "tolerances: as given, atol = ") << fmt(*r.atol_given)
      << (zh ? "，rtol = " : ", rtol = ") << fmt(*r.rtol_given) << (zh ? "\n" : " for every compared stage\n");
  else if (r.precision == Precision::BF16)
    o << (zh ? "容差：bf16 输入，rtol = 2e-2，atol = 2e-2；分数、缩放分数和 logits 的 atol 取 bf16 "
               "舍入的上界（若更大）；权重和输出另外取 bf16 logits 的舍入（最大 logit 的 2^-8）所传递的误差，输出再加上 V 与 P "
               "舍入为 bf16 的误差（最大 Σ P|V| 的 3·2^-8）（若更大）\n"
             : "tolerances: bf16 inputs, rtol = 2e-2, atol = 2e-2; for scores, scaled and logits "
               "the bound of bf16 rounding where larger; for weights and output what the rounding of bf16 "
               "logits (2^-8 of the largest logit) passes on, and for the output the rounding of V and P to bf16 "
               "(3·2^-8 of the largest Σ P|V|), where larger\n");
  else
    o << (zh ? "容差：atol = 1e-6 × 该阶段的 max|ref|，且不小于 fp32 次正规数的舍入（每次运算 2^-149），"
               "也不小于前一阶段的 atol 经这一步传来的量（分数本身：最大 |q||k| 的 8 ulp）；"
               "权重和输出另外允许 fp32 logits 的舍入（最大 logit 的 8 ulp）\n"
             : "tolerances: atol = 1e-6 * max|ref| of the stage, never below the rounding of fp32 "
               "subnormals (2^-149 per operation) nor below the stage before's atol carried through the step "
               "(the scores: 8 ulp of the largest |q| |k|); weights and output also allow the rounding of fp32 "
               "logits (8 ulp of the largest logit)\n");
  if (r.atol_given.has_value() != r.rtol_given.has_value()) {
    const bool a = r.atol_given.has_value();
    o << (zh ? std::string("给定的 ") + (a ? "atol = " : "rtol = ") + fmt(a ? *r.atol_given : *r.rtol_given) +
                   " 取代上面每个阶段的 " + (a ? "atol" : "rtol") + "\n"
             : std::string("the given ") + (a ? "atol = " : "rtol = ") + fmt(a ? *r.atol_given : *r.rtol_given) +
                   " replaces every stage's " + (a ? "atol" : "rtol") + " above\n");
  }
  const std::vector<std::string> weak = r.uninformative();
  if (!weak.empty()) {
    std::string names;
    for (const std::string& s : weak) names += (names.empty() ? "" : (zh ? "、" : ", ")) + s;
    if (zh)
      o << "注意：在此温度下，" << to_string(r.precision) << " logits 的舍入所允许的误差已覆盖 " << names
        << " 的整个取值范围，这些阶段的“通过”只说明数值在范围内，不说明它们正确\n";
    else
      o << "warning: at this temperature the error that rounding " << to_string(r.precision)
        << " logits allows covers the whole range of " << names
        << ": their pass says only that the values are in range, not that they are right\n";
  }
  // The last line starts with PASS or FAIL in both languages, for scripts that read it.
  if (zh)
    o << (r.pass ? "PASS（全部通过）" : "FAIL（未通过）") << "\n";
  else
    o << (r.pass ? "PASS" : "FAIL") << "\n";
  return o.str();
}

std::string render_verify_json(const VerifyReport& r) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["variant"] = std::string(to_string(r.variant));
  j["precision"] = std::string(to_string(r.precision));
  j["heads"] = r.heads;
  j["kv_heads"] = r.kv_heads;
  if (r.splits > 0) j["splits"] = r.splits;  // as run's JSON: the decode variant's
  j["n"] = r.n;
  j["m"] = r.m;
  j["d_k"] = r.d_k;
  j["d_v"] = r.d_v;
  j["temperature"] = r.temperature;
  j["mask"] = std::string(to_string(r.mask));
  if (!r.modifications.empty()) j["modifications"] = r.modifications;
  if (!r.source.empty()) j["source"] = r.source;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageCheck& c : r.stages) {
    nlohmann::json s;
    s["stage"] = c.stage;
    s["max_abs_err"] = num(c.max_abs_err);
    s["max_rel_err"] = c.max_rel_err ? num(*c.max_rel_err) : nullptr;
    s["atol"] = c.tol.atol;
    s["rtol"] = c.tol.rtol;
    s["elements"] = c.elements;
    s["failures"] = c.failures;
    s["inf_mismatches"] = c.inf_mismatches;
    if (c.worst_row >= 0) s["worst"] = {{"row", c.worst_row}, {"column", c.worst_col}};
    if (!c.note.empty()) s["note"] = c.note;
    if (c.stage == "weights" || c.stage == "output") {
      s["range"] = c.range;
      s["informative"] = c.informative;
    }
    s["pass"] = c.pass;
    stages.push_back(s);
  }
  j["stages"] = stages;
  if (r.weights_checked) {
    j["row_sums"] = {{"worst_deviation", num(r.worst_row_sum_dev)},
                     {"worst_row", r.worst_row_sum_row},
                     {"tolerance", r.row_sum_tol},
                     {"pass", r.row_sum_pass}};
    j["masked_weights"] = {{"masked", r.masked_count},
                           {"nonzero", r.masked_nonzero},
                           {"all_zero", r.masked_zero}};
  } else {
    j["row_sums"] = nullptr;
    j["masked_weights"] = nullptr;
  }
  j["result"] = r.pass ? "PASS" : "FAIL";
  j["pass"] = r.pass;
  return j.dump(2) + "\n";
}

}  // namespace attnlab
