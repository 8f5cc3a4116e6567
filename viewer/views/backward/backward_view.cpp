// The backward view's logic (see backward_view.h): the steps of the walk back and the pair of
// matrices each shows, the dS row of the selected query, the companion that runs the staged
// backward on the session's worker, the view's dO, its flags, its state dump and its words.
#include "viewer/views/backward/backward_view.h"

#include "core/backend.h"
#include "core/backward.h"
#include "cpu/backward.h"
#include "viewer/session/session.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab::viewer {
namespace {

struct Entry {
  BT id;
  Text text;
};

constexpr Entry kTexts[] = {
    {BT::Label, {"Backward", "反向传播"}},
    {BT::Title,
     {"The chain run back: step %d of %d — %s", "反向走一遍计算链：第 %d / %d 步 — %s"}},
    {BT::StepOf, {"step %d / %d", "步骤 %d / %d"}},
    {BT::Play, {"Play", "播放"}},
    {BT::Pause, {"Pause", "暂停"}},
    {BT::Prev, {"← Back", "← 上一步"}},
    {BT::Next, {"Next →", "下一步 →"}},
    {BT::Home, {"dO (start)", "dO（起点）"}},
    {BT::Upstream, {"upstream dO", "上游梯度 dO"}},
    {BT::UpRandom, {"random (seeded)", "随机（带种子）"}},
    {BT::UpSum, {"loss L = Σ O", "损失 L = Σ O"}},
    {BT::Seed, {"seed", "种子"}},
    {BT::Temperature, {"temperature T", "温度 T"}},
    {BT::NeedsStages,
     {"The backward view keeps every N × N matrix of the staged backward (the forward's stages, dP, dS, the "
      "scores' gradients), so it needs N ≤ %d; N = %d here. Generate N ≤ %d to see it.",
      "反向视图要保留分阶段反向传播的每个 N × N 矩阵（前向各阶段、dP、dS、分数的梯度），因此需要 N ≤ %d；"
      "当前 N = %d。请生成 N ≤ %d 的序列。"}},
    {BT::Computing, {"computing the backward…", "正在计算反向传播…"}},
    {BT::Failed, {"The backward could not be computed: %s", "无法计算反向传播：%s"}},
    {BT::Forward, {"forward: %s", "前向：%s"}},
    {BT::Gradient, {"gradient: %s", "梯度：%s"}},
    {BT::Pooled,
     {"(each pixel: the entry of largest |value| of its block of %d × %d cells)",
      "（每个像素：其 %d × %d 个单元的块中 |值| 最大的条目）"}},
    {BT::StepDout, {"dO = ∂L/∂O, the upstream gradient", "dO = ∂L/∂O，上游梯度"}},
    {BT::StepDv, {"the values' gradient dV = Pᵀ dO", "值的梯度 dV = Pᵀ dO"}},
    {BT::StepDp, {"the weights' gradient dP = dO Vᵀ", "权重的梯度 dP = dO Vᵀ"}},
    {BT::StepD, {"the shared part D = rowsum(dO ∘ O)", "共有部分 D = rowsum(dO ∘ O)"}},
    {BT::StepDs, {"through the softmax: dS = P ∘ (dP − D)", "经过 softmax 反传：dS = P ∘ (dP − D)"}},
    {BT::StepCapped, {"through the soft-cap", "经过软上限"}},
    {BT::StepBiased, {"through ALiBi / the bias", "经过 ALiBi / 偏置"}},
    {BT::StepTemperature, {"through the temperature: ÷ T", "经过温度：÷ T"}},
    {BT::StepScores, {"through the scale: × s", "经过缩放：× s"}},
    {BT::StepRope, {"dQ of the rotated Q (RoPE)", "旋转后 Q 的梯度（RoPE）"}},
    {BT::StepDq, {"the queries' gradient dQ = dS' K", "查询的梯度 dQ = dS' K"}},
    {BT::StepDk, {"the keys' gradient dK = dS'ᵀ Q", "键的梯度 dK = dS'ᵀ Q"}},
    {BT::StepDt, {"the temperature's gradient dT = Σ dS ∘ (−logits / T)", "温度的梯度 dT = Σ dS ∘ (−logits / T)"}},
    {BT::WhyDout,
     {"The walk back starts from dO, how the loss changes with each output value: here %s.",
      "反向从 dO 开始：损失随每个输出值的变化率。这里是：%s。"}},
    {BT::WhyDv,
     {"O = P V, so each value row j collects dO weighted by how much every query read it: dV = Pᵀ dO. A key "
      "nobody reads gets no gradient.",
      "O = P V，所以第 j 行值按每个查询读取它的权重收集 dO：dV = Pᵀ dO。没有查询读取的键得不到梯度。"}},
    {BT::WhyDp,
     {"The same product read the other way: how the loss changes with each weight, dP = dO Vᵀ — the dot "
      "product of the query's dO with each value.",
      "同一个乘积反过来读：损失随每个权重的变化率，dP = dO Vᵀ——查询的 dO 与每个值的点积。"}},
    {BT::WhyD,
     {"D_i = dO_i · O_i = Σ_j P_ij dP_ij: the part of dP that every key of row i shares. The softmax keeps "
      "each row summing to 1, so raising every weight at once is impossible, and D is taken out next.",
      "D_i = dO_i · O_i = Σ_j P_ij dP_ij：第 i 行所有键共有的那部分 dP。softmax 让每行之和保持为 1，不可能同时"
      "提高所有权重，所以下一步要减去 D。"}},
    {BT::WhyDs,
     {"Through the softmax: dS = P ∘ (dP − D). A key's gradient is its weight times how far its dP_ij = dO_i · V_j "
      "lies above (+) or below (−) the row's weighted average D_i: positive means that raising this weight would "
      "raise the loss, so gradient descent lowers it. Masked keys have P = 0: exactly zero gradient.",
      "经过 softmax 反传：dS = P ∘ (dP − D)。一个键的梯度等于它的权重乘以它的 dP_ij = dO_i · V_j 高于（+）或低于（−）"
      "本行加权平均 D_i 的量：为正表示提高这个权重会增大损失，梯度下降会降低它。被屏蔽的键 P = 0：梯度恰好为零。"}},
    {BT::WhyCapped,
     {"The soft-cap C tanh(x / C) flattens large scores, so the gradient of its input x is the capped scores' "
      "gradient times 1 − tanh²(x / C): near the cap almost nothing passes.",
      "软上限 C tanh(x / C) 压平大分数，所以它的输入 x 的梯度是软上限后分数的梯度乘以 1 − tanh²(x / C)：接近上限时"
      "几乎没有梯度通过。"}},
    {BT::WhyBiased,
     {"ALiBi and an additive bias are added terms: the gradient passes through them unchanged.",
      "ALiBi 和加性偏置是加上去的项：梯度原样传回。"}},
    {BT::WhyTemperature,
     {"logits = x / T, x the scaled scores (after the score mods where the problem has them): x's gradient is "
      "dS / T. A low temperature makes the gradients larger where the weights still move.",
      "logits = x / T，x 为缩放分数（问题有分数修改时为修改后的分数）：x 的梯度是 dS / T。温度低时，在权重仍会变化的"
      "地方梯度更大。"}},
    {BT::WhyScores,
     {"scaled = QKᵀ · s: the raw scores' gradient dS' = dscaled · s (s = %s).",
      "缩放分数 = QKᵀ · s：原始分数的梯度 dS' = dscaled · s（s = %s）。"}},
    {BT::WhyRope,
     {"With RoPE the scores multiply the rotated Q and K; their gradients are turned back pair by pair to "
      "give dQ and dK in the inputs' frame.",
      "使用 RoPE 时分数由旋转后的 Q 和 K 相乘得到；它们的梯度按对转回，得到输入坐标下的 dQ 和 dK。"}},
    {BT::WhyDq,
     {"S' = QKᵀ, so dQ = dS' K: a gradient-descent step (−dQ) moves each query towards the keys whose scores "
      "should rise and away from the others.",
      "S' = QKᵀ，所以 dQ = dS' K：梯度下降的一步（−dQ）让每个查询向分数应升高的键靠近，远离其他键。"}},
    {BT::WhyDk,
     {"and dK = dS'ᵀ Q: each key gathers the pulls of every query that reads it.",
      "且 dK = dS'ᵀ Q：每个键汇集所有读取它的查询的拉力。"}},
    {BT::WhyDt,
     {"logits = x / T, so ∂logits/∂T = −logits / T: dT is the sum of dS ∘ (−logits / T) over every unmasked "
      "entry: dT = %s.",
      "logits = x / T，所以 ∂logits/∂T = −logits / T：dT 是所有未屏蔽项上 dS ∘ (−logits / T) 之和：dT = %s。"}},
    {BT::RowTitle, {"Query “%s”: its dS row in two parts", "查询“%s”：它的 dS 行分成两部分"}},
    {BT::RowWeights, {"P (weights)", "P（权重）"}},
    {BT::RowCentered, {"dP − D (centred)", "dP − D（减去共有部分）"}},
    {BT::RowProduct, {"dS (product)", "dS（乘积）"}},
    {BT::RowKey, {"key", "键"}},
    {BT::RowSum,
     {"Σ_j dS = %s ≈ 0; D = %s, Σ_j P dP = %s", "Σ_j dS = %s ≈ 0；D = %s，Σ_j P dP = %s"}},
    {BT::RowWhy,
     {"Why 0: Σ_j P_ij (dP_ij − D_i) = Σ_j P_ij dP_ij − D_i Σ_j P_ij = D_i − D_i, because the weights sum to 1. "
      "Shifting every score of a row by the same amount changes no weight, so the gradient has no such part.",
      "为什么是 0：Σ_j P_ij (dP_ij − D_i) = Σ_j P_ij dP_ij − D_i Σ_j P_ij = D_i − D_i，因为权重之和为 1。给一行的"
      "每个分数加同一个数不改变任何权重，所以梯度没有这个方向的分量。"}},
    {BT::Concentration, {"Where the |dS| mass sits", "|dS| 集中在哪里"}},
    {BT::TopKey, {"on the top key “%s” (P = %s): %s", "在最大权重的键“%s”上（P = %s）：%s"}},
    {BT::TopTwo, {"on the top two keys: %s · row mass Σ|dS|: %s", "在权重最大的两个键上：%s · 整行总量 Σ|dS|：%s"}},
    {BT::Dt, {"dT (all rows): %s", "dT（所有行）：%s"}},
    {BT::TemperatureLesson,
     {"Lower T and the gradient gathers on the top key and its runner-up: their share of Σ|dS| grows, and "
      "the top key holds at most half (its dS is minus the others' sum). The row's Σ|dS| shrinks as the "
      "softmax saturates, but what reaches Q and K is dS / T, which grows as T falls until the row saturates: "
      "only a saturated row (its top weight 1) learns nothing.",
      "降低 T，梯度就聚集到权重最大的键及其次大的键上：它们在 Σ|dS| 中的份额增大，而最大的键最多占一半（它的 dS 是"
      "其余各项之和的相反数）。softmax 趋于饱和时整行的 Σ|dS| 在缩小，但到达 Q 和 K 的是 dS / T，它随 T 降低而增大，"
      "直到该行饱和：只有饱和的行（最大权重为 1）什么也学不到。"}},
    {BT::Caveats,
     {"Caveats: these are the gradients of this one toy loss (a random dO, or L = Σ O), not of a model's "
      "training loss; masked positions get exactly zero gradient; the numbers are fp32 from the staged "
      "backward (attnlab backward --check compares them with fp64).",
      "注意：这些是这一个玩具损失（随机 dO 或 L = Σ O）的梯度，不是模型训练损失的梯度；被屏蔽的位置梯度恰好为零；"
      "数值是分阶段反向传播的 fp32 结果（attnlab backward --check 会与 fp64 比较）。"}},
    {BT::SweepTitle,
     {"The row at %d temperatures (the same dO; the line: T on screen):",
      "本行在 %d 个温度下（同一个 dO；竖线：当前的 T）："}},
    {BT::SweepAxis, {"T (log scale; lower T to the left)", "T（对数刻度；越往左温度越低）"}},
    {BT::SweepTop, {"top key's share", "最大键的份额"}},
    {BT::SweepTopTwo, {"top two keys' share", "最大两个键的份额"}},
    {BT::SweepMass, {"Σ|dS| ÷ its largest", "Σ|dS| ÷ 其最大值"}},
    {BT::SweepNone,
     {"The temperature sweep runs up to N = %d (a backward per temperature); move the slider to see one T at a "
      "time.",
      "温度扫描只在 N ≤ %d 时计算（每个温度一次反向传播）；请拖动滑块逐个查看。"}},
    {BT::SweepRounding,
     {"Orange at 0 at the lowest T: the top weight rounded to 1 in fp32, so its dS rounded to 0 (rounding; the "
      "math gives it half).",
      "橙线在最低温度处为 0：最大权重在 fp32 中舍入为 1，它的 dS 也舍入为 0（这是舍入；数学上它占一半）。"}},
    {BT::TipQuery, {"query “%s” (#%d)", "查询“%s”（#%d）"}},
    {BT::TipKey, {"key “%s” (#%d)", "键“%s”（#%d）"}},
    {BT::TipDim, {"dimension %d", "维度 %d"}},
    {BT::LogNote,
     {"More than 64 tokens: log colour scales over %d decades, as the chain view's weights (P by its value, a "
      "gradient by its sign and log |value|).",
      "超过 64 个 token：颜色按对数刻度，跨 %d 个数量级，与计算链视图的权重相同（P 按数值，梯度按符号与 log |值|）。"}},
};
constexpr bool texts_in_order() {
  for (std::size_t i = 0; i < std::size(kTexts); ++i)
    if (kTexts[i].id != static_cast<BT>(i)) return false;
  return std::size(kTexts) == static_cast<std::size_t>(BT::Count_);
}
static_assert(texts_in_order(), "one entry per BT, in BT's order");

struct StepInfo {
  BackStep step;
  const char* word;
  BT title, why;
};
constexpr StepInfo kSteps[] = {
    {BackStep::Dout, "dout", BT::StepDout, BT::WhyDout},
    {BackStep::Dv, "dv", BT::StepDv, BT::WhyDv},
    {BackStep::Dp, "dp", BT::StepDp, BT::WhyDp},
    {BackStep::D, "D", BT::StepD, BT::WhyD},
    {BackStep::Ds, "ds", BT::StepDs, BT::WhyDs},
    // These three came back through ÷ T, the cap or the bias: back_step_texts picks which.
    {BackStep::Capped, "dcapped", BT::StepTemperature, BT::WhyTemperature},
    {BackStep::Biased, "dbiased", BT::StepTemperature, BT::WhyTemperature},
    {BackStep::Scaled, "dscaled", BT::StepTemperature, BT::WhyTemperature},
    {BackStep::Scores, "dscores", BT::StepScores, BT::WhyScores},
    {BackStep::Rope, "dq_rot", BT::StepRope, BT::WhyRope},
    {BackStep::Dq, "dq", BT::StepDq, BT::WhyDq},
    {BackStep::Dk, "dk", BT::StepDk, BT::WhyDk},
    {BackStep::Dt, "dT", BT::StepDt, BT::WhyDt},
};

const StepInfo& info(BackStep s) { return kSteps[static_cast<int>(s)]; }

Upstream sum_upstream() {
  Upstream u;
  u.kind = UpstreamKind::Sum;
  return u;
}

}  // namespace

