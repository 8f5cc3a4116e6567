// The pieces of core/report.cpp's renderings that other renderings of a run share (the backward's,
// core/backward_report.cpp), so that every table of the lab is laid out by one code: the stages
// of a Trace with their titles, the summarised indices of a large matrix, a table grid and its
// text and markdown layouts, the header lines of a run, CSV numbers and the JSON layout of
// matrices row by row.
#pragma once

#include "core/backward.h"
#include "core/problem.h"
#include "core/trace.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace attnlab::report_parts {

using Json = nlohmann::ordered_json;

constexpr int kMaxShown = 12;  // rows/columns shown in full in text and markdown
constexpr int kEdge = 6;       // rows/columns kept at each end when summarising

// %.9g of a float read back: what JSON writes for it (9 significant digits round-trip a float).
double float_for_json(float x);
// A CSV value: %.9g, "-inf", "inf", "nan".
std::string csv_number(float x);

enum class Axis { Query, Key, Feature };  // what a row or column of a stage is indexed by

struct Stage {
  std::string key;    // JSON/CSV name: q k v scores scaled mask logits weights output
  std::string title;  // page-style title in the chosen language
  const MatrixF* m;
  Axis rows, cols;
};

// The stages of a run that hold numbers (the inputs first), with their titles in `lang`.
std::vector<Stage> stages_of(const Problem& p, const Trace& t, Lang lang);
// The label of row or column i along `a`: a query or key token (of its head), or a feature's 1-based index.
std::string axis_label(const Problem& p, Axis a, int i);
// Indices shown when summarising `count` entries; -1 marks a gap ("…"); `keep` stays visible.
std::vector<int> shown_indices(int count, int keep = -1);

struct Grid {
  std::vector<std::string> header;              // first cell is the row-label header
  std::vector<std::vector<std::string>> cells;  // first cell of each row is its label
  int marked = -1;                              // the selected query's row in cells (-1: none)
};

// Head 0 of stage s as a grid, summarised when large; `mark_query` puts "> " before the selected
// query's row (markdown_table sets that row's label in bold instead); every value is shown divided
// by `unit` (a table's common power of ten).
Grid grid_of(const Problem& p, const Stage& s, int query, bool mark_query, double unit = 1.0);
// The power of ten, as its exponent, that grid_of's cells are divided by when every finite cell it
// shows is below `below` in size: their largest then reads between 1 and 10 with two decimals,
// where it would read 0.00 (the weights of thousands of keys) or 0.01; 0 otherwise, and for cells
// that are all 0 or masked. kSmallForward: the forward's tables (the demo's weights, up to 0.26,
// read as the page's); kSmallGradients: the gradients, which are small as a rule.
constexpr double kSmallForward = 0.05, kSmallGradients = 0.5;
int table_exponent(const Problem& p, const Stage& s, int query, double below);
// "  [values × 1e-3]" after a table's title (empty for exponent 0).
std::string unit_suffix(int exponent, Lang lang);
std::string text_table(const Grid& g);
std::string markdown_table(const Grid& g);
std::string md_escape(const std::string& s);

// The header lines of a run before its tables: the source, d_k and the scaling, the sequence and
// query, the modifications, the backend line, the heads, the summarising note.
std::vector<std::string> intro_lines(const Problem& p, const Trace& t, int query, Lang lang);

// The problem's modifications, when it has any: "modifications" (the English line) and "mods"
// (θ, the slopes in use, C, W, P, the files), added to `j` in that order.
void add_mods_json(Json& j, const Problem& p);
// The first keys of a run's JSON, in this order: tokens, key_tokens, d_k, d_v, temperature, mask,
// the modifications (add_mods_json), backend, precision, variant, heads, kv_heads.
void add_run_json(Json& j, const Problem& p, const Trace& t);
// What dO is, as backward's and walk --backward's JSON name it: {"kind": "random", "seed": S},
// {"kind": "sum"}, {"kind": "file" | "mse", "file": F}.
Json upstream_json(const Upstream& u);
// Row r of m as a JSON array (float_for_json numbers, null for −inf), appended to `out`.
void append_json_row(std::string& out, const MatrixF& m, Eigen::Index r);
// `j` laid out one top-level key per line; an entry "<key>/<name>" of `matrices` fills the
// placeholder `name` of the top-level object `key`, one matrix row per line; "rows" one item per line.
std::string layout_json(const Json& j, const std::map<std::string, const MatrixF*>& matrices);

}  // namespace attnlab::report_parts
