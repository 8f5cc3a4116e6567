// Renderings of a finished run (Problem + Trace) for people and tools; nothing here computes
// attention, everything is read from the Trace.
//   text      the page's layout: every stage as a labelled table (2 decimals, −∞ for masked
//             entries), columns aligned by terminal display width (CJK = 2 columns), then the
//             selected row's statistics, the description and the caveat
//   markdown  the same tables and figures as GitHub markdown
//   csv       long form `stage,row,col,row_token,col_token,value`, every entry, %.9g, -inf
//   json      issue 2's schema (nlohmann::ordered_json, keys in the documented order), numbers
//             at float precision (9 significant digits round-trip a float), -inf as null
// Text and markdown summarise large problems (n or m > 12: first and last rows/columns plus the
// selected query) and show head 0 of a multi-head problem; JSON and CSV are always complete.
#include "core/report.h"
#include "core/report_parts.h"

#include "core/modify.h"

#include "core/format.h"
#include "core/messages.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab {
namespace report_parts {

// ---- numbers ------------------------------------------------------------------------------

// %.9g round-trips every float; the double parsed back from it prints (shortest round-trip in
// nlohmann's dump) with at most 9 significant digits instead of the 17 of the raw widening.
double float_for_json(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return std::strtod(buf, nullptr);
}

std::string csv_number(float x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return buf;
}

// ---- the stages ---------------------------------------------------------------------------

std::vector<Stage> stages_of(const Problem& p, const Trace& t, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const std::string dk = std::to_string(p.d_k());
  const std::string temp = short_number(p.temperature);
  const std::string sc = p.scale ? format_number("%.6g", *p.scale) : std::string();
  const std::string theta = short_number(p.mods.rope_theta), cap = short_number(p.mods.softcap);
  const bool bias = p.bias().size() > 0;
  const std::string biased = p.mods.alibi && bias ? (zh ? "加上 ALiBi 与偏置后的分数" : "scores with ALiBi and the bias added")
                             : p.mods.alibi       ? (zh ? "加上 ALiBi 后的分数" : "scores with ALiBi added")
                                                  : (zh ? "加上偏置后的分数" : "scores with the bias added");
  // What the logits divide: the last of the scaled, biased and capped scores the problem has.
  const std::string into = p.mods.softcap > 0           ? (zh ? "软上限后的分数" : "soft-capped scores")
                           : p.mods.alibi || bias ? biased
                                                  : (zh ? "缩放分数" : "scaled scores");
  std::vector<Stage> all = {
      {"q", zh ? "Q（查询）" : "Q (queries)", &p.q(), Axis::Query, Axis::Feature},
      {"k", zh ? "K（键）" : "K (keys)", &p.k(), Axis::Key, Axis::Feature},
      {"v", zh ? "V（值）" : "V (values)", &p.v(), Axis::Key, Axis::Feature},
      {"q_rot", zh ? "RoPE 旋转后的 Q（θ=" + theta + "）" : "Q rotated by RoPE (θ=" + theta + ")", &t.q_rot,
       Axis::Query, Axis::Feature},
      {"k_rot", zh ? "RoPE 旋转后的 K" : "K rotated by RoPE", &t.k_rot, Axis::Key, Axis::Feature},
      {"scores", zh ? "QKᵀ（原始分数）" : "QKᵀ (raw scores)", &t.scores, Axis::Query, Axis::Key},
      {"scaled",
       p.scale ? (zh ? "QKᵀ × " + sc + "（缩放分数，显式缩放 " + sc + "，d_k=" + dk + "）"
                     : "QKᵀ × " + sc + " (scaled scores, explicit scale " + sc + ", d_k=" + dk + ")")
       : zh ? "QKᵀ / √d_k（缩放分数，d_k=" + dk + "）" : "QKᵀ / √d_k (scaled scores, d_k=" + dk + ")",
       &t.scaled, Axis::Query, Axis::Key},
      {"biased", biased, &t.biased, Axis::Query, Axis::Key},
      {"capped", zh ? "软上限 C·tanh(s/C)，C=" + cap : "soft-capped C·tanh(s/C), C=" + cap, &t.capped, Axis::Query,
       Axis::Key},
      {"mask", zh ? "Mask（0 保留，−∞ 屏蔽）" : "Mask (0 keeps, −∞ blocks)", &t.mask, Axis::Query,
       Axis::Key},
      {"logits",
       zh ? "Mask 后 logits（(" + into + " + mask) / 温度，T=" + temp + "）"
          : "Masked logits ((" + into + " + mask) / temperature, T=" + temp + ")",
       &t.logits, Axis::Query, Axis::Key},
      {"weights", zh ? "softmax（注意力权重）" : "softmax (attention weights)", &t.weights,
       Axis::Query, Axis::Key},
      {"output",
       zh ? "Output = softmax(...)V（加权输出）" : "Output = softmax(...)V (weighted output)",
       &t.output, Axis::Query, Axis::Feature},
  };
  // A fused run (or one with keep_stages off) leaves the N x N stages empty: show what exists.
  std::vector<Stage> present;
  for (auto& s : all)
    if (s.m->size() > 0) present.push_back(s);
  return present;
}

std::string axis_label(const Problem& p, Axis a, int i) {
  switch (a) {
    case Axis::Query: return token_label(p.query_tokens(), i % std::max(1, p.n()));
    case Axis::Key: return token_label(p.key_tokens(), i % std::max(1, p.m()));
    case Axis::Feature: return std::to_string(i + 1);
  }
  return {};
}

// Indices shown when summarising `count` entries; -1 marks a gap ("…"). `keep` (the selected
// query) stays visible even when it falls into the gap.
std::vector<int> shown_indices(int count, int keep) {
  std::vector<int> idx;
  if (count <= kMaxShown) {
    for (int i = 0; i < count; ++i) idx.push_back(i);
    return idx;
  }
  std::vector<int> want;
  for (int i = 0; i < kEdge; ++i) want.push_back(i);
  if (keep >= kEdge && keep < count - kEdge) want.push_back(keep);
  for (int i = count - kEdge; i < count; ++i) want.push_back(i);
  int prev = -1;
  for (int i : want) {
    if (prev >= 0 && i != prev + 1) idx.push_back(-1);
    idx.push_back(i);
    prev = i;
  }
  return idx;
}

// Rows of head 0 that a stage has: query stages n, key stages m.
int head_rows(const Problem& p, const Stage& s) {
  return s.rows == Axis::Query ? p.n() : p.m();
}


int table_exponent(const Problem& p, const Stage& s, int query, double below) {
  const int rows = std::min<int>(head_rows(p, s), static_cast<int>(s.m->rows()));
  double mx = 0;
  for (int r : shown_indices(rows, s.rows == Axis::Query ? query : -1))
    for (int c : shown_indices(static_cast<int>(s.m->cols())))
      if (r >= 0 && c >= 0 && std::isfinite((*s.m)(r, c))) mx = std::max(mx, std::abs(static_cast<double>((*s.m)(r, c))));
  if (mx == 0 || mx >= below) return 0;
  return static_cast<int>(std::floor(std::log10(mx)));
}

std::string unit_suffix(int exponent, Lang lang) {
  if (exponent == 0) return "";
  const std::string u = "1e" + std::to_string(exponent);
  return lang == Lang::Zh ? "  [数值 × " + u + "]" : "  [values × " + u + "]";
}

Grid grid_of(const Problem& p, const Stage& s, int query, bool mark_query, double unit) {
  Grid g;
  const int rows = std::min<int>(head_rows(p, s), static_cast<int>(s.m->rows()));
  const int cols = static_cast<int>(s.m->cols());
  const bool query_rows = s.rows == Axis::Query;
  const auto ri = shown_indices(rows, query_rows ? query : -1);
  const auto ci = shown_indices(cols);
  g.header.push_back("token");
  for (int c : ci) g.header.push_back(c < 0 ? "…" : axis_label(p, s.cols, c));
  for (int r : ri) {
    std::vector<std::string> row;
    if (r < 0) {
      row.push_back("…");
      for (std::size_t k = 0; k < ci.size(); ++k) row.push_back("…");
    } else {
      std::string lab = axis_label(p, s.rows, r);
      if (query_rows && r == query) g.marked = static_cast<int>(g.cells.size());
      if (mark_query) lab = (query_rows && r == query ? "> " : "  ") + lab;
      row.push_back(lab);
      for (int c : ci) row.push_back(c < 0 ? "…" : table_value(static_cast<float>((*s.m)(r, c) / unit)));
    }
    g.cells.push_back(std::move(row));
  }
  return g;
}

std::string text_table(const Grid& g) {
  std::vector<int> width(g.header.size(), 0);
  for (std::size_t c = 0; c < g.header.size(); ++c) width[c] = display_width(g.header[c]);
  for (const auto& row : g.cells)
    for (std::size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], display_width(row[c]));
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l = pad_right(cells[0], width[0]);
    for (std::size_t c = 1; c < cells.size(); ++c) {
      l += "  ";
      l += pad_left(cells[c], width[c]);
    }
    out += l + "\n";
  };
  line(g.header);
  for (const auto& row : g.cells) line(row);
  return out;
}