const char* btr(Lang lang, BT id) { return kTexts[static_cast<int>(id)].text.in(lang); }

std::vector<std::string> backward_texts() {
  std::vector<std::string> out = texts_of(kTexts);
  for (const Lang l : {Lang::En, Lang::Zh}) {
    out.push_back(upstream_text(upstream_random(0), l));
    out.push_back(upstream_text(sum_upstream(), l));
  }
  return out;
}

std::vector<BackStep> backward_steps(const GradTrace& g) {
  std::vector<BackStep> out;
  for (const StepInfo& s : kSteps) {
    if (s.step == BackStep::Capped && g.dcapped.size() == 0) continue;
    if (s.step == BackStep::Biased && g.dbiased.size() == 0) continue;
    if (s.step == BackStep::Rope && g.dq_rot.size() == 0) continue;
    out.push_back(s.step);
  }
  return out;
}

const char* back_step_word(BackStep s) { return info(s).word; }
StepTexts back_step_texts(BackStep s, const GradTrace& g) {
  const bool biased = g.dbiased.size() != 0, capped = g.dcapped.size() != 0;
  if (s == BackStep::Scaled && biased) return {BT::StepBiased, BT::WhyBiased};
  if ((s == BackStep::Scaled || s == BackStep::Biased) && capped) return {BT::StepCapped, BT::WhyCapped};
  return {info(s).title, info(s).why};
}

