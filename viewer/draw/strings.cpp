// UI text table, scientific notes and UTF-8 helpers (see strings.h). Chinese texts follow the
// original page (../shared/seed/000_3263779550f4bc2b.txt) wherever the page has them.
#include "viewer/draw/strings.h"

#include "core/format.h"

#include <array>
#include <bit>
#include <cstdint>
#include <string_view>

namespace attnlab::viewer {
namespace {

struct Entry {
  S id;
  const char* en;
  const char* zh;
};

// Kept in enum order: tr() indexes it by the enum's value. The static_asserts below catch a
// missing line and a line out of place.
constexpr Entry kTable[] = {
    {S::AppTitle, "attnlab — scaled dot-product attention lab", "attnlab — 缩放点积注意力交互实验室"},
    {S::PageHeading, "The full computation chain", "完整计算流程"},
    {S::PageIntro,
     "Q and K have feature dimension d_k=%d; the standard scaling divides by √d_k, then the "
     "temperature adjusts how sharp the softmax is. V decides the content of the weighted output.",
     "Q 与 K 的特征维数 d_k=%d；标准缩放先除以 √d_k，再由温度调整 softmax 锐度。V 决定加权输出的内容。"},
    {S::PageIntroExplicit,
     "Q and K have feature dimension d_k=%d; the scaling is an explicit %s (not 1/√d_k), then the temperature sets "
     "the softmax's sharpness. V decides the content of the weighted output.",
     "Q 与 K 的特征维数 d_k=%d；缩放是显式的 %s（不是 1/√d_k），再由温度调整 softmax 锐度。V 决定加权输出的内容。"},
    {S::KeyboardLine, "Keyboard: Space play/pause, ← → one step, Home reset. F1: all keys.",
     "键盘：空格播放或暂停，左右方向键单步，Home 重置。F1：全部按键。"},
    {S::KeyboardLineNoSteps, "Keyboard: ↑ ↓ query, M mask, [ ] temperature (this view has no steps). F1: all keys.",
     "键盘：↑↓ 查询，M 掩码，[ ] 温度（本视图没有步骤）。F1：全部按键。"},
    {S::KeyboardLineOtherViews,
     "Keyboard: ↑ ↓ query, M mask and [ ] temperature act on the other views (this view has its own settings). F1: all keys.",
     "键盘：↑↓ 查询、M 掩码、[ ] 温度只设置其他视图（本视图有自己的设置）。F1：全部按键。"},
    {S::Controls, "Controls", "控制"},
    {S::Input, "Input", "输入"},
    {S::ModeDemo, "Demo sentence (5 tokens)", "示例句子（5 个 token）"},
    {S::ModeRandom, "Random sequence", "随机序列"},
    {S::Generate, "Generate", "生成"},
    {S::RandomLimits, "N ≤ 65536 on CPU, ≤ 1048576 on CUDA (stages kept up to 4096); d_k, d_v ≤ 1024",
     "CPU 上 N ≤ 65536，CUDA 上 N ≤ 1048576（N ≤ 4096 时保留全部阶段）；d_k、d_v ≤ 1024"},
    {S::RandomPending, "Set N, d_k, d_v and seed, then Generate; the demo stays until then",
     "设置 N、d_k、d_v 和种子后点击“生成”；在此之前仍显示演示句"},
    {S::Query, "Query token", "查询 token"},
    {S::Temperature, "Temperature T", "温度 T"},
    {S::TemperatureEntry, "Type T, Enter", "输入温度，回车"},
    {S::Mask, "Mask", "掩码"},
    {S::MaskNone, "None (bidirectional)", "无（双向）"},
    {S::MaskCausal, "Causal", "因果"},
    {S::Backend, "Backend", "后端"},
    {S::CudaUnavailable, "CUDA unavailable: %s", "CUDA 不可用：%s"},
    {S::Language, "Language", "语言"},
    {S::Steps, "Step playback", "分步播放"},
    {S::StepOf, "Step %d / 4", "步骤 %d / 4"},
    {S::Play, "Play", "播放"},
    {S::Pause, "Pause", "暂停"},
    {S::Speed, "Speed (steps/s)", "速度（步/秒）"},
    {S::Reset, "Home", "重置"},
    {S::Prev, "← Back", "← 上一步"},
    {S::Next, "Next →", "下一步 →"},
    {S::Step1, "1 · raw scores QKᵀ", "1 · QKᵀ（原始分数）"},
    {S::Step2, "2 · logits = (scaled scores + mask) / T", "2 · Mask 后 logits（(缩放分数 + mask) / 温度）"},
    {S::Step2Mods, "2 · logits = (scores after the score mods + mask) / T", "2 · Mask 后 logits（(分数修改后的分数 + mask) / 温度）"},
    {S::Step3, "3 · softmax (attention weights)", "3 · softmax（注意力权重）"},
    {S::Step4, "4 · output = weights · V", "4 · Output = softmax(...)V（加权输出）"},
    {S::TableQ, "Q (queries)", "Q（查询）"},
    {S::TableK, "K (keys)", "K（键）"},
    {S::TableV, "V (values)", "V（值）"},
    {S::TableScores, "QKᵀ (raw scores)", "QKᵀ（原始分数）"},
    {S::TableScaled, "QKᵀ / √d_k (scaled scores, d_k=%d)", "QKᵀ / √d_k（缩放分数，d_k=%d）"},
    {S::TableScaledExplicit, "QKᵀ × %s (scaled scores, explicit scale, d_k=%d)", "QKᵀ × %s（缩放分数，显式缩放，d_k=%d）"},
    {S::TableMask, "Mask (0 keeps, −∞ blocks)", "Mask（0 保留，−∞ 屏蔽）"},
    {S::TableLogits, "Masked logits (scaled scores / temperature)", "Mask 后 logits（缩放分数 / 温度）"},
    {S::TableWeights, "softmax (attention weights)", "softmax（注意力权重）"},
    {S::TableOutput, "Output = softmax(...)V", "Output = softmax(...)V（加权输出）"},
    {S::DemoTies,
     "Six cells differ from the original page in the last digit: 模型 0.50 and 1.00, 上下文 2.11 and 1.43, 分配 1.49, "
     "权重 1.12 (the page: 0.49, 0.99, 2.10, 1.44, 1.48, 1.11). Each is an exact decimal tie (0.12 + 0.2 + 0.175 = "
     "0.495) that the page's doubles and the lab's fp32 land on opposite sides of before rounding.",
     "有六个格子与原网页在最后一位不同：模型 0.50 与 1.00、上下文 2.11 与 1.43、分配 1.49、权重 1.12（网页为 0.49、"
     "0.99、2.10、1.44、1.48、1.11）。每个都恰是十进制的中点（0.12 + 0.2 + 0.175 = 0.495），网页的双精度与本实验室的 "
     "fp32 在舍入前落在中点的两侧。"},
    {S::Pooling, "Pooling", "池化"},
    {S::PoolMax, "max", "最大值"},
    {S::PoolMean, "mean", "平均值"},
    {S::ResetView, "Reset view", "重置视图"},
    {S::Zoom, "zoom %.1f×", "视图放大 %.1f×"},
    {S::PooledNote, "%d×%d matrix on %d×%d pixels (rows × columns): each pixel pools a block (%s)",
     "%d×%d 矩阵显示在 %d×%d 像素上（行×列）：每个像素池化一个区块（%s）"},
    {S::Masked, "masked", "已屏蔽"},
    {S::Legend, "scale", "色标"},
    {S::HeatHint, "rows = queries ↓, columns = %s → · click: select the query · wheel: zoom · drag: pan",
     "行 = 查询 ↓，列 = %s → · 单击选择查询 · 滚轮缩放 · 拖动平移"},
    {S::TipQuery, "query", "查询"},
    {S::TipKey, "key", "键"},
    {S::TipOutputDim, "output dim", "输出维"},
    {S::TipValue, "value", "数值"},
    {S::TipStage, "stage", "阶段"},
    {S::TipMasked, "masked (−∞ in the mask)", "已屏蔽（mask 为 −∞）"},
    {S::TipPooled, "pixel shows the %s of %s, %s: %s", "像素显示%s（%s，%s）：%s"},
    {S::RowStats, "Row statistics", "行统计"},
    {S::MaxWeight, "Max weight", "最大权重"},
    {S::Entropy, "Entropy (natural log)", "熵（自然对数）"},
    {S::Effective, "Effective positions (unmasked keys)", "有效位置（未屏蔽键数）"},
    {S::Perplexity, "Perplexity e^H", "困惑度 e^H"},
    {S::Scale, "Scale", "缩放"},
    {S::ScaleExplicit, "explicit %s (not 1/√d_k)", "显式 %s（不是 1/√d_k）"},
    {S::OutputShape, "Output shape", "输出维度"},
    {S::WeightSum, "Row weight sum", "行权重和"},
    {S::Argmax, "on", "位于"},
    {S::Description, "Description of the current picture", "读取当前图形说明"},
    {S::Copy, "Copy", "复制"},
    {S::Copied, "Copied to the clipboard", "已复制到剪贴板"},
    {S::Speak, "Speak", "朗读"},
    {S::StopSpeaking, "Stop", "停止"},
    {S::NoEspeak, "Speak needs espeak-ng on PATH (apt install espeak-ng)",
     "朗读需要 PATH 中有 espeak-ng（apt install espeak-ng）"},
    {S::SpeakProblem, "Nothing may have been heard; espeak-ng said: %s",
     "可能没有发出声音；espeak-ng 报告：%s"},
    {S::Tables, "Numeric tables", "数值流程表"},
    {S::TablesTooLarge,
     "Tables are shown for N ≤ %d (here N = %d); the command above exports every stage.",
     "数值表仅在 N ≤ %d 时显示（当前 N = %d）；上面的命令可导出全部阶段。"},
    {S::TableColumns, "columns %s–%s of %d", "列 %s–%s（共 %d 列）"},
    {S::CurrentStep, "◀ current step", "◀ 当前步骤"},
    {S::StagesNotKept,
     "Intermediate stages not kept (they would need %.1f GB, %.1f GB available): only the output "
     "is shown.",
     "未保留中间阶段（需要 %.1f GB，可用 %.1f GB）：只显示输出。"},
    {S::StageComing,
     "Bringing this step's matrix back from the backend (only the step on screen and the weights "
     "are copied; --stages all keeps every step)…",
     "正在从后端取回这一步的矩阵（只复制当前步骤和注意力权重；--stages all 保留每一步）……"},
    {S::PlotTooSmall, "The window is too small for the heatmap at this text size: make it larger, or press Ctrl − "
     "for smaller text.",
     "在当前文字大小下，窗口放不下热力图：请把窗口放大，或按 Ctrl − 缩小文字。"},
    {S::Performance, "Performance", "性能"},
    {S::BackendRan, "Backend that ran", "实际运行的后端"},
    {S::TimeUpload, "upload", "上传"},
    {S::TimeQk, "QKᵀ", "QKᵀ"},
    {S::TimeScaleMask, "scale + mask + T", "缩放 + 掩码 + 温度"},
    {S::TimeSoftmax, "softmax", "softmax"},
    {S::TimePv, "P·V", "P·V"},
    {S::TimeDownload, "download", "下载"},
    {S::TimeTotal, "total", "总计"},
    {S::Redraw, "Last redraw: backend %.1f ms + heatmap %.1f ms", "上次重绘：后端 %.1f ms + 热力图 %.1f ms"},
    {S::Compare, "Compare CPU vs CUDA", "对比 CPU 与 CUDA"},
    {S::CompareVariants, "Compare staged vs fused", "对比分步链与融合内核"},
    {S::CompareNeedsCuda, "Compare needs a CUDA device: %s", "对比需要 CUDA 设备：%s"},
    {S::CompareCpuLimit, "Compare keeps every stage on both backends, which the viewer does up to N ≤ %d",
     "对比要在两个后端上保留全部阶段，查看器只在 N ≤ %d 时这样做"},
    {S::SpeedUp, "speed-up", "加速比"},
    {S::MaxDiff, "max |difference|", "最大绝对差"},
    {S::Stage, "stage", "阶段"},
    {S::TermStaged, "staged", "分步"},
    {S::TermFused, "fused", "融合"},
    {S::TermScores, "scores", "原始分数"},
    {S::TermScaled, "scaled", "缩放分数"},
    {S::TermLogits, "logits", "logits"},
    {S::TermWeights, "weights", "注意力权重"},
    {S::TermOutput, "output", "输出"},
    {S::Notes, "Scientific notes: model, verification and limits", "科学说明：模型、验证与适用边界"},
    {S::NotesIntro, "What this implementation does, how it is re-checked automatically, and where it applies.",
     "以下说明给出当前实现、自动复算口径与适用范围。"},
    {S::NotesRelated, "Related text: Attention — from weighted averages to self-attention",
     "相关正文: 注意力机制：从加权平均到自注意力"},
    {S::Keys, "Keys (F1)", "按键（F1）"},
    {S::ScreenshotSaved, "Screenshot saved: %s", "截图已保存：%s"},
    {S::ErrorPrefix, "Refused: ", "已拒绝："},
    {S::Sequence, "Sequence", "序列"},
    {S::Tokens, "tokens", "个 token"},
    {S::ColourScale, "Colour scale", "色标"},
    {S::ScaleLinear, "linear", "线性"},
    {S::ScaleLog, "log (6 decades)", "对数（6 个数量级）"},
    {S::ScaleLogShort, "log", "对数"},
    {S::Computing, "Computing the new state… %.0f%% (the picture shows the last one)",
     "正在计算新的状态……%.0f%%（图中仍是上一个状态）"},
    {S::Streamed,
     "N = %d: the stages are streamed block by block into this view (no %d×%d matrix is kept); "
     "the selected row is exact.",
     "N = %d：各阶段逐块流式计算到当前视图（不保留 %d×%d 矩阵）；所选行为精确值。"},
    {S::TipExactNeedsRow, "exact value: zoom in, or select this row",
     "精确值：放大，或选中这一行"},
    {S::CompareNeedsStages, "Compare needs every stage kept: N ≤ %d (here N = %d)",
     "比较需要保留全部阶段：N ≤ %d（当前 N = %d）"},
    {S::ViewLabel, "View", "视图"},
    {S::ViewChain, "Staged chain (4 steps)", "分步链（4 步）"},
    {S::ViewWalk, "Fused (online softmax)", "融合内核（在线 softmax）"},
    {S::AxisKeys, "keys", "键"},
    {S::AxisDims, "output dimensions", "输出维度"},
    {S::RowOne, "row %d", "行 %d"},
    {S::RowRange, "rows %d–%d", "行 %d–%d"},
    {S::ColOne, "column %d", "列 %d"},
    {S::ColRange, "columns %d–%d", "列 %d–%d"},
    {S::PooledNoteZoomed, "%s × %s of the %d×%d matrix on %d×%d pixels: each pixel pools a block (%s)",
     "%s × %s（共 %d×%d 的矩阵）显示在 %d×%d 像素上：每个像素池化一个区块（%s）"},
    {S::TipMaskedWeight, "0 (masked: −∞ in the mask)", "0（已屏蔽：mask 为 −∞）"},
    {S::PageSentence, "Query “%s” gives its highest weight to “%s”: %s%%.", "查询“%s”对“%s”的权重最高，为 %s%%。"},
    {S::Reproduce, "The problem on screen, on the command line:", "在命令行中重现当前问题："},
    {S::SelectedKey, "selected key", "选中的键"},
    {S::Seed, "seed", "种子"},
    {S::ModeFiles, "Your own files (CSV or .npy)", "自己的文件（CSV 或 .npy）"},
    {S::FilesMask, "mask file (optional)", "掩码文件（可选）"},
    {S::FilesTokens, "tokens a,b,c (optional)", "token 列表 a,b,c（可选）"},
    {S::Load, "Load", "载入"},
    {S::FilesHint,
     "Q is n × d_k, K m × d_k, V m × d_v; a mask file holds 0 and -inf (n × m). The command line's "
     "rules and messages apply; a refused file leaves the current problem on screen.",
     "Q 为 n × d_k，K 为 m × d_k，V 为 m × d_v；掩码文件只含 0 和 -inf（n × m）。规则和提示与命令行相同；"
     "文件被拒绝时保留当前问题。"},
    {S::MaskCustom, "Custom (file)", "自定义（文件）"},
    {S::WindowTooSmall,
     "The window is %d×%d pixels, smaller than the lab's minimum of %d×%d: make it larger (or press "
     "Ctrl − for smaller text).",
     "窗口为 %d×%d 像素，小于实验室的最小尺寸 %d×%d：请把窗口放大（或按 Ctrl − 缩小文字）。"},
    {S::RowChartTitle, "weights of query %s", "查询“%s”的权重"},
    {S::ExportCsv, "Export this stage (CSV)", "导出当前阶段（CSV）"},
    {S::ExportJson, "Export the trace (JSON)", "导出全部阶段（JSON）"},
    {S::ExportPng, "Export the heatmap (PNG)", "导出热力图（PNG）"},
    {S::Exported, "Written: %s", "已写入：%s"},
    {S::WalkTileSize, "Keys per tile", "每块键数"},
    {S::WalkFirst, "First tile", "第一块"},
    {S::WalkColTile, "tile", "块"},
    {S::WalkColKeys, "keys", "键"},
    {S::WalkColTileMax, "tile max", "块最大值"},
    {S::WalkColOutput, "output so far", "当前输出"},
    {S::WalkSkipped, "skipped", "跳过"},
    {S::WalkStrip, "Logits x_j of query “%s” (%d keys), the kernel's tiles of %d",
     "查询“%s”的 logit x_j（%d 个键），内核按每块 %d 个键处理"},
    {S::WalkLegend, "orange frame: current tile · teal bar: consumed · hatched: skipped (never loaded) · dark grey: masked",
     "橙色框：当前块 · 青色条：已处理 · 斜线：跳过（从未加载）· 深灰：已屏蔽"},
    {S::WalkChartM, "running max m", "运行最大值 m"},
    {S::WalkChartL, "running sum l", "运行和 l"},
    {S::WalkChartErr, "log10 max|output so far − staged|", "log10 max|当前输出 − 分步链|"},
    {S::WalkOutputNow, "output if the keys stopped here", "若到此为止的输出"},
    {S::WalkStaged, "staged output", "分步链输出"},
    {S::WalkFinal, "final: max|walk − staged| = %s · max|walk − CPU fused kernel| = %s · error against fp64 = %s",
     "最终：max|游走 − 分步链| = %s · max|游走 − CPU 融合内核| = %s · 相对 fp64 误差 = %s"},
    {S::WalkUnits,
     "Computed by the CPU fused kernel's own update step (cpu/online_softmax.h). The kernel keeps m on raw scores q·k; x and m are shown in logit units (× s/T, s the scale: 1/√d_k unless the problem gives one); α, l, acc are its fp32 values.",
     "由 CPU 融合内核自己的更新步骤计算（cpu/online_softmax.h）。内核在原始分数 q·k 上取 m；这里 x 与 m 换算为 logit 单位（× s/T，s 为缩放：问题未给出时为 1/√d_k）；α、l、acc 为内核的 fp32 值。"},
    {S::WalkCuda,
     "The CUDA fused kernels run the same algorithm in log2 units with exp2, 64-key tiles and blocks of queries; attnlab walk compares them on a GPU.",
     "CUDA 融合内核以 log2 单位与 exp2、每块 64 个键、成批查询运行同一算法；在有 GPU 时 attnlab walk 会比较它们。"},
    {S::WalkNothingYet, "nothing accumulated yet", "尚未累加"},
    {S::WalkKeysHint, "Space play · ←/→ one tile · Home first tile", "空格 播放 · ←/→ 一块 · Home 第一块"},
    {S::WalkError, "walk refused: %s", "游走无法计算：%s"},
    {S::ViewPerf, "Performance",
     "性能"},
    {S::PerfSeries, "Series to time",
     "要计时的系列"},
    {S::PerfBackends, "Backends",
     "后端"},
    {S::PerfVariants, "Variants",
     "变体"},
    {S::PerfPrecisions, "Precisions",
     "精度"},
    {S::PerfMasks, "Masks",
     "掩码"},
    {S::PerfHeads, "heads",
     "头数"},
    {S::PerfD, "d",
     "d"},
    {S::PerfN, "N (a list, or a..b doubling)",
     "N（列表，或 a..b 倍增）"},
    {S::PerfRun, "Run",
     "运行"},
    {S::PerfCancel, "Cancel",
     "取消"},
    {S::PerfExportCsv, "Export CSV",
     "导出 CSV"},
    {S::PerfExportPng, "Save PNG",
     "保存 PNG"},
    {S::PerfIdle, "Choose the series and press Run: every number comes from the engine of attnlab bench.",
     "选择系列后按“运行”：所有数字都来自 attnlab bench 的同一引擎。"},
    {S::PerfMeasuring, "Measuring the machine's ceilings (copy and GEMM probes)…",
     "正在测量机器的上限（拷贝与 GEMM 探针）…"},
    {S::PerfProgress, "%d/%d · %s · about %s left",
     "%d/%d · %s · 约剩 %s"},
    {S::PerfDone, "done: %d cases in %s",
     "完成：%d 个用例，用时 %s"},
    {S::PerfCancelled, "cancelled after %d of %d cases",
     "已取消：完成 %d / %d 个用例"},
    {S::PerfError, "sweep stopped: %s",
     "扫描中止：%s"},
    {S::PerfChartTime, "Time",
     "时间"},
    {S::PerfChartTflops, "TFLOP/s",
     "TFLOP/s"},
    {S::PerfChartSpeedup, "Speed-up",
     "加速比"},
    {S::PerfChartRoofline, "Roofline",
     "屋顶线"},
    {S::PerfChartMemory, "Memory",
     "内存"},
    {S::PerfAxisN, "N (tokens, log scale)",
     "N（token 数，对数刻度）"},
    {S::PerfAxisMs, "median time per run, min–max bars (log)",
     "每次运行的中位时间，竖线为最小–最大（对数）"},
    {S::PerfAxisTflops, "TFLOP/s = 4·d per visible (query, key) pair per head / median (log)",
     "TFLOP/s = 每头每个可见（查询，键）对 4·d / 中位时间（对数）"},
    {S::PerfAxisSpeedup, "times faster than the baseline (log)",
     "比基线快的倍数（对数）"},
    {S::PerfAxisIntensity, "arithmetic intensity: FLOPs / moved bytes (log)",
     "算术强度：浮点运算数 / 搬运字节数（对数）"},
    {S::PerfAxisGflops, "GFLOP/s attained (log)",
     "实际 GFLOP/s（对数）"},
    {S::PerfAxisMemory, "peak memory per run (log)",
     "每次运行的峰值内存（对数）"},
    {S::PerfBaseline, "Baseline",
     "基线"},
    {S::PerfSkippedN, "N=%s: %s",
     "N=%s：%s"},
    {S::PerfPending, "%d still to run",
     "还有 %d 个待运行"},
    {S::PerfTip, "%s, N = %d\nmedian %s ms (min %s, max %s, %d runs)\n%s TFLOP/s · %s GB/s moved\npeak memory %s\nerror against %s: %s\nintensity %s FLOP/byte",
     "%s，N = %d\n中位 %s ms（最小 %s，最大 %s，%d 次）\n%s TFLOP/s · 搬运 %s GB/s\n峰值内存 %s\n相对 %s 的误差：%s\n算术强度 %s FLOP/字节"},
    {S::PerfTipSpeedup, "%s, N = %d: %s× the baseline",
     "%s，N = %d：基线的 %s 倍"},
    {S::PerfRoofBw, "%s memory roof %s GB/s",
     "%s 内存屋顶 %s GB/s"},
    {S::PerfRoofGemm, "%s GEMM roof %s GFLOP/s",
     "%s GEMM 屋顶 %s GFLOP/s"},
    {S::PerfRoofPeak, "%s fp32 FMA peak %s GFLOP/s",
     "%s fp32 FMA 峰值 %s GFLOP/s"},
    {S::PerfGemmPoint, "%s SGEMM probe %s GFLOP/s",
     "%s SGEMM 探测 %s GFLOP/s"},
    {S::PerfRoofMissing, "%s roofs not measured: %s",
     "%s 屋顶未测量：%s"},
    {S::PerfRoofHint,
     "The staged chain moves every N×N stage: its intensity stays near d/7 FLOP/byte whatever N. The fused kernel moves only Q, K, V and O: its intensity grows as N/4 in fp32. A causal mask halves the FLOPs but not the bytes: d/14 and N/8. Left of a ridge a case is bound by memory, right of it by compute.",
     "分步链要搬运每个 N×N 阶段：无论 N 多大，其算术强度都约为 d/7 FLOP/字节。融合内核只搬运 Q、K、V 和 O：其算术强度按 N/4 增长（fp32）。因果掩码使浮点运算数减半、字节数不变：d/14 与 N/8。在屋脊左侧受内存限制，右侧受计算限制。"},
    {S::PerfMemWall, "host memory available %s",
     "主机可用内存 %s"},
    {S::PerfNoPoints, "no points yet",
     "尚无数据点"},
    {S::PerfPressRun, "Nothing timed yet: press Run to time the cases chosen above.",
     "尚未计时：按“运行”为上面选定的用例计时。"},
    {S::PerfNoCase, "No case gave a point (the legend says why each was skipped).",
     "没有用例给出数据点（图例说明了每个用例被跳过的原因）。"},
    {S::PerfCancelledNone, "Cancelled before any case was timed.",
     "在任何用例计时之前已取消。"},
    {S::PerfNoFigure, "No case here has a figure for this chart.",
     "这里没有用例给出这张图的数值。"},
    {S::PerfCudaOff, "CUDA greyed out: %s",
     "CUDA 不可用：%s"},
    {S::PerfExported, "wrote %s",
     "已写入 %s"},
    {S::PerfNothingChosen, "choose at least one backend, variant, precision and mask",
     "每项至少选择一个：后端、变体、精度、掩码"},
    {S::PerfSpread, "bars: fastest to slowest repetition",
     "竖线：最快到最慢的一次"},
    {S::PerfPass, "Pass",
     "传播方向"},
    {S::PerfPassForward, "forward",
     "前向"},
    {S::PerfPassBackward, "backward",
     "反向"},
    {S::PerfPassBoth, "both",
     "两者"},
    {S::PerfBackwardRule,
     "Backward FLOPs, as attnlab bench counts them: the forward's 4·d per visible (query, key) pair per head, times %s for the fused backward (five products: S again, dP, dV, dK, dQ; the forward has two) and %s for the staged one (it keeps S and P from its forward). A backward's time leaves out its forward; its error is over dQ, dK and dV against the fp64 staged backward.",
     "反向的浮点运算数（与 attnlab bench 的计法相同）：前向每个头、每个可见的（查询，键）对计 4·d，融合反向乘以 %s（五次乘积：重算 S、dP、dV、dK、dQ；前向只有两次），分步反向乘以 %s（它沿用前向保存的 S 和 P）。反向的时间不含其前向；其误差取 dQ、dK、dV 相对 fp64 分步反向的误差。"},
    {S::PerfAxisTflopsRule, "TFLOP/s = FLOPs / median (log; the backward's rule under the legend)",
     "TFLOP/s = 浮点运算数 / 中位时间（对数；反向的计法见图例下方）"},
    {S::PerfRoofBackward,
     "A backward point: its FLOPs over the bytes bench counts for it (Q, K, V, O and dO read once, dQ, dK and dV written once), staged and fused alike.",
     "反向的点：其浮点运算数除以 bench 为它计的字节数（Q、K、V、O、dO 各读一次，dQ、dK、dV 各写一次），分步与融合相同。"},
    {S::QueriesLabel, "Several queries (Shift+click a row)", "多个查询（按住 Shift 单击一行）"},
    {S::QueriesHint, "indices or tokens, e.g. 2, 5, 9; Enter applies", "序号或 token，如 2, 5, 9；回车应用"},
    {S::QueriesTable, "Selected queries", "所选查询"},
    {S::QueriesMean, "mean", "平均"},
    {S::QueriesClear, "Only this query", "只留当前查询"},
    {S::QueriesChart, "outlines: the other selected queries", "轮廓线：其他所选查询"},
    {S::QueriesNeedRows, "computing the rows of the selected queries…", "正在计算所选查询的行…"},
    {S::QueriesColMax, "max", "最大权重"},
    {S::QueriesColEntropy, "entropy", "熵"},
    {S::QueriesColPerplexity, "e^H", "e^H"},
    // precision and diff views (issue 14)
    {S::ViewPrecision, "Precision (error vs fp64)", "精度（相对 fp64 的误差）"},
    {S::ViewDiff, "A/B difference", "A/B 差异"},
    {S::RunPrecision, "Run precision", "运行精度"},
    {S::PrecAbs, "absolute", "绝对误差"},
    {S::PrecRel, "relative to the row", "相对本行"},
    {S::PrecRelDef,
     "relative error = |x − fp64| / (largest |fp64| value of the cell's row, over its unmasked keys)",
     "相对误差 = |x − fp64| / （该格所在行未屏蔽位置上 |fp64| 的最大值）"},
    {S::PrecDescription,
     "Each cell is the error of the %s run against the same chain computed in fp64 from the same inputs "
     "(log colour scale). Step 2 divides the scaled scores by T = %s before the exponential, so every rounding "
     "error of the scores is multiplied by 1/T: the error grows as T falls. fp32 keeps 24 significant bits "
     "(about 7 decimal digits), bf16 8 (about 2 to 3).",
     "每个格子是 %s 运行相对于同一输入、以 fp64 计算的同一链路的误差（对数颜色刻度）。第 2 步在取指数之前把缩放分数"
     "除以 T = %s，分数的每个舍入误差都被乘以 1/T：T 越小，误差越大。fp32 有 24 位有效二进制位（约 7 位十进制），"
     "bf16 只有 8 位（约 2 到 3 位）。"},
    {S::PrecSummary, "max error %s (%s ulps) · mean %s · %d of %d cells exact",
     "最大误差 %s（%s ulp）· 平均 %s · %d / %d 个格子完全一致"},
    {S::PrecExact, "every cell equals fp64 exactly at this step", "本步每个格子都与 fp64 完全一致"},
    {S::PrecLegendLog, "log10 colour scale", "log10 颜色刻度"},
    {S::PrecLegendZero, "error 0: bottom colour", "误差为 0：最底端颜色"},
    {S::PrecHist, "cells per log10 error", "各 log10 误差区间的格子数"},
    {S::PrecHistAxis, "log10 error, %d bins per decade from %d to %d (beyond: the end bins); %d exact (0) not shown",
     "log10 误差，每十倍 %d 个区间，从 %d 到 %d（超出者计入两端区间）；%d 个为 0（不画出）"},
    {S::PrecTipRun, "run (%s)", "运行值（%s）"},
    {S::PrecTipFp64, "fp64", "fp64"},
    {S::PrecTipAbs, "|x − fp64|", "|x − fp64|"},
    {S::PrecTipRel, "relative", "相对误差"},
    {S::PrecTipUlps, "distance in %s ulps (the spacing between the two values)", "以 %s ulp 计的距离（两值之间的间距）"},
    {S::PrecNeedsStages,
     "This view needs every stage kept (N ≤ %d); N = %d is streamed into pooled pictures, so there is no cell by "
     "cell comparison. Generate N ≤ %d to see it.",
     "此视图需要保留全部阶段（N ≤ %d）；N = %d 以流式计算为池化图像，无法逐格比较。请生成 N ≤ %d 的序列。"},
    {S::PrecComputing, "computing the fp64 reference…", "正在计算 fp64 参考…"},
    {S::PrecRefError, "fp64 reference failed: %s", "fp64 参考计算失败：%s"},
    {S::PrecNonFinite, "%d cells where one value is infinite and the other not (top colour)",
     "%d 个格子一方为无穷、另一方不是（最顶端颜色）"},
    {S::FusedOnlyOutput,
     "A fused run keeps only the output: steps 1–3 need the staged variant. Showing step 4.",
     "融合内核只保留输出：第 1–3 步需要分步链。此处显示第 4 步。"},
    {S::DiffA, "A (on screen): %s", "A（当前）：%s"},
    {S::DiffB, "B: %s", "B：%s"},
    {S::DiffEditor, "B changes (* marks what differs from A)", "B 的改动（* 表示与 A 不同）"},
    {S::DiffKeep, "as A", "同 A"},
    {S::DiffApply, "Apply", "应用"},
    {S::DiffIdentical, "B − A = 0 in every cell: the two runs agree exactly at this step.",
     "每个格子的 B − A 都是 0：两次运行在这一步完全一致。"},
    {S::DiffIdenticalMasked,
     "B − A = 0 in every cell neither run masks; %d cells are masked (hatched) in A or B.",
     "两次运行都未屏蔽的格子，B − A 都是 0；另有 %d 个格子在 A 或 B 中被屏蔽（斜线）。"},
    {S::DiffSummary, "max |B − A| = %s · mean |B − A| = %s · %d of %d cells changed",
     "最大 |B − A| = %s · 平均 |B − A| = %s · %d / %d 个格子有变化"},
    {S::DiffTop, "Largest changes", "变化最大的格子"},
    {S::DiffColQuery, "query", "查询"},
    {S::DiffColKey, "key", "键"},
    {S::DiffLegend, "B − A, blue < 0 < red", "B − A，蓝 < 0 < 红"},
    {S::DiffMaskedLegend, "masked (−∞) in A or B", "A 或 B 中被屏蔽（−∞）"},
    {S::DiffComputing, "computing B…", "正在计算 B…"},
    {S::DiffBError, "B could not run: %s", "B 无法运行：%s"},
    {S::DiffNeedsStages,
     "This view needs every stage kept (N ≤ %d); N = %d is streamed into pooled pictures, so there is no cell by "
     "cell difference. Generate N ≤ %d to see it.",
     "此视图需要保留全部阶段（N ≤ %d）；N = %d 以流式计算为池化图像，无法逐格求差。请生成 N ≤ %d 的序列。"},
    {S::DiffQueryNote, "B has another query: one row, B's selected row minus A's (B's run has the spec's other changes too).",
     "B 换了查询：只有一行，B 所选行减去 A 所选行（B 的运行同时带有规格中的其他改动）。"},
    {S::DiffDescription,
     "Each cell is B − A at the current step: the same inputs run with B's settings minus the run on screen (A). "
     "Blue: B is lower, red: B is higher, white: equal. Two backends or two variants compared this way show how "
     "closely they agree: not \"identical\", but differences of rounding size.",
     "每个格子是当前步骤的 B − A：同一输入按 B 的设置运行，减去当前屏幕上的运行（A）。蓝色：B 更小，红色：B 更大，"
     "白色：相等。这样比较两个后端或两个变体，能看出它们一致到什么程度：不是“完全相同”，而是舍入量级的差异。"},
    {S::DiffNoSpec, "Choose what B changes above and press Apply.", "在上方选择 B 的改动，然后点击“应用”。"},
    {S::DiffTipA, "A", "A"},
    {S::DiffTipB, "B", "B"},
    {S::DiffTipDiff, "B − A", "B − A"},
    {S::SetMaskNone, "mask none", "掩码 无"},
    {S::SetMaskCausal, "mask causal", "掩码 因果"},
    {S::SetMaskCustom, "mask custom", "掩码 自定义"},
    {S::SetStaged, "staged", "分步链"},
    {S::SetFused, "fused", "融合内核"},
    {S::SetQuery, "query", "查询"},
    {S::DiffSameRun, "B is the same run as A: every difference is 0.", "B 与 A 是同一次运行：所有差值都是 0。"},
    {S::DiffMaxAt, "largest at %s → %s", "最大处：%s → %s"},
    {S::DiffVariant, "Variant", "变体"},
    {S::DiffPrecision, "Precision", "精度"},
    {S::DiffQuery, "Query", "查询"},
    {S::DiffBeforeChange,
     "The temperature and the mask act from step 2 (the logits) on: before it B − A is 0 by construction; → shows "
     "the change.",
     "温度和掩码从第 2 步（logits）起才起作用：在此之前 B − A 必然为 0；按 → 查看变化。"},
    // heads view (issue 15)
    {S::ViewHeads, "Heads", "多头"},
    {S::HeadsLayer, "Layer", "层"},
    {S::HeadsHead, "Head", "头"},
    {S::HeadsCount, "heads", "头数"},
    {S::HeadsTitle, "heads: %d · softmax weights (step 3)", "%d 个头 · 注意力权重（第 3 步）"},
    {S::HeadsTitleLayer, "Layer %d “%s” · heads: %d · softmax weights (step 3)",
     "层 %d“%s”：%d 个头 · 注意力权重（第 3 步）"},
    {S::HeadsProgress, "computing head %d of %d…", "正在计算第 %d / %d 个头…"},
    {S::HeadsCaption, "head %d · rows %s%%", "头 %d · 行最大 %s%%"},
    {S::HeadsCaptionKv, "head %d · kv %d · rows %s%%", "头 %d · kv %d · 行最大 %s%%"},
    {S::HeadsCaptionPending, "head %d · …", "头 %d · …"},
    {S::HeadsCaptionError, "head %d · refused", "头 %d · 无法计算"},
    {S::HeadsTip,
     "Head %d: a typical pixel row's largest weight is %s%% (the median over the thumbnail's pixel rows; "
     "where a pixel row pools several query rows it is their largest, above a single row's), the largest "
     "anywhere %s%%. Click to open it in the chain view.",
     "头 %d：典型一个像素行的最大权重为 %s%%（缩略图各像素行的中位数；一个像素行汇集多个查询行时取其中最大者，"
     "高于单独一行的值），全头最大权重为 %s%%。点击在分步链视图中打开。"},
    {S::HeadsTipKv, "It reads key/value head %d (grouped-query attention: %d query heads share it).",
     "它读取键/值头 %d（分组查询注意力：%d 个查询头共用它）。"},
    {S::HeadsError, "head %d refused: %s", "头 %d 无法计算：%s"},
    {S::HeadsNote,
     "Each thumbnail: one head's softmax weights (queries down, keys across), pooled (%s) to at most "
     "%d×%d pixels, on its own colour scale (%s); “rows” (max pooling): the median of each pixel row's largest "
     "weight (a pixel row of a long sequence pools several query rows). "
     "Framed: the head the other views show.",
     "每个缩略图：一个头的注意力权重（行为查询，列为键），池化（%s）到至多 %d×%d 像素，使用各自的色标（%s）；"
     "“行最大”（最大值池化时）：各像素行最大权重的中位数（长序列的一个像素行汇集多个查询行）。带框的是其他视图显示的头。"},
    {S::HeadsOneHead,
     "This problem has one head: generate a random sequence with more heads, or open a bundle "
     "(attnlab-view --bundle DIR).",
     "当前问题只有一个头：生成头数更多的随机序列，或打开一个数据包（attnlab-view --bundle DIR）。"},
    {S::HeadsBundleMask, "the bundle holds each call's mask", "数据包自带每次调用的掩码"},
    {S::PanelMaskOtherViews, "This view has its own mask; the one chosen here is the other views'.",
     "本视图有自己的掩码；这里选的掩码用于其他视图。"},
    {S::PanelTemperatureOtherViews, "This view has its own settings; this temperature is the other views'.",
     "本视图有自己的设置；这里的温度用于其他视图。"},
    {S::HeadsPattern,
     "A pattern gives every head the same Q and K (only V differs), so its thumbnails are alike; noise "
     "gives each head its own.",
     "同一模式下每个头的 Q 与 K 相同（只有 V 不同），所以缩略图彼此相同；噪声模式下每个头各不相同。"},
    {S::HeadsShown, "layer %d · head %d of %d", "层 %d · 头 %d（共 %d 个）"},
    {S::HeadsShownHead, "head %d of %d", "头 %d（共 %d 个）"},
    {S::ModeBundle, "Bundle %s", "数据包 %s"},
    {S::HeadsCaptionBare, "head %d", "头 %d"},
    {S::HeadsCaptionKvBare, "head %d · kv %d", "头 %d · kv %d"},
    {S::HeadsTipMean, "Head %d: the largest weight anywhere is %s%% (“rows” needs max pooling). Click to open it in the chain view.",
     "头 %d：全头最大权重为 %s%%（“行最大”需要最大值池化）。点击在分步链视图中打开。"},
    {S::Mods, "Modifications", "位置与分数修改"},
    {S::ModsHint,
     "What real models change in the chain: RoPE turns Q and K by their position before QKᵀ; ALiBi adds "
     "−slope·|i−j| to the scaled scores; soft-capping bounds them by C·tanh(s/C); a window and a prefix "
     "change which keys a query sees.",
     "真实模型对计算链的改动：RoPE 在 QKᵀ 之前按位置旋转 Q 和 K；ALiBi 在缩放分数上加 −斜率·|i−j|；"
     "软上限用 C·tanh(s/C) 限制分数；窗口和前缀改变查询能看到哪些键。"},
    {S::ModRope, "RoPE (rotary positions)", "RoPE（旋转位置编码）"},
    {S::ModRopeTheta, "θ", "θ"},
    {S::ModAlibi, "ALiBi (standard slopes)", "ALiBi（标准斜率）"},
    {S::ModSoftcap, "Soft-cap", "软上限"},
    {S::ModSoftcapC, "C", "C"},
    {S::ModWindow, "Window", "窗口"},
    {S::ModWindowW, "W", "W"},
    {S::ModPrefix, "Prefix (prefix-LM)", "前缀（prefix-LM）"},
    {S::ModPrefixP, "P", "P"},
    {S::TableQRot, "Q rotated by RoPE (θ=%s)", "RoPE 旋转后的 Q（θ=%s）"},
    {S::TableKRot, "K rotated by RoPE", "RoPE 旋转后的 K"},
    {S::TableBiased, "Scaled scores with ALiBi / the bias added", "加上 ALiBi / 偏置后的缩放分数"},
    {S::TableCapped, "Soft-capped scores C·tanh(s/C), C=%s", "软上限分数 C·tanh(s/C)，C=%s"},
    {S::SubShow, "Show", "显示"},
    {S::SubLogits, "logits", "logits（进入 softmax）"},
    {S::SubScaled, "scaled QKᵀ", "缩放分数"},
    {S::SubBiased, "+ ALiBi / bias", "+ ALiBi / 偏置"},
    {S::SubCapped, "soft-capped", "软上限后"},
    {S::SubNote,
     "The stages the modifications add between the scaled scores and the logits, before the mask and the temperature.",
     "修改在缩放分数与 logits 之间加入的阶段，在掩码与温度之前。"},
    {S::ModBiasFile, "Bias file (n × m, CSV or .npy)", "偏置文件（n × m，CSV 或 .npy）"},
    {S::ModDocsFile, "Document ids (one per position)", "文档编号（每个位置一个）"},
    {S::WalkUnitsMods,
     "Computed by the CPU fused kernel's own update step (cpu/online_softmax.h). With score modifications the kernel first turns each tile's scores into the modified scaled scores and keeps m on them; x and m are shown in logit units (× 1/T); α, l, acc are its fp32 values.",
     "由 CPU 融合内核自己的更新步骤计算（cpu/online_softmax.h）。有分数修改时，内核先把每块分数变成修改后的缩放分数，并在其上取 m；这里 x 与 m 换算为 logit 单位（× 1/T）；α、l、acc 为内核的 fp32 值。"},
    {S::RopeQK, "QKᵀ (of the rotated Q, K)", "QKᵀ（旋转后的 Q、K）"},
    {S::RopeQ, "Q", "Q（原值）"},
    {S::RopeQRot, "Q rotated", "旋转后的 Q"},
    {S::RopeQDiff, "Q rotated − Q", "旋转后的 Q − Q"},
    {S::RopeK, "K", "K（原值）"},
    {S::RopeKRot, "K rotated", "旋转后的 K"},
    {S::RopeKDiff, "K rotated − K", "旋转后的 K − K"},
    {S::RopeNote,
     "RoPE turns each row's pairs of dimensions (c, c + d_k/2) by the angle position × θ^(−2c/d_k): the row at "
     "position 0 is not turned; pair 0 (dimensions 0 and d_k/2, the first column of each half) turns fastest, the last "
     "pairs (the last columns of each half) hardly at all. Q and Q rotated share "
     "one colour scale (K and K rotated another), so a flip between them changes only what the rotation changes.",
     "RoPE 把每一行的维度对 (c, c + d_k/2) 旋转“位置 × θ^(−2c/d_k)”的角度：位置 0 的行不转；第 0 对（维度 0 与 d_k/2，"
     "即每一半的第一列）转得最快，最后几对（每一半的最后几列）几乎不转。Q 与旋转后的 Q 共用一个色标（K 与旋转后的 K 共用另一个），在两者之间切换时，颜色只随旋转而变。"},
    {S::RopeNoteDiff,
     "What the rotation changed (rotated − given), on its own colour scale: 0 in the row at position 0; the first "
     "columns of each half (fast pairs) swing back and forth down the rows, the last ones (slow pairs) grow slowly.",
     "旋转带来的变化（旋转后 − 原值），用它自己的色标：位置 0 的行为 0；每一半的前几列（转得快的维度对）沿行来回摆动，"
     "后几列（转得慢的）缓慢增长。"},
    {S::AxisDimsK, "dimensions of d_k", "d_k 的维度"},
    {S::RopeHintK, "rows = keys ↓, columns = dimensions of d_k → · click: select the key · wheel: zoom · drag: pan",
     "行 = 键 ↓，列 = d_k 的维度 → · 单击选择键 · 滚轮缩放 · 拖动平移"},
    {S::TipPosition, "position", "位置"},
    {S::TipDimPair, "dimension %d (pair %d: dimensions %d and %d)", "维度 %d（第 %d 对：维度 %d 与 %d）"},
    {S::TipRopeAngle, "angle = position × θ^(−2c/d_k) = %d × %.6g = %.6g rad",
     "角度 = 位置 × θ^(−2c/d_k) = %d × %.6g = %.6g 弧度"},
    {S::TipRopeValues, "given %.6g → rotated %.6g (change %.6g)", "原值 %.6g → 旋转后 %.6g（变化 %.6g）"},
    {S::PrecLegendClamped, "%d decades: errors below %s, and 0, take the bottom colour",
     "%d 个数量级：低于 %s 的误差及 0 取最底端颜色"},
    {S::DiffMaskedSwatch, "masked (−∞)", "被屏蔽（−∞）"},
    {S::DiffMaskedWhere, "in A or B", "在 A 或 B 中"},
    {S::MapPooled, "pooled: each pixel a block of %d × %d cells, showing %s",
     "已池化：每个像素是 %d × %d 个单元的区块，显示%s"},
    {S::PoolLargestError, "its largest error", "其中最大的误差"},
    {S::PoolLargestChange, "its largest |B − A|, with its sign", "其中 |B − A| 最大者（带符号）"},
    {S::ExportNoStageHere,
     "this view shows no step's stage to write as CSV (the chain and precision views do; the trace JSON has every stage)",
     "此视图没有显示某一步的阶段可写成 CSV（链视图和精度视图有；轨迹 JSON 含全部阶段）"},
    {S::ExportNoHeatmapHere,
     "this view's pictures are not one heatmap to write as PNG (the chain and precision views' are; S saves the window)",
     "此视图的图不是一张可写成 PNG 的热图（链视图和精度视图的是；按 S 保存整个窗口）"},
};
static_assert(std::size(kTable) == static_cast<std::size_t>(S::Count_), "one line per S value");
constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < std::size(kTable); ++i)
    if (static_cast<std::size_t>(kTable[i].id) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kTable's lines must follow the order of enum S");

}  // namespace

const char* tr(Lang lang, S id) {
  const Entry& e = kTable[static_cast<int>(id)];
  return lang == Lang::Zh ? e.zh : e.en;
}

std::vector<std::pair<std::string, std::string>> science_notes(Lang lang) {
  if (lang == Lang::Zh) {
    return {
        {"观察目标", "沿缩放点积注意力的完整计算链检查分数、掩码、行归一化和加权输出。"},
        {"数学模型",
         "依次计算 Q、K、V、QKᵀ、QKᵀ/√dₖ、mask、按温度调整的 logits、逐行 softmax 和 "
         "output=softmax(...)V。"},
        {"假设与适用范围",
         "示例矩阵固定且维度相容，温度为正；因果掩码只允许每个查询读取当前位置及之前的键。\n"
         "token 序列用于展示矩阵运算，不代表经过训练的完整语言模型。"},
        {"操作步骤",
         "选择查询 token，调整 softmax 温度，并切换双向或因果掩码。\n"
         "展开数值流程表，逐项核对 Q、K、V、原始分数、缩放分数、mask、权重和输出。\n"
         "比较所选行的权重和、被掩码位置与 output 的维度。"},
        {"预期现象",
         "每一行未掩码权重之和为 1，因果掩码后的未来位置权重精确为 0。\n"
         "较低温度使分布更尖锐；V 改变加权输出内容而不改变由 Q、K 生成的权重。"},
        {"数值验证",
         "测试独立复算 √dₖ 缩放、稳定 softmax、行和、掩码零值、矩阵维度与 output 加权和。\n"
         "无效温度、全掩码行和不相容矩阵维度会被运行时校验拒绝。"},
        {"局限",
         "注意力权重只是当前模型计算中的系数，不能自动等同于因果解释或完整模型解释。\n"
         "固定小矩阵不展示多头投影、位置编码、残差连接、训练过程或真实模型不确定性。"},
    };
  }
  return {
      {"Goal", "Inspect the scores, the mask, the row normalisation and the weighted output along the "
               "full scaled dot-product attention chain."},
      {"Model",
       "Q, K, V, QKᵀ, QKᵀ/√dₖ, the mask, temperature-adjusted logits, a row-wise softmax, and "
       "output = softmax(...)V, in that order."},
      {"Assumptions and scope",
       "The example matrices are fixed and dimension-compatible; the temperature is positive; a "
       "causal mask lets each query read only its own and earlier positions.\n"
       "The tokens illustrate the matrix arithmetic; they are not a trained language model."},
      {"Procedure",
       "Pick a query token, adjust the softmax temperature, switch between the bidirectional and "
       "the causal mask.\n"
       "Expand the numeric tables and check Q, K, V, raw scores, scaled scores, mask, weights and "
       "output one by one.\n"
       "Compare the selected row's weight sum, the masked positions and the output shape."},
      {"Expected",
       "Every row's unmasked weights sum to 1; with a causal mask the future positions are exactly 0.\n"
       "A lower temperature sharpens the distribution; V changes the output content but not the "
       "weights, which come from Q and K."},
      {"Verification",
       "Tests independently recompute the √dₖ scaling, the stable softmax, the row sums, the mask "
       "zeros, the matrix shapes and the output weighted sum.\n"
       "An invalid temperature, a fully masked row and incompatible matrix shapes are rejected at "
       "run time with a clear message."},
      {"Limits",
       "Attention weights are coefficients of this computation; they are not automatically a "
       "causal explanation or a full explanation of the model.\n"
       "The fixed small matrices show no multi-head projection, positional encoding, residual "
       "connections, training or real model uncertainty."},
  };
}

std::vector<std::string> all_ui_text() {
  std::vector<std::string> out;
  for (const Entry& e : kTable) {
    out.emplace_back(e.en);
    out.emplace_back(e.zh);
  }
  for (Lang l : {Lang::Zh, Lang::En}) {
    for (auto& [h, b] : science_notes(l)) {
      out.push_back(h);
      out.push_back(b);
    }
  }
  return out;
}

const std::vector<std::string>& index_labels(std::vector<std::string>& cache, int n) {
  if (static_cast<int>(cache.size()) != n) {
    cache.clear();
    for (int j = 0; j < n; ++j) cache.push_back(std::to_string(j));
  }
  return cache;
}

std::vector<unsigned> utf8_codepoints(const std::string& s) {
  std::vector<unsigned> out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) {
      ++i;
      continue;
    }
    unsigned cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (ok) out.push_back(cp);
    i += ok ? len : 1;
  }
  return out;
}

