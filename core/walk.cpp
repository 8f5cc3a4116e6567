// Renderings of the online-softmax walk (see walk.h): the sentence per tile, text and markdown
// tables in zh/en, and the JSON for outside tools. Nothing here computes attention: every number
// comes from the Walk that cpu/walk.cpp filled through the CPU fused kernel's update step.
#include "core/walk.h"
#include "core/walk_parts.h"

#include "core/format.h"
#include "core/messages.h"
#include "core/modify.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

namespace attnlab {
namespace {

using Json = nlohmann::ordered_json;

bool zh(Lang l) { return l == Lang::Zh; }

std::string num(double x) { return walk_number(x); }
std::string vec(const std::vector<double>& v) { return walk_vector(v); }
Json jnum(double x) { return walk_json_number(x); }
Json jvec(const std::vector<double>& v) { return walk_json_vector(v); }

std::string key_range(const WalkTile& t) {
  return t.j1 - t.j0 == 1 ? std::to_string(t.j0)
                          : std::to_string(t.j0) + "–" + std::to_string(t.j1 - 1);
}

Json walk_json(const Walk& w) {
  Json j;
  walk_json_header(w, j);
  // With score mods the kernel multiplies the modified scaled scores by 1/T (walk.h).
  const std::string s = w.explicit_scale ? "s = " + format_number("%.9g", *w.explicit_scale) : "s = 1/sqrt(d_k)";
  j["units"] = (w.score_mods ? "logits x_j = mod(q.k_j * s) * scale (" + s +
                                   ", scale = 1/T; mod: the score mods, ALiBi or the bias added, then the cap)"
                             : std::string("logits x_j = q.k_j * scale (scale = ") +
                                   (w.explicit_scale ? "s/T, " + s : std::string("1/(sqrt(d_k) T)")) + ")") +
               "; m in the same units (the kernel's max of the scores times scale); weights: exp(x_j - m) "
               "against the running m, before the division by l; alpha, l, acc, weights: the kernel's fp32";
  j["scale"] = jnum(w.scale);
  Json tiles = Json::array();
  for (const WalkTile& t : w.tiles) {
    Json o;
    walk_json_tile(t.index, t.j0, t.j1, t.skip, o);
    o["logits"] = jvec(t.logits);
    o["weights"] = jvec(t.weights);
    o["tile_max"] = t.skipped ? Json(nullptr) : jnum(t.tile_max);
    o["m"] = jnum(t.m);
    o["alpha"] = t.skipped ? Json(nullptr) : jnum(t.alpha);
    o["l"] = jnum(t.l);
    o["acc"] = jvec(t.acc);
    o["output"] = t.output.empty() ? Json(nullptr) : jvec(t.output);
    tiles.push_back(std::move(o));
  }
  j["tiles"] = std::move(tiles);
  j["output"] = jvec(w.output);
  j["values_exponent"] = w.values_exponent;
  j["staged_output"] = jvec(w.staged_output);
  j["max_abs_diff"] = jnum(w.max_abs_diff);
  j["fp64_error"] = jnum(w.fp64_error);
  j["cpu_fused_output"] = jvec(w.cpu_fused_output);
  j["cpu_fused_max_abs_diff"] = jnum(w.cpu_fused_diff);
  j["cuda_fused_output"] = w.cuda_fused_output ? jvec(*w.cuda_fused_output) : Json(nullptr);
  j["cuda_fused_max_abs_diff"] = w.cuda_fused_diff ? jnum(*w.cuda_fused_diff) : Json(nullptr);
  if (!w.cuda_fused_output) j["cuda_note"] = w.cuda_note;
  if (w.splits > 0) {
    Json sp;
    sp["count"] = w.splits;
    Json states = Json::array();
    for (const WalkSplit& st : w.split_states)
      states.push_back({{"index", st.index}, {"keys", {st.j0, st.j1}}, {"m", jnum(st.m)}, {"l", jnum(st.l)},
                        {"acc", jvec(st.acc)}});
    sp["states"] = std::move(states);
    Json merges = Json::array();
    for (const WalkMerge& mg : w.merges)
      merges.push_back({{"split", mg.index}, {"m_a", jnum(mg.m_a)}, {"m_b", jnum(mg.m_b)}, {"m", jnum(mg.m)},
                        {"a", jnum(mg.a)}, {"b", jnum(mg.b)}, {"l_a", jnum(mg.l_a)}, {"l_b", jnum(mg.l_b)},
                        {"l", jnum(mg.l)}, {"acc", jvec(mg.acc)}});
    sp["merges"] = std::move(merges);
    sp["rule"] = "m = max(m_a, m_b); a = exp(m_a - m); b = exp(m_b - m); l = a l_a + b l_b; acc = a acc_a + b acc_b";
    sp["output"] = jvec(w.split_output);
    sp["max_abs_diff_to_walk"] = jnum(w.split_max_abs_diff);
    sp["l_ulps_to_walk"] = jnum(w.split_l_ulps);
    sp["fp64_error"] = jnum(w.split_fp64_error);
    sp["values_exponent"] = w.split_values_exponent;
    j["split_kv"] = std::move(sp);
  }
  return j;
}

// `walk --split S`: each split's state, each merge with its arithmetic, the merged output against
// the one-pass walk; `bullet` starts every line ("" in text, "- " in markdown).
std::string split_lines(const Walk& w, Lang lang, const char* bullet) {
  if (w.splits == 0) return "";
  const bool z = zh(lang);
  std::string s = z ? "Split-KV：键分成 " + std::to_string(w.splits) + " 段（与 --variant decode --split " +
                          std::to_string(w.splits) + " 的切法相同），每段由解码内核算出自己的部分状态 (m, l, acc)，再按段序合并：\n\n"
                    : "Split-KV: the keys in " + count_text(w.splits, "split", "splits") + " (cut as --variant decode --split " +
                          std::to_string(w.splits) + " cuts them); the decode kernel computes each split's partial "
                          "state (m, l, acc), then merges them in split order:\n\n";
  const auto range = [](int j0, int j1) {
    return j1 - j0 == 1 ? std::to_string(j0) : std::to_string(j0) + "–" + std::to_string(j1 - 1);
  };
  for (const WalkSplit& st : w.split_states)
    s += bullet + std::string(z ? "段 " + std::to_string(st.index) + " · 键 " : "split " + std::to_string(st.index) + " · keys ") +
         range(st.j0, st.j1) + ": m " + num(st.m) + " · l " + num(st.l) + " · acc " + vec(st.acc) +
         (st.l == 0 ? (z ? "（这一段的键对该查询全部不可见：空状态）" : " (no key of the split is visible to the row: an empty state)") : "") + "\n";
  s += "\n";
  for (const WalkMerge& mg : w.merges)
    s += bullet + std::string(z ? "合并段 " + std::to_string(mg.index) + "：" : "merge split " + std::to_string(mg.index) + ": ") +
         "m = max(" + num(mg.m_a) + ", " + num(mg.m_b) + ") = " + num(mg.m) + "; a = exp(m_A − m) = " + num(mg.a) +
         ", b = exp(m_B − m) = " + num(mg.b) + "; l = a·l_A + b·l_B = " + num(mg.a) + "·" + num(mg.l_a) + " + " +
         num(mg.b) + "·" + num(mg.l_b) + " = " + num(mg.l) + "; acc = a·acc_A + b·acc_B = " + vec(mg.acc) + "\n";
  if (!w.merges.empty()) s += "\n";
  if (w.split_values_exponent > w.values_exponent) {
    const std::string e = std::to_string(w.split_values_exponent);
    s += bullet + (z ? "V 缩放（分段）：按原 V 各段的 acc 会超出 fp32，分段用 V·2^-" + e + "（2 的幂，精确）；acc 为缩放后的和，合并后的输出乘回 2^" + e
                     : "V scaled (splits): the splits' acc overflow fp32 with V as given, so they ran on V·2^-" + e +
                           " (a power of two: exact); their acc hold the scaled sums, the merged output is multiplied back by 2^" + e) +
         "\n";
  }
  s += bullet + std::string(z ? "合并后的输出 acc / l：" : "merged output acc / l: ") + vec(w.split_output) + "\n";
  s += bullet + std::string(z ? "与一遍游走的最大差：" : "max |merged − walk|: ") + format_number("%.3g", w.split_max_abs_diff) +
       (z ? "；l 相差 " : "; l differs by ") + format_number("%.3g", w.split_l_ulps) +
       (z ? " ulp（以游走的 fp32 l 计；同一个和，换了加法顺序）\n" : " ulp of the walk's fp32 l (the same sum, added in another order)\n");
  s += bullet + std::string(z ? "合并结果相对 fp64 的误差：" : "merged output against fp64: ") +
       format_number("%.3g", w.split_fp64_error) + "\n";
  return s;
}

// The per-tile table as (label, value) rows; keys first when the tile is small.
struct Row {
  std::string label, value, weight;
};

std::vector<Row> tile_rows(const Walk& w, const WalkTile& t, Lang lang) {
  std::vector<Row> rows;
  if (!t.skipped && t.j1 - t.j0 <= kWalkKeyRowsMax) {
    for (int j = t.j0; j < t.j1; ++j) {
      const std::string label = (zh(lang) ? "键 " : "key ") + std::to_string(j) + " (" +
                                (j < static_cast<int>(w.key_tokens.size()) ? w.key_tokens[j] : std::to_string(j)) + ")";
      rows.push_back({label, num(t.logits[j - t.j0]), num(t.weights[j - t.j0])});
    }
  }
  return rows;
}

std::string summary_line(const WalkTile& t, Lang lang) {
  if (t.skipped) return zh(lang) ? "（跳过：未加载）" : "(skipped: never loaded)";
  return (zh(lang) ? "块最大值 " : "tile max ") + num(t.tile_max) + " · m " + num(t.m) + " · α " +
         num(t.alpha) + " · l " + num(t.l);
}

std::string final_lines(const Walk& w, Lang lang, const char* bullet) {
  std::string s;
  auto line = [&](const std::string& a, const std::string& b) { s += bullet + a + b + "\n"; };
  if (w.values_exponent > 0) {
    const std::string e = std::to_string(w.values_exponent);
    line(zh(lang) ? "V 缩放：" : "V scaled: ",
         zh(lang) ? "acc 按原 V 会超出 fp32，游走用 V·2^-" + e + "（2 的幂，精确）；acc 为缩放后的和，输出乘回 2^" + e
                  : "acc overflows fp32 with V as given, so the walk ran on V·2^-" + e +
                        " (a power of two: exact); acc holds the scaled sums, the outputs are multiplied back by 2^" + e);
  }
  line(zh(lang) ? "最终输出（游走）：" : "final output (walk): ", vec(w.output));
  line(zh(lang) ? "分步链输出：" : "staged output: ", vec(w.staged_output));
  line(zh(lang) ? "CPU 融合内核输出：" : "CPU fused kernel output: ", vec(w.cpu_fused_output));
  if (w.cuda_fused_output)
    line(zh(lang) ? "CUDA 融合内核输出：" : "CUDA fused kernel output: ", vec(*w.cuda_fused_output));
  else
    line(zh(lang) ? "CUDA 融合内核：" : "CUDA fused kernel: ", w.cuda_note);
  line(zh(lang) ? "与分步链的最大差：" : "max |walk − staged|: ", format_number("%.3g", w.max_abs_diff));
  line(zh(lang) ? "与 CPU 融合内核的最大差：" : "max |walk − CPU fused|: ",
       format_number("%.3g", w.cpu_fused_diff));
  if (w.cuda_fused_diff)
    line(zh(lang) ? "与 CUDA 融合内核的最大差：" : "max |walk − CUDA fused|: ",
         format_number("%.3g", *w.cuda_fused_diff));
  line(zh(lang) ? "相对 fp64 的误差：" : "error against fp64: ", format_number("%.3g", w.fp64_error));
  return s;
}

std::string heading(const Walk& w, Lang lang) {
  const int count = static_cast<int>(w.tiles.size());
  if (w.score_mods) {
    const std::string scaled = w.explicit_scale ? "q·k_j·" + num(*w.explicit_scale) : std::string("q·k_j/√d_k");
    if (zh(lang))
      return "在线 softmax 游走：查询 " + std::to_string(w.query) + "（" + w.query_token + "），头 " +
             std::to_string(w.head) + "，每块 " + std::to_string(w.tile) + " 个键，共 " + std::to_string(count) +
             " 块；T = " + short_number(w.temperature) + "，掩码 " + mask_text(w.mask, w.prefix, Lang::Zh) + "；修改：" +
             w.modifications_zh + "。logit x_j = mod(" + scaled + ")/T：内核先对缩放分数做分数修改，在修改后的分数上取最大值，再乘以 1/T = " +
             num(w.scale) + "。";
    return "Online softmax walk: query " + std::to_string(w.query) + " (" + w.query_token + "), head " +
           std::to_string(w.head) + ", " + count_text(w.tile, "key", "keys") + " per tile, " +
           count_text(count, "tile", "tiles") + "; T = " + short_number(w.temperature) + ", mask " + mask_text(w.mask, w.prefix, Lang::En) +
           "; modifications: " + w.modifications + ". Logits x_j = mod(" + scaled +
           ")/T: the kernel modifies the scaled scores first, takes its max on them and multiplies by 1/T = " +
           num(w.scale) + ".";
  }
  const std::string mods = w.modifications.empty() ? std::string()
                           : zh(lang)              ? "；修改：" + w.modifications_zh
                                                   : "; modifications: " + w.modifications;
  if (zh(lang))
    return "在线 softmax 游走：查询 " + std::to_string(w.query) + "（" + w.query_token + "），头 " +
           std::to_string(w.head) + "，每块 " + std::to_string(w.tile) + " 个键，共 " +
           std::to_string(count) + " 块；T = " + short_number(w.temperature) + "，掩码 " +
           mask_text(w.mask, w.prefix, Lang::Zh) + mods + "。logit x_j = q·k_j·scale，scale = " +
           (w.explicit_scale ? "s/T（显式缩放 s = " + num(*w.explicit_scale) + "）" : std::string("1/(√d_k·T)")) + " = " +
           num(w.scale) + "；内核在原始分数上取最大值，这里的 m 换算成同样的 logit 单位。";
  return "Online softmax walk: query " + std::to_string(w.query) + " (" + w.query_token +
         "), head " + std::to_string(w.head) + ", " + count_text(w.tile, "key", "keys") + " per tile, " +
         count_text(count, "tile", "tiles") + "; T = " + short_number(w.temperature) + ", mask " +
         mask_text(w.mask, w.prefix, Lang::En) + mods + ". Logits x_j = q·k_j·scale, scale = " +
         (w.explicit_scale ? "s/T (explicit scale s = " + num(*w.explicit_scale) + ")" : std::string("1/(√d_k·T)")) + " = " +
         num(w.scale) + "; the kernel takes its max on raw scores, m is shown in the same logit units.";
}

std::string tile_sentence(const Walk& w, const WalkTile& t, int tiles, Lang lang);

std::string render_text(const Walk& w, Lang lang) {
  std::string s = walk_source_line(w, lang) + heading(w, lang) + "\n\n";
  for (std::size_t i = 0; i < w.tiles.size();) {
    const auto [t, run] = walk_entry(w.tiles, i);
    s += walk_tiles_heading(t.index, t.index + run - 1, t.j0, t.j1, lang) + "\n";
    const std::vector<Row> rows = tile_rows(w, t, lang);
    if (!rows.empty()) {
      const std::string key = zh(lang) ? "键" : "key";
      int wl = display_width(key), wv = 3;
      for (const Row& r : rows) {
        wl = std::max(wl, display_width(r.label));
        wv = std::max(wv, display_width(r.value));
      }
      s += "  " + pad_right(key, wl) + "  " + pad_left("x_j", wv) + "  exp(x_j − m)\n";
      for (const Row& r : rows) s += "  " + pad_right(r.label, wl) + "  " + pad_left(r.value, wv) + "  " + r.weight + "\n";
    }
    s += "  " + summary_line(t, lang) + "\n";
    s += "  acc " + vec(t.acc) + " · " + (zh(lang) ? "输出 " : "output ") + vec(t.output) + "\n";
    s += "  " + tile_sentence(w, t, run, lang) + "\n\n";
  }
  s += final_lines(w, lang, "");
  if (w.splits > 0) s += "\n" + split_lines(w, lang, "");
  return s;
}

std::string render_markdown(const Walk& w, Lang lang) {
  std::string s = "## " + std::string(zh(lang) ? "在线 softmax 游走" : "Online softmax walk") + "\n\n" +
                  walk_source_line(w, lang) + (w.source.empty() ? "" : "\n") + heading(w, lang) + "\n\n";
  for (std::size_t i = 0; i < w.tiles.size();) {
    const auto [t, run] = walk_entry(w.tiles, i);
    s += "### " + walk_tiles_heading(t.index, t.index + run - 1, t.j0, t.j1, lang) + "\n\n";
    const std::vector<Row> rows = tile_rows(w, t, lang);
    if (!rows.empty()) {
      s += std::string("| ") + (zh(lang) ? "键" : "key") + " | x_j | exp(x_j − m) |\n|---|---:|---:|\n";
      for (const Row& r : rows) s += "| " + r.label + " | " + r.value + " | " + r.weight + " |\n";
      s += "\n";
    }
    s += std::string("| ") + (zh(lang) ? "块最大值" : "tile max") + " | m | α | l | acc | " +
         (zh(lang) ? "输出" : "output") + " |\n|---:|---:|---:|---:|---|---|\n";
    s += "| " + (t.skipped ? std::string("—") : num(t.tile_max)) + " | " + num(t.m) + " | " +
         (t.skipped ? std::string("—") : num(t.alpha)) + " | " + num(t.l) + " | " + vec(t.acc) + " | " +
         vec(t.output) + " |\n\n";
    s += tile_sentence(w, t, run, lang) + "\n\n";
  }
  s += final_lines(w, lang, "- ");
  if (w.splits > 0) s += "\n### Split-KV\n\n" + split_lines(w, lang, "- ");
  return s;
}

}  // namespace

// A number for the tables and sentences: 4 significant digits, −∞ for -inf.
std::string walk_number(double x) {
  if (std::isnan(x)) return "—";
  if (std::isinf(x)) return x < 0 ? "−∞" : "+∞";
  std::string s = format_number("%.4g", x);
  if (s == "-0") s = "0";
  return s;
}

std::string walk_vector(const std::vector<double>& v) {
  if (v.empty()) return "—";
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i == 8 && v.size() > 10) {
      s += ", … (" + std::to_string(v.size()) + ")";
      break;
    }
    s += (i ? ", " : "") + walk_number(v[i]);
  }
  return s + "]";
}

