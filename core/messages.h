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
  NpyMaskEntry,         // {0} file, {1} value, {2} " at row r, column c"
  NpyValueNotFinite,    // {0} file, {1} value, {2} place
  NpyValueOutOfRange,   // {0} file, {1} value, {2} place
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
  NpyMalformed,         // {0} file, {1} what the parser found
  NpyHeaderClaims,      // {0} file, {1} claimed bytes, {2} present
  NpyShapeTooLarge,     // {0} file, {1} shape
  NpyDataTruncated,     // {0} file, {1} shape, {2} type, {3} count, {4} item size, {5} present
  CannotWrite,          // {0} path, {1} reason
  FileTooLarge,         // {0} path, {1} its size, {2} the limit
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
  DiffValue,            // {0} key, {1} value, {2} what the key takes
  Bf16StagedCuda,
  Bf16Streamed,         // {0} N, {1} the largest N whose stages are kept
  RunPrecision,         // {0} the value
  // memory refusals (ResourceError): sizes as format_bytes writes them
  HostMemoryCpuRun,     // {0} variant, {1} need, {2} available
  GpuMemoryStaged,      // {0} need, {1} heads, {2} n, {3} m, {4} free
  GpuMemoryStagedMask,  // the same, with the (n, m) mask on the device
  GpuMemoryFused,       // {0} need, {1} free
  HostMemoryStages,     // {0} need, {1} stages, {2} heads, {3} n, {4} m, {5} available
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

}  // namespace attnlab
