// The online-softmax walk of one query row through the CPU fused kernel's own update step
// (cpu/online_softmax.h update_tile, the function cpu/fused.cpp runs for every tile): the row is
// lane 0 of a tile of queries, the keys come in tiles of B, and after each tile the walk reads the
// kernel's state (m, l, alpha, acc) and the weights it stored. No second implementation: what
// `attnlab walk` and the viewer's walk view show is what the kernel computes.
// The kernel walks the keys in blocks of kFusedKeyBlock (64); the walk uses the same step with any
// B (the step takes any number of keys), so at B = kFusedKeyBlock its numbers are the kernel's,
// bit for bit.
#pragma once

#include "core/modifications.h"
#include "core/problem.h"
#include "core/walk.h"
#include "cpu/decode.h"

namespace attnlab {

// (one row) Walks query `query` of head `head` of a valid problem (validate) in tiles of `tile`
// keys. Causal: tiles entirely after the query are recorded as skipped and never loaded; the
// diagonal tile is masked per element. Throws InputError for a tile < 1, a head or query out of
// range, or a score that overflows fp32 (as the kernel does).
Walk walk_row(const Problem& p, int head, int query, int tile);

// The problem of that one row: Q's row, the head's K and V, the row of the mask as a 1 x m custom
// mask (causal included), the same temperature and labels. O(m d).
Problem row_problem(const Problem& p, int head, int query);

// Runs f, which runs kernels on row_problem(p, head, query); an overflow refusal that names the
// one-row problem's row (query 0 of head 0) is thrown again naming (head, query) of p.
// throw_for_row throws e again naming (head, query) where e names a row, else returns.
void throw_for_row(const InputError& e, int head, int query);
template <class F>
auto on_row_problem(int head, int query, F f) {
  try {
    return f();
  } catch (const InputError& e) {
    throw_for_row(e, head, query);
    throw;
  }
}

// Fills w's checks from the CPU backend: the staged chain (cpu_staged) and the CPU fused kernel
// (cpu_fused) on row_problem, the fp64 reference on p's own row (reference_fp64_row: RoPE and ALiBi
// in double, not through row_problem's fp32 copies), and the differences to the walk's output. The CUDA output is the caller's (it needs the registry and a device).
void check_walk(const Problem& p, Walk& w);

// (one row) The split-KV computation of the row: the keys cut as the decode kernel cuts them for
// `splits` splits (cpu/decode.h plan_splits), each split's partial state from the kernel's
// split_partial, then the kernel's merge (merge_states) split by split, into w's split fields;
// the one-pass walk in w (walk_row) and its fp64 check (check_walk, when run first) are what the
// merged result is compared with. InputError for
// splits < 1 or more splits than keys.
void walk_splits(const Problem& p, int splits, Walk& w);

// The split fields of w (splits, split_states, merges, split_output) for query `query` of query
// head `head` from the partial states of its key/value head's splits, parts[0 .. plan.splits)
// (split_partial's, or decode_keys' items g * plan.splits + s), over a cache of `keys` keys: each
// split's state and the kernel's merge (merge_states) split by split. Returns the merged fp32 l.
// What walk_splits and the viewer's decode view read the kernel's combine through.
float walk_record_splits(const Problem& p, const cpu::decode::SplitPlan& plan, int keys,
                         const cpu::decode::Partial* parts, int head, int query, Walk& w);

// The header of a walk of p's row (head, query) in tiles of `tile` keys at the kernel's online
// scale `scale`: shapes, temperature, mask, modifications, tokens.
void walk_fill_header(const Problem& p, int head, int query, int tile, float scale, WalkHeader& w);

// InputError unless head and query are rows of p ("head must be between 0 and 7, got 9").
void walk_check_row(const Problem& p, int head, int query);
// Why the block mask never loads keys [j0, j1) for `query` (Skip::None: some key may be visible):
// after the query (causal, or past a prefix), outside its window, or other documents' keys. A mask
// file's tiles are loaded and masked per key.
WalkTile::Skip walk_tile_skip(const MaskRule& rule, int query, int j0, int j1);

// max |a - b| (infinity when the sizes differ).
double walk_max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace attnlab
