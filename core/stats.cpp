// Row statistics of the attention weights and the description text of the current picture
// (SPEC.md "读取当前图形说明"), in Chinese and English. Both read a finished Trace; neither
// computes attention.
#include "core/stats.h"

#include "core/modify.h"

#include "core/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace attnlab {
RowStats row_stats(const float* w, const float* mask, int m) {
  RowStats s;
  s.max_weight = -1;
  for (int c = 0; c < m; ++c) {
    const double p = w[c];
    const bool masked = mask != nullptr && std::isinf(mask[c]);
    if (!masked) ++s.unmasked;
    s.weight_sum += p;
    if (p > s.max_weight) {
      s.max_weight = p;
      s.argmax = c;
    }
    if (p > 0) s.entropy -= p * std::log(p);
  }
  s.perplexity = std::exp(s.entropy);
  return s;
}

RowStats row_stats(const Trace& t, int row) {
  const int n_mask = static_cast<int>(t.mask.rows());
  const float* mask = n_mask > 0 ? t.mask.data() + static_cast<std::size_t>(row % n_mask) * t.mask.cols() : nullptr;
  return row_stats(t.weights.data() + static_cast<std::size_t>(row) * t.weights.cols(), mask,
                   static_cast<int>(t.weights.cols()));
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

std::string caveat(Lang lang) {
  return lang == Lang::Zh
             ? "注意力权重只描述这次加权读取，不能作为模型预测的完整解释或因果归因。"
             : "Attention weights describe this one weighted read; they are not a complete "
               "explanation of the model's prediction and are not causal attribution.";
}

std::string mask_sentence(MaskKind m, Lang lang) {
  const bool zh = lang == Lang::Zh;
  switch (m) {
    case MaskKind::None:
      return zh ? "未启用因果掩码；这是双向、非因果注意力演示。"
                : "No causal mask is applied; this is a bidirectional, non-causal attention demo.";
    case MaskKind::Causal:
      return zh ? "已启用因果掩码：每个查询只读取当前位置及之前的键，未来位置的权重精确为 0。"
                : "A causal mask is applied: each query reads only its own and earlier "
                  "positions, and future positions get exactly 0 weight.";
    case MaskKind::Custom:
      return zh ? "使用自定义掩码：被屏蔽（−∞）的位置权重精确为 0。"
                : "A custom mask is applied: blocked (−∞) positions get exactly 0 weight.";
  }
  return {};
}

namespace {

// The mask mods' sentences after the mask kind's (core/modifications.h has the rules).
std::string mask_mod_sentences(bool causal, int window, int prefix, bool documents, Lang lang) {
  const bool zh = lang == Lang::Zh;
  std::string out;
  const auto add = [&](const std::string& s) { out += (out.empty() || zh ? "" : " ") + s; };
  if (prefix > 0) {
    const std::string p = std::to_string(prefix);
    add(zh ? "前缀语言模型（前 " + p + " 个位置）：这 " + p + " 个位置彼此双向可见" + (window > 0 ? "（在下面的窗口之内）" : "") +
                 "；之后的每个查询只读取当前位置及之前的键，未来位置的权重精确为 0。"
           : "Prefix-LM over the first " + p + " positions: they see each other both ways" +
                 (window > 0 ? " (within the window below)" : "") +
                 "; every later query reads only its own and earlier positions, and future positions get exactly 0 "
                 "weight.");
  }
  if (window > 0) {
    const std::string w = std::to_string(window);
    if (prefix > 0)  // the prefix reads both ways, within the window as well
      add(zh ? "滑动窗口 " + w + "：查询只读取与它相距小于 " + w + " 个位置的键——前缀之后是最近的 " + w +
                   " 个位置（含自身），前缀之内两侧都算；更远的键权重精确为 0。"
             : "A sliding window of " + w + ": a query reads only keys less than " + w +
                   " positions away — after the prefix the " + w + " most recent positions, its own among them, "
                   "inside the prefix on either side; farther keys get exactly 0 weight.");
    else if (causal)
      add(zh ? "滑动窗口 " + w + "：查询只读取最近的 " + w + " 个位置（含自身），更远的键权重精确为 0。"
             : "A sliding window of " + w + ": a query reads only the " + w +
                   " most recent positions, its own among them; farther keys get exactly 0 weight.");
    else
      add(zh ? "滑动窗口 " + w + "：查询只读取两侧与它相距小于 " + w + " 个位置的键，更远的键权重精确为 0。"
             : "A sliding window of " + w + ": a query reads only keys less than " + w +
                   " positions away on either side; farther keys get exactly 0 weight.");
  }
  if (documents)
    add(zh ? "打包文档：查询只读取同一文档内的键，其他文档的键权重精确为 0。"
           : "Packed documents: a query reads only keys of its own document; keys of other documents get "
             "exactly 0 weight.");
  return out;
}

std::string mask_sentence(MaskKind kind, int window, int prefix, bool documents, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const std::string mods = mask_mod_sentences(kind == MaskKind::Causal, window, prefix, documents, lang);
  if (mods.empty()) return mask_sentence(kind, lang);
  std::string base;
  if (kind == MaskKind::Custom)
    base = mask_sentence(kind, lang);
  else if (kind == MaskKind::Causal && prefix == 0)
    base = mask_sentence(kind, lang);
  else if (kind == MaskKind::None && prefix == 0)
    base = zh ? "未启用因果掩码：查询可以读取两侧的键，但受以下规则限制。"
              : "No causal mask is applied: a query may read keys on both sides, within the rules that follow.";
  return base.empty() ? mods : base + (zh ? "" : " ") + mods;
}

}  // namespace

namespace {

// Beside the demo (which names its sentence), a problem without any mask reads every key: the
// demo's own sentence calls itself a demo.
// One query at the end of its keys has none after it: it reads them all, as under a causal mask.
std::string unmasked_sentence(bool one_query, Lang lang) {
  if (one_query)
    return lang == Lang::Zh ? "未启用掩码：该查询读取全部键，它们都位于查询的位置及之前，结果与因果掩码相同。"
                            : "No mask is applied: the query reads every key, all of them at or before its position, "
                              "so it reads what a causal mask would let it.";
  return lang == Lang::Zh ? "未启用因果掩码：每个查询读取两侧的全部键（双向、非因果注意力）。"
                          : "No causal mask is applied: every query reads every key on both sides "
                            "(bidirectional, non-causal attention).";
}

}  // namespace

std::string mask_sentence(const Problem& p, Lang lang) {
  const bool documents = !p.documents().empty();
  if (p.mask == MaskKind::None && p.mods.window == 0 && p.mods.prefix == 0 && !documents && p.sentence.empty())
    return unmasked_sentence(p.n() == 1, lang);
  return mask_sentence(p.mask, p.mods.window, p.mods.prefix, documents, lang);
}

std::vector<std::string> mask_sentence_texts(Lang lang) {
  std::vector<std::string> out;
  for (MaskKind kind : {MaskKind::None, MaskKind::Causal, MaskKind::Custom})
    for (int window : {0, 1})
      for (int prefix : {0, 1})
        for (bool documents : {false, true}) out.push_back(mask_sentence(kind, window, prefix, documents, lang));
  for (bool one_query : {false, true}) out.push_back(unmasked_sentence(one_query, lang));
  return out;
}

std::string describe(const Problem& p, const Trace& t, int query, Lang lang) {
  const bool has_row = t.weights.rows() > query;
  const float* mask = has_row && t.mask.size() ? t.mask.data() + static_cast<std::size_t>(query % t.mask.rows()) * t.mask.cols() : nullptr;
  return describe(p, has_row ? t.weights.data() + static_cast<std::size_t>(query) * t.weights.cols() : nullptr, mask,
                  query, lang);
}

namespace {

// A weight in a description: three decimals, as the demo's row reads, down to 0.01 and for an
// exact zero; two significant digits below ("0.0050"), so that a flat row's weights stay told apart.
std::string weight_text(double w) { return w == 0 || std::fabs(w) >= 0.01 ? fixed(w, 3) : two_digits(w); }

}  // namespace

std::string describe(const Problem& p, const float* weights, const float* mask, int query, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const int n = p.n(), m = p.m();
  const std::string qtok = token_label(p.query_tokens(), query);
  const std::string dk = std::to_string(p.d_k());
  const std::string temp = short_number(p.temperature);
  std::string out;
  if (!p.source.empty()) out += (zh ? "来源：" : "Source: ") + p.source_in(lang) + (zh ? "。" : ". ");

  // Sequence sentence: the demo names its sentence, other problems their sizes.
  if (!p.sentence.empty()) {
    out += zh ? "自然语言序列“" + p.sentence + "”共有 " + std::to_string(n) + " 个 token。"
              : "The sequence " + p.sentence + " has " + std::to_string(n) + " tokens.";
  } else if (n == m) {
    out += zh ? "序列共有 " + std::to_string(n) + " 个 token。"
              : "The sequence has " + count_text(n, "token", "tokens") + ".";
  } else {
    out += zh ? "共有 " + std::to_string(n) + " 个查询和 " + std::to_string(m) + " 个键。"
              : "There " + std::string(n == 1 ? "is 1 query" : "are " + std::to_string(n) + " queries") +
                    " and " + count_text(m, "key", "keys") + ".";
  }
  if (p.heads > 1)
    out += zh ? "（共 " + std::to_string(p.heads) + " 个头，以下为第 0 个头。）"
              : " (" + std::to_string(p.heads) + " heads; head 0 is described.)";

  if (p.scale)
    out += zh ? "当前查询是“" + qtok + "”，键维度 d_k=" + dk + "，原始分数 QK^T 乘以显式缩放 " +
                    format_number("%.6g", *p.scale) + "（不是 1/sqrt(d_k)）后再以温度 " + temp + " 进入 softmax。"
              : " The current query is " + qtok + ", key dimension d_k=" + dk +
                    "; raw scores QKᵀ are multiplied by the explicit scale " +
                    format_number("%.6g", *p.scale) + " (not 1/sqrt(d_k)) and then divided by temperature " +
                    temp + " before the softmax.";
  else
  out += zh ? "当前查询是“" + qtok + "”，键维度 d_k=" + dk +
                  "，原始分数 QK^T 除以 sqrt(d_k) 后再以温度 " + temp + " 进入 softmax。"
            : " The current query is " + qtok + ", key dimension d_k=" + dk +
                  "; raw scores QKᵀ are divided by sqrt(d_k) and then by temperature " + temp +
                  " before the softmax.";

  if (has_modifications(p))
    out += zh ? "这次计算带有修改：" + modifications_text(p, lang) + "。"
              : " The chain is modified: " + modifications_text(p, lang) + ".";
  // Where the modifications act in the sentence above's chain.
  if (p.mods.rope_theta > 0)
    out += zh ? "RoPE 在 QKᵀ 之前旋转 Q 和 K，所以分数只依赖位置差 i − j；这并不保证分数随距离下降。"
              : " RoPE rotates Q and K before QKᵀ, so the scores depend on the positions' difference i − j alone; "
                "that does not make them fall with distance.";
  if (has_score_mods(p))
    out += zh ? "分数修改作用于缩放后的分数，在除以温度之前。"
              : " The score mods act on the scaled scores, before the division by the temperature.";
  if (p.mods.alibi)
    out += zh ? "ALiBi 从每个分数中减去 斜率·|i − j|：键越远惩罚越大，但分数大的键仍可能胜出。"
              : " ALiBi subtracts slope·|i − j| from each score: the farther the key, the larger the penalty, "
                "though a key with a large score can still win.";

  if (weights) {
    const RowStats s = row_stats(weights, mask, m);
    constexpr int kShown = 16;
    const std::string atok = token_label(p.key_tokens(), s.argmax);
    if (m <= kShown) {
      std::string list;
      for (int c = 0; c < m; ++c) {
        if (c) list += zh ? "、" : ", ";
        list += weight_text(weights[c]);
      }
      out += zh ? "当前行权重依次为 " + list + "，对“" + atok + "”的权重最高。"
                : " The current row's weights are " + list + "; the highest weight is on " + atok + ".";
    } else {
      // A long row's first keys are often masked or near zero: its largest weights say where the
      // row reads, each with its key.
      constexpr int kLargest = 8;
      std::vector<int> order(m);
      for (int c = 0; c < m; ++c) order[c] = c;
      std::partial_sort(order.begin(), order.begin() + kLargest, order.end(),
                        [&](int a, int b) { return weights[a] > weights[b] || (weights[a] == weights[b] && a < b); });
      // Only weights above 0: where fewer than 8 are (a causal row's first queries, a low
      // temperature whose other weights underflow fp32), the rest are said to be 0 rather than
      // listed as "largest".
      int shown = 0;
      while (shown < kLargest && weights[order[shown]] > 0) ++shown;
      std::string list;
      double mass = 0;
      for (int i = 0; i < shown; ++i) {
        const int c = order[i];
        mass += weights[c];
        if (i) list += zh ? "、" : ", ";
        list += weight_text(weights[c]) + (zh ? "（“" + token_label(p.key_tokens(), c) + "”）"
                                           : " (" + token_label(p.key_tokens(), c) + ")");
      }
      const std::string zeros = std::to_string(m - shown);
      if (shown < kLargest)
        out += zh ? "当前行 " + std::to_string(m) + " 个权重中有 " + zeros + " 个恰好为 0（被屏蔽，或小到 fp32 无法表示），其余为 " +
                        list + "；对“" + atok + "”的权重最高。"
                  : " Of the current row's " + std::to_string(m) + " weights, " + zeros +
                        " are exactly 0 (masked, or too small for fp32); " + (shown == 1 ? "the other is " : "the others are ") + list +
                        "; the highest weight is on " + atok + ".";
      else
        out += zh ? "当前行 " + std::to_string(m) + " 个权重中最大的 " + std::to_string(kLargest) + " 个为 " + list +
                        "，合计 " + weight_text(mass) + "；对“" + atok + "”的权重最高。"
                  : " The largest " + std::to_string(kLargest) + " of the current row's " + std::to_string(m) +
                        " weights are " + list + ", together " + weight_text(mass) + "; the highest weight is on " +
                        atok + ".";
    }
  }
  if (!zh) out += ' ';
  out += mask_sentence(p, lang);
  out += zh ? "注意力权重不能作为模型预测的完整解释，也不等于因果贡献。"
            : " Attention weights are not a complete explanation of the model's prediction and "
              "are not causal attribution.";
  return out;
}

}  // namespace attnlab