MatrixF dt_terms(const GradTrace& g, double temperature) {
  const MatrixF& logits = g.forward.logits;
  MatrixF out = MatrixF::Zero(g.dlogits.rows(), g.dlogits.cols());
  for (Eigen::Index i = 0; i < out.rows(); ++i)
    for (Eigen::Index j = 0; j < out.cols(); ++j)
      if (std::isfinite(logits(i, j)))
        out(i, j) = static_cast<float>(g.dlogits(i, j) * (-static_cast<double>(logits(i, j)) / temperature));
  return out;
}

StepPair step_pair(const Problem& p, const GradTrace& g, BackStep s, const MatrixF& dt) {
  const TraceT<MatrixF>& f = g.forward;
  switch (s) {
    case BackStep::Dout: return {&f.output, &g.dout, "O", "dO"};
    case BackStep::Dv: return {&p.v(), &g.dv, "V", "dV", false};
    case BackStep::Dp: return {&f.weights, &g.dp, "P", "dP", true, true, true, true};
    case BackStep::D: return {&f.output, &g.D, "O", "D"};
    case BackStep::Ds: return {&f.weights, &g.dlogits, "P", "dS", true, true, true, true};
    case BackStep::Capped: return {&f.capped, &g.dcapped, {"capped", "软上限后"}, {"d capped", "d 软上限后"}, true, true};
    case BackStep::Biased: return {&f.biased, &g.dbiased, {"biased", "加偏置后"}, {"d biased", "d 加偏置后"}, true, true};
    case BackStep::Scaled: return {&f.scaled, &g.dscaled, "QKᵀ·s", {"d scaled", "d 缩放分数"}, true, true};
    case BackStep::Scores: return {&f.scores, &g.dscores, "QKᵀ", "dS'", true, true};
    case BackStep::Rope: return {&f.q_rot, &g.dq_rot, "RoPE(Q)", "d RoPE(Q)"};
    case BackStep::Dq: return {&p.q(), &g.dq, "Q", "dQ"};
    case BackStep::Dk: return {&p.k(), &g.dk, "K", "dK", false};
    case BackStep::Dt: return {&f.logits, &dt, "logits", "dS ∘ (−logits / T)", true, true, false, true};
  }
  return {};
}