namespace {

bool no_line_start(unsigned cp) {
  switch (cp) {
    case 0xFF0C: case 0x3002: case 0x3001: case 0xFF1B: case 0xFF1A: case 0xFF09: case 0x300D:
    case 0x201D: case 0x2019: case 0xFF01: case 0xFF1F: case ',': case '.': case ';': case ':':
    case ')': case 0x2026:
      return true;
    default:
      return false;
  }
}

// Opening punctuation: it joins the piece after it, so it never ends a line.
bool no_line_end(unsigned cp) {
  switch (cp) {
    case 0xFF08: case 0x300C: case 0x300E: case 0x3010: case 0x300A: case 0x3008: case 0x201C:
    case 0x2018: case '(': case '[':
      return true;
    default:
      return false;
  }
}

}  // namespace

std::vector<std::string> wrap_units(const std::string& para) {
  enum Kind { Word, Space, Cjk };
  std::vector<std::string> units;
  Kind last_kind = Space;
  bool glue = false;  // the last character opens a bracket or a quote: the next one joins it
  for (std::size_t i = 0; i < para.size();) {
    const unsigned char c0 = static_cast<unsigned char>(para[i]);
    const std::size_t len = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : 4;
    const std::string ch = para.substr(i, len);
    const std::vector<unsigned> cps = utf8_codepoints(ch);
    const unsigned cp = cps.empty() ? 0 : cps[0];
    const Kind kind = ch == " " ? Space : cp >= 0x2E80 ? Cjk : Word;
    if (!units.empty() && glue && kind != Space) {
      units.back() += ch;
      last_kind = kind;
    } else if (units.size() >= 2 && last_kind == Space && no_line_start(cp)) {
      // Closing punctuation after a space ("[-0.0245 … 0.012]"): joined to the space alone it
      // would make a unit that starts with a space, dropped with its space at the start of a
      // line (the "…" lost); the space and it join the piece before instead.
      std::string space = std::move(units.back());
      units.pop_back();
      units.back() += space + ch;
      last_kind = kind == Cjk ? Cjk : Word;
    } else if (!units.empty() && (no_line_start(cp) || (kind == last_kind && kind != Cjk))) {
      units.back() += ch;
      if (kind == Cjk) last_kind = Cjk;  // a line may break after Chinese punctuation
    } else {
      units.push_back(ch);
      last_kind = kind;
    }
    glue = no_line_end(cp);
    i += len;
  }
  return units;
}

