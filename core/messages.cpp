// The message catalogue (see messages.h).
#include "core/messages.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>
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
    {Msg::UnknownBackend, "unknown backend '{0}' (use auto, cpu or cuda)", "未知的后端“{0}”（可用 auto、cpu 或 cuda）"},
    {Msg::FullyMaskedRow, "row {0} ({1}) is fully masked: every key is -inf, so its softmax is undefined",
     "行 {0}（{1}）被完全屏蔽：所有键都是 −∞，其 softmax 无定义"},
    {Msg::ShapeKColumns, "K has {0} columns but Q has {1} (both must be d_k)", "K 有 {0} 列而 Q 有 {1} 列（两者都必须是 d_k）"},
    {Msg::ShapeVRows, "V has {0} rows but K has {1} (one value per key)", "V 有 {0} 行而 K 有 {1} 行（每个键一个值）"},
    {Msg::QueriesOverKeys, "the queries are the last positions of the keys: there can be no more queries than keys, got {0} queries and {1} keys",
     "查询是键序列的最后若干位置：查询数不能多于键数，当前为 {0} 个查询、{1} 个键"},
    {Msg::KvHeads, "{0} query heads cannot share {1} key/value heads evenly (the key/value heads must divide the query heads)",
     "{0} 个查询头无法平均共享 {1} 个键/值头（键/值头数必须整除查询头数）"},
    {Msg::OverflowScores, "QKᵀ overflows at row {0}, column {1} (inputs too large for this precision and temperature)",
     "QKᵀ 在行 {0}、列 {1} 溢出（输入对当前精度和温度过大）"},
    {Msg::OverflowLogits,
     "the logits (scaled scores / temperature) overflow at row {0}, column {1} (inputs too large for this "
     "precision and temperature)",
     "logits（缩放分数 / 温度）在行 {0}、列 {1} 溢出（输入对当前精度和温度过大）"},
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
    {Msg::NotText, "{0}: byte {1} is a NUL byte, so this is no CSV or text file (binary data?); not read further",
     "{0}：偏移 {1} 处的字节是 NUL，所以这不是 CSV 或文本文件（二进制数据？）；不再继续读取"},
    {Msg::ValueOutOfRange, "{0}: value {1} is out of float32 range", "{0}：数值 {1} 超出 float32 范围"},
    {Msg::ValueNotFinite, "{0}: value {1} is not finite", "{0}：数值 {1} 不是有限数"},
    {Msg::CsvMaskEntry, "{0}: mask entries must be 0 or -inf, got {1}", "{0}：掩码元素只能是 0 或 -inf，当前为 {1}"},
    {Msg::EmptyValueAtEnd, "{0}: empty value (the line ends with a comma)", "{0}：空值（行末是逗号）"},
    {Msg::EmptyValueCommas, "{0}: empty value (two commas in a row or a leading comma)",
     "{0}：空值（连续两个逗号或行首是逗号）"},
    {Msg::NpyVersion, "{0}: .npy format version {1}.{2} is not supported (1.0, 2.0 and 3.0 are)",
     "{0}：不支持 .npy 格式版本 {1}.{2}（支持 1.0、2.0 和 3.0）"},
    {Msg::NpyHeaderTruncated, "{0}: .npy header is truncated", "{0}：.npy 文件头不完整"},
    {Msg::NpyDtype,
     "{0}: dtype {1} is not supported; expected little-endian float32 '<f4', float64 '<f8' or integers ('<i8', "
     "'<i4', '|u1', ...)",
     "{0}：不支持数据类型 {1}；应为小端 float32 “<f4”、float64 “<f8”或整数（“<i8”、“<i4”、“|u1”等）"},
    {Msg::NpyFortran, "{0}: Fortran-order arrays are not supported; save with np.ascontiguousarray",
     "{0}：不支持 Fortran 顺序的数组；请用 np.ascontiguousarray 保存"},
    {Msg::NpyRank, "{0}: expected a 2-D array, got rank {1} (shape {2})", "{0}：应为二维数组，当前为 {1} 维（形状 {2}）"},
    {Msg::NpyEmpty, "{0}: array is empty (shape {1})", "{0}：数组为空（形状 {1}）"},
    {Msg::NpyTrailing, "{0}: {1} unexpected bytes after the data of shape {2} (is the file corrupt or more than one array?)",
     "{0}：形状 {2} 的数据之后多出 {1} 个字节（文件损坏，或不止一个数组？）"},
    {Msg::NpyMaskEntry, "{0}: mask entries must be 0 or -inf, got {1} at [{2}, {3}]",
     "{0}：掩码元素只能是 0 或 -inf，位置 [{2}, {3}] 为 {1}"},
    {Msg::NpyValueNotFinite, "{0}: value {1} at [{2}, {3}] is not finite", "{0}：位置 [{2}, {3}] 的数值 {1} 不是有限数"},
    {Msg::NpyValueOutOfRange, "{0}: value {1} at [{2}, {3}] is out of float32 range",
     "{0}：位置 [{2}, {3}] 的数值 {1} 超出 float32 范围"},
    {Msg::MatrixNonFinite, "{0} has a non-finite value ({1}) at row {2}, column {3}",
     "{0} 在行 {2}、列 {3} 有非有限值（{1}）"},
    {Msg::MatrixEmpty, "{0} is empty", "{0} 为空"},
    {Msg::QueryTokenCount, "there are {0} query tokens but Q has {1} rows", "有 {0} 个查询 token，但 Q 有 {1} 行"},
    {Msg::KeyTokenCount, "there are {0} key tokens but K has {1} rows", "有 {0} 个键 token，但 K 有 {1} 行"},
    {Msg::MaskShape, "the mask is {0}x{1} but the scores are {2}x{3}", "掩码为 {0}x{1}，而分数矩阵为 {2}x{3}"},
    {Msg::MaskEntryAt, "mask entries must be 0 or -inf, got {0} at row {1}, column {2}",
     "掩码元素只能是 0 或 -inf，行 {1}、列 {2} 为 {0}"},
    {Msg::TokenLabelCount,
     "{0}: the number of labels is {1}, but the problem has n = {2} queries and m = {3} keys: give n + m = {4} "
     "(queries first, then keys)",
     "{0} 给出 {1} 个标签，而问题有 {2} 个查询和 {3} 个键（应给 n + m = {4} 个标签：先查询，后键）"},
    {Msg::MaskWord, "--mask '{0}' is neither none, causal nor an existing mask file",
     "--mask “{0}”既不是 none、causal，也不是已有的掩码文件"},
    {Msg::TokensBoth, "give either --tokens or --tokens-file, not both", "--tokens 与 --tokens-file 只能二选一"},
    {Msg::OnlyComments, "{0}: no numbers (only blank lines and comments)", "{0}：没有数字（只有空行和注释）"},
    {Msg::NpyExpected, "{0}: malformed .npy header: expected {1}", "{0}：.npy 文件头格式错误：此处应为 {1}"},
    {Msg::NpyExpectedString, "{0}: malformed .npy header: expected a quoted string",
     "{0}：.npy 文件头格式错误：此处应为带引号的字符串"},
    {Msg::NpyUnterminated, "{0}: malformed .npy header: unterminated string", "{0}：.npy 文件头格式错误：字符串没有结束引号"},
    {Msg::NpyDuplicateKey, "{0}: malformed .npy header: duplicate key {1}", "{0}：.npy 文件头格式错误：键 {1} 重复"},
    {Msg::NpyUnexpectedKey, "{0}: malformed .npy header: unexpected key {1}", "{0}：.npy 文件头格式错误：多余的键 {1}"},
    {Msg::NpyMissingKey, "{0}: malformed .npy header: missing key {1}", "{0}：.npy 文件头格式错误：缺少键 {1}"},
    {Msg::NpyStructured, "{0}: malformed .npy header: structured dtypes are not supported; save a plain float array",
     "{0}：.npy 文件头格式错误：不支持结构化 dtype；请保存普通浮点数组"},
    {Msg::NpyTrailingBytes, "{0}: malformed .npy header: unexpected bytes after the dictionary",
     "{0}：.npy 文件头格式错误：字典之后有多余的字节"},
    {Msg::NpyFortranValue, "{0}: malformed .npy header: fortran_order must be True or False",
     "{0}：.npy 文件头格式错误：fortran_order 必须是 True 或 False"},
    {Msg::NpyRankTooHigh, "{0}: malformed .npy header: shape has more than {1} dimensions",
     "{0}：.npy 文件头格式错误：形状超过 {1} 维"},
    {Msg::NpyDimTooLarge, "{0}: malformed .npy header: shape dimension is too large",
     "{0}：.npy 文件头格式错误：形状的某一维过大"},
    {Msg::NpyDimNotInteger, "{0}: malformed .npy header: shape dimensions must be non-negative integers",
     "{0}：.npy 文件头格式错误：形状的各维必须是非负整数"},
    {Msg::NpyHeaderClaims, "{0}: .npy header is truncated (it claims {1} bytes, {2} follow its length field)",
     "{0}：.npy 文件头不完整（声称 {1} 字节，长度字段之后只有 {2} 字节）"},
    {Msg::NpyShapeTooLarge, "{0}: shape {1} is too large", "{0}：形状 {1} 过大"},
    {Msg::NpyDataTruncated, "{0}: data is truncated: shape {1} of {2} needs {3} x {4} bytes, the file has {5}",
     "{0}：数据不完整：{2} 形状 {1} 需要 {3} x {4} 字节，文件只有 {5} 字节"},
    {Msg::CannotWrite, "cannot write '{0}': {1}", "无法写入“{0}”：{1}"},
    {Msg::FileTooLarge, "{0}: the file has {1} bytes, more than {2} (the largest input a problem can have); not read",
     "{0}：文件有 {1} 字节，超过 {2}（一个问题所能有的最大输入）；未读取"},
    {Msg::EmptyToken, "empty token at position {0} in {1} (tokens are comma separated, e.g. 'a,b,c')",
     "{1} 中第 {0} 个 token 为空（token 用逗号分隔，例如“a,b,c”）"},
    {Msg::NoTokens, "{0}: no tokens (the file is empty or blank)", "{0}：没有 token（文件为空或只有空白）"},
    {Msg::QueryListEmptyItem, "a list of queries takes indices or tokens separated by commas, got '{0}'",
     "查询列表应是用逗号分隔的序号或 token，收到“{0}”"},
    {Msg::QueryListTooLong, "at most {0} queries at once, got {1}", "最多同时选择 {0} 个查询，收到 {1} 个"},
    // precision and diff views (issue 14)
    {Msg::DiffEmpty,
     "--diff needs KEY=VALUE[,KEY=VALUE...] with keys mask, temperature, backend, variant, precision, query; got nothing",
     "--diff 需要 KEY=VALUE[,KEY=VALUE...]，键为 mask、temperature、backend、variant、precision、query；当前为空"},
    {Msg::DiffItem, "--diff item '{0}' is not KEY=VALUE", "--diff 的条目“{0}”不是 KEY=VALUE 形式"},
    {Msg::DiffKeyUnknown, "--diff key '{0}' is unknown (use mask, temperature, backend, variant, precision, query)",
     "--diff 的键“{0}”未知（可用 mask、temperature、backend、variant、precision、query）"},
    {Msg::DiffKeyTwice, "--diff key '{0}' is given twice", "--diff 的键“{0}”给了两次"},
    {Msg::DiffValue, "--diff {0}='{1}' is invalid: {0} takes one of {2}", "--diff {0}=“{1}”无效：{0} 可取 {2} 之一"},
    {Msg::Bf16StagedCuda,
     "bf16 on CUDA exists only in the fused kernel; the staged chain in bf16 runs on the CPU backend",
     "CUDA 上的 bf16 只有融合内核；bf16 分步链请用 CPU 后端"},
    {Msg::Bf16Streamed,
     "bf16 runs here keep every stage, so they need N <= {1}; N = {0} is streamed in fp32 only",
     "这里的 bf16 运行要保留全部阶段，因此需要 N <= {1}；N = {0} 只能以 fp32 流式计算"},
    {Msg::RunPrecision, "--precision must be fp32 or bf16, got '{0}'", "--precision 必须是 fp32 或 bf16，当前为“{0}”"},
    {Msg::HostMemoryCpuRun,
     "the problem ({0} chain on the CPU): needs about {1} of host memory, {2} available; try --variant fused or a "
     "smaller N",
     "该问题（CPU 上的 {0} 计算链）约需 {1} 主机内存，可用 {2}；请试 --variant fused 或更小的 N"},
    {Msg::GpuMemoryStaged,
     "problem needs {0} of GPU memory (staged: 4 stages of {1} x {2} x {3} fp32, the inputs), {4} free; try "
     "--variant fused or smaller N",
     "该问题需要 {0} GPU 显存（分步链：4 个 {1} x {2} x {3} 的 fp32 阶段和输入），空闲 {4}；请试 --variant fused "
     "或更小的 N"},
    {Msg::GpuMemoryStagedMask,
     "problem needs {0} of GPU memory (staged: 4 stages of {1} x {2} x {3} fp32, the inputs and the mask), {4} free; "
     "try --variant fused or smaller N",
     "该问题需要 {0} GPU 显存（分步链：4 个 {1} x {2} x {3} 的 fp32 阶段、输入和掩码），空闲 {4}；请试 --variant "
     "fused 或更小的 N"},
    {Msg::GpuMemoryFused, "problem needs {0} of GPU memory (fused: inputs and output), {1} free; try smaller N",
     "该问题需要 {0} GPU 显存（融合内核：输入和输出），空闲 {1}；请试更小的 N"},
    {Msg::HostMemoryStages,
     "problem needs {4} of host memory to bring back the stages ({0} x {1} x {2} x {3} fp32), {5} available; try "
     "--variant fused or smaller N",
     "取回各阶段需要 {4} 主机内存（{0} x {1} x {2} x {3} 的 fp32），可用 {5}；请试 --variant fused 或更小的 N"},
    {Msg::GpuMemoryStreamed,
     "the streamed view needs {0} of GPU memory (the inputs, {1} row statistics, the pooled grids, {2} exact rows of "
     "{3} keys), {4} free; try smaller N",
     "流式视图需要 {0} GPU 显存（输入、{1} 行统计、池化网格、{2} 个含 {3} 个键的精确行），空闲 {4}；请试更小的 N"},
    {Msg::HostMemoryStreamed,
     "the streamed view needs {0} of host memory (pooled grids, exact rows, output), {1} available; try fewer rows "
     "or smaller N",
     "流式视图需要 {0} 主机内存（池化网格、精确行、输出），可用 {1}；请减少行数或用更小的 N"},
    {Msg::HeadsRange, "--heads must be an integer from 1 to {0}, got '{1}'", "--heads 必须是 1 到 {0} 的整数，当前为“{1}”"},
    {Msg::ExportStreamed, "this stage is not kept (N = {0} is streamed); export it with: {1}",
     "这一阶段未保留（N = {0} 为流式计算）；请用此命令导出：{1}"},
    {Msg::ExportPending, "this step's matrix is still being brought back from the backend; export it in a moment",
     "这一步的矩阵还在从后端取回；请稍后再导出"},
    {Msg::ExportJsonTooLarge, "the whole trace as JSON is written from the window up to N = {0} (here {1}); use: {2}",
     "窗口只在 N ≤ {0} 时导出完整 JSON（当前 N = {1}）；请用：{2}"},
    {Msg::ExportJsonStages,
     "the whole trace as JSON needs every stage, and this window brings back only the step on screen and the "
     "weights (--stages); start it with --stages all, or use: {0}",
     "完整 JSON 需要全部阶段，而本窗口只取回当前步骤和注意力权重（--stages）；请以 --stages all 启动，或用：{0}"},
    {Msg::ExportNoHeatmap, "no heatmap has been drawn yet", "还没有画出热力图"},
    {Msg::RandomInputsTooLarge,
     "--random {0} --dk {1} --dv {2} --heads {3} needs {4} for Q, K and V alone; the viewer's limit is {5}",
     "--random {0} --dk {1} --dv {2} --heads {3} 仅 Q、K、V 就需要 {4}；查看器的上限是 {5}"},
    {Msg::MaskBundle, "--mask does not apply to --bundle: the bundle holds each call's mask",
     "--mask 不适用于 --bundle：数据包里每次调用都带着自己的掩码"},
    {Msg::MaskBundleFixed, "a bundle's call holds its own mask: it cannot be switched here",
     "数据包里的调用带着自己的掩码：这里不能切换"},
    {Msg::HeadOutside, "head {0} is out of range: 0..{1}", "头 {0} 超出范围：0..{1}"},
    {Msg::LayerOutside, "layer {0} is not in the bundle", "层 {0} 不在数据包中"},
    {Msg::RunOutOfMemory, "the run needed more memory than this machine has left; the picture is the last state that ran",
     "这次运行所需的内存超过本机剩余内存；画面保留上一次成功运行的状态"},
    {Msg::RunDeviceFailed, "the GPU failed ({0}); the picture is the last state that ran",
     "GPU 出错（{0}）；画面保留上一次成功运行的状态"},
    {Msg::CudaUnusable, "no usable NVIDIA GPU or driver: the lab runs on the CPU",
     "没有可用的 NVIDIA GPU 或驱动：实验室在 CPU 上运行"},
    {Msg::RopeTheta, "RoPE's base θ must be a finite number > 0, got {0}", "RoPE 的底数 θ 必须是大于 0 的有限数，当前为 {0}"},
    {Msg::RopeOddDim, "RoPE turns pairs of values: d_k must be even, got {0}",
     "RoPE 成对旋转数值：d_k 必须是偶数，当前为 {0}"},
    {Msg::SoftcapInvalid, "the soft-cap C must be a finite fp32 number > 0 (from 1.2e-38 to 3.4e38), got {0}",
     "软上限 C 必须是大于 0 的有限 fp32 数（1.2e-38 到 3.4e38 之间），当前为 {0}"},
    {Msg::WindowInvalid, "the window W must be a whole number >= 1 (at most 9 digits), got {0}", "窗口 W 必须是 ≥ 1 的整数（至多 9 位），当前为 {0}"},
    {Msg::PrefixInvalid, "the prefix P must be a whole number from 1 to the {1} positions, got {0}",
     "前缀 P 必须是 1 到 {1}（位置数）之间的整数，当前为 {0}"},
    {Msg::PrefixNotWhole, "the prefix P must be a whole number >= 1 (at most 9 digits), got {0}", "前缀 P 必须是 ≥ 1 的整数（至多 9 位），当前为 {0}"},
    {Msg::AlibiSlopeCount, "ALiBi takes one slope shared by every head or one per head ({1} in all), got {0}",
     "ALiBi 需要一个斜率（所有头共用）或每个头一个（共 {1} 个头），当前给了 {0} 个"},
    {Msg::AlibiSlopeValue, "an ALiBi slope must be a finite fp32 number (at most 3.4e38 in magnitude), got {0}",
     "ALiBi 斜率必须是有限的 fp32 数（绝对值不超过 3.4e38），当前为 {0}"},
    {Msg::BiasShape, "the bias is {0}x{1} but must be {2}x{3} (shared by every head) or {4}x{3} (one per head)",
     "偏置为 {0}x{1}，但必须是 {2}x{3}（所有头共用）或 {4}x{3}（每个头一份）"},
    {Msg::BiasValue, "bias entries must be finite numbers, got {0} at row {1}, column {2}",
     "偏置的元素必须是有限数，行 {1}、列 {2} 为 {0}"},
    {Msg::DocumentsLength, "there are {0} document ids but {1} positions: give one id per position",
     "文档编号有 {0} 个，但共有 {1} 个位置：每个位置需要一个编号"},
    {Msg::DocumentsValue, "document ids must be whole numbers from -16777215 to 16777215, got {0} at position {1}",
     "文档编号必须是 -16777215 到 16777215 之间的整数，位置 {1} 为 {0}"},
    {Msg::ScoreModUnknown,
     "unknown score modification '{0}': use alibi, alibi:S or alibi:S1/S2/..., softcap:C, bias:FILE, joined by ',' or '+'",
     "未知的分数修改“{0}”：可用 alibi、alibi:S 或 alibi:S1/S2/...、softcap:C、bias:FILE，以“,”或“+”连接"},
    {Msg::MaskModUnknown,
     "unknown mask modification '{0}': use none, causal, window:W, document:FILE or prefix:P, joined by ',' or '+'",
     "未知的掩码修改“{0}”：可用 none、causal、window:W、document:FILE 或 prefix:P，以“,”或“+”连接"},
    {Msg::ModTwice, "'{0}' is given twice", "“{0}”给了两次"},
    {Msg::CausalWithMaskFile,
     "the mask modification 'causal' does not go with a mask file: put the causal blocks into the file, or use the causal mask instead of the file",
     "掩码修改“causal”不能与掩码文件同用：请把因果屏蔽写进文件，或改用因果掩码代替文件"},
    {Msg::TokensAbove, "{0} has {1} rows per head: the lab takes at most {2} tokens per head",
     "{0} 每个头有 {1} 行：本实验室每个头最多 {2} 个 token"},
    {Msg::OverflowScoresRow, "QKᵀ overflows in head {0}, query row {1} (inputs too large for {2})",
     "QKᵀ 在头 {0}、查询行 {1} 溢出（输入对 {2} 过大）"},
    {Msg::OverflowLogitsRow,
     "the logits (scaled scores / temperature) overflow in head {0}, query row {1} (inputs too large for {2} at "
     "this temperature)",
     "logits（缩放分数 / 温度）在头 {0}、查询行 {1} 溢出（输入对 {2} 在当前温度下过大）"},
    {Msg::OverflowOutputRow, "the output overflows {2} in head {0}, query row {1} (its values do not fit {2})",
     "输出在头 {0}、查询行 {1} 超出 {2} 范围（结果无法用 {2} 表示）"},
    {Msg::OverflowGradients, "the backward's gradients overflow fp32 (inputs or dO too large)",
     "反向传播的梯度超出 fp32 范围（输入或 dO 过大）"},
    {Msg::CudaNotBuilt, "attnlab was built without CUDA", "attnlab 构建时未启用 CUDA"},
    {Msg::CudaNoDeviceFound, "cudaGetDeviceCount found no device", "cudaGetDeviceCount 没有找到设备"},
    {Msg::CudaNoDeviceBare, "no CUDA device", "没有可用的 CUDA 设备"},
    {Msg::CudaBackwardNotBuilt, "the CUDA backward is not in this build", "此构建不含 CUDA 反向传播"},
    // the lab's remaining refusals
    {Msg::FileTooLargeMiB,
     "{0}: the file has {1} bytes ({2}), more than {3} (the largest input a problem can have); not read",
     "{0}：文件有 {1} 字节（{2}），超过 {3}（一个问题所能有的最大输入）；未读取"},
    {Msg::TokenLabelCountEither,
     "{0}: the number of labels is {1}, but the problem has n = {2} queries and m = {3} keys: give {4} (one per "
     "position) or n + m = {5} (queries first, then keys)",
     "{0} 给出 {1} 个标签，而问题有 {2} 个查询和 {3} 个键（应给 {4} 个：每个位置一个；或 n + m = {5} 个：先查询，后键）"},
    {Msg::BiasShapeShared, "the bias is {0}x{1} but must be {2}x{3}", "偏置为 {0}x{1}，但必须是 {2}x{3}"},
    // problems, heads, splits and the query
    {Msg::ScaleInvalid, "scale must be a finite number > 0 and at most fp32's largest (3.40282347e+38), got {0}",
     "缩放系数必须是大于 0 且不超过 fp32 最大值（3.40282347e+38）的有限数，当前为 {0}"},
    {Msg::HeadsMin, "heads must be >= 1, got {0}", "头数必须 ≥ 1，当前为 {0}"},
    {Msg::KvGroupDivide, "kv_group (query heads per key/value head) must divide the {0} heads, got {1}",
     "kv_group（每个键/值头对应的查询头数）必须整除头数 {0}，当前为 {1}"},
    {Msg::RowsOverHeads, "Q has {0} rows and K has {1}: neither may leave a remainder over {2} heads",
     "Q 有 {0} 行，K 有 {1} 行：两者都必须能被 {2} 个头整除"},
    {Msg::RowsOverHeadsKv,
     "Q has {0} rows and K has {1}: neither may leave a remainder over {2} heads ({3} key/value heads)",
     "Q 有 {0} 行，K 有 {1} 行：两者都必须能按 {2} 个头（{3} 个键/值头）整除"},
    {Msg::RandomDims, "random problems need N, d_k, d_v and heads >= 1", "随机问题要求 N、d_k、d_v 和头数都 ≥ 1"},
    {Msg::OptionRange, "{0} must be between {1} and {2}, got {3}", "{0} 必须在 {1} 到 {2} 之间，当前为 {3}"},
    {Msg::DecodeViewKvHeads, "decode_view takes a problem with one key/value head per head",
     "decode_view 只接受每个头各有一个键/值头的问题"},
    {Msg::SplitRange, "--split must be between 1 and the number of keys ({0}), got {1}",
     "--split 必须在 1 到键数（{0}）之间，当前为 {1}"},
    {Msg::LabelAmbiguous, "label '{0}' names {1} rows; give the index", "标签“{0}”对应 {1} 行；请给出序号"},
    {Msg::QueryIndexRange, "query index {0} is out of range: there are {1} queries (0..{2})",
     "查询序号 {0} 超出范围：共有 {1} 个查询（0..{2}）"},
    {Msg::QueryUnknown, "query '{0}' is not a token or index of this problem; tokens are: {1}",
     "查询“{0}”既不是本问题的 token，也不是序号；token 有：{1}"},
    {Msg::QueryRowRange, "query row {0} is out of range: there are {1} queries", "查询行 {0} 超出范围：共有 {1} 个查询"},
    // synthetic patterns
    {Msg::PatternUnknown, "--pattern must be noise, local:W (W >= 0), sink, previous or induction, got '{0}'",
     "--pattern 必须是 noise、local:W（W ≥ 0）、sink、previous 或 induction，当前为“{0}”"},
    {Msg::PatternDk, "--pattern {0} needs --dk >= {1}, got {2}", "--pattern {0} 需要 --dk ≥ {1}，当前为 {2}"},
    {Msg::PatternWindow, "--pattern local:W needs W < N, got local:{0} with N {1}",
     "--pattern local:W 需要 W < N，当前为 local:{0}，而 N 为 {1}"},
    {Msg::PatternNoGapWindow,
     "--pattern {0} cannot be built for N {1} with --dk {2}: the window does not stand out from the other keys; "
     "use a larger --dk or a smaller W",
     "--pattern {0} 无法在 N 为 {1}、--dk 为 {2} 时构造：窗口内的键不比其他键突出；请用更大的 --dk 或更小的 W"},
    {Msg::PatternNoGapPrevious,
     "--pattern {0} cannot be built for N {1} with --dk {2}: the previous key does not stand out from the other "
     "keys; use a larger --dk",
     "--pattern {0} 无法在 N 为 {1}、--dk 为 {2} 时构造：前一个键不比其他键突出；请用更大的 --dk"},
    // the backward's upstream gradient
    {Msg::LossMseTarget, "--loss mse needs its target: --loss mse:FILE (Y, heads·n x d_v, CSV or .npy)",
     "--loss mse 需要目标：--loss mse:FILE（Y，头数·n x d_v，CSV 或 .npy）"},
    {Msg::LossUnknown,
     "unknown loss '{0}': use --loss sum (L = Σ O) or --loss mse:FILE (L = ½ Σ (O − Y)², Y from FILE)",
     "未知的损失“{0}”：请用 --loss sum（L = Σ O）或 --loss mse:FILE（L = ½ Σ (O − Y)²，Y 取自 FILE）"},
    {Msg::DoutShape,
     "dO (--dout {0}) is {1} x {2}, but the output O is {3} x {4} (heads·n x d_v: {5} x {6} query rows, {4} "
     "columns)",
     "dO（--dout {0}）为 {1} x {2}，而输出 O 为 {3} x {4}（头数·n x d_v：{5} x {6} 个查询行，{4} 列）"},
    {Msg::TargetShape,
     "the target Y (--loss mse:{0}) is {1} x {2}, but the output O is {3} x {4} (heads·n x d_v: {5} x {6} query "
     "rows, {4} columns)",
     "目标 Y（--loss mse:{0}）为 {1} x {2}，而输出 O 为 {3} x {4}（头数·n x d_v：{5} x {6} 个查询行，{4} 列）"},
    {Msg::DoutNotFinite, "dO (--dout {0}) holds {1} at row {2}, column {3}: every value must be finite",
     "dO（--dout {0}）在行 {2}、列 {3} 为 {1}：每个值都必须是有限数"},
    {Msg::TargetNotFinite, "the target Y (--loss mse:{0}) holds {1} at row {2}, column {3}: every value must be finite",
     "目标 Y（--loss mse:{0}）在行 {2}、列 {3} 为 {1}：每个值都必须是有限数"},
    // bundles
    {Msg::BundleMissing, "--bundle {0}: no such directory", "--bundle {0}：目录不存在"},
    {Msg::BundleNotDir, "--bundle {0}: not a directory", "--bundle {0}：不是目录"},
    {Msg::BundleNoManifest, "{0}: missing (a bundle holds manifest.json and .npy files)",
     "{0}：文件不存在（数据包由 manifest.json 和 .npy 文件组成）"},
    {Msg::BundleJson, "{0}: not valid JSON (line {1}, column {2})", "{0}：不是有效的 JSON（第 {1} 行第 {2} 列）"},
    {Msg::BundleJsonValue, "{0}: not valid here: a number out of a double's range", "{0}：无法读取：有数值超出 double 的范围"},
    {Msg::BundleNotObject, "{0}: must hold a JSON object", "{0}：必须是一个 JSON 对象"},
    {Msg::BundleFormat, "{0}: 'format' must be the JSON string \"attnlab-bundle\"",
     "{0}：“format”必须是 JSON 字符串 \"attnlab-bundle\""},
    {Msg::BundleVersion, "{0}: only version 1 is known", "{0}：只支持版本 1"},
    {Msg::BundleStrings, "{0}: '{1}' must be a list of strings", "{0}：“{1}”必须是字符串列表"},
    {Msg::BundleString, "{0}: '{1}' must be a string", "{0}：“{1}”必须是字符串"},
    {Msg::BundleNoCalls, "{0}: has no calls ('calls' must be a list with one entry per captured attention call)",
     "{0}：没有调用（“calls”必须是每次捕获的注意力调用各占一项的列表）"},
    {Msg::BundleAllSkipped,
     "{0}: has no calls: every attention call ({1}) was skipped when it was captured, the first, '{2}', because: {3}",
     "{0}：没有调用：捕获时每个注意力调用（{1} 个）都被跳过了，第一个“{2}”的原因：{3}"},
    {Msg::BundleCallObject, "{0}: call {1}: must be an object", "{0}：调用 {1}：必须是对象"},
    {Msg::BundleCallNoKey, "{0}: call {1}: has no '{2}'", "{0}：调用 {1}：缺少“{2}”"},
    {Msg::BundleCallNotWhole, "{0}: call {1}: '{2}' must be a whole number", "{0}：调用 {1}：“{2}”必须是整数"},
    {Msg::BundleCallIntRange, "{0}: call {1}: '{2}' must be between {3} and {4}, got {5}",
     "{0}：调用 {1}：“{2}”必须在 {3} 到 {4} 之间，当前为 {5}"},
    {Msg::BundleCallKvHeads, "{0}: call {1}: {2} query heads cannot share {3} key/value heads evenly",
     "{0}：调用 {1}：{2} 个查询头无法平均共享 {3} 个键/值头"},
    {Msg::BundleCallNoFile, "{0}: call {1}: has no '{2}' file", "{0}：调用 {1}：缺少“{2}”文件"},
    {Msg::BundleCallFileName, "{0}: call {1}: '{2}' must be a file name", "{0}：调用 {1}：“{2}”必须是文件名"},
    {Msg::BundleCallFileOutside, "{0}: call {1}: '{2}' must name a file inside the bundle, got '{3}'",
     "{0}：调用 {1}：“{2}”必须是数据包内的文件，当前为“{3}”"},
    {Msg::BundleScaleType, "{0}: call {1}: 'scale' must be a number or null", "{0}：调用 {1}：“scale”必须是数字或 null"},
    {Msg::BundleScaleValue,
     "{0}: call {1}: 'scale' must be a finite number > 0 and at most fp32's largest (3.40282347e+38), got {2}",
     "{0}：调用 {1}：“scale”必须是大于 0 且不超过 fp32 最大值（3.40282347e+38）的有限数，当前为 {2}"},
    {Msg::BundleCausalType, "{0}: call {1}: 'causal' must be true or false", "{0}：调用 {1}：“causal”必须是 true 或 false"},
    {Msg::BundleRopeType, "{0}: call {1}: 'rope_theta' must be a number (RoPE's base) or null",
     "{0}：调用 {1}：“rope_theta”必须是数字（RoPE 的底数）或 null"},
    {Msg::BundleRopeValue,
     "{0}: call {1}: 'rope_theta' must be a finite number > 0 (RoPE's base, such as 10000) or null, got {2}",
     "{0}：调用 {1}：“rope_theta”必须是大于 0 的有限数（RoPE 的底数，如 10000）或 null，当前为 {2}"},
    {Msg::BundleRopeOdd, "{0}: call {1}: 'rope_theta' needs an even d_k (RoPE pairs value c with c + d_k/2), got d_k {2}",
     "{0}：调用 {1}：“rope_theta”要求 d_k 为偶数（RoPE 把第 c 个值与第 c + d_k/2 个值配对），当前 d_k 为 {2}"},
    {Msg::BundleCallStrings, "{0}: call {1}: '{2}' must be a list of strings", "{0}：调用 {1}：“{2}”必须是字符串列表"},
    {Msg::BundleCallString, "{0}: call {1}: '{2}' must be a string", "{0}：调用 {1}：“{2}”必须是字符串"},
    {Msg::BundleCausalAndMask, "{0}: call {1}: has both 'causal' and a 'mask' (write the causal mask into the mask)",
     "{0}：调用 {1}：同时有“causal”和“mask”（请把因果屏蔽写进掩码）"},
    {Msg::BundleFileMissing, "{0}: missing (the manifest's {1} of call {2} '{3}')",
     "{0}：文件不存在（清单中调用 {2}“{3}”的 {1}）"},
    {Msg::BundleArrayShape, "{0}: {1} of call {2} '{3}' is {4}x{5} but the manifest says {6}x{7} ({8})",
     "{0}：调用 {2}“{3}”的 {1} 为 {4}x{5}，但清单写的是 {6}x{7}（{8}）"},
    {Msg::BundleArrayShapeHeads,
     "{0}: {1} of call {2} '{3}' is {4}x{5} but the manifest says {6}x{7} (shared by every head) or {8}x{7} (one "
     "per head)",
     "{0}：调用 {2}“{3}”的 {1} 为 {4}x{5}，但按清单应为 {6}x{7}（所有头共用）或 {8}x{7}（每个头一份）"},
    {Msg::BundleArrayShapeOne, "{0}: {1} of call {2} '{3}' is {4}x{5} but the manifest says {6}x{7}",
     "{0}：调用 {2}“{3}”的 {1} 为 {4}x{5}，但清单写的是 {6}x{7}"},
    {Msg::BundleBiasNotFinite,
     "{0}: value {1} is not finite (the bias of call {2} '{3}' holds finite numbers; keys a model blocks belong in "
     "the mask, as -inf)",
     "{0}：数值 {1} 不是有限数（调用 {2}“{3}”的偏置只含有限数；模型屏蔽的键应写进掩码，记为 -inf）"},
    {Msg::BundleBiasNotFiniteAt,
     "{0}: value {1} at [{2}, {3}] is not finite (the bias of call {4} '{5}' holds finite numbers; keys a model "
     "blocks belong in the mask, as -inf)",
     "{0}：位置 [{2}, {3}] 的数值 {1} 不是有限数（调用 {4}“{5}”的偏置只含有限数；模型屏蔽的键应写进掩码，记为 -inf）"},
    {Msg::BundleHeadRange, "--head {0} is out of range: call '{1}' has heads 0..{3} ({2} in all)",
     "--head {0} 超出范围：调用“{1}”有 {2} 个头（0..{3}）"},
    {Msg::LayerRange, "--layer {0} is out of range: the bundle's attention calls are 0..{2} ({1} in all)",
     "--layer {0} 超出范围：数据包有 {1} 次注意力调用（0..{2}）"},
    {Msg::LayerUnknown, "--layer '{0}' is neither an index (0..{1}) nor a call name of the bundle ({2})",
     "--layer 的值“{0}”既不是序号（0..{1}），也不是数据包中调用的名字（{2}）"},
    {Msg::BundleMaskPerHead,
     "call {0} '{1}' has a different mask for each head; the lab shares one mask between heads: pick one head with "
     "--head",
     "调用 {0}“{1}”的每个头有各自的掩码，而本实验室让所有头共用一个掩码：请用 --head 选一个头"},
    {Msg::BundleMaskRowBlocked,
     "{0}: row {1} blocks every key (the mask of call {2} '{3}'): that query's softmax is undefined",
     "{0}：行 {1} 屏蔽了所有键（调用 {2}“{3}”的掩码）：该查询的 softmax 无定义"},
    // the command line's options
    {Msg::QueriesRange, "--queries must be between 1 and N = {0} (the last Q of the N positions), got {1}",
     "--queries 必须在 1 到 N = {0} 之间（N 个位置中的最后 Q 个），当前为 {1}"},
    {Msg::KvHeadsRange, "--kv-heads must be between 1 and --heads {0}, got {1}",
     "--kv-heads 必须在 1 到 --heads {0} 之间，当前为 {1}"},
    {Msg::RandomRows, "--random {0} with --heads {1} gives 2^31 rows or more (heads x N must stay below 2^31)",
     "--random {0} 配合 --heads {1} 会有 2^31 行或更多（头数 x N 必须小于 2^31）"},
    {Msg::RandomInputsLimit, "--random {0} --dk {1} --dv {2} --heads {3} needs {4} for Q, K and V alone; the limit is {5}",
     "--random {0} --dk {1} --dv {2} --heads {3} 仅 Q、K、V 就需要 {4}；上限是 {5}"},
    {Msg::RandomInputsHost,
     "--random {0} --dk {1} --dv {2} --heads {3}: Q, K and V alone need about {4} of host memory, {5} available; "
     "try a smaller N",
     "--random {0} --dk {1} --dv {2} --heads {3}：仅 Q、K、V 就约需 {4} 主机内存，可用 {5}；请试更小的 N"},
    {Msg::OnlyRandomDemo, "{0} applies to --random problems only (the demo has its own values)",
     "{0} 只适用于 --random 问题（演示有自己的数值）"},
    {Msg::OnlyRandomBundle, "{0} applies to --random problems only (the bundle gives its shapes and values)",
     "{0} 只适用于 --random 问题（数据包自带形状和数值）"},
    {Msg::OnlyRandomFiles, "{0} applies to --random problems only (the files give the shapes and values)",
     "{0} 只适用于 --random 问题（文件决定形状和数值）"},
    {Msg::PatternNeedsRandom, "--pattern describes a random problem: add --random N",
     "--pattern 描述的是随机问题：请加上 --random N"},
    {Msg::ShapesRandom, "{0} shapes a random problem: add --random N (files and bundles carry their own shapes)",
     "{0} 设定的是随机问题的形状：请加上 --random N（文件和数据包自带形状）"},
    {Msg::HeadApplies, "--head applies to --bundle or to --random N --heads H",
     "--head 只适用于 --bundle 或 --random N --heads H"},
    {Msg::FilesOrRandom, "give either --q/--k/--v files or --random N, not both",
     "--q/--k/--v 文件与 --random N 只能二选一"},
    {Msg::OneInput, "give one input: --bundle DIR, --q/--k/--v files or --random N",
     "只能给一种输入：--bundle DIR、--q/--k/--v 文件或 --random N"},
    {Msg::HeadsBundle, "--heads applies to --random problems only (use --head H for one head of a bundle)",
     "--heads 只适用于 --random 问题（要数据包的某一个头，请用 --head H）"},
    {Msg::HeadsRandomOnly, "--heads applies to --random problems only", "--heads 只适用于 --random 问题"},
    {Msg::NeedInputs, "run needs its inputs: --q FILE --k FILE --v FILE, --random N or --bundle DIR",
     "run 需要输入：--q FILE --k FILE --v FILE、--random N 或 --bundle DIR"},
    {Msg::LayerBundleOnly, "--layer applies to --bundle only", "--layer 只适用于 --bundle"},
    {Msg::DoutSeed, "--dout-seed must be a whole number from 0 to 18446744073709551615, got '{0}'",
     "--dout-seed 必须是 0 到 18446744073709551615 之间的整数，当前为“{0}”"},
    {Msg::UpstreamTwice, "give the upstream gradient once: --dout FILE or --loss sum|mse:FILE, not both",
     "上游梯度只能给一次：--dout FILE 与 --loss sum|mse:FILE 只能二选一"},
    {Msg::DoutSeedWith, "--dout-seed seeds the random dO; it does not apply with --dout or --loss",
     "--dout-seed 是随机 dO 的种子；与 --dout 或 --loss 同用时不适用"},
    {Msg::SplitVariant, "--split S goes with --variant decode (the split-KV kernel), got --variant {0}",
     "--split S 须配合 --variant decode（split-KV 内核），当前为 --variant {0}"},
    // attnlab backward
    {Msg::BackwardCudaFused,
     "backward on CUDA is the fused backward: add --variant fused (the staged backward runs on the CPU)",
     "CUDA 上的反向传播是融合反向传播：请加上 --variant fused（分步反向传播在 CPU 上运行）"},
    {Msg::BackwardVariant,
     "backward runs --variant staged (every gradient kept as a matrix) or fused (FlashAttention-2's backward), not {0}",
     "反向传播可用 --variant staged（每个梯度都保留为矩阵）或 fused（FlashAttention-2 的反向传播），不能用 {0}"},
    {Msg::BackwardPrecision,
     "backward computes in fp32 (--check compares it with fp64; bf16 on --backend cuda only); --precision {0} is "
     "not available for the backward",
     "反向传播以 fp32 计算（--check 将其与 fp64 比较；bf16 仅限 --backend cuda）；反向传播不支持 --precision {0}"},
    {Msg::BackwardCheckBf16,
     "--check holds fp32 gradients within their derived bounds; the bf16 backward's are checked by the GPU tests "
     "(tests/gpu/test_cuda_backward.cpp)",
     "--check 检查 fp32 梯度是否在推导出的界内；bf16 反向传播的梯度由 GPU 测试检查（tests/gpu/test_cuda_backward.cpp）"},
    {Msg::BackwardSplit, "--split applies to --variant decode, which backward does not run",
     "--split 只用于 --variant decode，而反向传播没有这一变体"},
    {Msg::BackwardCheckCsv, "--check prints its comparison with text, markdown or json, not csv",
     "--check 的比较结果以 text、markdown 或 json 输出，不支持 csv"},
    {Msg::HostMemoryBackward,
     "backward (the {0} run, every gradient): needs about {1} of host memory, {2} available; try a smaller N",
     "反向传播（{0} 运行及全部梯度）约需 {1} 主机内存，可用 {2}；请试更小的 N"},
    {Msg::HostMemoryBackwardCheck,
     "backward (the {0} run, every gradient, the fp64 check): needs about {1} of host memory, {2} available; try a "
     "smaller N",
     "反向传播（{0} 运行、全部梯度及 fp64 检查）约需 {1} 主机内存，可用 {2}；请试更小的 N"},
    {Msg::HostMemoryBackwardAll,
     "backward (the {0} run, every gradient): needs about {1} of host memory, {2} available; try a smaller N, or "
     "--format text, which summarises",
     "反向传播（{0} 运行及全部梯度）约需 {1} 主机内存，可用 {2}；请试更小的 N，或用只给摘要的 --format text"},
    {Msg::HostMemoryBackwardCheckAll,
     "backward (the {0} run, every gradient, the fp64 check): needs about {1} of host memory, {2} available; try a "
     "smaller N, or --format text, which summarises",
     "反向传播（{0} 运行、全部梯度及 fp64 检查）约需 {1} 主机内存，可用 {2}；请试更小的 N，或用只给摘要的 --format text"},
    // the command line's remaining value checks
    {Msg::WalkFormat, "walk prints text, json or markdown, not '{0}' (--format csv is for demo, run and backward)",
     "walk 输出 text、json 或 markdown，不输出“{0}”（--format csv 用于 demo、run 与 backward）"},
    {Msg::WalkTileRange, "--tile must be between 1 and the number of keys ({0}), got {1}",
     "--tile 必须在 1 到键数（{0}）之间，当前为 {1}"},
    {Msg::WalkBackwardOnly, "--dout, --loss and --dout-seed go with --backward",
     "--dout、--loss 和 --dout-seed 须与 --backward 同用"},
    {Msg::WalkSplitBackward, "--split walks the forward's split-KV merge; it does not go with --backward",
     "--split 逐步演示前向的 split-KV 合并，不能与 --backward 同用"},
    {Msg::WalkBackwardCuda,
     "walk --backward runs the CPU fused backward's step (the CUDA backward is compared by the GPU tests)",
     "walk --backward 演示的是 CPU 融合反向的步骤（CUDA 反向由 GPU 测试比对）"},
    {Msg::ToleranceInvalid, "{0} must be a finite number >= 0, got {1}", "{0} 必须是不小于 0 的有限数，当前为 {1}"},
    {Msg::VerifyFormat, "verify prints text or json, not '{0}'", "verify 输出 text 或 json，不输出“{0}”"},
    {Msg::DescribeFormat,
     "describe prints a paragraph: --format text, markdown or json, not '{0}' (csv is for demo, run and backward)",
     "describe 输出一段文字：--format 可为 text、markdown 或 json，不可为“{0}”（csv 用于 demo、run 与 backward）"},
    {Msg::MaskNeedsValue, "--mask needs none, causal or a FILE", "--mask 需要 none、causal 或一个文件"},
    {Msg::FormatUnknown, "unknown format '{0}' (choose text, json, csv or markdown)",
     "未知的格式“{0}”（可选 text、json、csv 或 markdown）"},
    {Msg::VariantUnknown, "unknown variant '{0}' (use staged, fused or decode)",
     "未知的计算方式“{0}”（可用 staged、fused 或 decode）"},
    {Msg::PrecisionUnknown, "unknown precision '{0}' (use fp32 or bf16)", "未知的精度“{0}”（可用 fp32 或 bf16）"},
    {Msg::DocumentsQueriesOverKeys, "document ids need every query at a key's position, so no more queries than keys: got {0} queries and {1} keys",
     "文档编号要求每个查询都位于某个键的位置，因此查询数不能多于键数：当前为 {0} 个查询、{1} 个键"},
    {Msg::GpuMemoryBackward,
     "the backward needs {0} of GPU memory (inputs, dO, the output and every gradient), {1} free; try smaller N",
     "反向传播需要 {0} GPU 显存（输入、dO、输出和全部梯度），空闲 {1}；请试更小的 N"},
    {Msg::WalkTileCount, "--tile must be a whole number of keys per tile >= 1, got '{0}'",
     "--tile 必须是每块的键数，不小于 1 的整数，当前为“{0}”"},
    {Msg::WalkHeadCount, "--head must be a whole number >= 0, got '{0}'", "--head 必须是不小于 0 的整数，当前为“{0}”"},
    {Msg::WriteStdout, "could not write to standard output", "无法写入标准输出"},
    {Msg::NumberDigits, "{0} must be a whole number of at most 9 digits, got '{1}'",
     "{0} 必须是至多 9 位的整数，当前为“{1}”"},
    {Msg::NumberWhole, "{0} must be a whole number, got '{1}'", "{0} 必须是整数，当前为“{1}”"},
    {Msg::NumberAny, "{0} must be a number, got '{1}'", "{0} 必须是数字，当前为“{1}”"},
    {Msg::NumberDecimal, "{0} must be a decimal whole number, got '{1}'", "{0} 必须是十进制整数，当前为“{1}”"},
    {Msg::SeedRange, "{0} must be a whole number from 0 to 18446744073709551615, got '{1}'",
     "{0} 必须是 0 到 18446744073709551615 之间的整数，当前为“{1}”"},
    {Msg::DiffTemperature, "--diff {0}='{1}' is invalid: {0} takes a finite number > 0",
     "--diff {0}=“{1}”无效：{0} 须是大于 0 的有限数"},
    {Msg::DiffQuery, "--diff query='' is invalid: query takes a token or a 0-based index",
     "--diff query=“”无效：query 须是一个 token 或从 0 起的下标"},
    {Msg::TemperatureFp32, "temperature {0} is above fp32's largest number (3.4e38), in which the kernels divide by it",
     "温度 {0} 超过 fp32 的最大值（3.4e38），而内核在 fp32 中除以它"},
    {Msg::AlibiSlopeRange,
     "ALiBi slope {0} times the largest distance {1} does not fit fp32 (the bias -slope·|i - j| would overflow)",
     "ALiBi 斜率 {0} 乘以最大距离 {1} 超出 fp32 的范围（偏置 −slope·|i − j| 会溢出）"},
    {Msg::ModNoneAlone, "{0} '{1}': none means no modification and stands alone, not beside others",
     "{0}“{1}”：none 表示没有修改，只能单独使用，不能与其他修改同列"},
    {Msg::HostMemoryCpuOnline,
     "the problem ({0} kernel on the CPU): needs about {1} of host memory, {2} available; try a smaller N",
     "该问题（CPU 上的 {0} 内核）约需 {1} 主机内存，可用 {2}；请试更小的 N"},
    {Msg::TokenControl,
     "token label {0} contains a control character (a line break or a tab), which would break the printed tables: {1}",
     "第 {0} 个 token 标签含有控制字符（换行或制表符），会打乱输出的表格：{1}"},
    {Msg::TokenUtf8, "token label {0} is not valid UTF-8 (the tables, CSV and the viewer take UTF-8 text): {1}",
     "第 {0} 个 token 标签不是有效的 UTF-8（表格、CSV 和查看器只接受 UTF-8 文本）：{1}"},
    {Msg::BundleTokenLabel, "{0}: token {1} contains a control character or is not valid UTF-8: {2}",
     "{0}：第 {1} 个 token 含有控制字符或不是有效的 UTF-8：{2}"},
    {Msg::BundleGivesRope,
     "--rope: the bundle's call carries its own RoPE base (θ = {0}), which is not replaced",
     "--rope：数据包的这个调用自带 RoPE 底数（θ = {0}），不能替换"},
    {Msg::BundleGivesBias,
     "--score-mod bias: the bundle's call carries its own bias ({0}); the other score modifications add to it, a "
     "second bias is refused",
     "--score-mod bias：bundle 的这个调用自带偏置（{0}）；其他分数修改会叠加在它之上，但不能再给第二个偏置"},
    {Msg::LayerAmbiguous, "--layer '{0}' names {1} calls ({2}): give the call's index",
     "--layer“{0}”对应 {1} 个调用（{2}）：请给出调用的编号"},
    {Msg::DocumentsShape, "{0}: the document ids are a {1}x{2} matrix; give them as one row or one column, one per position",
     "{0}：文档编号是 {1}x{2} 的矩阵；请写成一行或一列，每个位置一个"},
    {Msg::ModFileMissing, "'{0}' names no file: give {1}", "“{0}”没有给出文件：请写成 {1}"},
    {Msg::HostMemoryVerify,
     "verify (the {0} run and the fp64 reference of every stage): needs about {1} of host memory, {2} available; "
     "try a smaller N",
     "verify（{0} 运行及每个阶段的 fp64 参考）约需 {1} 主机内存，可用 {2}；请试更小的 N"},
    {Msg::HostMemoryRender,
     "writing every stage as {0} ({1} numbers): needs about {2} of host memory, {3} available; use --format text, "
     "which summarises, --variant fused, or a smaller N",
     "把每个阶段写成 {0}（{1} 个数）约需 {2} 主机内存，可用 {3}；请用只给摘要的 --format text、--variant fused 或更小的 N"},
    {Msg::OutOfHostMemory, "out of host memory (try a smaller problem)", "主机内存不足（请试更小的问题）"},
    {Msg::CudaFallback, "CUDA failed ({0}); falling back to the CPU", "CUDA 出错（{0}）；改用 CPU 运行"},
    {Msg::CudaRefusedFallback, "CUDA refused the problem ({0}); falling back to the CPU", "CUDA 拒绝了该问题（{0}）；改用 CPU 运行"},
    {Msg::BenchRefFull, "fp64 full", "fp64 全部"},
    {Msg::BenchRefRows, "fp64 {0} rows of head 0", "fp64，头 0 的 {0} 行"},
    {Msg::BenchRefBackwardFull, "fp64 backward full", "fp64 反向，全部"},
    {Msg::BenchRefBackwardDq, "fp64 backward, dQ of head 0", "fp64 反向，头 0 的 dQ"},
    {Msg::BenchRefBackwardNone, "none (one head's N x N over the fp64 backward's limit)",
     "无（单个头的 N×N 超过 fp64 反向的上限）"},
    {Msg::BenchSkipBf16Cuda, "bf16 on cuda runs only on the fused and decode kernels", "cuda 上的 bf16 只在融合和解码内核上运行"},
    {Msg::BenchSkipQueries, "more queries than keys", "查询多于键"},
    {Msg::BenchSkipBackwardDecode, "the backward runs on the staged and fused variants", "反向传播只在分步和融合变体上运行"},
    {Msg::BenchSkipCpuBackwardBf16, "the CPU backward is fp32", "CPU 反向传播只有 fp32"},
    {Msg::BenchSkipCudaBackwardBuild, "the CUDA backward is not in this build", "本构建不含 CUDA 反向传播"},
    {Msg::BenchSkipCudaBackwardFused, "the CUDA backward is the fused one", "CUDA 反向传播只有融合内核"},
    {Msg::BenchSkipCudaBackwardBf16D, "the CUDA bf16 backward takes d 64 or 128", "CUDA bf16 反向传播只接受 d 为 64 或 128"},
    {Msg::BenchSkipCudaBackwardFp32D, "the CUDA fp32 backward takes d up to 256", "CUDA fp32 反向传播只接受不超过 256 的 d"},
    {Msg::BenchSkipKvHeads, "{0} key/value heads do not divide {1} heads", "{0} 个键/值头不能整除 {1} 个头"},
    {Msg::BenchSkipSplits, "{0} splits over {1} keys (at most one split per key)", "{1} 个键分成 {0} 份（每个键至多一份）"},
    {Msg::BenchSkipBudget, "would take ~{0} s (over {1} {2})", "约需 {0} 秒（超过 {1} {2}）"},
    {Msg::BenchSkipHostMemory, "out of host memory", "主机内存不足"},
    {Msg::BenchSkipNoRound, "no interleaved round was completed", "没有完成任何一轮交替计时"},
    {Msg::BenchCancelled, "cancelled", "已取消"},
    {Msg::BenchDeviceError, "device error: {0}", "设备错误：{0}"},
    {Msg::OverflowBiased,
     "the scores with ALiBi or the bias added overflow at row {0}, column {1} (inputs or bias too large for this "
     "precision)",
     "加上 ALiBi 或偏置后的分数在行 {0}、列 {1} 溢出（输入或偏置对当前精度过大）"},
    {Msg::HostMemoryWalk,
     "writing the walk as {0} ({1} numbers): needs about {2} of host memory, {3} available; use a larger --tile, "
     "--format text or a smaller N",
     "把游走写成 {0}（{1} 个数）约需 {2} 主机内存，可用 {3}；请用更大的 --tile、--format text 或更小的 N"},
    // the viewer's own flags
    {Msg::OptionWords, "{0} must be one of {1}, got '{2}'", "{0} 必须是 {1} 之一，当前为“{2}”"},
    {Msg::OptionWordList, "{0} takes one or more of {1}, separated by commas, got '{2}'",
     "{0} 取 {1} 中的一项或多项（以逗号分隔），当前为“{2}”"},
    {Msg::IntRange, "{0} must be an integer from {1} to {2}, got '{3}'", "{0} 必须是 {1} 到 {2} 之间的整数，当前为“{3}”"},
    {Msg::DecimalRange, "{0} must be a decimal number from {1} to {2}, got '{3}'",
     "{0} 必须是 {1} 到 {2} 之间的十进制数，当前为“{3}”"},
    {Msg::SecondsRange, "{0} must be a decimal number of seconds above 0 and at most {1}, got '{2}'",
     "{0} 必须是大于 0、至多 {1} 的秒数（十进制），当前为“{2}”"},
    {Msg::SizeForm, "--size must be WxH (e.g. 1280x800), got '{0}'", "--size 必须写成 WxH（例如 1280x800），当前为“{0}”"},
    {Msg::ExportDirMissing, "--export-dir '{0}' is not a folder (missing?)", "--export-dir “{0}”不是文件夹（不存在？）"},
    {Msg::ExportDirDenied, "cannot write in --export-dir '{0}' (no permission)", "无法在 --export-dir “{0}”中写入（没有权限）"},
    {Msg::MaskFileNeedsFiles, "--mask must be none or causal, or a mask FILE together with --q, --k and --v or --random N; got '{0}'",
     "--mask 必须是 none 或 causal，或与 --q、--k、--v 或 --random N 一起给出的掩码文件；当前为“{0}”"},
    {Msg::TokensNeedFiles, "--tokens and --tokens-file label file or random inputs: add --q, --k and --v, or --random N",
     "--tokens 与 --tokens-file 标注的是文件输入或随机输入：请加上 --q、--k 和 --v，或 --random N"},
    {Msg::FuzzSeedAlone, "--fuzz-seed seeds --fuzz-events N: add it", "--fuzz-seed 是 --fuzz-events N 的种子：请加上 --fuzz-events N"},
    {Msg::BenchDecodeAlone, "--bench-decode runs alone: not with --bench-redraw, --screenshot or --fuzz-events",
     "--bench-decode 只能单独运行：不能与 --bench-redraw、--screenshot 或 --fuzz-events 同用"},
    {Msg::FuzzAlone, "--fuzz-events runs the window's loop: not with --screenshot or --bench-redraw",
     "--fuzz-events 运行的是窗口的事件循环：不能与 --screenshot 或 --bench-redraw 同用"},
    {Msg::CacheDimRope, "--cache-dim {0} with --rope: RoPE turns pairs of values, so the cache's head size must be even",
     "--cache-dim {0} 与 --rope 同用：RoPE 成对旋转数值，缓存的头维度必须是偶数"},
    {Msg::RopeDemoOdd,
     "--rope applies to the input on screen as well as to the cache, and the demo's d_k is 3 (odd): add an input "
     "of an even d_k, such as --random 64",
     "--rope 同时作用于屏幕上的输入和缓存，而演示的 d_k 为 3（奇数）：请给出 d_k 为偶数的输入，例如 --random 64"},
    {Msg::AlibiViewerSlopes,
     "attnlab-view takes alibi with the standard slopes of the heads; given slopes: attnlab run "
     "--score-mod alibi:S1/S2/...",
     "attnlab-view 的 alibi 只用各头的标准斜率；要给定斜率，请用 attnlab run --score-mod alibi:S1/S2/..."},
    {Msg::HeadBundleRange, "--head must be between 0 and the call's last head, got {0}",
     "--head 必须在 0 到该调用的最后一个头之间，当前为 {0}"},
    {Msg::DecodeNoInput, "there is no input on screen", "屏幕上没有输入"},
    {Msg::CacheHeadsDivide,
     "--cache-heads H/G needs G dividing H (G key/value heads shared by H query heads), got '{0}'",
     "--cache-heads H/G 要求 G 整除 H（H 个查询头共享 G 个键/值头），当前为“{0}”"},
    {Msg::DecodeCacheKeys, "the cache must hold 1 to {0} keys, got {1}", "缓存的键数须在 1 到 {0} 之间，当前为 {1}"},
    {Msg::DecodeHeadDim, "the head size d must be from 1 to {0}, got {1}", "头维度 d 须在 1 到 {0} 之间，当前为 {1}"},
    {Msg::DecodeHeadsMultiple, "the query heads (1 to 64) must be a multiple of the key/value heads, got {0}/{1}",
     "查询头数（1 到 64）须是键/值头数的整数倍，当前为 {0}/{1}"},
    {Msg::DecodeCacheBytes,
     "a cache of {0} GB of K and V is more than the view holds ({1} GB): fewer keys, key/value heads or a smaller d",
     "缓存的 K 与 V 共 {0} GB，超过本视图的上限 {1} GB：请减少键数、键/值头数或 d"},
    {Msg::ViewLossSum, "--loss in the viewer takes sum (dO = 1 everywhere), got '{0}'",
     "查看器中的 --loss 只取 sum（dO 处处为 1），当前为“{0}”"},
    {Msg::BackStepNeeds, "--back-step {0} opens on the gradient of a stage that a modification adds: it needs {1}",
     "--back-step {0} 打开的是某项修改所加阶段的梯度：需要 {1}"},
    {Msg::ChainSubNeeds, "--chain-sub {0} shows a stage of step 2 that score mods add: it needs {1}",
     "--chain-sub {0} 显示的是分数修改在第 2 步加入的阶段：需要 {1}"},
    {Msg::ChainRopeNeeds, "--chain-rope {0} shows RoPE's Q or K: it needs --rope [THETA] (and an even d_k)",
     "--chain-rope {0} 显示的是 RoPE 的 Q 或 K：需要 --rope [THETA]（且 d_k 为偶数）"},
    {Msg::PerfSizesForm, "{0} takes a list (256,512,1024) or a doubling range (256..16384), got '{1}'",
     "{0} 取一个列表（256,512,1024）或一个倍增范围（256..16384），当前为“{1}”"},
    {Msg::PerfRangeDown, "{0} range {1} must go up", "{0} 的范围 {1} 必须从小到大"},
    {Msg::QueryAndQueries, "give --query Q or --queries LIST, not both", "--query Q 与 --queries LIST 只能二选一"},
    {Msg::RepeatAlone, "--repeat R counts the temperature changes of --bench-redraw: add it",
     "--repeat R 是 --bench-redraw 的温度改变次数：请加上 --bench-redraw"},
    {Msg::OutputIsInput, "--output '{0}' is the file that {1} reads: the result would overwrite an input; name another file",
     "--output “{0}”正是 {1} 读取的文件：结果会覆盖输入；请换一个文件名"},
    {Msg::HostMemoryBackwardStaged,
     "backward (the {0} run, every gradient as a heads·n x m matrix): needs about {1} of host memory, {2} available; "
     "--variant fused computes the same gradients without those matrices, or try a smaller N",
     "反向传播（{0} 运行，每个梯度都是头数·n x m 的矩阵）约需 {1} 主机内存，可用 {2}；--variant fused "
     "不存这些矩阵也能算出同样的梯度，或请试更小的 N"},
};

