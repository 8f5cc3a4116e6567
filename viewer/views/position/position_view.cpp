// The position view's logic (see position_view.h): the curves of one query against its relative
// distances, RoPE's shift invariance on them, the view's θ, its state dump and its words.
#include "viewer/views/position/position_view.h"

#include "core/modify.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab::viewer {
namespace {

struct Entry {
  PT id;
  Text text;
};

constexpr Entry kTexts[] = {
    {PT::Label, {"Position", "位置"}},
    {PT::Title,
     {"Query “%s” (position %d): every key's scaled score against its distance Δ = i − j",
      "查询“%s”（位置 %d）：每个键的缩放分数与相对距离 Δ = i − j 的关系"}},
    {PT::Theta, {"RoPE θ", "RoPE 底数 θ"}},
    {PT::ThetaHint,
     {"θ sets RoPE's wavelengths 2π·θ^(2c/d): pair 0 turns once every 6.3 positions, the last pair once every "
      "%s positions at this θ.",
      "θ 决定 RoPE 的波长 2π·θ^(2c/d)：第 0 对每 6.3 个位置转一圈，当前 θ 下最后一对每 %s 个位置转一圈。"}},
    {PT::UseProblemTheta, {"the problem's θ", "问题本身的 θ"}},
    {PT::Plain, {"no position (q·k only)", "无位置（只有 q·k）"}},
    {PT::Rope, {"with RoPE", "加 RoPE"}},
    {PT::Alibi, {"ALiBi's term −slope·|Δ| (slope %s: %s)", "ALiBi 项 −斜率·|Δ|（斜率 %s：%s）"}},
    {PT::Self, {"RoPE alone: the query against itself Δ away", "只看 RoPE：查询与相距 Δ 的自身"}},
    {PT::AxisDistance, {"Δ = i − j (keys before the query →)", "Δ = i − j（查询之前的键 →）"}},
    {PT::AxisScore, {"scaled score", "缩放分数"}},
    {PT::Sentence,
     {"ALiBi is on with slope %s (%s): it subtracts a straight line from every score, the same whatever the "
      "content.",
      "ALiBi 已启用，斜率 %s（%s）：它从每个分数中减去一条直线，与内容无关。"}},
    {PT::SentenceAlibiOff,
     {"ALiBi is off: its line is drawn for comparison with slope %s, the slope switching ALiBi on gives this head "
      "(%s).",
      "ALiBi 未启用：图中的直线用斜率 %s 画出以作比较，即启用 ALiBi 时这个头得到的斜率（%s）。"}},
    {PT::Shift,
     {"Moving the query and every key %d positions later changes the RoPE scores by at most %s: RoPE depends on "
      "Δ only.",
      "把查询和每个键都后移 %d 个位置，RoPE 分数最多变化 %s：RoPE 只依赖 Δ。"}},
    {PT::OddDim,
     {"RoPE turns pairs of values: d_k = %d is odd, so only the plain and ALiBi curves are drawn.",
      "RoPE 成对旋转数值：d_k = %d 是奇数，因此只画出无位置曲线和 ALiBi 直线。"}},
    {PT::Lesson,
     {"RoPE turns each pair (c, c + d/2) of q and k by the position times θ^(−2c/d). A score is a sum of pair "
      "products, and two turns combine into the turn by their difference: the score depends on i − j, never "
      "on i or j alone. The blue curve removes the content: fast pairs decorrelate within a few positions, "
      "slow ones only after their wavelength (the line above; thousands at θ = 10000), so the score's bound "
      "falls with distance on average. ALiBi instead adds a straight penalty −slope·|Δ|: the farther the key, "
      "the larger the penalty, whatever the content (a strong score can still outweigh it).",
      "RoPE 把 q 和 k 的每一对 (c, c + d/2) 按位置乘以 θ^(−2c/d) 的角度旋转。分数是各对乘积之和，两次旋转合成为按"
      "位置差的一次旋转：分数只依赖 i − j，从不单独依赖 i 或 j。蓝色曲线去掉了内容：转得快的对在几个位置内就失去"
      "相关，转得慢的要过了它的波长（上面那一行；θ = 10000 时为几千个位置）才失去相关，所以分数的上界平均随距离下降。"
      "ALiBi 则加上一条直线惩罚 −斜率·|Δ|：键越远惩罚越大，与内容无关（很大的分数仍可能压过它）。"}},
    {PT::Caveats,
     {"Caveats: RoPE guarantees that scores depend on relative position, not that they fall with distance — "
      "the decay is of an upper bound on average, and a trained q and k can prefer far keys. A larger θ "
      "stretches the wavelengths (used to reach longer contexts); positions beyond the training length still "
      "turn the pairs by angles the model never saw. ALiBi's slopes differ per head: some heads look near, "
      "some far.",
      "注意：RoPE 保证分数依赖相对位置，但不保证分数随距离下降——下降的是上界的平均值，训练后的 q 和 k 完全可能偏好"
      "远处的键。更大的 θ 会拉长波长（用于更长的上下文）；超出训练长度的位置仍会把各对旋转到模型从未见过的角度。"
      "ALiBi 的斜率因头而异：有的头看近处，有的头看远处。"}},
    {PT::Wavelengths, {"wavelengths", "波长"}},
    {PT::Query, {"query", "查询"}},
    {PT::Legend, {"Curves", "曲线"}},
    {PT::Tip,
     {"key %d · Δ = %d\nno position: %s\nwith RoPE: %s\nALiBi term: %s\nRoPE alone: %s",
      "键 %d · Δ = %d\n无位置：%s\n加 RoPE：%s\nALiBi 项：%s\n只看 RoPE：%s"}},
    {PT::SlopeStandard,
     {"the first of the standard slopes for %d heads", "%d 个头的标准斜率中的第一个"}},
    {PT::SlopeGiven, {"this head's own slope (given, or its standard slope among the heads it was picked from)",
                       "这个头自己的斜率（给定的，或它在原来各头中的标准斜率）"}},
    {PT::AlibiLeaves,
     {"The ALiBi line leaves the plot (green marks on its lower edge) below %s beyond |Δ| = %s; it reaches %s at "
      "the far end.",
      "ALiBi 直线低于 %s，在 |Δ| = %s 之外离开绘图区（下边缘的绿色标记）；在最远处达到 %s。"}},
    {PT::MaskedKeys,
     {"keys the mask hides from this query (%d of %d): greyed, not read", "掩码对该查询隐藏的键（%d / %d）：灰色，不参与读取"}},
    {PT::TipMasked, {"masked: the query cannot see this key", "已屏蔽：该查询看不到这个键"}},
    {PT::SlopeStandardOne, {"the standard slope for one head", "单个头的标准斜率"}},
    // The lesson where d_k is odd and RoPE's curves are not drawn: the same words, no blue curve.
    {PT::LessonOddDim,
     {"RoPE turns each pair (c, c + d/2) of q and k by the position times θ^(−2c/d). A score is a sum of pair "
      "products, and two turns combine into the turn by their difference: the score depends on i − j, never "
      "on i or j alone. With an even d_k a blue curve shows RoPE without the content: fast pairs decorrelate "
      "within a few positions, slow ones only after their wavelength (thousands at θ = 10000), "
      "so the score's bound falls with distance on average. ALiBi instead adds a straight penalty −slope·|Δ|: "
      "the farther the key, the larger the penalty, whatever the content (a strong score can still outweigh it).",
      "RoPE 把 q 和 k 的每一对 (c, c + d/2) 按位置乘以 θ^(−2c/d) 的角度旋转。分数是各对乘积之和，两次旋转合成为按"
      "位置差的一次旋转：分数只依赖 i − j，从不单独依赖 i 或 j。d_k 为偶数时，一条蓝色曲线画出去掉内容后的 RoPE："
      "转得快的对在几个位置内就失去相关，转得慢的要过了它的波长（θ = 10000 时为几千个位置）才失去相关，"
      "所以分数的上界平均随距离下降。ALiBi 则加上一条直线惩罚 −斜率·|Δ|：键越远惩罚越大，与内容无关（很大的分数"
      "仍可能压过它）。"}},
};
static_assert(std::size(kTexts) == static_cast<std::size_t>(PT::Count_), "one entry per PT");

// RoPE's score of q (at position qpos) and the keys (k row j at position j + kshift), scaled.
std::vector<double> rope_scores(const Problem& p, int query, int qpos, int kshift, double theta) {
  const int m = p.m();
  const MatrixD q = rope_rotate(p.q().row(query).cast<double>(), qpos, theta);
  const MatrixD k = rope_rotate(p.k().topRows(m).cast<double>(), kshift, theta);
  const Eigen::VectorXd s = k * q.transpose() * p.scale_value();
  return std::vector<double>(s.data(), s.data() + m);
}

}  // namespace