// Markdown's inline marks in a label or a title taken as text: \ * ` | < [ ] always, _ where it
// could open or close emphasis (not inside a word: d_k stays as it is).
std::string md_escape(const std::string& s) {
  const auto word = [&](std::size_t i) {
    return i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || static_cast<unsigned char>(s[i]) >= 0x80);
  };
  std::string o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const bool inside = ch == '_' && i > 0 && word(i - 1) && word(i + 1);
    if (std::string_view("\\*`|<[]").find(ch) != std::string_view::npos || (ch == '_' && !inside)) o += '\\';
    o += ch;
  }
  return o;
}

std::string markdown_table(const Grid& g) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on `"literal" + std::string&&`.
  auto cell = [](std::string& out, const std::string& s, bool bold = false) {
    out += bold ? " **" : " ";
    out += md_escape(s);
    out += bold ? "** |" : " |";
  };
  std::string out = "|";
  for (const auto& h : g.header) cell(out, h);
  out += "\n|---|";
  for (std::size_t c = 1; c < g.header.size(); ++c) out += "---:|";
  out += "\n";
  for (std::size_t r = 0; r < g.cells.size(); ++r) {
    out += "|";
    for (std::size_t c = 0; c < g.cells[r].size(); ++c) {
      cell(out, g.cells[r][c], c == 0 && static_cast<int>(r) == g.marked);
    }
    out += "\n";
  }
  return out;
}

