// The decode view's words, English and Chinese (see decode_view.h DT). Formats take printf
// arguments; the panel fills them.
#include "viewer/views/decode/decode_view.h"

#include "core/format.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace attnlab::viewer {
namespace {

struct Entry {
  DT id;
  Text text;
};

constexpr Entry kTexts[] = {
    {DT::Label, {"Decode", "解码"}},
    {DT::First, {"First token", "第一个 token"}},
    {DT::Cache, {"Cache", "缓存"}},
    {DT::CacheInput, {"the input on screen (%s tokens)", "屏幕上的输入（%s 个 token）"}},
    {DT::CacheKeys, {"random, %s keys", "随机，%s 个键"}},
    {DT::Heads, {"Heads", "头"}},
    {DT::HeadsItem, {"%s over %s", "%s共用 %s"}},  // QueryHeadCount or One, KvHeadCount or One
    {DT::Dim, {"d", "d"}},
    {DT::Splits, {"Splits", "分段"}},
    {DT::SplitsAuto, {"auto", "自动"}},
    {DT::Speed, {"tokens/s", "token/秒"}},
    {DT::TokenOf, {"token %s of %s", "第 %s 个 token，共 %s 个"}},  // 1-based, digits grouped
    {DT::Building, {"building the cache…", "正在生成缓存…"}},
    {DT::Computing, {"computing…", "计算中…"}},
    {DT::SentenceInput,
     {"Position %s, “%s”: its query reads the %s keys of the cache so far (itself and every earlier token), %s.",
      "位置 %s，“%s”：它的查询读取到目前为止缓存中的 %s 个键（它自己和之前的每个 token），%s。"}},
    {DT::SentenceCache,
     {"Position %s: %s a cache of %s (K and V of %s, %s), %s.", "位置 %s：%s%s的缓存（%s的 K 与 V，共 %s），%s。"}},
    {DT::InputNote,
     {"Decoding the input on screen: token t sees the keys of tokens 0..t, the causal mask's row t, whatever the "
      "mask is set to. The temperature is the session's.",
      "对屏幕上的输入逐 token 解码：token t 看到 token 0..t 的键，即因果掩码的行 t，与掩码设置无关。温度沿用当前设置。"}},
    {DT::StripTitle,
     {"The cache: keys in order, coloured by split; brighter = more weight for the selected head (▼ its largest)",
      "缓存：按顺序排列的键，颜色表示所属分段；越亮表示所选头给它的权重越大（▼ 为最大者）"}},
    {DT::Newest, {"the newest keys", "最新的键"}},
    {DT::Future, {"room for the tokens to come", "留给后续 token 的位置"}},
    {DT::HeadsTitle, {"Query heads and the cache rows they read", "查询头与它们读取的缓存行"}},
    {DT::HeadsShare,
     {"%d query heads share each key/value head: a token reads %s of K and V, not %s (one copy per query head).",
      "每 %d 个查询头共用一个键/值头：每个 token 读取 %s 的 K 与 V，而不是 %s（每个查询头一份）。"}},
    {DT::HeadsOwn,
     {"Every query head has its own key/value head: a token reads %s of K and V.",
      "每个查询头都有自己的键/值头：每个 token 读取 %s 的 K 与 V。"}},
    {DT::SplitsTitle,
     {"Each split's partial state for head %d (m in logit units; acc unnormalised)",
      "头 %d 在各段上的部分状态（m 以 logit 为单位；acc 未归一化）"}},
    {DT::ColSplit, {"split", "段"}},
    {DT::ColKeys, {"keys", "键"}},
    {DT::ColShare, {"share", "份额"}},
    {DT::MergeTitle,
     {"The combine (log-sum-exp): in exact arithmetic merging two states is exact, in any order; in fp32 the order "
      "changes only the rounding (the ulps below)",
      "合并（log-sum-exp）：在精确算术中两个状态的合并是精确的，与顺序无关；在 fp32 中顺序只影响舍入（见下方的 ulp）"}},
    {DT::MergeM, {"merge %d: m = max(m_A, m_B) = max(%s, %s) = %s", "合并 %d：m = max(m_A, m_B) = max(%s, %s) = %s"}},
    {DT::MergeAB, {"a = exp(m_A − m) = %s   b = exp(m_B − m) = %s", "a = exp(m_A − m) = %s   b = exp(m_B − m) = %s"}},
    {DT::MergeL, {"l = a·l_A + b·l_B = %s·%s + %s·%s = %s", "l = a·l_A + b·l_B = %s·%s + %s·%s = %s"}},
    {DT::MergeAcc, {"acc = a·acc_A + b·acc_B = %s", "acc = a·acc_A + b·acc_B = %s"}},
    {DT::MergeMore, {"… %d other merges, the same rule", "… 另有 %d 次合并，规则相同"}},
    {DT::MergeMoreOne, {"… 1 other merge, the same rule", "… 另有 1 次合并，规则相同"}},
    {DT::MergeNone,
     {"One split: nothing to merge (more splits: the Splits menu).", "只有一段：无需合并（更多分段：见“分段”菜单）。"}},
    {DT::Output, {"O = acc / l = %s", "O = acc / l = %s"}},
    {DT::CheckOnePass,
     {"Against one pass over every key: max |Δ| = %s, l differs by %s ulp.",
      "与一次遍历所有键的结果相比：max |Δ| = %s，l 相差 %s ulp。"}},
    {DT::CheckFp64, {"Against fp64: max error %s (verify's fp32 bound there %s): %s",
                     "与 fp64 相比：最大误差 %s（verify 的 fp32 界为 %s）：%s"}},
    {DT::Within, {"within", "在容差内"}},
    {DT::Outside, {"OUTSIDE", "超出容差"}},
    {DT::TimeTitle, {"Time per token", "每个 token 的时间"}},
    {DT::Bytes,
     {"K + V read per token: %s in %s = %s, %s%% of this machine's read rate (%s, all threads).",
      "每个 token 读取的 K + V：%s，用时 %s = %s，达到本机读带宽的 %s%%（%s，全部线程）。"}},
    {DT::BytesNoProbe,
     {"K + V read per token: %s in %s = %s (the machine's read rate is being measured).",
      "每个 token 读取的 K + V：%s，用时 %s = %s（正在测量本机读带宽）。"}},
    {DT::Tps, {"%s tokens/s shown (asked %s)", "每秒显示 %s 个 token（设定 %s）"}},
    {DT::TpsPaused, {"paused: Space plays", "已暂停：按空格播放"}},
    {DT::Measured, {"kernel time", "内核时间"}},
    {DT::Floor, {"bytes / read rate", "字节 / 读带宽"}},
    {DT::Caveat,
     {"Decode is memory-bound: for each key and dimension a query does 2 FLOPs on the 4 bytes of K and 2 on the 4 "
      "bytes of V, 0.5 FLOP/byte in fp32; the H/G query heads sharing a key/value head reuse what is read, "
      "(H/G)·0.5 FLOP/byte (4 at 8/1), still below a machine's ridge, so the time follows the bytes of the cache. The time is the CPU decode kernel's for every head; the checks "
      "run beside it and are not counted. Random keys give nearly even weights: the long cache teaches the bytes, "
      "the input on screen the numbers.",
      "解码受内存带宽限制：每个键每个维度，查询对 K 的 4 个字节做 2 次浮点运算，对 V 的 4 个字节再做 2 次，即 fp32 下 0.5 FLOP/字节；"
      "共用一个键/值头的 H/G 个查询头复用读到的数据，强度为 (H/G)·0.5 FLOP/字节（8/1 时为 4），仍低于机器的屋脊，所以时间随缓存的字节数增长。"
      "时间是 CPU 解码内核处理全部头所用的时间；校验另行计算，不计入。随机键的权重几乎均匀：长缓存展示的是字节，屏幕上的输入展示的是数值。"}},
    {DT::Refused, {"Refused: %s", "无法计算：%s"}},
    {DT::HeadPick, {"↑/↓ or a click picks the query head shown", "↑/↓ 或单击选择显示的查询头"}},
    {DT::SentenceFirst,
     {"Position %s, “%s”: its query reads the one key of the cache so far, its own.",
      "位置 %s，“%s”：它的查询读取缓存中目前唯一的键，即它自己的键。"}},
    // The counted parts of DT::SentenceInput and DT::SentenceCache, plural and singular.
    {DT::QueryHeads, {"each of %d query heads reads", "%d 个查询头各自读取 "}},
    {DT::QueryHead, {"%d query head reads", "%d 个查询头读取 "}},
    {DT::CacheKeyCount, {"%s keys", "%s 个键"}},
    {DT::CacheKeyOne, {"%s key", "%s 个键"}},
    {DT::KvHeadCount, {"%d key/value heads", "%d 个键/值头"}},
    {DT::KvHeadOne, {"%d key/value head", "%d 个键/值头"}},
    {DT::SplitCount, {"cut into %d splits", "分成 %d 段"}},
    {DT::SplitsParallel, {"cut into %d splits that run in parallel", "分成 %d 段并行计算"}},
    {DT::SplitOne, {"in %d split", "只有 %d 段"}},
    {DT::MergeOneKey, {"One key so far: one split, nothing to merge.", "目前只有一个键：只有一段，无需合并。"}},
    {DT::ValuesScaled,
     {"acc overflows fp32 with V as given (V near fp32's largest values), so the kernel ran on V·2^-%d, a power of "
      "two: exact; acc holds the scaled sums, O is multiplied back by 2^%d.",
      "按原 V 计算时 acc 会超出 fp32（V 接近 fp32 的最大值），所以内核用 V·2^-%d 计算（2 的幂，精确）；acc 为缩放后的和，"
      "O 乘回 2^%d。"}},
    // The counted parts of DT::HeadsItem (with KvHeadCount and KvHeadOne).
    {DT::QueryHeadCount, {"%d query heads", "%d 个查询头"}},
    {DT::QueryHeadOne, {"%d query head", "%d 个查询头"}},
    {DT::InputModsNote,
     {"The input's modifications apply at each token's own position: %s.",
      "输入的修改在每个 token 自己的位置上生效：%s。"}},
    {DT::PrefixPrompt,
     {"Positions 0 to %d are the prefix: the prompt, read in one prefill where each of its queries sees all of it. "
      "Decoding starts at its last position, %d.",
      "位置 0 到 %d 是前缀：即提示，在一次预填充中读取，其中每个查询都能看到整个前缀。解码从它的最后一个位置 %d 开始。"}},
    {DT::CustomMaskNote,
     {"The input's mask file does not apply here: each token reads the keys up to its own.",
      "输入的掩码文件在此不生效：每个 token 读取它及之前的键。"}},
    {DT::Unread,
     {"Keys 0 … %s are not read: no query sees them (the window). The kernel starts at key %s, on a panel of 16 "
      "keys, so the bytes per token stop growing with the cache.",
      "键 0 … %s 不被读取：没有查询能看到它们（窗口之外）。内核从键 %s 开始读（对齐到 16 个键的面板），所以每个 token "
      "读取的字节不再随缓存增长。"}},
    {DT::SentenceWindow,
     {"Position %s, “%s”: of the %s keys of the cache so far, its query sees the last %s (the window), %s.",
      "位置 %s，“%s”：到目前为止缓存中有 %s 个键，它的查询只看到最后 %s 个（窗口），%s。"}},
    {DT::SentenceCacheWindow,
     {"Position %s: %s, of a cache of %s, the last %s (the window; K and V of %s, %s), %s.",
      "位置 %s：%s%s的缓存中的最后 %s（窗口；%s的 K 与 V，共 %s），%s。"}},
    {DT::CacheModsNote,
     {"The modifications set in the controls apply at each token's own position: %s.",
      "控制面板中设置的修改在每个 token 自己的位置上生效：%s。"}},
    {DT::CacheBiasNote,
     {"The input's bias belongs to its own positions: a random cache does not take it.",
      "输入的偏置属于它自己的位置：随机缓存不使用它。"}},
    {DT::CacheDocumentsNote,
     {"The input's document ids belong to its own positions: a random cache does not take them.",
      "输入的文档编号属于它自己的位置：随机缓存不使用它们。"}},
};
static_assert(std::size(kTexts) == static_cast<std::size_t>(DT::Count_), "one entry per text");
constexpr bool in_order() {
  for (std::size_t i = 0; i < std::size(kTexts); ++i)
    if (kTexts[i].id != static_cast<DT>(i)) return false;
  return true;
}
static_assert(in_order(), "the entries in the order of DT");

}  // namespace

