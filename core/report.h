// Renderings of a run for people and tools: the page-style text tables, CSV, markdown, and the
// stable JSON interface (issue 2's schema: tokens, key_tokens, d_k, d_v, temperature, mask,
// backend, precision, query, stages{q,k,v,scores,scaled,mask,logits,weights,output}, rows[],
// description). JSON numbers keep full float precision (>= 9 significant digits); -inf is null.
#pragma once

#include "core/problem.h"
#include "core/stats.h"
#include "core/trace.h"

#include <initializer_list>
#include <string>

namespace attnlab {

enum class Format { Text, Json, Csv, Markdown };
Format parse_format(const std::string& s);  // throws InputError
// parse_format for a command that prints only `allowed`: any other value, known or not, is refused
// with `refusal` ({0}: the value as given), which names the command's own formats.
Format parse_format_among(const std::string& s, std::initializer_list<Format> allowed, Msg refusal);

// `query` is the selected query row (0 <= query < n). Large problems are summarised in text and
// markdown (first/last rows and columns); JSON and CSV are always complete.
std::string render(const Problem& p, const Trace& t, int query, Lang lang, Format f);

}  // namespace attnlab
