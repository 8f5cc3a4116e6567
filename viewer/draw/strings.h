// The viewer's UI text in Chinese and English, in one table so that the font atlas can be built
// from exactly the glyphs the UI uses (plus tokens and the core's texts, added by the caller), and
// the scientific notes panel (SPEC.md "模型、验证与适用边界") in both languages. The description,
// the caveat and the mask sentence come from core/stats.h, not from here. Also the line breaking
// of that text (wrap_units, wrap_lines) and a bounded cache of broken lines (WrapCache), free of
// ImGui: the UI passes its font's text width in as a function.
#pragma once

#include "core/types.h"

#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attnlab::viewer {

enum class S {
  AppTitle, PageHeading, PageIntro, PageIntroExplicit, KeyboardLine, KeyboardLineNoSteps, KeyboardLineOtherViews,
  Controls, Input, ModeDemo, ModeRandom, Generate, RandomLimits, RandomPending, Query, Temperature, TemperatureEntry,
  Mask, MaskNone, MaskCausal, Backend, CudaUnavailable, Language,
  Steps, StepOf, Play, Pause, Speed, Reset, Prev, Next,
  Step1, Step2, Step2Mods, Step3, Step4,
  TableQ, TableK, TableV, TableScores, TableScaled, TableScaledExplicit, TableMask, TableLogits, TableWeights, TableOutput, DemoTies,
  Pooling, PoolMax, PoolMean, ResetView, Zoom, PooledNote, Masked, Legend, HeatHint,
  TipQuery, TipKey, TipOutputDim, TipValue, TipStage, TipMasked, TipPooled,
  RowStats, MaxWeight, Entropy, Effective, Perplexity, Scale, ScaleExplicit, OutputShape, WeightSum, Argmax,
  Description, Copy, Copied, Speak, StopSpeaking, NoEspeak, SpeakProblem,
  Tables, TablesTooLarge, TableColumns, CurrentStep, StagesNotKept, StageComing, PlotTooSmall,
  Performance, BackendRan, TimeUpload, TimeQk, TimeScaleMask, TimeSoftmax, TimePv, TimeDownload,
  TimeTotal, Redraw, Compare, CompareVariants, CompareNeedsCuda, CompareCpuLimit, SpeedUp, MaxDiff, Stage,
  TermStaged, TermFused, TermScores, TermScaled, TermLogits, TermWeights, TermOutput,
  Notes, NotesIntro, NotesRelated, Keys, ScreenshotSaved, ErrorPrefix, Sequence, Tokens,
  ColourScale, ScaleLinear, ScaleLog, ScaleLogShort,
  Computing, Streamed, TipExactNeedsRow, CompareNeedsStages,
  ViewLabel, ViewChain, ViewWalk,
  AxisKeys, AxisDims, RowOne, RowRange, ColOne, ColRange, PooledNoteZoomed, TipMaskedWeight,
  PageSentence, Reproduce, SelectedKey, Seed,
  ModeFiles, FilesMask, FilesTokens, Load, FilesHint, MaskCustom, WindowTooSmall, RowChartTitle,
  ExportCsv, ExportJson, ExportPng, Exported,
  WalkTileSize, WalkFirst, WalkColTile, WalkColKeys, WalkColTileMax, WalkColOutput,
  WalkSkipped, WalkStrip, WalkLegend, WalkChartM, WalkChartL, WalkChartErr, WalkOutputNow,
  WalkStaged, WalkFinal, WalkUnits, WalkCuda, WalkNothingYet, WalkKeysHint, WalkError,
  ViewPerf, PerfSeries, PerfBackends, PerfVariants, PerfPrecisions, PerfMasks, PerfHeads, PerfD,
  PerfN, PerfRun, PerfCancel, PerfExportCsv, PerfExportPng, PerfIdle, PerfMeasuring, PerfProgress,
  PerfDone, PerfCancelled, PerfError, PerfChartTime, PerfChartTflops, PerfChartSpeedup,
  PerfChartRoofline, PerfChartMemory, PerfAxisN, PerfAxisMs, PerfAxisTflops, PerfAxisSpeedup,
  PerfAxisIntensity, PerfAxisGflops, PerfAxisMemory, PerfBaseline, PerfSkippedN, PerfPending,
  PerfTip, PerfTipSpeedup, PerfRoofBw, PerfRoofGemm, PerfRoofPeak, PerfGemmPoint, PerfRoofMissing, PerfRoofHint, PerfMemWall,
  PerfNoPoints, PerfPressRun, PerfNoCase, PerfCancelledNone, PerfNoFigure, PerfCudaOff, PerfExported, PerfNothingChosen, PerfSpread,
  // the perf view's pass (issue 24)
  PerfPass, PerfPassForward, PerfPassBackward, PerfPassBoth, PerfBackwardRule, PerfAxisTflopsRule, PerfRoofBackward,
  // several queries at once (issue 14)
  QueriesLabel, QueriesHint, QueriesTable, QueriesMean, QueriesClear, QueriesChart, QueriesNeedRows,
  QueriesColMax, QueriesColEntropy, QueriesColPerplexity,
  // precision and diff views (issue 14)
  ViewPrecision, ViewDiff, RunPrecision, PrecAbs, PrecRel, PrecRelDef, PrecDescription, PrecSummary,
  PrecExact, PrecLegendLog, PrecLegendZero, PrecHist, PrecHistAxis, PrecTipRun, PrecTipFp64, PrecTipAbs,
  PrecTipRel, PrecTipUlps, PrecNeedsStages, PrecComputing, PrecRefError, PrecNonFinite, FusedOnlyOutput,
  DiffA, DiffB, DiffEditor, DiffKeep, DiffApply, DiffIdentical, DiffIdenticalMasked, DiffSummary, DiffTop, DiffColQuery,
  DiffColKey, DiffLegend, DiffMaskedLegend, DiffComputing, DiffBError, DiffNeedsStages, DiffQueryNote,
  DiffDescription, DiffNoSpec, DiffTipA, DiffTipB, DiffTipDiff, SetMaskNone, SetMaskCausal, SetMaskCustom,
  SetStaged, SetFused, SetQuery, DiffSameRun, DiffMaxAt, DiffVariant, DiffPrecision, DiffQuery, DiffBeforeChange,
  // heads view (issue 15)
  ViewHeads, HeadsLayer, HeadsHead, HeadsCount, HeadsTitle, HeadsTitleLayer, HeadsProgress,
  HeadsCaption, HeadsCaptionKv, HeadsCaptionPending, HeadsCaptionError, HeadsTip, HeadsTipKv,
  HeadsError, HeadsNote, HeadsOneHead, HeadsBundleMask, PanelMaskOtherViews, PanelTemperatureOtherViews,
  HeadsPattern, HeadsShown, HeadsShownHead, ModeBundle, HeadsCaptionBare, HeadsCaptionKvBare, HeadsTipMean,
  // position and score modifications (issue 23)
  Mods, ModsHint, ModRope, ModRopeTheta, ModAlibi, ModSoftcap, ModSoftcapC, ModWindow, ModWindowW, ModPrefix,
  ModPrefixP, TableQRot, TableKRot, TableBiased, TableCapped, SubShow, SubLogits, SubScaled, SubBiased,
  SubCapped, SubNote, ModBiasFile, ModDocsFile, WalkUnitsMods,
  // step 1's RoPE matrices (issue 23)
  RopeQK, RopeQ, RopeQRot, RopeQDiff, RopeK, RopeKRot, RopeKDiff, RopeNote, RopeNoteDiff, AxisDimsK, RopeHintK,
  TipPosition, TipDimPair, TipRopeAngle, TipRopeValues,
  // the precision map's clamped log scale, the diff legend's masked swatch in two lines
  PrecLegendClamped, DiffMaskedSwatch, DiffMaskedWhere,
  // a pooled precision or diff map's note under its legend, and what its pixels show
  MapPooled, PoolLargestError, PoolLargestChange,
  // Export CSV / PNG in a view that shows no step's stage / no centre heatmap
  ExportNoStageHere, ExportNoHeatmapHere,
  Count_
};