MapEdges map_edges(const StepPair& pair, const MatrixF& m) {
  return {pair.query_rows ? Edge::Queries : Edge::Keys, pair.key_cols ? Edge::Keys : m.cols() > 1 ? Edge::Dims : Edge::None};
}

double MapPicture::position(double v) const {
  if (!gradient || !log_scale) return std::clamp(scale_pos(v, range, log_scale), 0.0, 1.0);
  if (v == 0) return 0.5;
  const double t = std::clamp(scale_pos(std::abs(v), log_range({0, range.hi}), true), 0.0, 1.0);
  return 0.5 + (v > 0 ? 0.5 : -0.5) * t;
}

ValueRange map_range(const MatrixF& m, const MatrixF* mask, bool gradient, bool log_scale) {
  const float* mk = mask && mask->size() ? mask->data() : nullptr;
  const int mask_rows = mk ? static_cast<int>(mask->rows()) : 0;
  const ValueRange r = finite_range(m.data(), static_cast<int>(m.rows()), static_cast<int>(m.cols()), mk, mask_rows);
  if (gradient) {
    const double a = std::max({std::abs(r.lo), std::abs(r.hi), 1e-30});
    return {-a, a};
  }
  return log_scale ? log_range(r) : r;
}

MapPicture map_picture(const MatrixF& m, const MatrixF* mask, bool gradient, bool log_scale, const AxisMap& rows,
                       const AxisMap& cols) {
  MapPicture out;
  out.gradient = gradient;
  out.log_scale = log_scale;
  const int r = static_cast<int>(m.rows()), c = static_cast<int>(m.cols());
  const float* mk = mask && mask->size() ? mask->data() : nullptr;
  const int mask_rows = mk ? static_cast<int>(mask->rows()) : 0;
  out.cells = pool_grid(m.data(), r, c, mk, mask_rows, rows, cols, PoolMode::Extreme);
  for (const PooledCell& cell : out.cells) out.masked_blocks += cell.masked;
  out.range = map_range(m, mask, gradient, log_scale);
  return out;
}

