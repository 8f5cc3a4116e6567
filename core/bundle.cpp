// Reading bundles (see bundle.h): the manifest with nlohmann::json, the arrays with core/io's
// .npy reader, every shape checked against the manifest before a Problem is made of them (a bias's
// values too), the RoPE base and the bias set as the Problem's modifications.
#include "core/bundle.h"

#include "core/format.h"
#include "core/io.h"
#include "core/messages.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>
#include <limits>

namespace attnlab {
namespace {

using Json = nlohmann::json;

std::string manifest_path(const std::string& dir) { return (std::filesystem::path(dir) / "manifest.json").string(); }

// A call of the manifest, as its refusals name it: the manifest's path and the call's index.
struct Where {
  std::string manifest;
  std::string call;
};

// The refusal `id` about the call `w`: its arguments after the manifest and the call.
[[noreturn]] void refuse(Msg id, const Where& w, std::vector<std::string> more = {}) {
  std::vector<std::string> args{w.manifest, w.call};
  args.insert(args.end(), more.begin(), more.end());
  throw InputError(id, std::move(args));
}

int get_int(const Json& c, const char* key, const Where& where, int min) {
  if (!c.contains(key)) refuse(Msg::BundleCallNoKey, where, {key});
  const Json& v = c[key];
  if (!v.is_number_integer()) refuse(Msg::BundleCallNotWhole, where, {key});
  // Printed as the manifest wrote it (a number above 2^63 had read back as -1).
  const std::string written = v.dump();
  if (v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(1 << 24))
    refuse(Msg::BundleCallIntRange, where, {key, std::to_string(min), std::to_string(1 << 24), written});
  const long long x = v.get<long long>();
  if (x < min || x > (1 << 24)) refuse(Msg::BundleCallIntRange, where, {key, std::to_string(min), std::to_string(1 << 24), written});
  return static_cast<int>(x);
}

std::string get_file(const Json& c, const char* key, const Where& where, bool optional) {
  if (!c.contains(key) || c[key].is_null()) {
    if (optional) return {};
    refuse(Msg::BundleCallNoFile, where, {key});
  }
  if (!c[key].is_string() || c[key].get<std::string>().empty()) refuse(Msg::BundleCallFileName, where, {key});
  const std::string f = c[key].get<std::string>();
  const std::filesystem::path p(f);
  // "." and "dir/" name no file (the bundle's folder, a folder in it).
  if (p.is_absolute() || f.find("..") != std::string::npos || p.lexically_normal() == "." || !p.has_filename())
    refuse(Msg::BundleCallFileOutside, where, {key, f});
  return f;
}

// The mask or bias of call `layer` whose shape is neither (n, m), shared by every head, nor
// (heads*n, m), one per head: refused naming both shapes, or the one shape where a call has one head.
[[noreturn]] void refuse_shape(const std::string& path, const char* what, const BundleCall& c, int layer,
                               const MatrixF& a) {
  const std::string L = std::to_string(layer), r = std::to_string(a.rows()), cols = std::to_string(a.cols());
  const std::string n = std::to_string(c.n), m = std::to_string(c.m);
  if (c.heads == 1) throw InputError(Msg::BundleArrayShapeOne, {path, what, L, c.name, r, cols, n, m});
  throw InputError(Msg::BundleArrayShapeHeads,
                   {path, what, L, c.name, r, cols, n, m, std::to_string(static_cast<long long>(c.heads) * c.n)});
}

[[noreturn]] void refuse_missing(const std::string& path, const char* what, const BundleCall& c, int layer) {
  throw InputError(Msg::BundleFileMissing, {path, what, std::to_string(layer), c.name});
}

MatrixF read_array(const Bundle& b, const BundleCall& c, int layer, const std::string& file,
                   const char* what, long rows, long cols, const std::string& expect) {
  const std::string path = (std::filesystem::path(b.dir) / file).string();
  if (!std::filesystem::exists(path)) refuse_missing(path, what, c, layer);
  MatrixF a = read_matrix(path);
  if (a.rows() != rows || a.cols() != cols)
    throw InputError(Msg::BundleArrayShape,
                     {path, what, std::to_string(layer), c.name, std::to_string(a.rows()), std::to_string(a.cols()),
                      std::to_string(rows), std::to_string(cols), expect});
  return a;
}

// The call's output: (heads*n, d_v), refused with the shapes the manifest declares and the file has.
MatrixF read_output(const Bundle& b, const BundleCall& c, int layer) {
  return read_array(b, c, layer, c.output, "output", static_cast<long>(c.heads) * c.n, c.d_v,
                    "heads " + std::to_string(c.heads) + " x n " + std::to_string(c.n) + ", d_v " + std::to_string(c.d_v));
}

// The call's bias: (n, m) or (heads*n, m), every value finite (read_matrix refuses the others).
MatrixF read_bias(const Bundle& b, const BundleCall& c, int layer) {
  const std::string path = (std::filesystem::path(b.dir) / c.bias).string();
  if (!std::filesystem::exists(path)) refuse_missing(path, "bias", c, layer);
  MatrixF a;
  try {
    a = read_matrix(path);  // refuses values that are not finite, naming the first
  } catch (const InputError& e) {
    // The reader's refusal with what a bias is for: a CSV names file:line:column, a .npy [row, column].
    std::vector<std::string> args = e.args;
    args.push_back(std::to_string(layer));
    args.push_back(c.name);
    if (e.id == Msg::ValueNotFinite && e.args.size() == 2) throw InputError(Msg::BundleBiasNotFinite, std::move(args));
    if (e.id == Msg::NpyValueNotFinite && e.args.size() == 4)
      throw InputError(Msg::BundleBiasNotFiniteAt, std::move(args));
    throw;
  }
  if (a.cols() != c.m || (a.rows() != c.n && a.rows() != static_cast<Eigen::Index>(c.heads) * c.n))
    refuse_shape(path, "bias", c, layer, a);
  return a;
}

void check_head(const BundleCall& c, std::optional<int> head) {
  if (head && (*head < 0 || *head >= c.heads))
    throw InputError(Msg::BundleHeadRange,
                     {std::to_string(*head), c.name, std::to_string(c.heads), std::to_string(c.heads - 1)});
}

}  // namespace

Bundle read_bundle(const std::string& dir) {
  Bundle b;
  b.dir = dir;
  const std::string mp = manifest_path(dir);
  // "No such directory" only when the system says so (a folder that may not be read is not missing).
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  if (st.type() == std::filesystem::file_type::not_found) throw InputError(Msg::BundleMissing, {dir});
  if (st.type() != std::filesystem::file_type::directory) throw InputError(Msg::BundleNotDir, {dir});
  if (!std::filesystem::exists(mp)) throw InputError(Msg::BundleNoManifest, {mp});
  Json j;
  const std::string text = read_input_file(mp, InputFormat::Text);
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // The parser's byte is the 1-based index of the last character it read: its line, and its
    // column in characters as an editor counts them (UTF-8's continuation bytes not counted).
    const std::size_t at = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    const std::size_t line_start = at == 0 ? 0 : text.rfind('\n', at - 1) + 1;  // npos + 1 = 0
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    const auto column = 1 + std::count_if(text.begin() + static_cast<std::ptrdiff_t>(line_start),
                                          text.begin() + static_cast<std::ptrdiff_t>(at),
                                          [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
    throw InputError(Msg::BundleJson, {mp, std::to_string(line), std::to_string(column)});
  } catch (const Json::exception&) {  // a number JSON allows but a double cannot hold (1e400)
    throw InputError(Msg::BundleJsonValue, {mp});
  }
  if (!j.is_object()) throw InputError(Msg::BundleNotObject, {mp});
  if (j.contains("format") && j["format"] != "attnlab-bundle") throw InputError(Msg::BundleFormat, {mp});
  if (j.contains("version") && j["version"] != 1) throw InputError(Msg::BundleVersion, {mp});
  // Names go into one-line texts (the source line, tables' titles): their control characters escaped.
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw InputError(Msg::BundleString, {mp, "model"});
    b.model = printable(j["model"].get<std::string>());
  }
  if (j.contains("tokens") && !j["tokens"].is_null()) {
    if (!j["tokens"].is_array()) throw InputError(Msg::BundleStrings, {mp, "tokens"});
    for (const Json& t : j["tokens"]) {
      if (!t.is_string()) throw InputError(Msg::BundleStrings, {mp, "tokens"});
      // Labels as --tokens takes them: a line break or an escape code would break the tables.
      const std::string label = t.get<std::string>();
      try {
        check_label(label, b.tokens.size() + 1);
      } catch (const InputError&) {
        throw InputError(Msg::BundleTokenLabel, {mp, std::to_string(b.tokens.size() + 1), quote(label)});
      }
      b.tokens.push_back(label);
    }
  }
  if (!j.contains("calls") || !j["calls"].is_array() || j["calls"].empty()) {
    // A capture whose every call was skipped writes its reasons under "skipped": the first one said.
    const Json* first = j.contains("skipped") && j["skipped"].is_array() && !j["skipped"].empty() ? &j["skipped"][0] : nullptr;
    if (first && first->is_object() && first->contains("name") && (*first)["name"].is_string() &&
        first->contains("reason") && (*first)["reason"].is_string())
      throw InputError(Msg::BundleAllSkipped, {mp, std::to_string(j["skipped"].size()),
                                               printable((*first)["name"].get<std::string>()),
                                               printable((*first)["reason"].get<std::string>())});
    throw InputError(Msg::BundleNoCalls, {mp});
  }
  for (std::size_t i = 0; i < j["calls"].size(); ++i) {
    const Json& c = j["calls"][i];
    const Where where{mp, std::to_string(i)};
    if (!c.is_object()) refuse(Msg::BundleCallObject, where);
    BundleCall bc;
    if (c.contains("name") && !c["name"].is_null()) {
      if (!c["name"].is_string()) refuse(Msg::BundleCallString, where, {"name"});
      bc.name = printable(c["name"].get<std::string>());
    }
    bc.heads = get_int(c, "heads", where, 1);
    bc.kv_heads = c.contains("kv_heads") ? get_int(c, "kv_heads", where, 1) : bc.heads;
    if (bc.heads % bc.kv_heads != 0)
      refuse(Msg::BundleCallKvHeads, where, {std::to_string(bc.heads), std::to_string(bc.kv_heads)});
    bc.n = get_int(c, "n", where, 1);
    bc.m = get_int(c, "m", where, 1);
    bc.d_k = get_int(c, "d_k", where, 1);
    bc.d_v = get_int(c, "d_v", where, 1);
    if (c.contains("scale") && !c["scale"].is_null()) {
      if (!c["scale"].is_number()) refuse(Msg::BundleScaleType, where);
      const double s = c["scale"].get<double>();
      if (!scale_fits(s)) refuse(Msg::BundleScaleValue, where, {format_number("%.9g", s)});
      // The default written out as a number stays the default (the lab's 1/sqrt(d_k) wording).
      if (std::abs(s * std::sqrt(static_cast<double>(bc.d_k)) - 1.0) > 1e-7) bc.scale = s;
    }
    if (c.contains("causal") && !c["causal"].is_null()) {
      if (!c["causal"].is_boolean()) refuse(Msg::BundleCausalType, where);
      bc.causal = c["causal"].get<bool>();
    }
    bc.q = get_file(c, "q", where, false);
    bc.k = get_file(c, "k", where, false);
    bc.v = get_file(c, "v", where, false);
    bc.mask = get_file(c, "mask", where, true);
    bc.bias = get_file(c, "bias", where, true);
    bc.output = get_file(c, "output", where, true);
    if (c.contains("rope_theta") && !c["rope_theta"].is_null()) {
      if (!c["rope_theta"].is_number()) refuse(Msg::BundleRopeType, where);
      const double t = c["rope_theta"].get<double>();
      if (!std::isfinite(t) || t <= 0) refuse(Msg::BundleRopeValue, where, {format_number("%.9g", t)});
      if (bc.d_k % 2 != 0) refuse(Msg::BundleRopeOdd, where, {std::to_string(bc.d_k)});
      bc.rope_theta = t;
    }
    if (c.contains("notes") && !c["notes"].is_null()) {
      if (!c["notes"].is_array()) refuse(Msg::BundleCallStrings, where, {"notes"});
      for (const Json& t : c["notes"]) {
        if (!t.is_string()) refuse(Msg::BundleCallStrings, where, {"notes"});
        // Kept without blanks around it; a blank note says nothing and is dropped (it would end
        // the source line with "note: ").
        if (std::string note = trim_blanks(t.get<std::string>()); !note.empty()) bc.notes.push_back(std::move(note));
      }
    }
    if (bc.causal && !bc.mask.empty()) refuse(Msg::BundleCausalAndMask, where);
    b.calls.push_back(std::move(bc));
  }
  return b;
}

// A whole number is always an index (a call named "0" is not picked over call 0: a value has one
// meaning whatever the bundle's names); anything else is a call's name.
int resolve_layer(const Bundle& b, const std::string& layer) {
  const int count = static_cast<int>(b.calls.size());
  if (!layer.empty() && layer.find_first_not_of("0123456789") == std::string::npos) {
    const std::size_t first = std::min(layer.find_first_not_of('0'), layer.size() - 1);
    const std::string digits = layer.substr(first);
    if (digits.size() < 9 && std::stoi(digits) < count) return std::stoi(digits);
    throw InputError(Msg::LayerRange, {layer, std::to_string(count), std::to_string(count - 1)});
  }
  // A name is one call's: a module called twice in one forward gives two calls of one name.
  std::vector<int> named;
  for (int i = 0; i < count; ++i)
    if (b.calls[i].name == layer && !layer.empty()) named.push_back(i);
  if (named.size() == 1) return named[0];
  if (named.size() > 1) {
    std::string at;
    for (std::size_t k = 0; k < named.size(); ++k) at += (k ? ", " : "") + std::to_string(named[k]);
    throw InputError(Msg::LayerAmbiguous, {layer, std::to_string(named.size()), at});
  }
  std::string names;
  for (int i = 0; i < count && i < 6; ++i) names += (i ? ", " : "") + b.calls[i].name;
  if (count > 6) names += ", …";
  throw InputError(Msg::LayerUnknown, {layer, std::to_string(count - 1), names});
}

Problem bundle_problem(const Bundle& b, int layer, std::optional<int> head) {
  if (layer < 0 || layer >= static_cast<int>(b.calls.size()))
    throw InputError(Msg::LayerOutside, {std::to_string(layer)});
  const BundleCall& c = b.calls[layer];
  check_head(c, head);
  const std::string dims = "heads " + std::to_string(c.heads) + ", kv_heads " + std::to_string(c.kv_heads) +
                           ", n " + std::to_string(c.n) + ", m " + std::to_string(c.m) + ", d_k " +
                           std::to_string(c.d_k) + ", d_v " + std::to_string(c.d_v);
  const MatrixF q = read_array(b, c, layer, c.q, "q", static_cast<long>(c.heads) * c.n, c.d_k, dims);
  const MatrixF k = read_array(b, c, layer, c.k, "k", static_cast<long>(c.kv_heads) * c.m, c.d_k, dims);
  const MatrixF v = read_array(b, c, layer, c.v, "v", static_cast<long>(c.kv_heads) * c.m, c.d_v, dims);
  // The output is not part of the problem, but a declared one of the wrong shape is a broken
  // bundle: refused here, where every command that reads the call passes, not only where it is used.
  if (!c.output.empty()) read_output(b, c, layer);
  const int group = c.heads / c.kv_heads;

  Problem p;
  ProblemInputs& in = p.edit();
  const int first = head ? *head : 0;
  const int count = head ? 1 : c.heads;
  p.heads = count;
  if (head) {  // one query head and its key/value head
    const int kvh = first / group;
    in.q = q.middleRows(static_cast<Eigen::Index>(first) * c.n, c.n);
    in.k = k.middleRows(static_cast<Eigen::Index>(kvh) * c.m, c.m);
    in.v = v.middleRows(static_cast<Eigen::Index>(kvh) * c.m, c.m);
    p.kv_group = 1;
  } else {  // every head, the key/value heads shared by their groups as the model shares them
    in.q = q;
    in.k = k;
    in.v = v;
    p.kv_group = group;
  }
  p.scale = c.scale;

  if (!c.mask.empty()) {
    const std::string path = (std::filesystem::path(b.dir) / c.mask).string();
    if (!std::filesystem::exists(path)) refuse_missing(path, "mask", c, layer);
    const MatrixF mk = read_mask(path);
    if (mk.cols() != c.m || (mk.rows() != c.n && mk.rows() != static_cast<Eigen::Index>(c.heads) * c.n))
      refuse_shape(path, "mask", c, layer, mk);
    for (Eigen::Index r = 0; r < mk.rows(); ++r)
      if (mk.row(r).array().isInf().all())  // read_mask takes 0 and -inf only
        throw InputError(Msg::BundleMaskRowBlocked, {path, std::to_string(r), std::to_string(layer), c.name});
    if (mk.rows() == c.n) {
      in.custom_mask = mk;
    } else {
      in.custom_mask = mk.middleRows(static_cast<Eigen::Index>(first) * c.n, c.n);
      for (int i = 1; i < count; ++i)
        if (mk.middleRows(static_cast<Eigen::Index>(first + i) * c.n, c.n) != p.custom_mask())
          throw InputError(Msg::BundleMaskPerHead, {std::to_string(layer), c.name});
    }
    p.mask = MaskKind::Custom;
  } else if (c.causal) {
    if (c.n == c.m) {
      p.mask = MaskKind::Causal;
    } else {
      // torch's is_causal with n != m: query i sees keys 0..i (top-left aligned).
      in.custom_mask = MatrixF::Zero(c.n, c.m);
      for (int r = 0; r < c.n; ++r)
        for (int col = r + 1; col < c.m; ++col) in.custom_mask(r, col) = -std::numeric_limits<float>::infinity();
      p.mask = MaskKind::Custom;
    }
  }

  if (!c.bias.empty()) {
    const MatrixF bias = read_bias(b, c, layer);
    in.bias = bias.rows() == c.n ? bias : MatrixF(bias.middleRows(static_cast<Eigen::Index>(first) * c.n,
                                                                    static_cast<Eigen::Index>(count) * c.n));
    p.mods.bias_name = c.bias;
    // One head of a per-head bias: its rows, named as one_head names them ("head 1's"), not shared.
    if (bias.rows() != c.n && count == 1) p.mods.bias_head = first;
  }
  p.mods.rope_theta = c.rope_theta;

  const int t = static_cast<int>(b.tokens.size());
  in.key_tokens = t == c.m ? b.tokens : index_tokens(c.m);
  if (t == c.n)
    in.query_tokens = b.tokens;
  else if (t == c.m && c.n < c.m)
    in.query_tokens.assign(b.tokens.end() - c.n, b.tokens.end());
  else
    in.query_tokens = index_tokens(c.n);

  p.source = "bundle " + printable(b.dir) + (b.model.empty() ? std::string() : " (" + b.model + ")") + ", call " +
             std::to_string(layer) + " of " + std::to_string(b.calls.size()) +
             (c.name.empty() ? std::string() : " '" + c.name + "'") + ", " +
             (head ? "head " + std::to_string(*head) + " of " + std::to_string(c.heads)
                   : "all " + std::to_string(c.heads) + " heads") +
             (c.kv_heads != c.heads ? " (" + count_text(c.kv_heads, "key/value head", "key/value heads") + ", each shared by " +
                                          std::to_string(group) + " query heads)"
                                    : std::string());
  p.source_zh = "数据包 " + printable(b.dir) + (b.model.empty() ? std::string() : "（" + b.model + "）") + "，调用 " +
                std::to_string(layer) + "（共 " + std::to_string(b.calls.size()) + " 个）" +
                (c.name.empty() ? std::string() : "“" + c.name + "”") + "，" +
                (head ? "头 " + std::to_string(*head) + "（共 " + std::to_string(c.heads) + " 个）"
                      : "全部 " + std::to_string(c.heads) + " 个头") +
                (c.kv_heads != c.heads ? "（" + std::to_string(c.kv_heads) + " 个键/值头，每个由 " +
                                             std::to_string(group) + " 个查询头共享）"
                                       : std::string());
  // Labels that fit neither side are not dropped without a word: the source says so.
  if (t > 0 && t != c.n && t != c.m) {
    p.source += "; its " + std::to_string(t) + " tokens fit neither the " + std::to_string(c.n) + " queries nor the " +
                std::to_string(c.m) + " keys, so positions are numbered";
    p.source_zh += "；它的 " + std::to_string(t) + " 个 token 与 " + std::to_string(c.n) + " 个查询、" +
                   std::to_string(c.m) + " 个键都不相符，位置以编号标注";
  }
  // The capture's notes (what it did or could not do, in its own words) follow the source into
  // every text that names it: run, verify, describe, the walks and the viewer.
  for (const std::string& note : c.notes) {
    p.source += "; note: " + printable(note);
    p.source_zh += "；备注：" + printable(note);
  }
  validate(p);
  return p;
}

MatrixF bundle_output(const Bundle& b, int layer, std::optional<int> head) {
  const BundleCall& c = b.calls.at(layer);
  check_head(c, head);
  if (c.output.empty()) return MatrixF();
  const MatrixF o = read_output(b, c, layer);
  if (!head) return o;
  return o.middleRows(static_cast<Eigen::Index>(*head) * c.n, c.n);
}

}  // namespace attnlab