// The text of `id` in `lang` (UTF-8). Some entries are printf formats (noted where used).
const char* tr(Lang lang, S id);

// The scientific notes: (heading, body) pairs; bodies may hold several lines.
std::vector<std::pair<std::string, std::string>> science_notes(Lang lang);

// Every string above in both languages and the scientific notes: what the font atlas must cover
// (with the key help, viewer/session/keymap.h, which the app adds).
std::vector<std::string> all_ui_text();

// "0".."n-1" (a matrix's dimensions as its columns' labels) in `cache`, made again only when n
// changes.
const std::vector<std::string>& index_labels(std::vector<std::string>& cache, int n);

// Unicode code points of UTF-8 text (invalid bytes skipped).
std::vector<unsigned> utf8_codepoints(const std::string& s);

// The pieces a line of mixed Chinese / English text may be broken between, in order (their
// concatenation is the input): a CJK character, a run of other non-space characters (a word, a
// number: "0.219" stays whole), or a run of spaces. Closing punctuation (，。、）… , . ; : etc.)
// joins the piece before it, so it never starts a line (after a space, with the space: "0.02 …"
// | "0.01]", never a line starting " …" whose space and ellipsis the wrapping drops); opening punctuation (（“《「【 ( [) joins
// the piece after it, so it never ends a line ("无关" | "（log-sum-exp）"); after Chinese
// punctuation a new piece starts ("0.219、" | "0.102").
std::vector<std::string> wrap_units(const std::string& para);

