// Renderings of a backward run (core/backward_report.h): the gradients as titled tables in the
// order the chain runs back, through the run's own table, header and JSON code (core/report_parts.h).
#include "core/backward_report.h"

#include "core/format.h"
#include "core/messages.h"
#include "core/modify.h"
#include "core/report_parts.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace attnlab {
namespace {

using namespace report_parts;

std::string num(double x) { return format_number("%.4g", x); }

// The gradients of g with their formulas as titles, in the order the chain runs back.
std::vector<Stage> grads_of(const Problem& p, const GradTrace& g, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const std::string T = short_number(p.temperature), C = short_number(p.mods.softcap);
  const int group = p.heads / p.kv_heads();
  const std::string summed =
      group > 1 ? (zh ? "；每个键/值头对共享它的 " + std::to_string(group) + " 个查询头求和"
                      : "; summed over the " + std::to_string(group) + " query heads of each key/value head")
                : "";
  const bool capped = g.dcapped.size() > 0, biased = g.dbiased.size() > 0, rope = g.dq_rot.size() > 0;
  const std::string by_t = zh ? "dlogits / T（T=" + T + "）" : "dlogits / T (T=" + T + ")";
  const std::string cap_of = [&](const std::string& x) {
    return zh ? "d capped ∘ (1 − tanh²(" + x + " / C))（软上限的导数，C=" + C + "）"
              : "d capped ∘ (1 − tanh²(" + x + " / C)) (the soft-cap's derivative, C=" + C + ")";
  }(biased ? "biased" : "scaled");
  const std::string scale = p.scale ? format_number("%.6g", *p.scale) : std::string();
  const std::string dk = std::to_string(p.d_k());
  std::vector<Stage> all = {
      {"dO", zh ? "dO = ∂L/∂O（上游梯度）" : "dO = ∂L/∂O (the upstream gradient)", &g.dout, Axis::Query, Axis::Feature},
      {"dV", (zh ? "dV = Pᵀ·dO（值的梯度" : "dV = Pᵀ·dO (gradient of the values") + summed + (zh ? "）" : ")"), &g.dv,
       Axis::Key, Axis::Feature},
      {"dP", zh ? "dP = dO·Vᵀ（权重的梯度）" : "dP = dO·Vᵀ (gradient of the weights)", &g.dp, Axis::Query, Axis::Key},
      {"D",
       zh ? "D = rowsum(dO ∘ O)（= Σ_j P_ij·dP_ij：按权重平均的 dP）"
          : "D = rowsum(dO ∘ O) (= Σ_j P_ij·dP_ij: the row's dP averaged by its weights)",
       &g.D, Axis::Query, Axis::Feature},
      {"dlogits",
       zh ? "dlogits = P ∘ (dP − D)（logits 的梯度；FlashAttention-2 中的 dS；被屏蔽处恰为 0，每行和为 0）"
          : "dlogits = P ∘ (dP − D) (gradient of the logits; FlashAttention-2's dS; exactly 0 where masked, each row "
            "sums to 0)",
       &g.dlogits, Axis::Query, Axis::Key},
      {"dcapped", "", &g.dcapped, Axis::Query, Axis::Key},
      {"dbiased", "d biased = " + (capped ? cap_of : by_t), &g.dbiased, Axis::Query, Axis::Key},
      {"dscaled",
       "d scaled = " + (biased ? (zh ? std::string("d biased（ALiBi 与偏置是加上的常数：梯度原样传过）")
                                     : std::string("d biased (ALiBi and the bias are added constants: the gradient "
                                                   "passes on)"))
                        : capped ? cap_of
                                 : by_t),
       &g.dscaled, Axis::Query, Axis::Key},
      {"dscores",
       p.scale ? (zh ? "d(QKᵀ) = d scaled × " + scale + "（原始分数的梯度，显式缩放）"
                     : "d(QKᵀ) = d scaled × " + scale + " (gradient of the raw scores, explicit scale)")
               : (zh ? "d(QKᵀ) = d scaled / √d_k（原始分数的梯度，d_k=" + dk + "）"
                     : "d(QKᵀ) = d scaled / √d_k (gradient of the raw scores, d_k=" + dk + ")"),
       &g.dscores, Axis::Query, Axis::Key},
      {"dQ_rot", zh ? "dQ_rot = d(QKᵀ)·K_rot（旋转后查询的梯度）" : "dQ_rot = d(QKᵀ)·K_rot (gradient of the rotated queries)",
       &g.dq_rot, Axis::Query, Axis::Feature},
      {"dK_rot",
       (zh ? "dK_rot = d(QKᵀ)ᵀ·Q_rot（旋转后键的梯度" : "dK_rot = d(QKᵀ)ᵀ·Q_rot (gradient of the rotated keys") + summed +
           (zh ? "）" : ")"),
       &g.dk_rot, Axis::Key, Axis::Feature},
      {"dQ",
       rope ? (zh ? "dQ = RoPEᵀ(dQ_rot)（转回输入的坐标：旋转的转置）"
                  : "dQ = RoPEᵀ(dQ_rot) (turned back to the inputs' frame: the rotation's transpose)")
            : (zh ? "dQ = d(QKᵀ)·K（查询的梯度）" : "dQ = d(QKᵀ)·K (gradient of the queries)"),
       &g.dq, Axis::Query, Axis::Feature},
      {"dK",
       rope ? (zh ? "dK = RoPEᵀ(dK_rot)（转回输入的坐标）" : "dK = RoPEᵀ(dK_rot) (turned back to the inputs' frame)")
            : (zh ? "dK = d(QKᵀ)ᵀ·Q（键的梯度" : "dK = d(QKᵀ)ᵀ·Q (gradient of the keys") + summed + (zh ? "）" : ")"),
       &g.dk, Axis::Key, Axis::Feature},
  };
  if (capped)
    all[5].title = zh ? "d capped = dlogits / T（软上限之后分数的梯度，T=" + T + "）"
                      : "d capped = dlogits / T (gradient of the soft-capped scores, T=" + T + ")";
  std::vector<Stage> present;
  for (auto& s : all)
    if (s.m->size() > 0) present.push_back(s);
  return present;
}

// The forward matrices the formulas read, as run titles them.
std::vector<Stage> forward_shown(const Problem& p, const GradTrace& g, Lang lang) {
  std::vector<Stage> out;
  for (const Stage& s : stages_of(p, g.forward, lang))
    if (s.key == "q" || s.key == "k" || s.key == "v" || s.key == "q_rot" || s.key == "k_rot" || s.key == "weights" ||
        s.key == "output")
      out.push_back(s);
  return out;
}

struct QueryFigures {
  double row_sum = 0, D = 0, dq_norm = 0;
  int visible = 0, up = -1, down = -1;  // keys whose logit descent raises / lowers most
  double up_value = 0, down_value = 0;
  bool saturated = false;  // one weight of the row is 1 in fp32
  // Several keys, every dlogits exactly 0 (a saturated softmax): no key to name as raised or lowered.
  bool flat() const { return visible > 1 && up_value == 0 && down_value == 0; }
};

// The fused backward keeps no (n, m) matrix: its figures are D and dQ's row only (visible -1).
QueryFigures query_figures(const Problem& p, const GradTrace& g, int query) {
  QueryFigures f;
  f.D = g.D(query, 0);
  f.dq_norm = g.dq.row(query).cast<double>().norm();
  if (g.dlogits.size() == 0) {
    f.visible = -1;
    return f;
  }
  const auto& mask = g.forward.mask;
  for (int j = 0; j < p.m(); ++j) {
    if (std::isinf(mask(query, j))) continue;
    const double x = g.dlogits(query, j);
    ++f.visible;
    f.row_sum += x;
    if (f.up < 0 || x < f.up_value) f.up = j, f.up_value = x;
    if (f.down < 0 || x > f.down_value) f.down = j, f.down_value = x;
    f.saturated = f.saturated || g.forward.weights(query, j) == 1.f;
  }
  return f;
}

std::vector<std::pair<std::string, std::string>> query_lines(const Problem& p, const GradTrace& g, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const QueryFigures f = query_figures(p, g, query);
  const auto key = [&](int j) { return token_label(p.key_tokens(), j); };
  if (f.visible < 0) return {{"D = Σ_j P·dP", num(f.D)}, {zh ? "|dQ 行|" : "|dQ row|", num(f.dq_norm)}};
  // One key: its weight is 1 whatever the logits, its dlogits exactly 0 (backward_chain): no key's
  // logit to raise or lower (the same key had been named for both, at its rounding noise).
  if (f.visible <= 1)
    return {{zh ? "Σ_j dlogits（精确算术中为 0）" : "Σ_j dlogits (0 in exact arithmetic)", format_number("%.2e", f.row_sum)},
            {"D = Σ_j P·dP", num(f.D)},
            {zh ? "梯度下降升高或降低的 logit" : "logit that gradient descent raises or lowers",
             zh ? "无：该行只看见一个键" : "none: the row sees one key"},
            {zh ? "|dQ 行|" : "|dQ row|", num(f.dq_norm)}};
  // Every dlogits 0: naming a key for both would read as the key that moves most (it had been).
  if (f.flat())
    return {{zh ? "Σ_j dlogits（精确算术中为 0）" : "Σ_j dlogits (0 in exact arithmetic)", format_number("%.2e", f.row_sum)},
            {"D = Σ_j P·dP", num(f.D)},
            {zh ? "梯度下降升高或降低的 logit" : "logit that gradient descent raises or lowers",
             f.saturated ? (zh ? "无：softmax 已饱和，该行的 dlogits 全为 0" : "none: the softmax saturated, every dlogits of the row is 0")
                         : (zh ? "无：该行的 dlogits 全为 0" : "none: every dlogits of the row is 0")},
            {zh ? "|dQ 行|" : "|dQ row|", num(f.dq_norm)}};
  std::vector<std::pair<std::string, std::string>> l = {
      {zh ? "Σ_j dlogits（精确算术中为 0）" : "Σ_j dlogits (0 in exact arithmetic)", format_number("%.2e", f.row_sum)},
      {"D = Σ_j P·dP", num(f.D)},
      {zh ? "梯度下降使其升高最多的 logit" : "logit that gradient descent raises most",
       key(f.up) + (zh ? "（dlogits " : " (dlogits ") + num(f.up_value) + (zh ? "）" : ")")},
      {zh ? "梯度下降使其降低最多的 logit" : "logit that gradient descent lowers most",
       key(f.down) + (zh ? "（dlogits " : " (dlogits ") + num(f.down_value) + (zh ? "）" : ")")},
      {zh ? "|dQ 行|" : "|dQ row|", num(f.dq_norm)},
  };
  return l;
}

std::string query_title(const Problem& p, int query, Lang lang) {
  return lang == Lang::Zh ? "查询“" + token_label(p.query_tokens(), query) + "”（行 " + std::to_string(query) +
                                "）的梯度"
                          : "Gradients of query " + token_label(p.query_tokens(), query) + " (row " +
                                std::to_string(query) + ")";
}

std::string dt_line(const GradTrace& g, Lang lang) {
  return lang == Lang::Zh
             ? "dT = ∂L/∂T = Σ dlogits ∘ (−logits / T)，对每个头所有未屏蔽的（查询，键）求和 = " + num(g.dT)
             : "dT = ∂L/∂T = Σ dlogits ∘ (−logits / T) over the visible (query, key) entries of every head = " +
                   num(g.dT);
}

std::vector<std::string> header_lines(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  std::vector<std::string> l = intro_lines(p, g.forward, query, lang);
  l.push_back(upstream_text(u, lang) + (g.loss ? (zh ? "；L = " : "; L = ") + num(*g.loss) : std::string()));
  const bool fused = g.forward.variant == Variant::Fused;
  const std::string backend = g.forward.backend.empty() ? "cpu" : g.forward.backend;
  l.push_back((zh ? "反向：" : "backward: ") + backend + " · " + std::string(fused ? "fused" : "staged") + " · " +
              std::string(to_string(g.forward.precision)) + " · " +
              fixed(g.backward_ms, 3) + " ms" +
              (fused ? (zh ? "（FlashAttention-2 的算法：按块由前向保存的 m 与 l 重算 P，不保留 (n, m) 矩阵；上面一行是前向的时间）"
                           : " (FlashAttention-2's algorithm: P recomputed tile by tile from the forward's m and l, no "
                             "(n, m) matrix kept; the line above is the forward's time)")
                     : (zh ? "（逐阶段；上面一行是前向的时间）" : " (stage by stage; the line above is the forward's time)")));
  return l;
}

std::string render_text(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang,
                        const BackwardCheck* check) {
  const bool zh = lang == Lang::Zh;
  std::string out = zh ? "反向传播\n" : "Backward pass\n";
  for (const auto& l : header_lines(p, g, u, query, lang)) out += l + "\n";
  out += zh ? "\n—— 前向（公式读取的矩阵）——\n" : "\n-- forward (the matrices the formulas read) --\n";
  for (const auto& s : forward_shown(p, g, lang)) {
    const int e = table_exponent(p, s, query, kSmallForward);
    out += "\n" + s.title + unit_suffix(e, lang) + "\n" + text_table(grid_of(p, s, query, true, std::pow(10.0, e)));
  }
  out += zh ? "\n—— 反向（按计算链倒序）——\n" : "\n-- backward (the chain in reverse) --\n";
  for (const auto& s : grads_of(p, g, lang)) {
    const int e = table_exponent(p, s, query, kSmallGradients);
    out += "\n" + s.title + unit_suffix(e, lang) + "\n" + text_table(grid_of(p, s, query, true, std::pow(10.0, e)));
  }
  out += "\n" + dt_line(g, lang) + "\n";
  out += "\n" + query_title(p, query, lang) + "\n";
  const auto lines = query_lines(p, g, query, lang);
  int w = 0;
  for (const auto& [k, v] : lines) w = std::max(w, display_width(k));
  for (const auto& [k, v] : lines) out += pad_right(k + (zh ? "：" : ":"), w + 2) + " " + v + "\n";
  out += zh ? "\n说明\n" : "\nWhat it says\n";
  out += describe_backward(p, g, u, query, lang) + "\n";
  if (check) out += "\n" + render_backward_check_text(*check, lang);
  return out;
}

std::string render_markdown(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang,
                            const BackwardCheck* check) {
  const bool zh = lang == Lang::Zh;
  std::string out = zh ? "## 反向传播\n\n" : "## Backward pass\n\n";
  for (const auto& l : header_lines(p, g, u, query, lang)) out += l + "  \n";
  out += zh ? "\n### 前向（公式读取的矩阵）\n" : "\n### Forward (the matrices the formulas read)\n";
  for (const auto& s : forward_shown(p, g, lang)) {
    const int e = table_exponent(p, s, query, kSmallForward);
    out += "\n#### " + md_escape(s.title + unit_suffix(e, lang)) + "\n\n" +
           markdown_table(grid_of(p, s, query, false, std::pow(10.0, e)));
  }
  out += zh ? "\n### 反向（按计算链倒序）\n" : "\n### Backward (the chain in reverse)\n";
  for (const auto& s : grads_of(p, g, lang)) {
    const int e = table_exponent(p, s, query, kSmallGradients);
    out += "\n#### " + md_escape(s.title + unit_suffix(e, lang)) + "\n\n" +
           markdown_table(grid_of(p, s, query, false, std::pow(10.0, e)));
  }
  out += "\n" + md_escape(dt_line(g, lang)) + "\n";
  out += "\n### " + md_escape(query_title(p, query, lang)) + "\n\n";
  for (const auto& [k, v] : query_lines(p, g, query, lang)) out += "- **" + md_escape(k) + "**: " + md_escape(v) + "\n";
  out += zh ? "\n### 说明\n\n" : "\n### What it says\n\n";
  out += describe_backward(p, g, u, query, lang) + "\n";
  if (check) out += "\n### " + std::string(zh ? "与 fp64 对照" : "Check against fp64") + "\n\n```\n" +
                    render_backward_check_text(*check, lang) + "```\n";
  return out;
}

void append_csv_rows(std::string& out, const Problem& p, const Stage& s) {
  const MatrixF& m = *s.m;
  std::vector<std::string> col_tokens(m.cols());
  for (Eigen::Index c = 0; c < m.cols(); ++c)
    col_tokens[c] = s.cols == Axis::Feature ? "" : csv_field(axis_label(p, s.cols, static_cast<int>(c)));
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    const std::string prefix = s.key + "," + std::to_string(r) + ",";
    const std::string rtok = csv_field(axis_label(p, s.rows, static_cast<int>(r)));
    for (Eigen::Index c = 0; c < m.cols(); ++c)
      out.append(prefix).append(std::to_string(c)).append(",").append(rtok).append(",").append(col_tokens[c])
          .append(",").append(csv_number(m(r, c))).append("\n");
  }
}

