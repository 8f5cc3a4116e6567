// Reading and applying a problem's named inputs (see inputs.h).
#include "core/inputs.h"

#include "core/format.h"
#include "core/io.h"
#include "core/messages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace attnlab {
namespace {

// --tokens / --tokens-file: n labels (queries, and keys when m == n) or n + m labels (queries
// first, then keys).
void apply_tokens(Problem& p, const std::vector<std::string>& tokens, const std::string& opt) {
  const int n = p.n(), m = p.m();
  const int count = static_cast<int>(tokens.size());
  if (count == n && n == m) {
    p.edit().query_tokens = tokens;
    p.edit().key_tokens = tokens;
  } else if (count == n + m) {
    p.edit().query_tokens.assign(tokens.begin(), tokens.begin() + n);
    p.edit().key_tokens.assign(tokens.begin() + n, tokens.end());
  } else {
    if (n == m)
      throw InputError(Msg::TokenLabelCountEither, {opt, std::to_string(count), std::to_string(n), std::to_string(m),
                                                    std::to_string(n), std::to_string(n + m)});
    throw InputError(Msg::TokenLabelCount,
                     {opt, std::to_string(count), std::to_string(n), std::to_string(m), std::to_string(n + m)});
  }
  // New labels: the demo's sentence no longer names them (the texts would quote it beside them).
  p.sentence.clear();
}

// A document id as the refusal quotes it: the shortest text that reads back as the fp32 value,
// or "≈" and three digits from 2^24 on, where fp32 has rounded the file's number already.
std::string document_id_text(float x) {
  return std::isfinite(x) && std::abs(x) >= 16777216.0f ? "≈" + format_number("%.3g", x) : shortest_text(x);
}

}  // namespace

Problem problem_from_files(const std::string& q_file, const std::string& k_file, const std::string& v_file) {
  if (q_file.empty() || k_file.empty() || v_file.empty())
    throw InputError(Msg::FilesTogether, {q_file.empty() ? "--q" : k_file.empty() ? "--k" : "--v"});
  Problem p;
  ProblemInputs& in = p.edit();
  in.q = read_matrix(q_file);
  in.k = read_matrix(k_file);
  in.v = read_matrix(v_file);
  // Labels are positions: the keys 0 … m − 1, and n < m queries the last n of them (a decode
  // shape, as --random --queries labels it).
  const int n = static_cast<int>(p.q().rows()), m = static_cast<int>(p.k().rows());
  in.key_tokens = index_tokens(m);
  if (n < m)
    in.query_tokens.assign(in.key_tokens.end() - n, in.key_tokens.end());
  else
    in.query_tokens = index_tokens(n);
  return p;
}

void apply_mask_spec(Problem& p, const std::string& mask) {
  if (mask == "none") {
    p.mask = MaskKind::None;
  } else if (mask == "causal") {
    p.mask = MaskKind::Causal;
  } else if (mask.empty()) {
    throw InputError(Msg::MaskNeedsValue, {});
  } else {
    // A word that is not a file is most likely a mistyped mask name: say both possibilities.
    if (!std::filesystem::exists(mask) && mask.find_first_of("/.") == std::string::npos)
      throw InputError(Msg::MaskWord, {mask});
    p.edit().custom_mask = read_mask(mask);
    p.mask = MaskKind::Custom;
  }
}