constexpr bool in_order() {
  for (std::size_t i = 0; i < std::size(kMessages); ++i)
    if (static_cast<std::size_t>(kMessages[i].id) != i) return false;
  return true;
}
static_assert(std::size(kMessages) == static_cast<std::size_t>(Msg::Count_), "one entry per Msg");
static_assert(in_order(), "kMessages must follow the order of enum Msg");

// The arguments are data, left as they are (core/messages.h), but for two reasons that read in
// the language of the rest: why there is no CUDA device (cuda_reason_text) and the system's
// reason for a file error (strerror's words, which the lab's messages carry in English: the
// program keeps the C locale), here in Chinese for the errors a user meets; any other
// reason stays as the system gives it. Matched through strerror itself, not its wording.
std::string file_reason_zh(const std::string& reason) {
  static const std::pair<int, const char*> kReasons[] = {
      {ENOENT, "没有这个文件或目录"}, {EACCES, "没有权限"},       {EISDIR, "这是一个目录"},
      {ENOTDIR, "路径中有一部分不是目录"}, {ENOSPC, "设备上没有剩余空间"}, {EROFS, "只读文件系统"},
      {ENAMETOOLONG, "文件名太长"},   {EMFILE, "打开的文件太多"}, {EFBIG, "文件太大"},
      {EIO, "输入/输出错误"},         {EDQUOT, "超出磁盘配额"},   {EPERM, "不允许的操作"},
      {ELOOP, "符号链接层数太多"},
  };
  for (const auto& [code, zh] : kReasons)
    if (reason == std::strerror(code)) return zh;
  return reason;
}

}  // namespace

