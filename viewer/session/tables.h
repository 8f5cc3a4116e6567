// The information panel's numeric tables (viewer/app/info_panel.cpp draws them): which matrices,
// in the chain's order, and the labels of their columns as the CLI's tables print them (`attnlab
// demo`): the key tokens over a matrix of keys (QKᵀ, the scaled and modified scores, the mask, the
// logits, the weights), feature numbers counted from 1 over Q, K, V, their RoPE rotations and the
// output. Free of SDL and ImGui.
#pragma once

#include "core/problem.h"
#include "core/trace.h"
#include "viewer/draw/strings.h"

#include <string>
#include <vector>

namespace attnlab::viewer {

struct NumericTable {
  const char* id = "";              // the ImGui table id
  S title = S::TableQ;              // the panel formats the titles that take an argument
  const MatrixF* m = nullptr;
  bool query_rows = true;           // rows are the queries (else the keys: K, V, K rotated)
  bool key_cols = false;            // columns are the keys (else feature numbers)
  int step = 0;                     // the chain step it belongs to (highlighted there); 0: none
};

// The tables of trace t of problem p, in the chain's order; the RoPE and score-mod stages only
// when t has them.
std::vector<NumericTable> numeric_tables(const Problem& p, const Trace& t);

// "1".."d": feature columns, counted from 1 as the CLI counts them.
std::vector<std::string> feature_labels(int d);

// The column labels of table `tb`: p's key tokens, or feature_labels of its width.
std::vector<std::string> table_column_labels(const Problem& p, const NumericTable& tb);

}  // namespace attnlab::viewer