const char* dtr(Lang lang, DT t) {
  const Entry& e = kTexts[static_cast<std::size_t>(t)];
  return e.text.in(lang);
}

std::vector<std::string> decode_texts() {
  std::vector<std::string> out;
  for (const Entry& e : kTexts) {
    out.emplace_back(e.text.en);
    out.emplace_back(e.text.zh);
  }
  return out;
}

std::string rate_text(double gbs) {
  if (!(gbs > 0)) return "0 B/s";
  static const char* const units[] = {"GB/s", "MB/s", "kB/s", "B/s"};
  double v = gbs;
  int u = 0;
  // Down a unit while the figure would print below 1.00 (three significant digits in every unit).
  while (u < 3 && v < 0.995) {
    v *= 1000;
    ++u;
  }
  const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return format_number(decimals == 0 ? "%.0f" : decimals == 1 ? "%.1f" : "%.2f", v) + " " + units[u];
}

std::vector<int> merges_shown(const std::vector<WalkMerge>& ms, int most) {
  std::vector<int> order(ms.size());
  for (std::size_t i = 0; i < ms.size(); ++i) order[i] = static_cast<int>(i);
  const auto weight = [&](int i) { return (ms[i].l_a > 0 ? 1 : 0) + (ms[i].l_b > 0 ? 1 : 0); };
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return weight(x) > weight(y); });
  order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(std::max(most, 0))));
  std::sort(order.begin(), order.end());
  return order;
}

std::string share_text(double percent) {
  if (!(percent > 0)) return "0";
  if (percent >= 0.995) return format_number("%.1f", percent);
  return two_digits(percent);
}

}  // namespace attnlab::viewer
