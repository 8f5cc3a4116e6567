// attnlab core types: the matrix aliases every module shares, the lab's enums and the typed
// errors library code throws. Only `main` functions turn errors into exit codes:
//   InputError (and its NoDeviceError, ResourceError) -> exit 2, one line "error: ..."
//   DeviceError and anything else                       -> exit 1
// This header is plain C++ (no Eigen device code, no CUDA) so .cu files may include it.
#pragma once

#include <Eigen/Core>

#include <stdexcept>
#include <string>
#include <vector>
#include <string_view>

namespace attnlab {

// Row-major so that a row (one query) is contiguous, as the kernels and the .npy files see it.
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class MaskKind { None, Causal, Custom };
enum class Variant { Staged, Fused, Decode };
enum class Precision { FP32, BF16, FP64 };
enum class Lang { Zh, En };

std::string_view to_string(MaskKind m);   // "none" | "causal" | "custom"
std::string_view to_string(Variant v);    // "staged" | "fused" | "decode"
std::string_view to_string(Precision p);  // "fp32" | "bf16" | "fp64"
std::string_view to_string(Lang l);       // "zh" | "en"
// A mask's name in a sentence: the option's word in English, "无（双向）", "因果", "自定义" in Chinese.
std::string_view mask_name(MaskKind m, Lang lang);
Variant parse_variant(std::string_view s);      // throws InputError on anything else
Precision parse_precision(std::string_view s);  // throws InputError on anything else
Lang parse_lang(std::string_view s);            // throws InputError on anything else
// zh when the locale that names the messages' language (LC_ALL, else LC_MESSAGES, else LANG: the
// first set and not empty) starts with "zh", else en.
Lang lang_from_env();

// The lab's messages in a translatable form (core/messages.h has the catalogue, en and zh): an
// error thrown with an id carries its arguments, so the viewer can show it in its UI language;
// what() is always the English text the command line prints.
enum class Msg : int;

// Bad input from the user: wrong shapes, bad temperature, malformed files, unknown tokens.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
  InputError(Msg id, std::vector<std::string> args);  // core/messages.cpp
  Msg id{};           // Msg::None: English only
  std::vector<std::string> args;
};
// `--backend cuda` without a usable device ("no CUDA device: <reason>").
struct NoDeviceError : InputError {
  using InputError::InputError;
};
// A problem whose estimated memory need exceeds what the host or the device has.
struct ResourceError : InputError {
  using InputError::InputError;
};
// A run stopped because its caller asked it to (RunOptions::cancel): a newer request superseded it.
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("cancelled") {}
};
// A CUDA call or launch failed at run time (message names the call and the CUDA error name).
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace attnlab
