// String conversions of the lab's enums and the language default from $LANG.
#include "core/types.h"
#include "core/lang_args.h"

#include "core/messages.h"

#include <cstdlib>

namespace attnlab {

std::string_view to_string(MaskKind m) {
  switch (m) {
    case MaskKind::None: return "none";
    case MaskKind::Causal: return "causal";
    case MaskKind::Custom: return "custom";
  }
  return "none";
}

std::string_view mask_name(MaskKind m, Lang lang) {
  if (lang == Lang::En) return to_string(m);
  switch (m) {
    case MaskKind::None: return "无（双向）";
    case MaskKind::Causal: return "因果";
    case MaskKind::Custom: return "自定义";
  }
  return "无（双向）";
}

std::string_view to_string(Variant v) {
  switch (v) {
    case Variant::Staged: return "staged";
    case Variant::Fused: return "fused";
    case Variant::Decode: return "decode";
  }
  return "staged";
}

std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::FP64: return "fp64";
  }
  return "fp32";
}

std::string_view to_string(Lang l) { return l == Lang::Zh ? "zh" : "en"; }

Variant parse_variant(std::string_view s) {
  if (s == "staged") return Variant::Staged;
  if (s == "fused") return Variant::Fused;
  if (s == "decode") return Variant::Decode;
  throw InputError(Msg::VariantUnknown, {std::string(s)});
}

Precision parse_precision(std::string_view s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  throw InputError(Msg::PrecisionUnknown, {std::string(s)});
}

Lang parse_lang(std::string_view s) {
  if (s == "zh") return Lang::Zh;
  if (s == "en") return Lang::En;
  throw InputError("unknown language '" + std::string(s) + "' (use zh or en)");
}

// POSIX's precedence for messages: LC_ALL, then LC_MESSAGES, then LANG, the first one set and not
// empty deciding.
Lang lang_from_env() {
  for (const char* name : {"LC_ALL", "LC_MESSAGES", "LANG"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::string_view(v).starts_with("zh") ? Lang::Zh : Lang::En;
  }
  return Lang::En;
}

Lang lang_from_args(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view value;
    if (arg == "--lang" && i + 1 < argc) value = argv[i + 1];
    else if (arg.starts_with("--lang=")) value = arg.substr(7);
    else continue;
    try {
      return parse_lang(value);
    } catch (const InputError&) {
      break;  // the refusal is of --lang itself: the environment's language
    }
  }
  return lang_from_env();
}

}  // namespace attnlab