std::string render_csv(const Problem& p, const GradTrace& g, Lang lang) {
  const std::vector<Stage> fwd = stages_of(p, g.forward, lang), grads = grads_of(p, g, lang);
  std::size_t numbers = 0;
  for (const auto* list : {&fwd, &grads})
    for (const auto& s : *list) numbers += static_cast<std::size_t>(s.m->size());
  std::string out = "stage,row,col,row_token,col_token,value\n";
  out.reserve(out.size() + numbers * 40);
  for (const auto* list : {&fwd, &grads})
    for (const auto& s : *list) append_csv_rows(out, p, s);
  out += "dT,0,0,,," + format_number("%.17g", g.dT) + "\n";
  if (g.loss) out += "loss,0,0,,," + format_number("%.17g", *g.loss) + "\n";
  return out;
}

std::string render_json(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang,
                        const BackwardCheck* check) {
  const Trace& t = g.forward;
  Json j;
  add_run_json(j, p, t);
  j["query"] = query;
  j["scale"] = p.scale_value();
  j["scale_explicit"] = p.scale.has_value();
  if (!p.source.empty()) j["source"] = p.source;
  j["upstream"] = upstream_json(u);
  if (g.loss) j["loss"] = *g.loss;
  j["dT"] = g.dT;
  std::map<std::string, const MatrixF*> matrices;
  Json stages = Json::object(), grads = Json::object();
  for (const auto& s : stages_of(p, t, lang)) {
    stages[s.key] = nullptr;
    matrices["stages/" + s.key] = s.m;
  }
  for (const auto& s : grads_of(p, g, lang)) {
    grads[s.key] = nullptr;
    matrices["gradients/" + s.key] = s.m;
  }
  j["stages"] = std::move(stages);
  j["gradients"] = std::move(grads);
  if (check) j["check"] = backward_check_json(*check);
  j["description"] = describe_backward(p, g, u, query, lang);
  j["timings_ms"] = {{"forward", t.timings.total_ms}, {"backward", g.backward_ms}};
  return layout_json(j, matrices);
}

}  // namespace