// A number for JSON: %.9g (every float round-trips), non-finite as null.
nlohmann::ordered_json walk_json_number(double x) {
  if (!std::isfinite(x)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return std::strtod(buf, nullptr);
}

nlohmann::ordered_json walk_json_vector(const std::vector<double>& v) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (double x : v) a.push_back(walk_json_number(x));
  return a;
}

int walk_tile_count(int keys, int tile) { return tile < 1 ? 0 : (keys + tile - 1) / tile; }

int default_walk_tile(bool demo, int keys) {
  if (demo) return 2;
  return std::min(64, static_cast<int>(std::bit_floor(static_cast<unsigned>(std::max(1, keys / 4)))));
}

namespace {

// A tile's sentence; a skipped one may stand for a run of `tiles` skipped alike (t's keys theirs).
std::string tile_sentence(const Walk& w, const WalkTile& t, int tiles, Lang lang) {
  const std::string keys = key_range(t);
  if (t.skipped) {
    const bool one = t.j1 - t.j0 == 1;
    const std::string subject = walk_tiles_subject(tiles, lang), is = tiles == 1 ? " is" : " are";
    // The query as the header names it: its row and its token (a decode row's position).
    const std::string query = std::to_string(w.query) + (zh(lang) ? "（" + w.query_token + "）" : " (" + w.query_token + ")");
    if (t.skip == WalkTile::Skip::Window)
      return zh(lang) ? "键 " + keys + (one ? " 在查询 " : " 全在查询 ") + query +
                            "的窗口之外：块掩码跳过" + subject + "，从未加载，m、l 和 acc 不变。"
                      : (one ? "Key " + keys + " lies" : "Keys " + keys + " all lie") + " outside query " + query +
                            "'s window: the block mask skips " + subject + ", never loaded; m, l and acc stay.";
    if (t.skip == WalkTile::Skip::Document)
      return zh(lang) ? "键 " + keys + (one ? " 属于" : " 全属于") + "其他文档：块掩码跳过" + subject + "，从未加载，m、l 和 acc 不变。"
                      : (one ? "Key " + keys + " belongs" : "Keys " + keys + " all belong") +
                            " to other documents: the block mask skips " + subject + ", never loaded; m, l and acc stay.";
    // After the query: the causal mask's rule, or the prefix-LM's past its prefix.
    if (w.mask != MaskKind::Causal && w.prefix > 0)
      return zh(lang) ? "键 " + keys + (one ? " 在查询 " : " 全在查询 ") + query + "之后：前缀语言模型在前 " +
                            std::to_string(w.prefix) + " 个位置之后是因果的，" + subject + "从未加载，m、l 和 acc 不变。"
                      : (one ? "Key " + keys + " comes" : "Keys " + keys + " all come") + " after query " + query +
                            ": past its first " + std::to_string(w.prefix) +
                            " positions the prefix-LM is causal, so " + subject + is + " never loaded; m, l and acc stay.";
    return zh(lang) ? "键 " + keys + (one ? " 在查询 " : " 全在查询 ") + query +
                          "之后：因果掩码下" + subject + "从未加载，m、l 和 acc 不变。"
                    : (one ? "Key " + keys + " comes" : "Keys " + keys + " all come") +
                          " after query " + query +
                          ": under the causal mask " + subject + is + " never loaded; m, l and acc stay.";
  }
  const int size = t.j1 - t.j0;
  std::string masked;
  if (t.masked > 0 && t.masked < size)
    masked = zh(lang) ? "（本块 " + std::to_string(t.masked) + " 个键被掩码，权重为 0）"
                      : " (" + std::to_string(t.masked) + " of its keys masked, weight 0)";
  if (std::isinf(t.tile_max) && t.tile_max < 0) {
    if (std::isinf(t.m_prev) && t.m_prev < 0)
      return zh(lang) ? "这一块的键全被掩码，此前也没有累加任何东西：m 仍为 −∞，不做重缩放，l = 0，不会产生 NaN。"
                      : "Every key of this tile is masked and nothing has been accumulated yet: m stays "
                        "−∞, nothing is rescaled, l = 0, and no NaN appears.";
    return zh(lang) ? "这一块的键全被掩码：m = " + num(t.m) + " 不变，α = 1，l 与 acc 保持原样。"
                    : "Every key of this tile is masked: m = " + num(t.m) +
                          " stays, α = 1, l and acc are unchanged.";
  }
  if (std::isinf(t.m_prev) && t.m_prev < 0) {
    return zh(lang) ? "第一批有效的键" + masked + "：m = 块最大值 = " + num(t.m) + "，l = " + num(t.l) +
                          "；此前没有累加，所以不需要重缩放（α = 0）。"
                    : "The first keys that count" + masked + ": m = tile max = " + num(t.m) +
                          ", l = " + num(t.l) + "; nothing was accumulated before, so nothing is "
                          "rescaled (α = 0).";
  }
  if (t.tile_max > t.m_prev) {
    return zh(lang) ? "新块含有更大的 logit，" + num(t.tile_max) + " > " + num(t.m_prev) +
                          "，所以此前的 l 和 acc 都乘以 α = " + num(t.alpha) + " 重新缩放" + masked +
                          "；l = " + num(t.l) + "。"
                    : "The new tile holds a larger logit, " + num(t.tile_max) + " > " +
                          num(t.m_prev) + ", so everything so far is rescaled by α = " +
                          num(t.alpha) + masked + "; l = " + num(t.l) + ".";
  }
  return zh(lang) ? "块最大值 " + num(t.tile_max) + " ≤ m = " + num(t.m) + "：m 不变，α = " +
                        num(t.alpha) + "，本块的权重直接加入 l 和 acc" + masked + "；l = " + num(t.l) + "。"
                  : "The tile max " + num(t.tile_max) + " ≤ m = " + num(t.m) + ": m stays, α = " +
                        num(t.alpha) + ", the tile's weights are simply added to l and acc" +
                        masked + "; l = " + num(t.l) + ".";
}

}  // namespace