std::string render_message(Msg id, const std::vector<std::string>& args, Lang lang) {
  // The reason after "no CUDA device: " is the runtime's words, or one of the lab's own, which
  // read in the language of the rest.
  if (id == Msg::NoDevice && lang != Lang::En && !args.empty()) {
    std::vector<std::string> said = args;
    said[0] = cuda_reason_text(said[0], lang);
    if (said[0] != args[0]) return render_message(id, said, lang);
  }
  // So does a file error's reason.
  if ((id == Msg::CannotOpen || id == Msg::CannotRead || id == Msg::CannotWrite) && lang == Lang::Zh && args.size() > 1) {
    std::vector<std::string> said = args;
    said[1] = file_reason_zh(said[1]);
    if (said[1] != args[1]) return render_message(id, said, lang);
  }
  const auto i = static_cast<std::size_t>(id);
  const std::string_view t = i < std::size(kMessages) ? (lang == Lang::Zh ? kMessages[i].zh : kMessages[i].en) : "{0}";
  std::string out;
  for (std::size_t k = 0; k < t.size(); ++k) {
    if (t[k] == '{' && k + 2 < t.size() && t[k + 2] == '}' && t[k + 1] >= '0' && t[k + 1] <= '9') {
      const std::size_t a = static_cast<std::size_t>(t[k + 1] - '0');
      // A value the code quoted ('0x10', a CSV token, a dtype) takes the Chinese marks in Chinese
      // (one with quotes of its own inside, such as ',' / '}', stays as it is).
      const bool quoted = a < args.size() && args[a].size() >= 2 && args[a].front() == '\'' &&
                          args[a].back() == '\'' && std::count(args[a].begin(), args[a].end(), '\'') == 2;
      // The Chinese marks take no blank beside a Chinese character: "当前为 {0}" keeps its blank
      // before a number and drops it before “abc”.
      const auto chinese_at = [](std::string_view s, std::size_t at) {
        return at < s.size() && static_cast<unsigned char>(s[at]) >= 0x80;
      };
      if (quoted && lang == Lang::Zh) {
        if (out.size() >= 2 && out.back() == ' ' && chinese_at(out, out.size() - 2)) out.pop_back();
        out += "“" + args[a].substr(1, args[a].size() - 2) + "”";
        if (k + 4 < t.size() && t[k + 3] == ' ' && chinese_at(t, k + 4)) ++k;
      } else if (a < args.size()) {
        out += args[a];
      }
      k += 2;
    } else {
      out += t[k];
    }
  }
  return out;
}

std::string cuda_reason_text(const std::string& reason, Lang lang) {
  static const std::string prefix = render_message(Msg::NoDevice, {""}, Lang::En);  // "no CUDA device: "
  if (reason.rfind(prefix, 0) == 0)
    return render_message(Msg::NoDevice, {cuda_reason_text(reason.substr(prefix.size()), lang)}, lang);
  for (const Msg id : {Msg::CudaNotBuilt, Msg::CudaNoDeviceFound, Msg::CudaNoDeviceBare, Msg::CudaBackwardNotBuilt})
    if (reason == render_message(id, {}, Lang::En)) return render_message(id, {}, lang);
  return reason;
}

InputError::InputError(Msg id_, std::vector<std::string> args_)
    : std::runtime_error(render_message(id_, args_, Lang::En)), id(id_), args(std::move(args_)) {}

Message message_of(const std::exception& e) {
  if (const auto* ie = dynamic_cast<const InputError*>(&e); ie && ie->id != Msg::None)
    return Message{ie->id, ie->args, e.what()};
  return Message{Msg::None, {}, e.what()};
}

}  // namespace attnlab