MapSize map_size(int rows, int cols, float w, float h, float least) {
  if (rows <= 0 || cols <= 0 || !(w > 0) || !(h > 0)) return {};
  const float aspect = static_cast<float>(cols) / static_cast<float>(rows);
  MapSize s{std::min(w, h * aspect), std::min(h, w / aspect)};
  // Only the thin side is held up: a square matrix in a small box stays square.
  if (aspect < 1) s.w = std::max(s.w, std::min(w, least));
  else if (aspect > 1) s.h = std::max(s.h, std::min(h, least));
  return s;
}

DsRow ds_row(const GradTrace& g, int query) {
  DsRow r;
  const int m = static_cast<int>(g.dlogits.cols());
  r.query = query;
  r.keys = m;
  r.D = g.D(query, 0);
  r.p.resize(m);
  r.centered.resize(m);
  r.ds.resize(m);
  double best = -1;
  for (int j = 0; j < m; ++j) {
    const double p = g.forward.weights(query, j), dp = g.dp(query, j), ds = g.dlogits(query, j);
    r.p[j] = p;
    r.centered[j] = dp - r.D;  // a masked key's too: its dS is 0 because its P is
    r.ds[j] = ds;
    r.p_dp += p * dp;
    r.row_sum += ds;
    r.mass += std::abs(ds);
    if (p > best) best = p, r.top = j;
  }
  if (r.mass > 0 && r.top >= 0) {
    r.top_share = std::abs(r.ds[r.top]) / r.mass;
    int second = -1;
    for (int j = 0; j < m; ++j)
      if (j != r.top && (second < 0 || r.p[j] > r.p[second])) second = j;
    r.top_two_share = (std::abs(r.ds[r.top]) + (second >= 0 ? std::abs(r.ds[second]) : 0)) / r.mass;
  }
  return r;
}