Json report_parts::upstream_json(const Upstream& u) {
  Json up = {{"kind", upstream_kind_name(u.kind)}};
  if (u.kind == UpstreamKind::Random) up["seed"] = u.seed;
  if (u.kind == UpstreamKind::File || u.kind == UpstreamKind::Mse) up["file"] = u.file;
  return up;
}

std::string describe_backward(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const QueryFigures f = query_figures(p, g, query);
  const std::string q = token_label(p.query_tokens(), query);
  const auto key = [&](int j) { return token_label(p.key_tokens(), j); };
  std::string s;
  if (f.visible < 0) {
    s = zh ? "融合反向不保留 (n, m) 矩阵：dP 与 dlogits = P ∘ (dP − D) 按块重算后即丢弃，只留下 dQ、dK、dV、D 与 dT。要看每个键的 dlogits，请运行逐阶段反向（默认的 --variant staged）。"
           : "The fused backward keeps no (n, m) matrix: dP and dlogits = P ∘ (dP − D) are recomputed tile by tile "
             "and dropped, leaving dQ, dK, dV, D and dT. To see each key's dlogits, run the staged backward (the "
             "default --variant staged).";
  } else if (f.visible <= 1) {
    s = zh ? "查询“" + q + "”只看见一个键：无论 logits 如何，它的权重都是 1，所以该行的 dlogits 为 0，梯度不会经由分数到达它的 Q。"
           : "Query " + q + " sees one key only: its weight is 1 whatever the logits, so its row of dlogits is 0 "
                            "and no gradient reaches its Q through the scores.";
  } else if (f.flat() && f.saturated) {
    s = zh ? "查询“" + q + "”的 softmax 已饱和：fp32 中一个键的权重为 1，其余都是 0，所以 dlogits = P ∘ (dP − D) 在每个键上都是 0"
                 "（最大的键上 dP − D 为 0，其余键上 P 为 0），梯度不会经由分数到达它的 Q。温度更高或分数更小时它才会学到东西。"
           : "Query " + q + "'s softmax has saturated: one key holds weight 1 in fp32 and every other key 0, so "
                            "dlogits = P ∘ (dP − D) is 0 on every key (dP − D is 0 on the top key, P on the others) and "
                            "no gradient reaches its Q through the scores. A higher temperature, or smaller scores, "
                            "would let it learn.";
  } else if (f.flat()) {
    s = zh ? "查询“" + q + "”的 dlogits 在每个键上都是 0：它读取的每个键都有 dP − D = 0 或 P = 0，梯度不会经由分数到达它的 Q。"
           : "Query " + q + "'s dlogits are 0 on every key: each key it reads has dP − D = 0 or P = 0, so no "
                            "gradient reaches its Q through the scores.";
  } else {
    s = zh ? "对查询“" + q + "”，dlogits = P ∘ (dP − D) 衡量每个键的值与 dO 的一致程度（dP_ij = dO_i·V_j）比该行按权重的平均 D = " +
                 num(f.D) + " 高出多少：高于平均的键梯度为正，低于平均的为负。梯度下降沿梯度的反方向走，把权重移向低于平均的键——最多移向键“" +
                 key(f.up) + "”（dlogits " + num(f.up_value) + "），最多移离键“" + key(f.down) + "”（" +
                 num(f.down_value) + "）。该行之和为 0（此处 " + format_number("%.1e", f.row_sum) +
                 "）：softmax 的梯度只在键之间转移权重，不改变总和。"
           : "For query " + q + ", dlogits = P ∘ (dP − D) weighs how much each key's value agrees with dO (dP_ij = "
                               "dO_i·V_j) beyond the row's weighted average D = " +
                 num(f.D) + ": a key above the average gets a positive gradient, one below it a negative one. "
                            "Gradient descent moves against the gradient, so it shifts weight toward the keys below "
                            "the average: most toward key " +
                 key(f.up) + " (dlogits " + num(f.up_value) + "), most away from key " + key(f.down) + " (" +
                 num(f.down_value) + "). The row sums to 0 (here " + format_number("%.1e", f.row_sum) +
                 "): the softmax's gradient only moves weight between keys, it cannot change the total.";
  }
  if (u.kind == UpstreamKind::Random)
    s += zh ? "dO 是随机的：这些梯度展示计算链如何把梯度传回，而不是训练好的模型会学到什么。"
            : " dO is random: these gradients show how the chain carries a gradient back, not what a trained model "
              "would learn.";
  return s;
}

std::string render_backward(const Problem& p, const GradTrace& g, const Upstream& u, int query, Lang lang, Format f,
                            const BackwardCheck* check) {
  if (query < 0 || query >= std::max(1, p.n()))
    throw InputError(Msg::QueryRowRange, {std::to_string(query), std::to_string(p.n())});
  switch (f) {
    case Format::Text: return render_text(p, g, u, query, lang, check);
    case Format::Markdown: return render_markdown(p, g, u, query, lang, check);
    case Format::Csv: return render_csv(p, g, lang);
    case Format::Json: return render_json(p, g, u, query, lang, check);
  }
  return {};
}

}  // namespace attnlab