std::vector<std::string> wrap_lines(const std::string& text, float width, const TextMeasure& measure,
                                    const WidthRounding& round) {
  const auto fits = [&](float w) { return (round ? round(w) : w) <= width; };
  // The summed widths add the same advances as measuring the line whole, in another order, so the
  // two floats may differ in their last bits; with whole-pixel rounding a line whose advances add
  // up to exactly the panel's width (it happens: a font's advances are multiples of one scale)
  // would then fit one way and not the other. Where the decision changes within a margin wider
  // than that difference (at most about n * 2^-24 of a sum of n advances: 1/64 px plus 2^-14 of
  // the sum covers lines of a thousand glyphs), the candidate line is measured whole instead, as
  // the width it is drawn with is.
  const auto margin = [](float sum) { return 1.0f / 64 + sum / 16384; };
  std::vector<std::string> lines;
  std::size_t para_start = 0;
  while (para_start <= text.size()) {
    std::size_t para_end = text.find('\n', para_start);
    if (para_end == std::string::npos) para_end = text.size();
    std::string line;
    float line_w = 0;
    for (std::string& u : wrap_units(text.substr(para_start, para_end - para_start))) {
      const bool space = u[0] == ' ';
      if (line.empty()) {
        // The first unit of a line is taken whatever its width, unless it is a space.
        if (!space) {
          line_w = measure(u);
          line = std::move(u);
        }
        continue;
      }
      const float w = measure(u);
      float sum = line_w + w;
      if (fits(sum - margin(sum)) != fits(sum + margin(sum))) sum = measure(line + u);
      if (fits(sum)) {
        line += u;
        line_w = sum;
      } else {
        lines.push_back(std::move(line));
        line.clear();
        line_w = 0;
        if (!space) {
          line_w = w;
          line = std::move(u);
        }
      }
    }
    lines.push_back(std::move(line));
    para_start = para_end + 1;
  }
  return lines;
}

