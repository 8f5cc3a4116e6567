// The backward walk's renderings (core/walk_backward.h): text, markdown, JSON. No arithmetic of
// attention here.
#include "core/walk_backward.h"

#include "core/format.h"
#include "core/messages.h"
#include "core/modify.h"
#include "core/report_parts.h"
#include "core/walk_parts.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace attnlab {
namespace {

using Json = nlohmann::ordered_json;

bool zh(Lang l) { return l == Lang::Zh; }
std::string num(double x) { return walk_number(x); }
std::string vec(const std::vector<double>& v) { return walk_vector(v); }

std::string skip_text(const BackwardWalk& w, WalkTile::Skip s, Lang lang) {
  switch (s) {
    case WalkTile::Skip::Window: return zh(lang) ? "在窗口之外" : "outside the window";
    case WalkTile::Skip::Document: return zh(lang) ? "属于其他文档" : "other documents' keys";
    default:
      if (w.mask != MaskKind::Causal && w.prefix > 0)
        return zh(lang) ? "在查询之后（前缀之后是因果的）" : "after the query (causal past the prefix)";
      return zh(lang) ? "在查询之后（因果）" : "after the query (causal)";
  }
}

std::string heading(const BackwardWalk& w, Lang lang) {
  const std::string count = std::to_string(w.tiles.size());
  const std::string mods = w.modifications.empty() ? std::string()
                           : zh(lang)              ? "；修改：" + w.modifications_zh
                                                   : "; modifications: " + w.modifications;
  if (zh(lang))
    return "反向游走（FlashAttention-2 的反向，按一个查询看）：查询 " + std::to_string(w.query) + "（" + w.query_token +
           "），头 " + std::to_string(w.head) + "，每块 " + std::to_string(w.tile) + " 个键，共 " + count + " 块；T = " +
           short_number(w.temperature) + "，掩码 " + mask_text(w.mask, w.prefix, Lang::Zh) + mods + "。\n" + w.upstream_zh +
           "。\n前向为该行保存了 log-sum-exp 的两部分：m = " + num(w.m) + "，l = " + num(w.l) + "（L = m + log l = " +
           num(w.lse) + "）。反向逐块由它们重算权重 P_j = exp(x_j − m) / l（前向与反向之间不保存 N×N 的 P），再算 dP_j = dO·V_j、"
           "dS_j = P_j (dP_j − D)，D = dO·O = " + num(w.D) + "，并把 dS_j K_j 累加进该行的 dQ（乘以 s/T，即缩放除以温度" +
           (w.score_mods ? "与修改的导数" : std::string()) + "）。" + (w.rope ? "dQ 在旋转后的坐标中累加，最后用 RoPEᵀ 转回。" : "");
  return "Backward walk (FlashAttention-2's backward, seen from one query): query " + std::to_string(w.query) + " (" +
         w.query_token + "), head " + std::to_string(w.head) + ", " + count_text(w.tile, "key", "keys") + " per tile, " +
         count_text(static_cast<long long>(w.tiles.size()), "tile", "tiles") + "; T = " + short_number(w.temperature) + ", mask " + mask_text(w.mask, w.prefix, Lang::En) + mods +
         ".\n" + w.upstream + ".\nThe forward kept the row's log-sum-exp in two parts: m = " + num(w.m) + ", l = " +
         num(w.l) + " (L = m + log l = " + num(w.lse) +
         "). The backward recomputes each tile's weights from them, P_j = exp(x_j − m) / l (no N×N P is kept "
         "between the passes), then dP_j = dO·V_j and dS_j = P_j (dP_j − D) with D = dO·O = " +
         num(w.D) + ", and adds dS_j K_j into the row's dQ (times s/T, the scale over the temperature" +
         (w.score_mods ? " and the modifications' derivative" : std::string()) + ")." +
         (w.rope ? " dQ accumulates in the rotated frame and is turned back by RoPEᵀ at the end." : "");
}

// A skipped tile's sentence may stand for a run of `tiles` skipped alike.
std::string tile_sentence_of(const BackwardWalk& w, const BackwardWalkTile& t, Lang lang, int tiles = 1) {
  if (t.skipped)
    return zh(lang) ? "跳过：" + skip_text(w, t.skip, lang) + "，块掩码排除了" + walk_tiles_subject(tiles, lang) +
                          "，从不加载；这些键的 dS 恰为 0。"
                    : "Skipped: " + skip_text(w, t.skip, lang) + "; the block mask rules out " +
                          walk_tiles_subject(tiles, lang) + ", never loaded, and these keys' dS is exactly 0.";
  std::string s;
  // A row that sees one key: dS is 0 in exact arithmetic (P = 1 and D = dO·O = dP of that key),
  // and what the kernel computes is rounding.
  if (t.top >= 0 && w.visible == 1) {
    const std::string ds = num(t.ds[t.top - t.j0]);
    s = zh(lang) ? "该行只看见键“" + w.key_tokens[t.top] + "”：P = 1，D = dO·O 即它的 dP，所以 dS 在精确算术中为 0；内核算出的 " + ds +
                       " 只是舍入（同样的乘积按不同顺序求和两次）。"
                 : "The row sees key " + w.key_tokens[t.top] + " only: P = 1 and D = dO·O is its dP, so its dS is 0 in "
                   "exact arithmetic; the kernel's " + ds + " is rounding (the same products summed twice, in other "
                   "orders).";
  } else if (t.top >= 0 && t.ds[t.top - t.j0] == 0) {
    s = zh(lang) ? "本块每个键的 dS 都为 0：梯度不移动其中任何 logit（权重为 0，或值与 dO 的吻合恰好等于平均 D）。"
                 : "Every dS in the tile is 0: the gradient moves none of its logits (their weights are 0, or "
                   "each value agrees with dO exactly as much as the average D).";
  } else if (t.top < 0) {
    // Loaded and masked whole: a mask file's tile, which the block mask does not rule out.
    s = zh(lang) ? "本块每个键都被掩码（块掩码没有排除它，仍被加载）：P = 0，所以这些键的 dS 恰为 0。"
                 : "Every key of the tile is masked (loaded: the block mask does not rule it out): P = 0, so "
                   "these keys' dS is exactly 0.";
  } else {
    const double ds = t.ds[t.top - t.j0];
    const std::string key = w.key_tokens[t.top];
    s = zh(lang) ? "本块 |dS| 最大的是键“" + key + "”（dS " + num(ds) + "）：" +
                       (ds > 0 ? "它的值比平均 D 更符合 dO，梯度下降会降低它的 logit。"
                               : "它的值不如平均 D 符合 dO，梯度下降会提高它的 logit。")
                 : "The tile's largest |dS| is key " + key + " (dS " + num(ds) + "): " +
                       (ds > 0 ? "its value agrees with dO more than the average D, so gradient descent lowers its logit."
                               : "its value agrees with dO less than the average D, so gradient descent raises its logit.");
  }
  s += zh(lang) ? "到此为止 Σ dS = " + num(t.ds_sum) + "。" : " Σ dS so far = " + num(t.ds_sum) + ".";  // no space after 。
  return s;
}

struct KeyRow {
  std::string key, x, p, dp, ds;
};

std::vector<KeyRow> key_rows(const BackwardWalk& w, const BackwardWalkTile& t) {
  std::vector<KeyRow> rows;
  if (t.skipped || t.j1 - t.j0 > kWalkKeyRowsMax) return rows;
  for (int j = t.j0; j < t.j1; ++j) {
    const int i = j - t.j0;
    rows.push_back({w.key_tokens[j], num(t.logits[i]), num(t.p[i]), num(t.dp[i]), num(t.ds[i])});
  }
  return rows;
}

std::string final_lines(const BackwardWalk& w, Lang lang, const char* bullet) {
  std::string s;
  const auto line = [&](const std::string& a, const std::string& b) { s += bullet + a + b + "\n"; };
  const double sum = w.tiles.empty() ? 0 : w.tiles.back().ds_sum;
  line(zh(lang) ? "Σ_j dS（精确算术中为 0：Σ P·dP = D）：" : "Σ_j dS (0 in exact arithmetic: Σ P·dP = D): ",
       format_number("%.2e", sum));
  line(zh(lang) ? "最终 dQ（游走）：" : "final dQ (walk): ", vec(w.dq));
  line(zh(lang) ? "CPU 融合反向的 dQ：" : "CPU fused backward's dQ: ", vec(w.fused_dq));
  line(zh(lang) ? "与融合反向的最大差：" : "max |walk − fused backward|: ", format_number("%.3g", w.fused_diff));
  line(zh(lang) ? "fp64 反向的 dQ：" : "fp64 backward's dQ: ", vec(w.fp64_dq));
  line(zh(lang) ? "相对 fp64 的误差：" : "error against fp64: ", format_number("%.3g", w.fp64_error));
  if (w.fp64_error_reaches_scale())
    s += std::string(bullet) + (zh(lang) ? "警告：误差达到 fp64 梯度的最大元素，这一行的 fp32 dQ 没有一位有效数字：在这个温度下，fp32 的"
                    "舍入乘以缩放与温度之比 s/T 后超过了梯度本身（fp32 融合反向算出的也是它）。\n"
                  : "warning: the error reaches the fp64 gradient's largest entry, so not one digit of this row's "
                    "fp32 dQ is right: at this temperature fp32's rounding, multiplied by the scale over the temperature s/T, "
                    "outweighs the gradient itself (the fp32 fused backward computes the same).\n");
  return s;
}

std::string render_text(const BackwardWalk& w, Lang lang) {
  std::string s = walk_source_line(w, lang) + heading(w, lang) + "\n\n";
  for (std::size_t i = 0; i < w.tiles.size();) {
    const auto [t, run] = walk_entry(w.tiles, i);
    s += walk_tiles_heading(t.index, t.index + run - 1, t.j0, t.j1, lang) + "\n";
    const std::vector<KeyRow> rows = key_rows(w, t);
    if (!rows.empty()) {
      int wk = display_width(zh(lang) ? "键" : "key"), wn = 9;
      for (const KeyRow& r : rows) {
        wk = std::max(wk, display_width(r.key));
        for (const std::string* v : {&r.x, &r.p, &r.dp, &r.ds}) wn = std::max(wn, display_width(*v));
      }
      s += "  " + pad_right(zh(lang) ? "键" : "key", wk) + "  " + pad_left("x_j", wn) + "  " + pad_left("P_j", wn) + "  " +
           pad_left("dP_j", wn) + "  " + pad_left("dS_j", wn) + "\n";
      for (const KeyRow& r : rows)
        s += "  " + pad_right(r.key, wk) + "  " + pad_left(r.x, wn) + "  " + pad_left(r.p, wn) + "  " +
             pad_left(r.dp, wn) + "  " + pad_left(r.ds, wn) + "\n";
    }
    if (!t.skipped) s += "  dQ " + vec(t.dq) + "\n";
    s += "  " + tile_sentence_of(w, t, lang, run) + "\n\n";
  }
  return s + final_lines(w, lang, "");
}

std::string render_markdown(const BackwardWalk& w, Lang lang) {
  std::string s = "## " + std::string(zh(lang) ? "反向游走" : "Backward walk") + "\n\n" + walk_source_line(w, lang) +
                  (w.source.empty() ? "" : "\n") + heading(w, lang) + "\n\n";
  for (std::size_t i = 0; i < w.tiles.size();) {
    const auto [t, run] = walk_entry(w.tiles, i);
    s += "### " + walk_tiles_heading(t.index, t.index + run - 1, t.j0, t.j1, lang) + "\n\n";
    const std::vector<KeyRow> rows = key_rows(w, t);
    if (!rows.empty()) {
      s += std::string("| ") + (zh(lang) ? "键" : "key") + " | x_j | P_j | dP_j | dS_j |\n|---|---:|---:|---:|---:|\n";
      for (const KeyRow& r : rows) s += "| " + r.key + " | " + r.x + " | " + r.p + " | " + r.dp + " | " + r.ds + " |\n";
      s += "\n";
    }
    if (!t.skipped) s += "dQ " + vec(t.dq) + "\n\n";
    s += tile_sentence_of(w, t, lang, run) + "\n\n";
  }
  return s + final_lines(w, lang, "- ");
}

Json render_json(const BackwardWalk& w) {
  Json j;
  j["pass"] = "backward";
  walk_json_header(w, j);
  j["scale"] = walk_json_number(w.scale);
  j["upstream"] = report_parts::upstream_json(w.dout_source);  // as backward's JSON names it
  j["units"] = "logits x_j = s_j * scale; m in logit units; P_j = exp(x_j - m) / l; dS_j = P_j (dP_j - D)";
  j["m"] = walk_json_number(w.m);
  j["l"] = walk_json_number(w.l);
  j["lse"] = walk_json_number(w.lse);
  j["D"] = walk_json_number(w.D);
  j["dout"] = walk_json_vector(w.dout);
  Json tiles = Json::array();
  for (const BackwardWalkTile& t : w.tiles) {
    Json o;
    walk_json_tile(t.index, t.j0, t.j1, t.skip, o);
    o["logits"] = walk_json_vector(t.logits);
    o["p"] = walk_json_vector(t.p);
    o["dp"] = walk_json_vector(t.dp);
    o["ds"] = walk_json_vector(t.ds);
    o["ds_sum"] = walk_json_number(t.ds_sum);
    o["dq"] = walk_json_vector(t.dq);
    tiles.push_back(std::move(o));
  }
  j["tiles"] = std::move(tiles);
  j["dq"] = walk_json_vector(w.dq);
  j["fused_dq"] = walk_json_vector(w.fused_dq);
  j["fused_max_abs_diff"] = walk_json_number(w.fused_diff);
  j["fp64_dq"] = walk_json_vector(w.fp64_dq);
  j["fp64_error"] = walk_json_number(w.fp64_error);
  j["fp64_error_reaches_scale"] = w.fp64_error_reaches_scale();
  return j;
}

}  // namespace

bool BackwardWalk::fp64_error_reaches_scale() const {
  if (fp64_dq.empty() || !(fp64_error > 0)) return false;
  double scale = 0;
  for (double x : fp64_dq) scale = std::max(scale, std::fabs(x));
  return fp64_error >= scale;
}

std::string backward_walk_tile_sentence(const BackwardWalk& w, int t, Lang lang) {
  return tile_sentence_of(w, w.tiles.at(t), lang);
}

std::string render_backward_walk(const BackwardWalk& w, Lang lang, Format format) {
  switch (format) {
    case Format::Text: return render_text(w, lang);
    case Format::Markdown: return render_markdown(w, lang);
    case Format::Json: return render_json(w).dump(1) + "\n";
    case Format::Csv: break;
  }
  throw InputError(Msg::WalkFormat, {"csv"});
}

}  // namespace attnlab
