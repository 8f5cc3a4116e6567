// The catalogue of the lab's user-facing refusals, in English and Chinese: each id has a template
// with {0}, {1}, ... for its arguments. Library code throws InputError(Msg::X, {args}) (its what()
// is the English text, as the command line prints it); the viewer keeps the id and the arguments
// (Message) and shows the text in its UI language. Arguments are data (numbers, file names,
// tokens, a CUDA error), never words to translate.
#pragma once

#include "core/types.h"

#include <exception>
#include <string>
#include <vector>

namespace attnlab {

enum class Msg : int {
  None = 0,
  TemperatureInvalid,   // {0}: the value, as typed or printed
  QueryOutside,         // {0} query, {1} last row
  LimitCpu,             // {0} N, {1} CPU limit, {2} CUDA limit
  LimitCuda,            // {0} N, {1} limit
  NMin,                 // {0} N
  HeadDimRange,         // {0} d_k | d_v, {1} limit, {2} value
  NoCustomMask,
  FilesTogether,        // {0} the missing option
  NoDevice,             // {0} reason
  UnknownBackend,       // {0} name
  FullyMaskedRow,       // {0} row, {1} token
  ShapeKColumns,        // {0} K columns, {1} Q columns
  ShapeVRows,           // {0} V rows, {1} K rows
  QueriesOverKeys,      // {0} n, {1} m
  KvHeads,              // {0} query heads, {1} key/value heads
  OverflowScores,       // {0} row, {1} column
  OverflowLogits,       // {0} row, {1} column
  CannotOpen,           // {0} path, {1} reason
  CannotRead,           // {0} path, {1} reason
  NotANumber,           // {0} file:line:column, {1} the token
  RowLength,            // {0} file:line, {1} found, {2} expected
  EmptyFile,            // {0} file
  NotNpy,               // {0} file
  InputTooLarge,        // {0} file, {1} limit
  NotText,              // {0} file, {1} the offset of its first NUL byte
  ValueOutOfRange,      // {0} where, {1} value
  ValueNotFinite,       // {0} where, {1} value
  CsvMaskEntry,         // {0} where, {1} value
  EmptyValueAtEnd,      // {0} where
  EmptyValueCommas,     // {0} where
  NpyVersion,           // {0} file, {1} major, {2} minor
  NpyHeaderTruncated,   // {0} file
  NpyDtype,             // {0} file, {1} dtype
  NpyFortran,           // {0} file
  NpyRank,              // {0} file, {1} rank, {2} shape
  NpyEmpty,             // {0} file, {1} shape
  NpyTrailing,          // {0} file, {1} bytes, {2} shape
  NpyMaskEntry,         // {0} file, {1} value, {2} row, {3} column
  NpyValueNotFinite,    // {0} file, {1} value, {2} row, {3} column
  NpyValueOutOfRange,   // {0} file, {1} value, {2} row, {3} column
  MatrixNonFinite,      // {0} Q | K | V, {1} value, {2} row, {3} column
  MatrixEmpty,          // {0} Q | K | V
  QueryTokenCount,      // {0} labels, {1} rows
  KeyTokenCount,        // {0} labels, {1} rows
  MaskShape,            // {0} rows, {1} columns, {2} n, {3} m
  MaskEntryAt,          // {0} value, {1} row, {2} column
  TokenLabelCount,      // {0} option, {1} labels, {2} n, {3} m, {4} what to give
  MaskWord,             // {0} the word
  TokensBoth,
  OnlyComments,         // {0} file
  // a malformed .npy header (core/io.cpp's parser): {0} file
  NpyExpected,          // {0}, {1} the characters that may come there, quoted
  NpyExpectedString,    // {0}
  NpyUnterminated,      // {0}
  NpyDuplicateKey,      // {0}, {1} key
  NpyUnexpectedKey,     // {0}, {1} key
  NpyMissingKey,        // {0}, {1} key
  NpyStructured,        // {0}
  NpyTrailingBytes,     // {0}
  NpyFortranValue,      // {0}
  NpyRankTooHigh,       // {0}, {1} the most dimensions
  NpyDimTooLarge,       // {0}
  NpyDimNotInteger,     // {0}
  NpyHeaderClaims,      // {0} file, {1} claimed bytes, {2} present
  NpyShapeTooLarge,     // {0} file, {1} shape
  NpyDataTruncated,     // {0} file, {1} shape, {2} type, {3} count, {4} item size, {5} present
  CannotWrite,          // {0} path, {1} reason
  FileTooLarge,         // {0} path, {1} its size in bytes, {2} the limit
  EmptyToken,           // {0} position, {1} the list
  NoTokens,             // {0} file
  // several queries (viewer)
  QueryListEmptyItem,   // {0} the list
  QueryListTooLong,     // {0} the most, {1} given
  // precision and diff views (issue 14)
  DiffEmpty,            // --diff with nothing in it
  DiffItem,             // {0} the item without '='
  DiffKeyUnknown,       // {0} key
  DiffKeyTwice,         // {0} key
  DiffValue,            // {0} key, {1} value, {2} the words the key takes ("none, causal")
  Bf16StagedCuda,
  Bf16Streamed,         // {0} N, {1} the largest N whose stages are kept
  RunPrecision,         // {0} the value
  // memory refusals (ResourceError): sizes as format_bytes writes them
  HostMemoryCpuRun,     // {0} variant, {1} need, {2} available
  GpuMemoryStaged,      // {0} need, {1} heads, {2} n, {3} m, {4} free
  GpuMemoryStagedMask,  // the same, with the (n, m) mask on the device
  GpuMemoryFused,       // {0} need, {1} free
  HostMemoryStages,     // {0} stages, {1} heads, {2} n, {3} m, {4} need, {5} available
  GpuMemoryStreamed,    // {0} need, {1} row statistics, {2} exact rows, {3} m, {4} free
  HostMemoryStreamed,   // {0} need, {1} available
  HeadsRange,           // {0} the most, {1} given
  // the viewer's export buttons
  ExportStreamed,       // {0} N, {1} the command that exports it
  ExportPending,
  ExportJsonTooLarge,   // {0} the limit, {1} N, {2} the command
  ExportJsonStages,     // {0} the command
  ExportNoHeatmap,
  // the viewer's problem controls
  RandomInputsTooLarge, // {0} N, {1} d_k, {2} d_v, {3} heads, {4} need, {5} the limit
  MaskBundle,
  MaskBundleFixed,      // the viewer's mask control (M, the radio) on a bundle's call
  HeadOutside,          // {0} head, {1} last head
  LayerOutside,         // {0} layer
  // a run that failed on the viewer's worker (the state on screen stays)
  RunOutOfMemory,
  RunDeviceFailed,      // {0} the device's own words
  CudaUnusable,         // why CUDA is off, for people (the runtime's words go to a tooltip)
  // position and score modifications (core/modifications.h)
  RopeTheta,            // {0} the value
  RopeOddDim,           // {0} d_k
  SoftcapInvalid,       // {0} the value
  WindowInvalid,        // {0} the value
  PrefixInvalid,        // {0} the value, {1} positions
  PrefixNotWhole,       // {0} the text (a spec's P before the problem is known)
  AlibiSlopeCount,      // {0} slopes given, {1} heads
  AlibiSlopeValue,      // {0} the value
  BiasShape,            // {0} rows, {1} columns, {2} n, {3} m, {4} heads n
  BiasValue,            // {0} value, {1} row, {2} column
  DocumentsLength,      // {0} ids, {1} positions
  DocumentsValue,       // {0} value, {1} position
  ScoreModUnknown,      // {0} the item
  MaskModUnknown,       // {0} the item
  ModTwice,             // {0} the modification
  CausalWithMaskFile,
  TokensAbove,          // {0} Q | K, {1} rows per head, {2} the most
  // the command line's mends (fix/cli): the online-softmax kernels' overflows, one query row at a
  // time, and the CUDA runtime's known reasons
  OverflowScoresRow,    // {0} head, {1} query row, {2} fp32 | bf16
  OverflowLogitsRow,    // {0} head, {1} query row, {2} fp32 | bf16
  OverflowOutputRow,    // {0} head, {1} query row, {2} fp32 | bf16
  OverflowGradients,    // the backward's (every backend)
  CudaNotBuilt,
  CudaNoDeviceFound,
  CudaNoDeviceBare,     // the viewer's and bench's short form, without a reason
  CudaBackwardNotBuilt,
  // the lab's remaining refusals, moved here so that --lang zh says them in Chinese too
  FileTooLargeMiB,      // {0} path, {1} its size in bytes, {2} the same in MiB, {3} the limit
  TokenLabelCountEither,  // {0} option, {1} labels, {2} n, {3} m, {4} n, {5} n + m
  BiasShapeShared,      // {0} rows, {1} columns, {2} n, {3} m: one head, so one shape
  // problems, heads, splits and the query (core/problem.cpp)
  ScaleInvalid,         // {0} the value
  HeadsMin,             // {0} heads
  KvGroupDivide,        // {0} heads, {1} kv_group
  RowsOverHeads,        // {0} Q rows, {1} K rows, {2} heads
  RowsOverHeadsKv,      // {0} Q rows, {1} K rows, {2} heads, {3} key/value heads
  RandomDims,
  OptionRange,          // {0} the option, {1} lowest, {2} highest, {3} given
  DecodeViewKvHeads,
  SplitRange,           // {0} keys, {1} given
  LabelAmbiguous,       // {0} label, {1} rows it names
  QueryIndexRange,      // {0} index, {1} queries, {2} last index
  QueryUnknown,         // {0} the text, {1} the first tokens
  QueryRowRange,        // {0} query row, {1} queries
  // synthetic patterns (core/patterns.cpp)
  PatternUnknown,       // {0} the text
  PatternDk,            // {0} pattern, {1} the least d_k, {2} d_k
  PatternWindow,        // {0} W, {1} N
  PatternNoGapWindow,   // {0} pattern, {1} N, {2} d_k
  PatternNoGapPrevious, // {0} pattern, {1} N, {2} d_k
  // the backward's upstream gradient (core/backward.cpp)
  LossMseTarget,
  LossUnknown,          // {0} the spec
  DoutShape,            // {0} file, {1} rows, {2} columns, {3} O rows, {4} O columns, {5} heads, {6} n
  TargetShape,          // the same for Y
  DoutNotFinite,        // {0} file, {1} value, {2} row, {3} column
  TargetNotFinite,      // the same for Y
  // bundles (core/bundle.cpp): {0} the manifest's path, {1} the call's index where a call is named
  BundleMissing,        // {0} the directory
  BundleNotDir,         // {0} the directory
  BundleNoManifest,     // {0} manifest path
  BundleJson,           // {0} manifest path, {1} line, {2} column
  BundleJsonValue,      // {0} manifest path
  BundleNotObject,      // {0} manifest path
  BundleFormat,         // {0} manifest path
  BundleVersion,        // {0} manifest path
  BundleStrings,        // {0} manifest path, {1} key
  BundleString,         // {0} manifest path, {1} key
  BundleNoCalls,        // {0} manifest path
  BundleAllSkipped,     // {0} manifest path, {1} how many skipped, {2} the first's name, {3} its reason
  BundleCallObject,     // {0}, {1}
  BundleCallNoKey,      // {0}, {1}, {2} key
  BundleCallNotWhole,   // {0}, {1}, {2} key
  BundleCallIntRange,   // {0}, {1}, {2} key, {3} lowest, {4} highest, {5} given
  BundleCallKvHeads,    // {0}, {1}, {2} query heads, {3} key/value heads
  BundleCallNoFile,     // {0}, {1}, {2} key
  BundleCallFileName,   // {0}, {1}, {2} key
  BundleCallFileOutside,  // {0}, {1}, {2} key, {3} the file
  BundleScaleType,      // {0}, {1}
  BundleScaleValue,     // {0}, {1}, {2} the value
  BundleCausalType,     // {0}, {1}
  BundleRopeType,       // {0}, {1}
  BundleRopeValue,      // {0}, {1}, {2} the value
  BundleRopeOdd,        // {0}, {1}, {2} d_k
  BundleCallStrings,    // {0}, {1}, {2} key
  BundleCallString,     // {0}, {1}, {2} key
  BundleCausalAndMask,  // {0}, {1}
  BundleFileMissing,    // {0} path, {1} key (q, k, v, output, mask, bias), {2} call, {3} its name
  BundleArrayShape,     // {0} path, {1} key, {2} call, {3} name, {4}x{5} found, {6}x{7} declared, {8} the dims
  BundleArrayShapeHeads,  // {0} path, {1} key, {2} call, {3} name, {4}x{5} found, {6} n, {7} m, {8} heads n
  BundleArrayShapeOne,  // {0} path, {1} key, {2} call, {3} name, {4}x{5} found, {6}x{7} declared
  BundleBiasNotFinite,  // {0} file:line:column, {1} value, {2} call, {3} name
  BundleBiasNotFiniteAt,  // {0} file, {1} value, {2} row, {3} column, {4} call, {5} name
  BundleHeadRange,      // {0} head, {1} call name, {2} heads, {3} last head
  LayerRange,           // {0} the text, {1} calls, {2} last index
  LayerUnknown,         // {0} the text, {1} last index, {2} the first names
  BundleMaskPerHead,    // {0} call, {1} name
  BundleMaskRowBlocked, // {0} the mask file, {1} its row, {2} call, {3} name
  // the command line's options (cli/common.cpp)
  QueriesRange,         // {0} N, {1} given
  KvHeadsRange,         // {0} heads, {1} given
  RandomRows,           // {0} N, {1} heads
  RandomInputsLimit,    // {0} N, {1} d_k, {2} d_v, {3} heads, {4} need, {5} the limit
  RandomInputsHost,     // {0} N, {1} d_k, {2} d_v, {3} heads, {4} need, {5} room
  OnlyRandomDemo,       // {0} the option
  OnlyRandomBundle,     // {0} the option
  OnlyRandomFiles,      // {0} the option
  PatternNeedsRandom,
  ShapesRandom,         // {0} the option
  HeadApplies,
  FilesOrRandom,
  OneInput,
  HeadsBundle,
  HeadsRandomOnly,
  NeedInputs,
  LayerBundleOnly,
  DoutSeed,             // {0} the text
  UpstreamTwice,
  DoutSeedWith,
  SplitVariant,         // {0} the variant
  // attnlab backward (cli/cmd_backward.cpp)
  BackwardCudaFused,
  BackwardVariant,      // {0} the variant
  BackwardPrecision,    // {0} the precision
  BackwardCheckBf16,
  BackwardSplit,
  BackwardCheckCsv,
  HostMemoryBackward,   // {0} staged | fused, {1} need, {2} available
  HostMemoryBackwardCheck,  // the same, with the fp64 check
  HostMemoryBackwardAll,    // the same, every number printed (json, csv)
  HostMemoryBackwardCheckAll,
  // the command line's remaining value checks
  WalkFormat,           // {0} the format given (csv, or unknown)
  WalkTileRange,        // {0} keys, {1} tile
  WalkBackwardOnly,     // --dout, --loss, --dout-seed without --backward
  WalkSplitBackward,
  WalkBackwardCuda,
  ToleranceInvalid,     // {0} option, {1} value
  VerifyFormat,         // {0} format
  DescribeFormat,       // {0} the format given
  MaskNeedsValue,
  FormatUnknown,        // {0} format
  VariantUnknown,       // {0} name
  PrecisionUnknown,     // {0} name
  DocumentsQueriesOverKeys,  // {0} queries, {1} keys
  GpuMemoryBackward,    // {0} need, {1} free
  WalkTileCount,        // {0} text: walk --tile not a whole number >= 1
  WalkHeadCount,        // {0} text: walk --head not a whole number >= 0
  WriteStdout,          // standard output could not be written
  NumberDigits,         // {0} option, {1} value: digits beyond the option's integer type
  NumberWhole,          // {0} option, {1} value: a real number for a whole-number option
  NumberAny,            // {0} option, {1} value: no number
  NumberDecimal,        // {0} option, {1} value: a base prefix (0x10)
  SeedRange,            // {0} option, {1} value: not a whole number from 0 to 2^64 - 1
  DiffTemperature,      // {0} key, {1} value: --diff temperature= not a finite number > 0
  DiffQuery,            // --diff query= empty
  TemperatureFp32,      // {0} the temperature, above FLT_MAX
  AlibiSlopeRange,      // {0} slope, {1} the largest distance: slope * distance beyond fp32
  ModNoneAlone,         // {0} option (--score-mod, --mask-mod), {1} the spec: none beside other items
  HostMemoryCpuOnline,  // {0} variant (fused, decode), {1} needed, {2} available: HostMemoryCpuRun without its hint
  TokenControl,         // {0} the label's position (from 1), {1} the label quoted with its escapes
  TokenUtf8,            // {0} the label's position (from 1), {1} the label with its bytes escaped: not UTF-8
  BundleTokenLabel,     // {0} manifest path, {1} the token's position (from 1), {2} the token escaped
  BundleGivesRope,      // {0} the call's θ: --rope beside a bundle call that has its own RoPE
  BundleGivesBias,      // {0} the call's bias file: --score-mod bias: beside a bundle call with its own bias
  LayerAmbiguous,       // {0} --layer as typed, {1} the number of calls of that name, {2} their indices
  DocumentsShape,       // {0} file, {1} rows, {2} columns: document ids not one row or one column
  ModFileMissing,       // {0} the item as typed, {1} its form (bias:FILE, document:FILE): no file named
  HostMemoryVerify,     // {0} variant, {1} need, {2} available
  HostMemoryRender,     // {0} format, {1} numbers, {2} need, {3} available
  OutOfHostMemory,      // an allocation failed
  CudaFallback,         // {0} the device's error
  CudaRefusedFallback,  // {0} why CUDA refused the problem
  // which fp64 reference a bench case's error is against (engine/bench.cpp)
  BenchRefFull,
  BenchRefRows,         // {0} rows
  BenchRefBackwardFull,
  BenchRefBackwardDq,
  BenchRefBackwardNone,
  // why bench leaves a case out (engine/bench.cpp skip_reason, run_cases; the perf view's legend)
  BenchSkipBf16Cuda,
  BenchSkipQueries,
  BenchSkipBackwardDecode,
  BenchSkipCpuBackwardBf16,
  BenchSkipCudaBackwardBuild,
  BenchSkipCudaBackwardFused,
  BenchSkipCudaBackwardBf16D,
  BenchSkipCudaBackwardFp32D,
  BenchSkipKvHeads,     // {0} key/value heads, {1} heads
  BenchSkipSplits,      // {0} splits, {1} keys
  BenchSkipBudget,      // {0} seconds, {1} the budget's flag, {2} the budget
  BenchSkipHostMemory,
  BenchSkipNoRound,
  BenchCancelled,
  BenchDeviceError,     // {0} the device's error
  OverflowBiased,       // {0} row, {1} column
  HostMemoryWalk,       // {0} the format, {1} the numbers, {2} the need, {3} the room
  // the viewer's own flags' values and combinations (viewer/app/options.cpp, the views' flags)
  OptionWords,          // {0} option, {1} the words it takes ("max, mean"), {2} given
  OptionWordList,       // {0} option, {1} the words a comma-separated list takes, {2} the item given
  IntRange,             // {0} option, {1} lowest, {2} highest, {3} given
  DecimalRange,         // {0} option, {1} lowest, {2} highest, {3} given
  SecondsRange,         // {0} option, {1} highest, {2} given
  SizeForm,             // {0} given
  ExportDirMissing,     // {0} folder
  ExportDirDenied,      // {0} folder
  MaskFileNeedsFiles,   // {0} the file given
  TokensNeedFiles,
  FuzzSeedAlone,
  BenchDecodeAlone,
  FuzzAlone,
  CacheDimRope,         // {0} --cache-dim
  RopeDemoOdd,
  AlibiViewerSlopes,
  HeadBundleRange,      // {0} given
  DecodeNoInput,
  CacheHeadsDivide,     // {0} given
  DecodeCacheKeys,      // {0} the most, {1} given
  DecodeHeadDim,        // {0} the most, {1} given
  DecodeHeadsMultiple,  // {0} query heads, {1} key/value heads
  DecodeCacheBytes,     // {0} GB of the cache, {1} GB the view holds
  ViewLossSum,          // {0} given
  BackStepNeeds,        // {0} step word, {1} the option it needs
  ChainSubNeeds,        // {0} stage word, {1} the option it needs
  ChainRopeNeeds,       // {0} what it shows
  PerfSizesForm,        // {0} option, {1} given
  PerfRangeDown,        // {0} option, {1} given
  QueryAndQueries,
  RepeatAlone,
  OutputIsInput,        // {0} --output, {1} the option that reads it
  HostMemoryBackwardStaged,  // {0} staged, {1} need, {2} available
  Count_
};

// Why CUDA is unavailable (engine/registry.h cuda_available, bench's skips) in `lang`: the lab's
// known reasons translated, also after "no CUDA device: "; the driver's own words as they are.
std::string cuda_reason_text(const std::string& reason, Lang lang);

// The text of `id` in `lang` with its arguments filled in.
std::string render_message(Msg id, const std::vector<std::string>& args, Lang lang);

// A refusal as the viewer keeps it: the id and arguments where the error had them, else the
// English text alone.
struct Message {
  Msg id = Msg::None;
  std::vector<std::string> args;
  std::string en;  // what() of the error; empty: no message
  bool empty() const { return en.empty(); }
  std::string text(Lang lang) const { return id == Msg::None ? en : render_message(id, args, lang); }
};
Message message_of(const std::exception& e);
inline Message message_of(Msg id, std::vector<std::string> args) {
  Message m{id, std::move(args), {}};
  m.en = render_message(m.id, m.args, Lang::En);
  return m;
}
// The refusal m thrown again: with its id and arguments where it has them.
inline InputError error_of(const Message& m) {
  return m.id == Msg::None ? InputError(m.en) : InputError(m.id, m.args);
}

}  // namespace attnlab
