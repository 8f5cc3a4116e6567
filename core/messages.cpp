// The message catalogue (see messages.h).
#include "core/messages.h"

#include <array>
#include <string_view>

namespace attnlab {
namespace {

struct Entry {
  Msg id;
  const char* en;
  const char* zh;
};

// In enum order: render_message indexes it by the id (checked below).
constexpr Entry kMessages[] = {
    {Msg::None, "{0}", "{0}"},
    {Msg::TemperatureInvalid, "temperature must be a finite number > 0, got {0}", "温度必须是大于 0 的有限数，当前为 {0}"},
    {Msg::QueryOutside, "query {0} is outside 0..{1}", "查询 {0} 超出范围 0..{1}"},
    {Msg::LimitCpu, "N = {0} is above the viewer's CPU limit of {1} tokens; the CUDA backend goes up to {2}",
     "N = {0} 超过查看器在 CPU 上的上限 {1} 个 token；CUDA 后端最多 {2} 个"},
    {Msg::LimitCuda, "N = {0} is above the viewer's CUDA limit of {1} tokens",
     "N = {0} 超过查看器在 CUDA 上的上限 {1} 个 token"},
    {Msg::NMin, "N must be at least 1, got {0}", "N 至少为 1，当前为 {0}"},
    {Msg::HeadDimRange, "{0} must be 1..{1}, got {2}", "{0} 必须在 1..{1} 之间，当前为 {2}"},
    {Msg::NoCustomMask, "no custom mask is loaded: load a mask file with the inputs",
     "没有载入自定义掩码：请随输入一起载入掩码文件"},
    {Msg::FilesTogether, "--q, --k and --v must be given together (missing {0})",
     "--q、--k 和 --v 必须一起给出（缺少 {0}）"},
    {Msg::NoDevice, "no CUDA device: {0}", "没有可用的 CUDA 设备：{0}"},
    {Msg::UnknownBackend, "unknown backend '{0}'", "未知的后端“{0}”"},
    {Msg::FullyMaskedRow, "row {0} ({1}) is fully masked: every key is -inf, so its softmax is undefined",
     "第 {0} 行（{1}）被完全屏蔽：所有键都是 −∞，其 softmax 无定义"},
    {Msg::ShapeKColumns, "K has {0} columns but Q has {1} (both must be d_k)", "K 有 {0} 列而 Q 有 {1} 列（两者都必须是 d_k）"},
    {Msg::ShapeVRows, "V has {0} rows but K has {1} (one value per key)", "V 有 {0} 行而 K 有 {1} 行（每个键一个值）"},
    {Msg::CausalNotSquare, "a causal mask needs as many queries as keys, got {0} queries and {1} keys",
     "因果掩码要求查询数等于键数，当前为 {0} 个查询、{1} 个键"},
    {Msg::OverflowScores, "QKᵀ overflows at row {0}, column {1} (inputs too large for this precision and temperature)",
     "QKᵀ 在第 {0} 行、第 {1} 列溢出（输入对当前精度和温度过大）"},
    {Msg::OverflowLogits,
     "the logits (scaled scores / temperature) overflows at row {0}, column {1} (inputs too large for this "
     "precision and temperature)",
     "logits（缩放分数 / 温度）在第 {0} 行、第 {1} 列溢出（输入对当前精度和温度过大）"},
    {Msg::CannotOpen, "cannot open '{0}': {1}", "无法打开“{0}”：{1}"},
    {Msg::CannotRead, "cannot read '{0}': {1}", "无法读取“{0}”：{1}"},
    {Msg::NotANumber, "{0}: {1} is not a number", "{0}：{1} 不是数字"},
    {Msg::RowLength, "{0}: row has {1} values but earlier rows have {2} (first row on line {3})",
     "{0}：该行有 {1} 个值，而前面的行有 {2} 个（第一行在第 {3} 行）"},
    {Msg::EmptyFile, "{0}: no numbers (empty file)", "{0}：没有数字（空文件）"},
    {Msg::NotNpy, "{0}: not a .npy file (it does not start with the magic \\x93NUMPY)",
     "{0}：不是 .npy 文件（开头没有 \\x93NUMPY 标记）"},
    {Msg::InputTooLarge, "{0}: more than {1} (the largest input a problem can have); not read further",
     "{0}：超过 {1}（一个问题所能有的最大输入）；不再继续读取"},
};

constexpr bool in_order() {
  for (std::size_t i = 0; i < std::size(kMessages); ++i)
    if (static_cast<std::size_t>(kMessages[i].id) != i) return false;
  return true;
}
static_assert(std::size(kMessages) == static_cast<std::size_t>(Msg::Count_), "one entry per Msg");
static_assert(in_order(), "kMessages must follow the order of enum Msg");

}  // namespace

std::string render_message(Msg id, const std::vector<std::string>& args, Lang lang) {
  const auto i = static_cast<std::size_t>(id);
  const std::string_view t = i < std::size(kMessages) ? (lang == Lang::Zh ? kMessages[i].zh : kMessages[i].en) : "{0}";
  std::string out;
  for (std::size_t k = 0; k < t.size(); ++k) {
    if (t[k] == '{' && k + 2 < t.size() && t[k + 2] == '}' && t[k + 1] >= '0' && t[k + 1] <= '9') {
      const std::size_t a = static_cast<std::size_t>(t[k + 1] - '0');
      if (a < args.size()) out += args[a];
      k += 2;
    } else {
      out += t[k];
    }
  }
  return out;
}

InputError::InputError(Msg id_, std::vector<std::string> args_)
    : std::runtime_error(render_message(id_, args_, Lang::En)), id(id_), args(std::move(args_)) {}

Message message_of(const std::exception& e) {
  if (const auto* ie = dynamic_cast<const InputError*>(&e); ie && ie->id != Msg::None)
    return Message{ie->id, ie->args, e.what()};
  return Message{Msg::None, {}, e.what()};
}

}  // namespace attnlab