bool has_weights(const Problem& p, const Trace& t, int query) {
  return t.weights.rows() > query && t.weights.cols() == p.m();
}

// The header lines before the tables: what problem this is and which backend ran.
std::vector<std::string> intro_lines(const Problem& p, const Trace& t, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const std::string dk = std::to_string(p.d_k());
  std::vector<std::string> l;
  if (!p.source.empty()) l.push_back(source_line(p.source, p.source_zh, lang));
  if (p.scale)
    l.push_back(zh ? "Q 与 K 的特征维数 d_k=" + dk + "；缩放是显式的 " + format_number("%.6g", *p.scale) +
                         "（不是 1/√d_k），再由温度调整 softmax 锐度。V 决定加权输出的内容。"
                   : "Q and K have feature dimension d_k=" + dk + "; the scaling is an explicit " +
                         format_number("%.6g", *p.scale) +
                         " (not 1/√d_k), then the temperature sets the softmax's sharpness. V "
                         "decides the content of the weighted output.");
  else
  l.push_back(zh ? "Q 与 K 的特征维数 d_k=" + dk +
                       "；标准缩放先除以 √d_k，再由温度调整 softmax 锐度。V 决定加权输出的内容。"
                 : "Q and K have feature dimension d_k=" + dk +
                       "; the standard scaling divides by √d_k, then the temperature sets the "
                       "softmax's sharpness. V decides the content of the weighted output.");
  std::string seq;
  if (!p.sentence.empty())
    seq = zh ? "序列“" + p.sentence + "”，" : "Sequence " + p.sentence + ", ";
  const std::string mask = mask_text(p.mask, p.mods.prefix, Lang::En);
  const std::string mask_zh = mask_text(p.mask, p.mods.prefix, Lang::Zh);
  l.push_back(zh ? seq + "n=" + std::to_string(p.n()) + " 个查询，m=" + std::to_string(p.m()) +
                       " 个键，d_v=" + std::to_string(p.d_v()) + "；当前查询“" +
                       token_label(p.query_tokens(), query) + "”（行 " + std::to_string(query) +
                       "）；温度 T=" + short_number(p.temperature) + "；掩码：" + mask_zh
                 : seq + "n=" + count_text(p.n(), "query", "queries") + ", m=" + count_text(p.m(), "key", "keys") +
                       ", d_v=" + std::to_string(p.d_v()) + "; query " +
                       token_label(p.query_tokens(), query) + " (row " + std::to_string(query) +
                       "); temperature T=" + short_number(p.temperature) + "; mask: " + mask);
  if (has_modifications(p)) l.push_back((zh ? "修改：" : "modifications: ") + modifications_text(p, lang));
  l.push_back((zh ? "后端：" : "backend: ") + t.backend + " · " + std::string(to_string(t.variant)) +
              " · " + std::string(to_string(t.precision)) + " · " + fixed(t.timings.total_ms, 3) +
              " ms" +
              (t.splits > 0 ? (zh ? " · 键分成 " + std::to_string(t.splits) + " 段"
                                  : " · keys in " + count_text(t.splits, "split", "splits"))
                            : ""));
  if (p.heads > 1)
    l.push_back(zh ? "共 " + std::to_string(p.heads) + " 个头" +
                         (p.kv_heads() != p.heads ? "（共享 " + std::to_string(p.kv_heads()) + " 个键/值头）" : "") +
                         "；表格只显示第 0 个头，JSON/CSV 输出包含全部。"
                   : std::to_string(p.heads) + " heads" +
                         (p.kv_heads() != p.heads
                              ? " (sharing " + count_text(p.kv_heads(), "key/value head", "key/value heads") + ")"
                              : "") +
                         "; the tables show head 0 only, JSON/CSV output holds every head.");
  if (p.n() > kMaxShown || p.m() > kMaxShown || p.d_k() > kMaxShown || p.d_v() > kMaxShown)
    l.push_back(zh ? "矩阵较大：表格只显示首尾的行和列（… 表示省略），--format json 或 csv 给出全部数值。"
                   : "Large matrices: the tables show the first and last rows and columns (… marks "
                     "the gap); --format json or csv gives every value.");
  if (!has_weights(p, t, query))
    l.push_back(zh ? "这次运行（fused、decode 或未保留中间阶段）没有物化 N×N 矩阵，只给出输出；"
                     "用 --variant staged 查看全部阶段。"
                   : "This run (fused, decode, or stages not kept) did not materialise the N×N matrices "
                     "and gives only the output; use --variant staged to see every stage.");
  return l;
}

}  // namespace report_parts