std::vector<double> sweep_temperatures() {
  std::vector<double> out;
  for (int k = 0; k < kBackwardSweepPoints; ++k)
    out.push_back(kBackwardTMin * std::pow(kBackwardTMax / kBackwardTMin, k / (kBackwardSweepPoints - 1.0)));
  return out;
}

bool sweep_rounded_top(const std::vector<SweepPoint>& sweep, int row) {
  for (const SweepPoint& p : sweep)
    if (row < static_cast<int>(p.top_share.size()) && p.top_share[row] == 0 && p.top_two_share[row] > 0) return true;
  return false;
}

std::vector<SweepPoint> temperature_sweep(const Problem& p, const Upstream& u, const std::atomic<bool>* cancel) {
  std::vector<SweepPoint> out;
  for (const double t : sweep_temperatures()) {
    if (cancel && cancel->load()) throw Cancelled();
    Problem at = p;  // the inputs are shared: a copy of the settings only
    at.temperature = t;
    const GradTrace g = cpu_backward(at, u);
    SweepPoint pt;
    pt.temperature = t;
    for (int i = 0; i < static_cast<int>(g.dlogits.rows()); ++i) {
      const DsRow r = ds_row(g, i);
      const float none = std::numeric_limits<float>::quiet_NaN();  // no mass, no share
      pt.top_share.push_back(r.mass > 0 ? static_cast<float>(r.top_share) : none);
      pt.top_two_share.push_back(r.mass > 0 ? static_cast<float>(r.top_two_share) : none);
      pt.mass.push_back(static_cast<float>(r.mass));
    }
    out.push_back(std::move(pt));
  }
  return out;
}

std::string BackwardCompanion::key() const {
  return "backward: " + upstream_kind_name(up_.kind) + " " + std::to_string(up_.seed);
}

std::shared_ptr<const CompanionResult> BackwardCompanion::compute(const CompanionInput& in) const {
  auto out = std::make_shared<BackwardResult>();
  const Problem& p = *in.problem;
  out->temperature = p.temperature;
  out->problem = in.problem;
  if (std::max(p.n(), p.m()) > kBackwardMaxTokens) return out;  // the view says why
  try {
    // The session's own run when it kept every stage in fp32 (what the chain view shows); else the
    // staged CPU chain's run of its own (a CUDA run that kept one step, a bf16 run).
    const Trace* t = in.main;
    if (t && t->has_stages && t->precision == Precision::FP32 && present_stages(*t) == problem_stages(p)) {
      const Trace forward = *t;  // copy: backward_of keeps it in the result
      out->grad = std::make_shared<const GradTrace>(
          backward_of(p, forward, upstream_dout(up_, forward.output, nullptr)));
      out->on_screen_run = true;
    } else {
      out->grad = std::make_shared<const GradTrace>(cpu_backward(p, up_));
    }
    if (std::max(p.n(), p.m()) <= kBackwardSweepMaxTokens) out->sweep = temperature_sweep(p, up_, in.cancel);
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    out->grad.reset();
    out->error = message_of(e);
  }
  return out;
}

