// Input/output of matrices and token lists: CSV (comma or whitespace separated, '#' comments)
// and .npy (float32 or float64, 2-D, C order, version 1.0/2.0/3.0), and whole-file writes. The
// renderings of a Trace are in core/report.h. Readers throw InputError naming the file, and for
// CSV the line and column ("q.csv:3:2: 'abc' is not a number").
#pragma once

#include "core/types.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

// The most bytes any input file (matrix, mask, tokens) may hold: the largest input a problem can
// have. A file problem has one head, so its largest matrix is N x d with N up to 2^20 tokens (the
// CLI's limit on --random N) and d up to 128 (the largest head dimension of common models, and
// the widest the TF32 fused kernel takes): 2^27 values, 1 GiB in the widest encoding, float64
// .npy (512 MiB as float32). CSV text and token files get the same bound; a matrix that large in
// CSV at full float32 precision (up to 15 characters a number) needs .npy instead. A mask is
// n x m, which at the largest n = m a staged run can hold in memory is far below the bound.
// The bound is checked before anything is read: a regular file by its size, a stream (FIFO, pipe,
// /dev/zero) by reading at most one byte past it, so memory stays bounded whatever the input.
constexpr std::uint64_t kMaxInputFileBytes = std::uint64_t{1} << 30;

// The bytes of `path`, refused with InputError when it holds more than `limit` bytes:
// "<path>: the file has B bytes (X MiB), more than N MiB (the largest input a problem can have);
// not read"
// for a regular file, judged by its size before any byte is read, or "<path>: more than N MiB
// (the largest input a problem can have); not read further" for a stream, after reading limit + 1
// bytes. Every reader below goes through it with the default limit; tests pass a smaller one.
std::string read_input_file(const std::string& path, std::uint64_t limit = kMaxInputFileBytes);
// What the bytes must be, checked as they arrive so that input which cannot be that format is
// refused at its first wrong bytes instead of after reading up to the limit (a device such as
// /dev/zero, a binary file given as CSV): Text holds no NUL byte (CSV, token lists, a bundle's
// manifest), Npy starts with the magic \x93NUMPY. Matrix: Npy where the first byte is the magic's,
// else Text (a matrix whose name does not say .npy: a pipe, a FIFO, another name). Bytes: anything.
enum class InputFormat { Bytes, Text, Npy, Matrix };
std::string read_input_file(const std::string& path, InputFormat format, std::uint64_t limit = kMaxInputFileBytes);

// Reads CSV or .npy: .npy by its extension or, under any other name (a pipe, a FIFO), by its magic;
// anything else is CSV. .npy: little-endian float32, float64 or integers, 2-D, C order.
MatrixF read_matrix(const std::string& path);
// The same, where a vector is asked for (document ids): a 1-D .npy reads as one row.
MatrixF read_vector(const std::string& path);
// Parses CSV text; `name` is used in messages.
MatrixF parse_csv(std::string_view text, const std::string& name);
// Parses .npy bytes; `name` is used in messages.
MatrixF parse_npy(std::string_view bytes, const std::string& name);
// Mask files may hold -inf ("-inf", "-Infinity", "−∞") besides 0; same formats.
MatrixF read_mask(const std::string& path);
// Mask bytes already in memory (.npy by `name`'s extension or the bytes' magic, else CSV): values 0
// or -inf only.
MatrixF parse_mask(std::string_view bytes, const std::string& name);

// Writes `data` to `path`, replacing it atomically: into a temporary file beside it, renamed over it
// once every byte is on disk, so that a reader never sees half a file and a failed write (a full
// disk, a read-only folder, a path that is a directory) leaves no partial file and the old one
// unchanged. InputError "cannot write '<path>': <reason>". A device or a pipe (/dev/stdout,
// /dev/full) is written directly, as it cannot be replaced; a symbolic link's target is replaced.
void write_file(const std::string& path, std::string_view data);

void write_csv(const std::string& path, const MatrixF& m);
void write_npy(const std::string& path, const MatrixF& m);  // float32, C order
std::string to_npy_bytes(const MatrixF& m);

// A token as a message quotes it: '…', at most about 40 bytes, control characters and bytes that
// are no UTF-8 escaped (\xNN).
std::string quote(std::string_view token);
// A token label fit for the tables: no control character (Msg::TokenControl), UTF-8 (TokenUtf8);
// `position` counts from 1 for the refusal.
void check_label(std::string_view label, std::size_t position);
// Token labels: "a,b,c" or a file with one token per line (blank lines ignored), each checked.
std::vector<std::string> split_tokens(std::string_view csv);
std::vector<std::string> read_tokens_file(const std::string& path);

}  // namespace attnlab