using namespace report_parts;

namespace {

struct StatLine {
  std::string name, value;
};

std::vector<StatLine> stat_lines(const Problem& p, const Trace& t, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const RowStats s = row_stats(t, query);
  const std::string dk = std::to_string(p.d_k());
  char scale[64];
  if (p.scale)
    std::snprintf(scale, sizeof scale, "%.6g", *p.scale);
  else
    std::snprintf(scale, sizeof scale, "1/√%s = %.3f", dk.c_str(), 1.0 / std::sqrt(p.d_k()));
  const std::string shape = std::to_string(p.n()) + "×" + std::to_string(p.d_v());
  const std::string atok = token_label(p.key_tokens(), s.argmax);
  return {
      {zh ? "最大权重" : "max weight",
       percent_text(s.max_weight) + "%" + (zh ? "（“" + atok + "”）" : " (" + atok + ")")},
      {zh ? "熵" : "entropy", fixed(s.entropy, 3) + (zh ? "（自然对数）" : " (natural log)")},
      {zh ? "有效位置" : "effective positions",
       std::to_string(s.unmasked) + (zh ? "（未屏蔽的键）" : " (unmasked keys)")},
      {zh ? "困惑度 e^H" : "perplexity e^H", fixed(s.perplexity, 3)},
      {zh ? "权重和" : "weight sum", fixed(s.weight_sum, 6)},
      {zh ? "缩放" : "scale", scale},
      {zh ? "输出维度" : "output shape",
       p.heads > 1 ? std::to_string(p.heads) + "×" + shape : shape},
  };
}

std::string stats_title(const Problem& p, int query, Lang lang) {
  return lang == Lang::Zh ? "查询“" + token_label(p.query_tokens(), query) + "”（行 " +
                                std::to_string(query) + "）的统计"
                          : "Statistics of query " + token_label(p.query_tokens(), query) + " (row " +
                                std::to_string(query) + ")";
}

// ---- the four formats ---------------------------------------------------------------------

std::string render_text(const Problem& p, const Trace& t, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  std::string out = zh ? "完整计算流程\n" : "Full computation chain\n";
  for (const auto& l : intro_lines(p, t, query, lang)) out += l + "\n";
  for (const auto& s : stages_of(p, t, lang)) {
    const int e = table_exponent(p, s, query, kSmallForward);
    out += "\n" + s.title + unit_suffix(e, lang) + "\n";
    out += text_table(grid_of(p, s, query, true, std::pow(10.0, e)));
  }
  if (has_weights(p, t, query)) {
    out += "\n" + stats_title(p, query, lang) + "\n";
    const auto stats = stat_lines(p, t, query, lang);
    int w = 0;
    for (const auto& st : stats) w = std::max(w, display_width(st.name));
    for (const auto& st : stats) out += pad_right(st.name + (zh ? "：" : ":"), w + 2) + " " + st.value + "\n";
  }
  out += zh ? "\n读取当前图形说明\n" : "\nDescription of the current picture\n";
  out += describe(p, t, query, lang) + "\n";
  out += (zh ? "\n说明：" : "\nCaveat: ") + caveat(lang) + "\n";
  return out;
}

std::string render_markdown(const Problem& p, const Trace& t, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  std::string out = zh ? "## 完整计算流程\n\n" : "## Full computation chain\n\n";
  // Every text that can hold a label (a token, a file's name) is escaped: a label "*e*" is no italics.
  for (const auto& l : intro_lines(p, t, query, lang)) out += md_escape(l) + "  \n";
  for (const auto& s : stages_of(p, t, lang)) {
    const int e = table_exponent(p, s, query, kSmallForward);
    out += "\n### " + md_escape(s.title + unit_suffix(e, lang)) + "\n\n";
    out += markdown_table(grid_of(p, s, query, false, std::pow(10.0, e)));
  }
  if (has_weights(p, t, query)) {
    out += "\n### " + md_escape(stats_title(p, query, lang)) + "\n\n";
    for (const auto& st : stat_lines(p, t, query, lang))
      out += "- **" + st.name + "**: " + md_escape(st.value) + "\n";
  }
  out += zh ? "\n### 读取当前图形说明\n\n" : "\n### Description of the current picture\n\n";
  out += md_escape(describe(p, t, query, lang)) + "\n\n> " + caveat(lang) + "\n";
  return out;
}


// Every number of every stage, one per line. Appended piece by piece into one string reserved up
// front: no temporary per number, and no doubling of a string that grows to hundreds of MB.
std::string render_csv(const Problem& p, const Trace& t, Lang lang) {
  const std::vector<Stage> stages = stages_of(p, t, lang);
  std::size_t numbers = 0;
  for (const auto& s : stages) numbers += static_cast<std::size_t>(s.m->size());
  std::string out = "stage,row,col,row_token,col_token,value\n";
  out.reserve(out.size() + numbers * 40);
  for (const auto& s : stages) {
    const MatrixF& m = *s.m;
    std::vector<std::string> col_tokens(m.cols());
    for (Eigen::Index c = 0; c < m.cols(); ++c)
      col_tokens[c] = s.cols == Axis::Feature ? "" : csv_field(axis_label(p, s.cols, c));
    for (Eigen::Index r = 0; r < m.rows(); ++r) {
      const std::string prefix = s.key + "," + std::to_string(r) + ",";
      const std::string rtok = csv_field(axis_label(p, s.rows, static_cast<int>(r)));
      for (Eigen::Index c = 0; c < m.cols(); ++c) {
        out.append(prefix).append(std::to_string(c)).append(",").append(rtok).append(",");
        out.append(col_tokens[c]).append(",").append(csv_number(m(r, c))).append("\n");
      }
    }
  }
  return out;
}

}  // namespace