bool BackwardView::parse_flag(const std::string& flag, const FlagValue& value, Options& o) {
  if (flag == "--dout-seed") {
    o.dout_seed = parse_flag_int<std::uint64_t>(flag, value(), 0, std::numeric_limits<std::uint64_t>::max());
    o.seed_given = true;
  } else if (flag == "--back-step") {
    const std::string& v = value();
    std::string all;
    for (const StepInfo& i : kSteps) {
      if (v == i.word) {
        o.step = v;
        return true;
      }
      all += std::string(all.empty() ? "" : ", ") + i.word;
    }
    throw InputError(Msg::OptionWords, {flag, all, v});
  } else if (flag == "--loss") {
    const std::string& v = value();
    if (v != "sum") throw InputError(Msg::ViewLossSum, {v});
    o.sum = true;
  } else {
    return false;
  }
  if (o.sum && o.seed_given)  // the CLI's line: the seed would be dropped
    throw InputError(Msg::DoutSeedWith, {});
  return true;
}

std::string BackwardView::usage() {
  return "  --view backward: [--dout-seed S] [--loss sum] [--back-step WORD]\n"
         "                 (the staged backward played back from dO to dQ, dK and dT; dO standard normal\n"
         "                 of seed S, default 0, or the loss L = sum of O, whose dO is 1 everywhere; WORD the\n"
         "                 step it opens on: dout, dv, dp, D, ds, dcapped, dbiased, dscaled, dscores,\n"
         "                 dq_rot, dq, dk or dT)\n";
}

BackwardView::BackwardView(const Options& o) : open_on_(o.step) {
  set_upstream(o.sum ? sum_upstream() : upstream_random(o.dout_seed));
}

BackwardView::BackwardView(const ViewContext& ctx, const Options& o) : BackwardView(o) {
  const Problem& p = ctx.session.problem();
  const unsigned stages = problem_stages(p);  // the core's rule of which stages a problem has
  const char* needs = nullptr;
  if (o.step == "dcapped" && !(stages & kStageCapped)) needs = "--score-mod softcap:C";
  if (o.step == "dbiased" && !(stages & kStageBiased)) needs = "--score-mod alibi | bias:FILE";
  if (o.step == "dq_rot" && !(p.mods.rope_theta > 0)) needs = "--rope [THETA]";
  if (needs)
    throw InputError(Msg::BackStepNeeds, {o.step, needs});
}

void BackwardView::set_upstream(const Upstream& u) {
  up_ = u;
  companion_ = std::make_shared<const BackwardCompanion>(u);
}

void BackwardView::set_random(std::uint64_t seed) { set_upstream(upstream_random(seed)); }
void BackwardView::set_sum() { set_upstream(sum_upstream()); }

const GradTrace* BackwardView::update(const Session& s) {
  if (s.streaming() || std::max(s.problem().n(), s.problem().m()) > kBackwardMaxTokens) {
    status_ = Status::TooLarge;
    return nullptr;
  }
  const BackwardResult* r = s.companion<BackwardResult>();
  if (!r || (!r->grad && r->error.empty())) {
    status_ = Status::Computing;
    return nullptr;
  }
  if (!r->grad) {
    status_ = Status::Failed;
    error_ = r->error;
    return nullptr;
  }
  if (r->grad != grad_) {
    grad_ = r->grad;
    problem_ = r->problem;
    temperature_ = r->temperature;
    sweep_ = r->sweep;
    ++adopted_;
    on_screen_run_ = r->on_screen_run;
    // The same step when the new backward has it (a modification switched on or off adds or
    // takes out steps around it), else the nearest one before it that it has.
    const std::vector<BackStep> old = std::move(steps_);
    steps_ = backward_steps(*grad_);
    const auto index_of = [&](BackStep st) {
      const auto it = std::find(steps_.begin(), steps_.end(), st);
      return it == steps_.end() ? -1 : static_cast<int>(it - steps_.begin());
    };
    int at = -1;
    for (int i = std::min(step_, static_cast<int>(old.size()) - 1); i >= 0 && at < 0; --i) at = index_of(old[i]);
    step_ = std::clamp(at, 0, std::max(0, static_cast<int>(steps_.size()) - 1));
    for (std::size_t i = 0; i < steps_.size() && !open_on_.empty(); ++i)
      if (open_on_ == back_step_word(steps_[i])) {
        step_ = static_cast<int>(i);
        open_on_.clear();
      }
  }
  status_ = Status::Ok;
  return grad_.get();
}

void BackwardView::next() {
  if (!steps_.empty()) step_ = std::min(step_ + 1, static_cast<int>(steps_.size()) - 1);
}
void BackwardView::prev() { step_ = std::max(step_ - 1, 0); }
void BackwardView::home() {
  step_ = 0;
  playing_ = false;
}
void BackwardView::toggle_play() {
  playing_ = !playing_;
  elapsed_ = 0;
  if (playing_ && step_ >= static_cast<int>(steps_.size()) - 1) step_ = 0;
}

