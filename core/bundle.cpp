// Reading bundles (see bundle.h): the manifest with nlohmann::json, the arrays with core/io's
// .npy reader, every shape checked against the manifest before a Problem is made of them (a bias's
// values too), the RoPE base and the bias set as the Problem's modifications.
#include "core/bundle.h"

#include "core/format.h"
#include "core/io.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>

namespace attnlab {
namespace {

using Json = nlohmann::json;

std::string manifest_path(const std::string& dir) { return (std::filesystem::path(dir) / "manifest.json").string(); }

[[noreturn]] void refuse(const std::string& where, const std::string& what) { throw InputError(where + ": " + what); }

int get_int(const Json& c, const char* key, const std::string& where, int min) {
  if (!c.contains(key)) refuse(where, std::string("has no '") + key + "'");
  const Json& v = c[key];
  if (!v.is_number_integer()) refuse(where, std::string("'") + key + "' must be a whole number");
  const long long x = v.get<long long>();
  if (x < min || x > (1 << 24))
    refuse(where, std::string("'") + key + "' must be between " + std::to_string(min) + " and " +
                      std::to_string(1 << 24) + ", got " + std::to_string(x));
  return static_cast<int>(x);
}

std::string get_file(const Json& c, const char* key, const std::string& where, bool optional) {
  if (!c.contains(key) || c[key].is_null()) {
    if (optional) return {};
    refuse(where, std::string("has no '") + key + "' file");
  }
  if (!c[key].is_string() || c[key].get<std::string>().empty())
    refuse(where, std::string("'") + key + "' must be a file name");
  const std::string f = c[key].get<std::string>();
  const std::filesystem::path p(f);
  if (p.is_absolute() || f.find("..") != std::string::npos)
    refuse(where, std::string("'") + key + "' must name a file inside the bundle, got '" + f + "'");
  return f;
}

MatrixF read_array(const Bundle& b, const BundleCall& c, int layer, const std::string& file,
                   const char* what, long rows, long cols, const std::string& expect) {
  const std::string path = (std::filesystem::path(b.dir) / file).string();
  if (!std::filesystem::exists(path))
    throw InputError(path + ": missing (the manifest's " + what + " of call " + std::to_string(layer) +
                     " '" + c.name + "')");
  MatrixF a = read_matrix(path);
  if (a.rows() != rows || a.cols() != cols)
    throw InputError(path + ": " + what + " of call " + std::to_string(layer) + " '" + c.name +
                     "' is " + std::to_string(a.rows()) + "x" + std::to_string(a.cols()) +
                     " but the manifest says " + std::to_string(rows) + "x" + std::to_string(cols) +
                     " (" + expect + ")");
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
  const std::string call = "call " + std::to_string(layer) + " '" + c.name + "'";
  if (!std::filesystem::exists(path)) throw InputError(path + ": missing (the manifest's bias of " + call + ")");
  MatrixF a;
  try {
    a = read_matrix(path);  // refuses values that are not finite, naming the first
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.find("not finite") == std::string::npos) throw;
    throw InputError(what + " (the bias of " + call +
                     " holds finite numbers; keys a model blocks belong in the mask, as -inf)");
  }
  if (a.cols() != c.m || (a.rows() != c.n && a.rows() != static_cast<Eigen::Index>(c.heads) * c.n))
    throw InputError(path + ": bias of " + call + " is " + std::to_string(a.rows()) + "x" +
                     std::to_string(a.cols()) + " but the manifest says " + std::to_string(c.n) + "x" +
                     std::to_string(c.m) + " (one for every head) or " + std::to_string(c.heads * c.n) + "x" +
                     std::to_string(c.m) + " (one per head)");
  return a;
}

void check_head(const BundleCall& c, std::optional<int> head) {
  if (head && (*head < 0 || *head >= c.heads))
    throw InputError("--head " + std::to_string(*head) + " is out of range: call '" + c.name +
                     "' has " + std::to_string(c.heads) + " heads (0.." +
                     std::to_string(c.heads - 1) + ")");
}

}  // namespace