namespace {

// The items of a modification spec: split at ',' and '+', surrounding spaces dropped. The sign of
// a number's exponent ("softcap:1e+3": a '+' after a digit and an 'e', before a digit) is the
// number's, not a joint. "none" stands alone: beside another item it is refused (ModNoneAlone).
std::vector<std::string> spec_items(const std::string& spec, const char* what) {
  std::vector<std::string> out;
  std::string cur;
  const auto flush = [&] {
    const auto a = cur.find_first_not_of(" \t"), b = cur.find_last_not_of(" \t");
    out.push_back(a == std::string::npos ? std::string() : cur.substr(a, b - a + 1));
    cur.clear();
  };
  const auto digit = [&spec](std::size_t i) {
    return i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) != 0;
  };
  for (std::size_t i = 0; i < spec.size(); ++i) {
    const char ch = spec[i];
    const bool exponent =
        ch == '+' && i >= 2 && (spec[i - 1] == 'e' || spec[i - 1] == 'E') && digit(i - 2) && digit(i + 1);
    if ((ch == ',' || ch == '+') && !exponent) flush();
    else cur += ch;
  }
  flush();
  if (out.size() > 1 && std::find(out.begin(), out.end(), "none") != out.end())
    throw InputError(Msg::ModNoneAlone, {what, spec});
  return out;
}

// A number as typed (plain decimal, as a temperature), or `bad` naming the text.
double spec_number(const std::string& text, Msg bad) {
  if (const std::optional<double> v = parse_plain_number(text)) return *v;
  throw InputError(bad, {"'" + text + "'"});
}

// A whole number of at most 9 digits; surrounding blanks are dropped, as parse_plain_number drops
// them from the specs' other numbers ('window: 2' as 'alibi: 1').
int spec_int(const std::string& text, Msg bad) {
  const std::string s = trim_blanks(text);
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    throw InputError(bad, {"'" + text + "'"});
  return std::stoi(s);
}

}  // namespace

void apply_rope_spec(Problem& p, const std::string& theta) {
  if (theta.empty() || theta == "none") {
    p.mods.rope_theta = 0;
    return;
  }
  p.mods.rope_theta = spec_number(theta, Msg::RopeTheta);
  if (!(p.mods.rope_theta > 0)) throw InputError(Msg::RopeTheta, {theta});
}

void apply_score_mod_spec(Problem& p, const std::string& spec, SpecFiles files) {
  Modifications& md = p.mods;
  md.alibi = false;
  md.alibi_slopes.clear();
  md.softcap = 0;
  md.bias_name.clear();
  md.bias_head = -1;
  if (p.bias().size() > 0) p.edit().bias = MatrixF();
  if (spec.empty() || spec == "none") return;
  bool alibi = false, cap = false, bias = false;
  const auto once = [](bool& seen, const std::string& what) {
    if (seen) throw InputError(Msg::ModTwice, {what});
    seen = true;
  };
  for (const std::string& item : spec_items(spec, "--score-mod")) {
    const auto colon = item.find(':');
    const std::string name = item.substr(0, colon);
    const std::string arg = colon == std::string::npos ? std::string() : item.substr(colon + 1);
    if (item == "none") {  // alone (spec_items refuses it beside others), as " none "
      continue;
    } else if (name == "alibi") {
      once(alibi, "alibi");
      md.alibi = true;
      if (colon != std::string::npos) {
        std::string cur;
        for (std::size_t i = 0; i <= arg.size(); ++i) {
          if (i == arg.size() || arg[i] == '/') {
            md.alibi_slopes.push_back(spec_number(cur, Msg::AlibiSlopeValue));
            // The kernels take the slope in fp32: one beyond its range would be inf there.
            if (std::abs(md.alibi_slopes.back()) > std::numeric_limits<float>::max())
              throw InputError(Msg::AlibiSlopeValue, {cur});
            cur.clear();
          } else {
            cur += arg[i];
          }
        }
      }
    } else if (name == "softcap" && colon != std::string::npos) {
      once(cap, "softcap");
      md.softcap = spec_number(arg, Msg::SoftcapInvalid);
      // The kernels take C and 1 / C in fp32: both must be finite there.
      if (!(md.softcap >= std::numeric_limits<float>::min() && md.softcap <= std::numeric_limits<float>::max()))
        throw InputError(Msg::SoftcapInvalid, {arg});
    } else if (name == "bias" && arg.empty()) {
      throw InputError(Msg::ModFileMissing, {item, "bias:FILE"});
    } else if (name == "bias") {
      once(bias, "bias");
      if (files == SpecFiles::Read) p.edit().bias = read_matrix(arg);
      md.bias_name = printable(std::filesystem::path(arg).filename().string());
    } else {
      throw InputError(Msg::ScoreModUnknown, {item});
    }
  }
}

