// The viewer's UI text in Chinese and English, in one table so that the font atlas can be built
// from exactly the glyphs the UI uses (plus tokens and the core's texts, added by the caller), and
// the scientific notes panel (SPEC.md "模型、验证与适用边界") in both languages. The description,
// the caveat and the mask sentence come from core/stats.h, not from here.
#pragma once

#include "core/types.h"

#include <string>
#include <utility>
#include <vector>

namespace attnlab::viewer {

enum class S {
  AppTitle, PageHeading, PageIntro, KeyboardLine,
  Controls, Input, ModeDemo, ModeRandom, Generate, RandomLimits, RandomOverLimit, RandomPending, Query, Temperature, TemperatureEntry,
  Mask, MaskNone, MaskCausal, Backend, CudaUnavailable, Language,
  Steps, StepOf, Play, Pause, Speed, Reset, Prev, Next,
  Step1, Step2, Step3, Step4,
  TableQ, TableK, TableV, TableScores, TableScaled, TableMask, TableLogits, TableWeights, TableOutput,
  Pooling, PoolMax, PoolMean, ResetView, Zoom, PooledNote, Masked, Legend, HeatHint,
  TipQuery, TipKey, TipOutputDim, TipValue, TipStage, TipMasked, TipPooled,
  RowStats, MaxWeight, Entropy, Effective, Perplexity, Scale, OutputShape, WeightSum, Argmax,
  Description, Copy, Copied, Speak, StopSpeaking, NoEspeak, SpeakProblem,
  Tables, TablesTooLarge, CurrentStep, StagesNotKept,
  Performance, BackendRan, TimeUpload, TimeQk, TimeScaleMask, TimeSoftmax, TimePv, TimeDownload,
  TimeTotal, Redraw, Compare, CompareVariants, CompareNeedsCuda, CompareCpuLimit, SpeedUp, MaxDiff, Stage,
  Notes, NotesIntro, NotesRelated, Keys, ScreenshotSaved, ErrorPrefix, Sequence, Tokens,
  ColourScale, ScaleLinear, ScaleLog, ScaleLogShort,
  Count_
};

// The text of `id` in `lang` (UTF-8). Some entries are printf formats (noted where used).
const char* tr(Lang lang, S id);

// The scientific notes: (heading, body) pairs; bodies may hold several lines.
std::vector<std::pair<std::string, std::string>> science_notes(Lang lang);

// Every string above in both languages, plus the key help: what the font atlas must cover.
std::vector<std::string> all_ui_text();

// Unicode code points of UTF-8 text (invalid bytes skipped).
std::vector<unsigned> utf8_codepoints(const std::string& s);

// The pieces a line of mixed Chinese / English text may be broken between, in order (their
// concatenation is the input): a CJK character, a run of other non-space characters (a word, a
// number: "0.219" stays whole), or a run of spaces. Closing punctuation (，。、）… , . ; : etc.)
// joins the piece before it, so it never starts a line; after Chinese punctuation a new piece
// starts ("0.219、" | "0.102").
std::vector<std::string> wrap_units(const std::string& para);

}  // namespace attnlab::viewer