// The width of a piece of text in pixels. wrap_lines assumes it is additive: the width of a line is
// the sum of its pieces' widths (true of ImGui's unrounded glyph advances; see viewer/ui/kit.cpp).
using TextMeasure = std::function<float(const std::string&)>;
// What a line's summed width is compared with `width` as: ImGui::CalcTextSize rounds the sum up,
// and a caller reproducing it passes the same rounding. Empty: the sum itself.
using WidthRounding = std::function<float(float)>;

// Greedy line breaking of `text` into lines no wider than `width`: paragraphs split at '\n' (an
// empty paragraph is an empty line), breaks only between wrap_units, a unit wider than the line
// stands alone on its line, and a unit starting with a space is dropped at the start of a line.
// A unit joins the line when round(width of the line + width of the unit) <= width. Each unit is
// measured once and the widths are summed: a paragraph costs one measure per unit, where measuring
// the growing line instead costs time quadratic in its length. Only where the float sum is within
// a hair (1/64 px and 2^-14 of itself) of changing the decision is the candidate line measured
// whole, since the sum's last bits depend on the order of the additions.
// text (UTF-8) -> lines, in order; as many as the paragraphs or more.
std::vector<std::string> wrap_lines(const std::string& text, float width, const TextMeasure& measure,
                                    const WidthRounding& round = {});

// wrap_lines at the narrowest width (at most `width`) that gives no more lines than at `width`:
// lines of about one length ("当前" | "输出" rather than "当前输" | "出"), for a short label in a
// narrow place (a table's header).
std::vector<std::string> wrap_balanced(const std::string& text, float width, const TextMeasure& measure,
                                       const WidthRounding& round = {});

// `text` shortened to fit `width` pixels with "…": the whole text where it fits; else the longest
// run of its first wrap_units (words, numbers, CJK characters; spaces at its end dropped) that fits
// with "…" after it; where not even the first unit does, its longest first code points that do; "…"
// alone where nothing fits beside it. A label too long for its place (a radio button at a large UI
// scale, a heatmap column) ends cleanly this way instead of being cut by the clip rectangle.
std::string ellipsize(const std::string& text, float width, const TextMeasure& measure);

// wrap_lines results kept between frames: an unchanged text at an unchanged width in an unchanged
// font costs one hash and one string compare, and no measuring. The key is everything the lines
// depend on: the text, the width exactly as passed, and the font (an identity pointer and a size,
// which together fix what `measure` returns; `round` must be the same on every call). At most
// kMaxEntries entries: when full it is emptied (a temperature slider dragged through many values
// leaves one stale description per frame behind).
class WrapCache {
 public:
  static constexpr std::size_t kMaxEntries = 256;

  // The lines of wrap_lines(text, width, measure); valid until the next call.
  const std::vector<std::string>& lines(const std::string& text, float width, const void* font,
                                        float font_size, const TextMeasure& measure,
                                        const WidthRounding& round = {});
  std::size_t size() const { return entries_.size(); }
  std::size_t misses() const { return misses_; }  // how many calls ran wrap_lines

 private:
  struct Entry {
    std::string text;
    float width = 0;
    const void* font = nullptr;
    float font_size = 0;
    std::vector<std::string> lines;
  };
  // Keyed by the hash of the whole key; the entry holds the key itself, so a collision is a miss
  // that replaces the entry, never a wrong answer.
  std::unordered_map<std::size_t, Entry> entries_;
  std::size_t misses_ = 0;
};

}  // namespace attnlab::viewer