void apply_mask_mod_spec(Problem& p, const std::string& spec, SpecFiles files) {
  Modifications& md = p.mods;
  md.window = 0;
  md.prefix = 0;
  md.documents_name.clear();
  if (!p.documents().empty()) p.edit().documents.clear();
  if (spec.empty() || spec == "none") return;
  bool causal = false, window = false, doc = false, prefix = false;
  const auto once = [](bool& seen, const std::string& what) {
    if (seen) throw InputError(Msg::ModTwice, {what});
    seen = true;
  };
  for (const std::string& item : spec_items(spec, "--mask-mod")) {
    const auto colon = item.find(':');
    const std::string name = item.substr(0, colon);
    const std::string arg = colon == std::string::npos ? std::string() : item.substr(colon + 1);
    if (item == "none") {  // alone (spec_items refuses it beside others), as " none "
      continue;
    } else if (item == "causal") {
      once(causal, "causal");
      if (p.mask == MaskKind::Custom) throw InputError(Msg::CausalWithMaskFile, {});
      p.mask = MaskKind::Causal;
    } else if (name == "window" && colon != std::string::npos) {
      once(window, "window");
      md.window = spec_int(arg, Msg::WindowInvalid);
      if (md.window < 1) throw InputError(Msg::WindowInvalid, {arg});
    } else if (name == "prefix" && colon != std::string::npos) {
      once(prefix, "prefix");
      // Whether P fits the positions is validate's (the spec may be read before the problem is
      // made: the viewer's flags, bench's lists); here only its form.
      md.prefix = spec_int(arg, Msg::PrefixNotWhole);
      if (md.prefix < 1) throw InputError(Msg::PrefixNotWhole, {arg});
    } else if (name == "document" && arg.empty()) {
      throw InputError(Msg::ModFileMissing, {item, "document:FILE"});
    } else if (name == "document") {
      once(doc, "document");
      if (files == SpecFiles::Read) {
        const MatrixF ids = read_vector(arg);
        // One row or one column: a matrix's entries would be read in an order the file does not say.
        if (ids.rows() != 1 && ids.cols() != 1)
          throw InputError(Msg::DocumentsShape,
                           {printable(arg), std::to_string(ids.rows()), std::to_string(ids.cols())});
        std::vector<int>& out = p.edit().documents;
        out.clear();
        for (Eigen::Index i = 0; i < ids.size(); ++i) {
          const float x = ids.data()[i];
          // Ids are read as fp32, whose whole numbers are exact below 2^24: a larger one may be
          // another id rounded (two documents read as one), so it is refused.
          if (!(std::isfinite(x) && x == std::floor(x) && std::abs(x) < 16777216.0f))
            throw InputError(Msg::DocumentsValue, {document_id_text(x), std::to_string(i)});
          out.push_back(static_cast<int>(x));
        }
      }
      md.documents_name = printable(std::filesystem::path(arg).filename().string());
    } else {
      throw InputError(Msg::MaskModUnknown, {item});
    }
  }
}

void apply_token_spec(Problem& p, const std::string& tokens, const std::string& tokens_file) {
  if (!tokens.empty() && !tokens_file.empty())
    throw InputError(Msg::TokensBoth, {});
  // Labels are only checked against the shapes once the shapes themselves are known valid.
  if (!tokens.empty() || !tokens_file.empty()) {
    // The labels are replaced: check the shapes without the old ones, then apply the new ones
    // (apply_tokens checks their count itself).
    p.edit().query_tokens.clear();
    p.edit().key_tokens.clear();
    validate(p);
    if (!tokens.empty())
      apply_tokens(p, split_tokens(tokens), "--tokens");
    else
      apply_tokens(p, read_tokens_file(tokens_file), "--tokens-file");
  }
}

}  // namespace attnlab