bool BackwardView::tick(double dt) {
  if (!playing_ || steps_.size() <= 1) return false;
  elapsed_ += dt;
  if (elapsed_ < kBackwardStepSeconds) return false;
  elapsed_ = 0;
  step_ = (step_ + 1) % static_cast<int>(steps_.size());
  return true;
}

bool BackwardView::on_action(Action a) { return take_step_keys(*this, a); }

StepKeysHelp BackwardView::step_keys_help(Lang lang) const {
  const bool zh = lang == Lang::Zh;
  return {zh ? "播放 / 暂停反向传播（每 1.5 秒一步，循环）" : "play / pause the backward (a step every 1.5 s, wrapping)",
          zh ? "后退 / 前进一个梯度" : "one gradient back / forward", zh ? "回到 dO" : "back to dO",
          chain_step_keys_help(lang).query};
}

const DsRow& BackwardView::row(const Session& s) {
  if (grad_ && (row_of_ != adopted_ || row_query_ != s.query())) {
    row_ = ds_row(*grad_, std::clamp(s.query(), 0, static_cast<int>(grad_->dlogits.rows()) - 1));
    row_of_ = adopted_;
    row_query_ = s.query();
  }
  return row_;
}

const MatrixF& BackwardView::dt_matrix() {
  if (grad_ && dt_of_ != adopted_) {
    dt_ = dt_terms(*grad_, temperature_);
    dt_of_ = adopted_;
  }
  return dt_;
}

void BackwardView::dump(nlohmann::json& j, const Session& s) const {
  nlohmann::json o;
  o["status"] = status_ == Status::Ok         ? "ok"
                : status_ == Status::TooLarge ? "too_large"
                : status_ == Status::Failed   ? "failed"
                                              : "computing";
  o["upstream"] = upstream_kind_name(up_.kind);
  o["dout_seed"] = up_.seed;
  o["step"] = step_;
  o["steps"] = nlohmann::json::array();
  for (BackStep b : steps_) o["steps"].push_back(back_step_word(b));
  if (!steps_.empty()) o["current"] = back_step_word(current());
  o["playing"] = playing_;
  if (grad_ && status_ == Status::Ok) {
    o["on_screen_run"] = on_screen_run_;
    o["temperature"] = temperature_;
    o["dT"] = grad_->dT;
    const DsRow r = ds_row(*grad_, std::clamp(s.query(), 0, static_cast<int>(grad_->dlogits.rows()) - 1));
    o["query"] = r.query;
    o["row_sum"] = r.row_sum;
    o["D"] = r.D;
    o["p_dp"] = r.p_dp;
    o["mass"] = r.mass;
    o["top"] = r.top;
    o["top_share"] = r.top_share;
    o["top_two_share"] = r.top_two_share;
    o["any_masked"] = any_masked;  // the maps' "masked" swatch is drawn only then
    o["row_table"] = row_table;
    o["maps"] = nlohmann::json::array();
    for (int i = 0; i < 2; ++i) {
      const MapPicture& m = picture[i];
      const MapPlace& pl = place[i];
      nlohmann::json mj;
      mj["place"] = {{"x", pl.x},           {"y", pl.y},
                     {"w", pl.w},           {"h", pl.h},
                     {"mark_right", pl.mark_right}, {"legend_x", pl.legend_x}, {"legend_right", pl.legend_right},
                     {"label_x", pl.label_x},       {"labels_top", pl.labels_top}};
      mj["labels"] = {{"row_stride", pl.row_stride}, {"col_stride", pl.col_stride}, {"col_lines", pl.col_lines}};
      mj["blocks"] = m.cells.size();
      mj["masked_blocks"] = m.masked_blocks;
      mj["log_scale"] = m.log_scale;
      mj["gradient"] = m.gradient;
      mj["range"] = {m.range.lo, m.range.hi};
      o["maps"].push_back(mj);
    }
  }
  j["backward"] = o;
}

std::string BackwardView::broken(const Session&) const {
  if (!steps_.empty() && (step_ < 0 || step_ >= static_cast<int>(steps_.size())))
    return "backward view: step " + std::to_string(step_) + " outside its " + std::to_string(steps_.size()) + " steps";
  if (grad_ && grad_->dlogits.rows() != grad_->forward.weights.rows())
    return "backward view: dS of another shape than P";
  return {};
}

}  // namespace attnlab::viewer