namespace report_parts {

// Row r of m as nlohmann dumps an array of float_for_json values (null for -inf, a masked entry;
// nothing else non-finite reaches a valid trace), written straight into `out`: a tree of every
// number of every stage cost about 70 bytes per number.
void append_json_row(std::string& out, const MatrixF& m, Eigen::Index r) {
  out += '[';
  for (Eigen::Index c = 0; c < m.cols(); ++c) {
    if (c) out += ',';
    const float x = m(r, c);
    out += std::isfinite(x) ? Json(float_for_json(x)).dump() : "null";
  }
  out += ']';
}

// One top-level key per line, one matrix row (or one statistics row) per line: readable by a
// person, still one json.loads away for a tool. An entry "<key>/<name>" of `matrices` fills the
// placeholder `name` of the top-level object `key` (its entries fix the order), row by row.
std::string layout_json(const Json& j, const std::map<std::string, const MatrixF*>& matrices) {
  auto dump = [](const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); };
  std::string out = "{\n";
  bool first_key = true;
  for (const auto& [key, value] : j.items()) {
    out += first_key ? "" : ",\n";
    first_key = false;
    out.append(" ").append(dump(Json(key))).append(": ");
    bool has_matrix = false;
    if (value.is_object())
      for (const auto& [sk, sv] : value.items()) has_matrix = has_matrix || matrices.count(key + "/" + sk) > 0;
    if (has_matrix || key == "rows") {
      const bool obj = value.is_object();
      out += obj ? "{" : "[";
      bool first = true;
      for (const auto& [sk, sv] : value.items()) {
        out += first ? "\n" : ",\n";
        first = false;
        out += "  ";
        const auto it = obj ? matrices.find(key + "/" + sk) : matrices.end();
        if (obj) out += dump(Json(sk)) + ": ";
        if (it != matrices.end()) {
          out += "[";
          const MatrixF& m = *it->second;
          for (Eigen::Index r = 0; r < m.rows(); ++r) {
            out += r ? ",\n   " : "\n   ";
            append_json_row(out, m, r);
          }
          out += "]";
        } else {
          out += dump(sv);
        }
      }
      out += first ? "" : "\n ";
      out += obj ? "}" : "]";
    } else {
      out += dump(value);
    }
  }
  return out + "\n}\n";
}