Bundle read_bundle(const std::string& dir) {
  Bundle b;
  b.dir = dir;
  const std::string mp = manifest_path(dir);
  if (!std::filesystem::is_directory(dir)) throw InputError("--bundle " + dir + ": not a directory");
  if (!std::filesystem::exists(mp)) throw InputError(mp + ": missing (a bundle holds manifest.json and .npy files)");
  Json j;
  try {
    j = Json::parse(read_input_file(mp, InputFormat::Text));
  } catch (const Json::exception& e) {
    refuse(mp, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) refuse(mp, "must hold a JSON object");
  if (j.contains("format") && j["format"] != "attnlab-bundle")
    refuse(mp, "'format' must be \"attnlab-bundle\"");
  if (j.contains("version") && j["version"] != 1) refuse(mp, "only version 1 is known");
  if (j.contains("model") && j["model"].is_string()) b.model = j["model"].get<std::string>();
  if (j.contains("tokens") && !j["tokens"].is_null()) {
    if (!j["tokens"].is_array()) refuse(mp, "'tokens' must be a list of strings");
    for (const Json& t : j["tokens"]) {
      if (!t.is_string()) refuse(mp, "'tokens' must be a list of strings");
      b.tokens.push_back(t.get<std::string>());
    }
  }
  if (!j.contains("calls") || !j["calls"].is_array() || j["calls"].empty())
    refuse(mp, "has no 'calls' (a list with one entry per captured attention call)");
  for (std::size_t i = 0; i < j["calls"].size(); ++i) {
    const Json& c = j["calls"][i];
    const std::string where = mp + ": call " + std::to_string(i);
    if (!c.is_object()) refuse(where, "must be an object");
    BundleCall bc;
    if (c.contains("name") && c["name"].is_string()) bc.name = c["name"].get<std::string>();
    bc.heads = get_int(c, "heads", where, 1);
    bc.kv_heads = c.contains("kv_heads") ? get_int(c, "kv_heads", where, 1) : bc.heads;
    if (bc.heads % bc.kv_heads != 0)
      refuse(where, std::to_string(bc.heads) + " query heads cannot share " +
                        std::to_string(bc.kv_heads) + " key/value heads evenly");
    bc.n = get_int(c, "n", where, 1);
    bc.m = get_int(c, "m", where, 1);
    bc.d_k = get_int(c, "d_k", where, 1);
    bc.d_v = get_int(c, "d_v", where, 1);
    if (c.contains("scale") && !c["scale"].is_null()) {
      if (!c["scale"].is_number()) refuse(where, "'scale' must be a number or null");
      const double s = c["scale"].get<double>();
      if (!std::isfinite(s) || s <= 0) refuse(where, "'scale' must be a finite number > 0, got " + format_number("%.9g", s));
      // The default written out as a number stays the default (the lab's 1/sqrt(d_k) wording).
      if (std::abs(s * std::sqrt(static_cast<double>(bc.d_k)) - 1.0) > 1e-7) bc.scale = s;
    }
    if (c.contains("causal") && !c["causal"].is_null()) {
      if (!c["causal"].is_boolean()) refuse(where, "'causal' must be true or false");
      bc.causal = c["causal"].get<bool>();
    }
    bc.q = get_file(c, "q", where, false);
    bc.k = get_file(c, "k", where, false);
    bc.v = get_file(c, "v", where, false);
    bc.mask = get_file(c, "mask", where, true);
    bc.bias = get_file(c, "bias", where, true);
    bc.output = get_file(c, "output", where, true);
    if (c.contains("rope_theta") && !c["rope_theta"].is_null()) {
      if (!c["rope_theta"].is_number()) refuse(where, "'rope_theta' must be a number (RoPE's base) or null");
      const double t = c["rope_theta"].get<double>();
      if (!std::isfinite(t) || t <= 0)
        refuse(where, "'rope_theta' must be a finite number > 0 (RoPE's base, such as 10000) or null, got " +
                          format_number("%.9g", t));
      if (bc.d_k % 2 != 0)
        refuse(where, "'rope_theta' needs an even d_k (RoPE pairs value c with c + d_k/2), got d_k " +
                          std::to_string(bc.d_k));
      bc.rope_theta = t;
    }
    if (c.contains("notes") && !c["notes"].is_null()) {
      if (!c["notes"].is_array()) refuse(where, "'notes' must be a list of strings");
      for (const Json& t : c["notes"]) {
        if (!t.is_string()) refuse(where, "'notes' must be a list of strings");
        bc.notes.push_back(t.get<std::string>());
      }
    }
    if (bc.causal && !bc.mask.empty()) refuse(where, "has both 'causal' and a 'mask' (write the causal mask into the mask)");
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
    throw InputError("--layer " + layer + " is out of range: the bundle has " + std::to_string(count) +
                     " attention calls (0.." + std::to_string(count - 1) + ")");
  }
  for (int i = 0; i < count; ++i)
    if (b.calls[i].name == layer && !layer.empty()) return i;
  std::string names;
  for (int i = 0; i < count && i < 6; ++i) names += (i ? ", " : "") + b.calls[i].name;
  if (count > 6) names += ", …";
  throw InputError("--layer '" + layer + "' is neither an index (0.." + std::to_string(count - 1) +
                   ") nor a call name of the bundle (" + names + ")");
}

Problem bundle_problem(const Bundle& b, int layer, std::optional<int> head) {
  if (layer < 0 || layer >= static_cast<int>(b.calls.size()))
    throw InputError("layer " + std::to_string(layer) + " is not in the bundle");
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
  in.q.resize(static_cast<Eigen::Index>(count) * c.n, c.d_k);
  in.k.resize(static_cast<Eigen::Index>(count) * c.m, c.d_k);
  in.v.resize(static_cast<Eigen::Index>(count) * c.m, c.d_v);
  for (int i = 0; i < count; ++i) {
    const int h = first + i, kvh = h / group;
    in.q.middleRows(static_cast<Eigen::Index>(i) * c.n, c.n) = q.middleRows(static_cast<Eigen::Index>(h) * c.n, c.n);
    in.k.middleRows(static_cast<Eigen::Index>(i) * c.m, c.m) = k.middleRows(static_cast<Eigen::Index>(kvh) * c.m, c.m);
    in.v.middleRows(static_cast<Eigen::Index>(i) * c.m, c.m) = v.middleRows(static_cast<Eigen::Index>(kvh) * c.m, c.m);
  }
  p.scale = c.scale;

  if (!c.mask.empty()) {
    const std::string path = (std::filesystem::path(b.dir) / c.mask).string();
    if (!std::filesystem::exists(path))
      throw InputError(path + ": missing (the manifest's mask of call " + std::to_string(layer) + " '" + c.name + "')");
    const MatrixF mk = read_mask(path);
    if (mk.cols() != c.m || (mk.rows() != c.n && mk.rows() != static_cast<Eigen::Index>(c.heads) * c.n))
      throw InputError(path + ": mask of call " + std::to_string(layer) + " '" + c.name + "' is " +
                       std::to_string(mk.rows()) + "x" + std::to_string(mk.cols()) + " but the manifest says " +
                       std::to_string(c.n) + "x" + std::to_string(c.m) + " (one for every head) or " +
                       std::to_string(c.heads * c.n) + "x" + std::to_string(c.m) + " (one per head)");
    if (mk.rows() == c.n) {
      in.custom_mask = mk;
    } else {
      in.custom_mask = mk.middleRows(static_cast<Eigen::Index>(first) * c.n, c.n);
      for (int i = 1; i < count; ++i)
        if (mk.middleRows(static_cast<Eigen::Index>(first + i) * c.n, c.n) != p.custom_mask())
          throw InputError("call " + std::to_string(layer) + " '" + c.name +
                           "' has a different mask for each head; the lab shares one mask between "
                           "heads: pick one head with --head");
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

  p.source = "bundle " + b.dir + (b.model.empty() ? std::string() : " (" + b.model + ")") + ", call " +
             std::to_string(layer) + " of " + std::to_string(b.calls.size()) +
             (c.name.empty() ? std::string() : " '" + c.name + "'") + ", " +
             (head ? "head " + std::to_string(*head) + " of " + std::to_string(c.heads)
                   : "all " + std::to_string(c.heads) + " heads") +
             (c.kv_heads != c.heads ? " (" + std::to_string(c.kv_heads) + " key/value heads, each shared by " +
                                          std::to_string(group) + " query heads)"
                                    : std::string());
  p.source_zh = "bundle " + b.dir + (b.model.empty() ? std::string() : "（" + b.model + "）") + "，调用 " +
                std::to_string(layer) + "（共 " + std::to_string(b.calls.size()) + " 个）" +
                (c.name.empty() ? std::string() : "“" + c.name + "”") + "，" +
                (head ? "头 " + std::to_string(*head) + "（共 " + std::to_string(c.heads) + " 个）"
                      : "全部 " + std::to_string(c.heads) + " 个头") +
                (c.kv_heads != c.heads ? "（" + std::to_string(c.kv_heads) + " 个键/值头，每个由 " +
                                             std::to_string(group) + " 个查询头共享）"
                                       : std::string());
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
