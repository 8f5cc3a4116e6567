// The backward walk of one query row (core/walk_backward.h), through the CPU fused backward's own
// step: the row is lane 0 of a tile of queries; its scores and dP come from the kernel's product
// (rows_madd), its mods and mask from modify_tile and mask_tile, its P and dS from backward_pair
// (cpu/online_softmax.h), the function cpu/fused_backward.cpp runs on every tile; m and l are the
// fused forward's (cpu::RowStats). Everything runs on the row alone (cpu/walk.h row_problem, with
// row_upstream's dO): O(m d) at any n, the fused kernels' dQ row there being the whole problem's. The tile's share of dQ is summed over its keys as the kernel
// sums a key block's, then added to the row's running dQ, so with a tile of the kernel's key
// block the running sum follows the kernel's order of blocks (the kernel's threads may add them
// in another order: its dQ can differ in the last bits).
#pragma once

#include "core/backward.h"
#include "core/problem.h"
#include "core/walk_backward.h"

namespace attnlab {

// Walks query `query` of head `head` of a valid problem in tiles of `tile` keys, with dO from `u`
// (the row of the whole problem's dO). Fills the checks: the CPU fused backward's dQ row and the
// fp64 backward's (reference_backward_fp64_row). InputError for a tile < 1, a head or query out of
// range, an upstream of the wrong shape; a row that overflows is refused naming (head, query).
BackwardWalk walk_backward_row(const Problem& p, const Upstream& u, int head, int query, int tile);

}  // namespace attnlab