void add_mods_json(Json& j, const Problem& p) {
  if (!has_modifications(p)) return;
  j["modifications"] = modifications_text(p, Lang::En);
  Json mods = Json::object();
  if (p.mods.rope_theta > 0) mods["rope_theta"] = p.mods.rope_theta;
  if (p.mods.alibi) mods["alibi_slopes"] = alibi_slopes(p);
  if (p.bias().size() > 0) {
    mods["bias"] = {{"file", p.mods.bias_name}, {"per_head", p.mods.bias_head >= 0 || p.bias().rows() != p.n()}};
    if (p.mods.bias_head >= 0) mods["bias"]["head"] = p.mods.bias_head;  // this head's rows of the file
  }
  if (p.mods.softcap > 0) mods["softcap"] = p.mods.softcap;
  if (p.mods.window > 0) mods["window"] = p.mods.window;
  if (!p.documents().empty()) mods["documents"] = {{"file", p.mods.documents_name}, {"positions", p.documents().size()}};
  if (p.mods.prefix > 0) mods["prefix"] = p.mods.prefix;
  j["mods"] = std::move(mods);
}

void add_run_json(Json& j, const Problem& p, const Trace& t) {
  j["tokens"] = p.query_tokens();
  j["key_tokens"] = p.key_tokens();
  j["d_k"] = p.d_k();
  j["d_v"] = p.d_v();
  j["temperature"] = p.temperature;
  j["mask"] = std::string(to_string(p.mask));
  add_mods_json(j, p);
  j["backend"] = t.backend;
  j["precision"] = std::string(to_string(t.precision));
  j["variant"] = std::string(to_string(t.variant));
  j["heads"] = p.heads;
  j["kv_heads"] = p.kv_heads();
}

}  // namespace report_parts