std::string walk_tile_sentence(const Walk& w, int index, Lang lang) { return tile_sentence(w, w.tiles.at(index), 1, lang); }

std::string walk_tiles_heading(int first, int last, int j0, int j1, Lang lang) {
  const std::string keys = j1 - j0 == 1 ? std::to_string(j0) : std::to_string(j0) + "–" + std::to_string(j1 - 1);
  if (first == last)
    return zh(lang) ? "块 " + std::to_string(first) + " · 键 " + keys : "Tile " + std::to_string(first) + " · keys " + keys;
  const std::string tiles = std::to_string(first) + "–" + std::to_string(last), n = std::to_string(last - first + 1);
  return zh(lang) ? "块 " + tiles + " · 键 " + keys + "（共 " + n + " 块）"
                  : "Tiles " + tiles + " · keys " + keys + " (" + n + " tiles)";
}

std::string walk_tiles_subject(int tiles, Lang lang) {
  if (tiles == 1) return zh(lang) ? "这一块" : "this tile";
  return zh(lang) ? "这 " + std::to_string(tiles) + " 块" : "these " + std::to_string(tiles) + " tiles";
}

std::string render_walk(const Walk& w, Lang lang, Format format) {
  switch (format) {
    case Format::Json: return walk_json(w).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
    case Format::Markdown: return render_markdown(w, lang);
    case Format::Text: return render_text(w, lang);
    case Format::Csv: break;
  }
  throw InputError(Msg::WalkFormat, {"csv"});
}

std::string walk_source_line(const WalkHeader& w, Lang lang) {
  return w.source.empty() ? std::string() : source_line(w.source, w.source_zh, lang) + "\n";
}

void walk_json_header(const WalkHeader& w, nlohmann::ordered_json& j) {
  j["query"] = w.query;
  j["head"] = w.head;
  j["tile"] = w.tile;
  j["temperature"] = w.temperature;
  j["mask"] = std::string(to_string(w.mask));
  if (!w.modifications.empty()) j["modifications"] = w.modifications;
  j["d_k"] = w.d_k;
  j["d_v"] = w.d_v;
  j["keys"] = w.keys;
  if (!w.source.empty()) j["source"] = w.source;
}

void walk_json_tile(int index, int j0, int j1, WalkTile::Skip skip, nlohmann::ordered_json& o) {
  o["index"] = index;
  o["keys"] = {j0, j1};
  o["skipped"] = skip != WalkTile::Skip::None;
  if (skip != WalkTile::Skip::None)
    o["skip_reason"] = skip == WalkTile::Skip::Window ? "window" : skip == WalkTile::Skip::Document ? "document" : "causal";
}

}  // namespace attnlab