const char* ptr(Lang lang, PT id) { return kTexts[static_cast<int>(id)].text.in(lang); }

std::vector<std::string> position_texts() {
  std::vector<std::string> out;
  for (const Entry& e : kTexts) {
    out.emplace_back(e.text.en);
    out.emplace_back(e.text.zh);
  }
  return out;
}

double rope_wavelength(double theta, int c, int d) {
  return 2 * 3.14159265358979323846 * std::pow(theta, 2.0 * c / d);
}

PositionCurves position_curves(const Problem& p, int query, double theta) {
  PositionCurves c;
  const int m = p.m(), d = p.d_k();
  c.query = query;
  c.pos = query + p.causal_offset();
  c.keys = m;
  c.theta = theta;
  c.rope_possible = d % 2 == 0;
  c.alibi_on = p.mods.alibi;
  // The slope ALiBi gives this head: the same function whether it is on or off.
  Problem on = p;
  on.mods.alibi = true;
  c.slope = alibi_slopes(on)[0];
  c.slope_given = !p.mods.alibi_slopes.empty();
  c.slope_heads = p.heads;
  const MaskRule rule = mask_rule(p);
  c.masked.resize(m);
  for (int j = 0; j < m; ++j) c.masked[j] = !rule.visible(query, j);
  c.masked_keys = static_cast<int>(std::count(c.masked.begin(), c.masked.end(), 1));
  const double scale = p.scale_value();
  const Eigen::RowVectorXd q = p.q().row(query).cast<double>();
  const Eigen::VectorXd plain = p.k().topRows(m).cast<double>() * q.transpose() * scale;
  c.plain.assign(plain.data(), plain.data() + m);
  c.alibi.resize(m);
  for (int j = 0; j < m; ++j) c.alibi[j] = -c.slope * std::abs(c.pos - j);
  if (c.rope_possible) {
    c.rope = rope_scores(p, query, c.pos, 0, theta);
    // The query against itself at distance Δ: each pair's squared length times cos(Δ θ_c).
    const int half = d / 2;
    std::vector<double> energy(half), freq(half);
    for (int k = 0; k < half; ++k) {
      energy[k] = q(k) * q(k) + q(k + half) * q(k + half);
      freq[k] = std::pow(theta, -2.0 * k / d);
    }
    c.self.resize(m);
    for (int j = 0; j < m; ++j) {
      double s = 0;
      for (int k = 0; k < half; ++k) s += energy[k] * std::cos((c.pos - j) * freq[k]);
      c.self[j] = s * scale;
    }
  }
  return c;
}