namespace {

std::string render_json(const Problem& p, const Trace& t, int query, Lang lang) {
  Json j;
  add_run_json(j, p, t);
  if (t.splits > 0) j["splits"] = t.splits;
  j["query"] = query;
  Json stages = Json::object();
  std::map<std::string, const MatrixF*> matrices;
  for (const auto& s : stages_of(p, t, lang)) {
    stages[s.key] = nullptr;
    matrices["stages/" + s.key] = s.m;
  }
  j["stages"] = std::move(stages);
  Json rows = Json::array();
  if (t.weights.size() > 0 && t.weights.cols() == p.m()) {
    for (Eigen::Index r = 0; r < t.weights.rows(); ++r) {
      const RowStats s = row_stats(t, static_cast<int>(r));
      Json row;
      row["token"] = axis_label(p, Axis::Query, static_cast<int>(r));
      row["max_weight"] = s.max_weight;
      row["argmax"] = s.argmax;
      row["entropy"] = s.entropy;
      row["unmasked"] = s.unmasked;
      row["perplexity"] = s.perplexity;
      row["weight_sum"] = s.weight_sum;
      rows.push_back(std::move(row));
    }
  }
  j["rows"] = std::move(rows);
  j["description"] = describe(p, t, query, lang);
  j["variant"] = std::string(to_string(t.variant));
  j["heads"] = p.heads;
  j["scale"] = p.scale_value();
  j["scale_explicit"] = p.scale.has_value();
  if (!p.source.empty()) j["source"] = p.source;
  j["timings_ms"] = {{"upload", t.timings.upload_ms},     {"qk", t.timings.qk_ms},
                     {"scale_mask", t.timings.scale_mask_ms}, {"softmax", t.timings.softmax_ms},
                     {"pv", t.timings.pv_ms},             {"fused", t.timings.fused_ms},
                     {"download", t.timings.download_ms}, {"total", t.timings.total_ms}};
  return layout_json(j, matrices);
}

}  // namespace

Format parse_format(const std::string& s) {
  if (s == "text") return Format::Text;
  if (s == "json") return Format::Json;
  if (s == "csv") return Format::Csv;
  if (s == "markdown" || s == "md") return Format::Markdown;
  throw InputError(Msg::FormatUnknown, {s});
}

Format parse_format_among(const std::string& s, std::initializer_list<Format> allowed, Msg refusal) {
  Format f;
  try {
    f = parse_format(s);
  } catch (const InputError&) {
    throw InputError(refusal, {s});
  }
  if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) throw InputError(refusal, {s});
  return f;
}

std::string render(const Problem& p, const Trace& t, int query, Lang lang, Format f) {
  if (query < 0 || query >= std::max(1, p.n()))
    throw InputError(Msg::QueryRowRange, {std::to_string(query), std::to_string(p.n())});
  switch (f) {
    case Format::Text: return render_text(p, t, query, lang);
    case Format::Markdown: return render_markdown(p, t, query, lang);
    case Format::Csv: return render_csv(p, t, lang);
    case Format::Json: return render_json(p, t, query, lang);
  }
  return {};
}

}  // namespace attnlab