std::vector<std::string> wrap_balanced(const std::string& text, float width, const TextMeasure& measure,
                                       const WidthRounding& round) {
  std::vector<std::string> best = wrap_lines(text, width, measure, round);
  const std::size_t lines = best.size();
  if (lines < 2) return best;
  // Lines of whole pixels: the narrowest whole width that keeps the count, by bisection.
  float lo = 0, hi = std::floor(width);
  while (hi - lo > 1) {
    const float mid = std::floor((lo + hi) / 2);
    std::vector<std::string> at = wrap_lines(text, mid, measure, round);
    bool fits = at.size() <= lines;
    for (const std::string& l : at) fits = fits && (round ? round(measure(l)) : measure(l)) <= mid;
    if (fits) {
      hi = mid;
      best = std::move(at);
    } else {
      lo = mid;
    }
  }
  return best;
}

std::string ellipsize(const std::string& text, float width, const TextMeasure& measure) {
  static const std::string kEllipsis = "…";
  if (measure(text) <= width) return text;
  const auto fits = [&](const std::string& head) { return measure(head + kEllipsis) <= width; };
  const auto trimmed = [](std::string s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  };
  std::string best, head;
  for (const std::string& u : wrap_units(text)) {
    head += u;
    const std::string t = trimmed(head);
    if (t.empty()) continue;
    if (!fits(t)) break;
    best = t;
  }
  if (best.empty()) {
    // Not even the first word: its first code points (a long token, a long number).
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (std::size_t i = 0; i < text.size();) {
      const unsigned c = p[i];
      const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      const std::string t = trimmed(text.substr(0, std::min(text.size(), i + len)));
      if (!fits(t)) break;
      best = t;
      i += len;
    }
  }
  return best + kEllipsis;
}

const std::vector<std::string>& WrapCache::lines(const std::string& text, float width, const void* font,
                                                 float font_size, const TextMeasure& measure,
                                                 const WidthRounding& round) {
  std::size_t h = std::hash<std::string_view>{}(text);
  for (std::size_t part : {static_cast<std::size_t>(std::bit_cast<std::uint32_t>(width)),
                           std::hash<const void*>{}(font),
                           static_cast<std::size_t>(std::bit_cast<std::uint32_t>(font_size))}) {
    h ^= part + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  auto it = entries_.find(h);
  if (it != entries_.end() && it->second.width == width && it->second.font == font &&
      it->second.font_size == font_size && it->second.text == text) {
    return it->second.lines;
  }
  ++misses_;
  if (it == entries_.end() && entries_.size() >= kMaxEntries) {
    entries_.clear();
    it = entries_.end();
  }
  Entry e{text, width, font, font_size, wrap_lines(text, width, measure, round)};
  if (it == entries_.end()) it = entries_.emplace(h, std::move(e)).first;
  else it->second = std::move(e);
  return it->second.lines;
}

}  // namespace attnlab::viewer