PlotRange position_plot_range(const PositionCurves& c) {
  double lo = 0, hi = 0;
  for (const auto* cv : {&c.plain, &c.rope, &c.self})
    for (double x : *cv)
      if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!(lo < hi)) lo -= 1, hi += 1;
  const double pad = 0.05 * (hi - lo);
  return {lo - pad, hi + pad};
}

double rope_shift_error(const Problem& p, int query, double theta, int shift) {
  const int pos = query + p.causal_offset();
  const std::vector<double> a = rope_scores(p, query, pos, 0, theta);
  const std::vector<double> b = rope_scores(p, query, pos + shift, shift, theta);
  double e = 0;
  for (std::size_t j = 0; j < a.size(); ++j) e = std::max(e, std::abs(a[j] - b[j]));
  return e;
}

double PositionView::theta(const Session& s) const {
  const double own = s.problem().mods.rope_theta;
  return own > 0 && !theta_moved_ ? own : theta_;
}

void PositionView::set_theta(double t) {
  theta_ = std::clamp(t, kRopeThetaMin, kRopeThetaMax);
  theta_moved_ = true;
}

const PositionCurves& PositionView::update(const Session& s) {
  const double t = theta(s);
  if (s.revision() != revision_ || s.query() != query_ || t != computed_theta_) {
    curves_ = position_curves(s.problem(), s.query(), t);
    if (curves_.rope_possible) curves_.shift_error = rope_shift_error(s.problem(), s.query(), t, kPositionShift);
    range_ = position_plot_range(curves_);
    revision_ = s.revision();
    query_ = s.query();
    computed_theta_ = t;
    ++computed_;
  }
  return curves_;
}

void PositionView::dump(nlohmann::json& j, const Session& s) const {
  nlohmann::json o;
  o["theta"] = theta(s);
  o["theta_moved"] = theta_moved_;
  o["computed"] = computed_;
  if (query_ >= 0) {
    o["query"] = curves_.query;
    o["position"] = curves_.pos;
    o["keys"] = curves_.keys;
    o["rope"] = curves_.rope_possible;
    o["alibi_slope"] = curves_.slope;
    o["alibi_on"] = curves_.alibi_on;
    o["alibi_slope_heads"] = curves_.slope_heads;
    o["masked_keys"] = curves_.masked_keys;
    o["y_range"] = {range_.lo, range_.hi};
    const auto alibi_min = std::min_element(curves_.alibi.begin(), curves_.alibi.end());
    o["alibi_min"] = alibi_min == curves_.alibi.end() ? 0.0 : *alibi_min;
  }
  j["position"] = o;
}

std::string PositionView::broken(const Session& s) const {
  const double t = theta(s);
  if (!(t >= kRopeThetaMin && t <= kRopeThetaMax) && !(s.problem().mods.rope_theta > 0))
    return "position view: θ " + std::to_string(t) + " outside its range";
  if (query_ >= 0 && revision_ == s.revision() && static_cast<int>(curves_.plain.size()) != curves_.keys)
    return "position view: curves of another size than their keys";
  return {};
}

}  // namespace attnlab::viewer
