// Input/output of matrices and token lists: CSV (comma or whitespace separated, '#' comments)
// and .npy (float32 or float64, 2-D, C order, version 1.0/2.0/3.0), and whole-file writes. The
// renderings of a Trace are in core/report.h. Readers throw InputError naming the file, and for
// CSV the line and column ("q.csv:3:2: 'abc' is not a number").
#pragma once

#include "core/types.h"

#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

// Reads CSV or .npy by extension (".npy" -> npy, anything else -> CSV).
MatrixF read_matrix(const std::string& path);
// Parses CSV text; `name` is used in messages.
MatrixF parse_csv(std::string_view text, const std::string& name);
// Parses .npy bytes; `name` is used in messages.
MatrixF parse_npy(std::string_view bytes, const std::string& name);
// Mask files may hold -inf ("-inf", "-Infinity", "−∞") besides 0; same formats.
MatrixF read_mask(const std::string& path);
// Mask bytes already in memory (CSV or .npy by `name`'s extension): values 0 or -inf only.
MatrixF parse_mask(std::string_view bytes, const std::string& name);

// Writes `data` to `path` (replacing it); InputError "cannot write '<path>': <reason>", also when
// only the final flush fails (a full disk).
void write_file(const std::string& path, std::string_view data);

void write_csv(const std::string& path, const MatrixF& m);
void write_npy(const std::string& path, const MatrixF& m);  // float32, C order
std::string to_npy_bytes(const MatrixF& m);

// Token labels: "a,b,c" or a file with one token per line (blank lines ignored).
std::vector<std::string> split_tokens(std::string_view csv);
std::vector<std::string> read_tokens_file(const std::string& path);

}  // namespace attnlab
