// Random problems for the differential tests (tests/test_random_problems.cpp on the CPU,
// tests/gpu/test_cuda_random.cpp on CUDA): from one seed, a problem drawn over the whole space
// the lab accepts, with its description, so that a failure names everything needed to rerun it.
//   shape        1, 2, 3, 4 or 8 query heads over any divisor of them as key/value heads; prefill
//                (n = m), decode (n < m: the queries are the last positions) or more queries than
//                keys; sizes and head dims drawn half from the tiles' edges (1, 31, 32, 33, 63,
//                64, 65, 127, 128, 129, ...) and half uniformly, d_k and d_v apart
//   settings     temperature log-uniform in [0.05, 20]; an explicit scale one time in five
//   mask         none, causal (where n <= m) or a random 0 / -inf file
//   mods         each drawn on its own: RoPE (even d_k; θ 10000, 500 or 1e6), ALiBi (standard,
//                one slope or one per head), soft-cap C in [0.5, 50], a bias (shared or per
//                head), a window W in [1, m], a prefix P in [1, m], document ids (runs or
//                scattered)
// The sizes are held to a budget (heads n m d at most kWorkBudget) so that a draw runs in
// milliseconds through every kernel and its fp64 reference. Some draws are refused by validate
// (a row that the mask and the mask mods leave without a key): the tests count those.
#pragma once

#include "core/problem.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab::test {

struct Draw {
  Problem p;
  std::string what;  // every drawn parameter, and the seed
};

constexpr double kWorkBudget = 4e6;  // heads n m max(d_k, d_v), at most

inline Draw draw_problem(std::uint64_t seed) {
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + 1);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  const auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(gen) < p; };
  const auto log_uniform = [&](double lo, double hi) {
    return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(gen));
  };
  // A size: half the time one of the tiles' edges (at most `hi`), else uniform in [1, hi].
  const auto size = [&](int hi) {
    static constexpr int kEdges[] = {1, 2, 3, 5, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 191, 192, 193, 255, 256, 257};
    if (chance(0.5)) {
      std::vector<int> fit;
      for (int e : kEdges)
        if (e <= hi) fit.push_back(e);
      return fit[uniform(0, static_cast<int>(fit.size()) - 1)];
    }
    return uniform(1, hi);
  };

  static constexpr int kHeads[] = {1, 1, 1, 2, 3, 4, 8};
  const int heads = kHeads[uniform(0, 6)];
  std::vector<int> divisors;
  for (int g = 1; g <= heads; ++g)
    if (heads % g == 0) divisors.push_back(g);
  const int kv_heads = divisors[uniform(0, static_cast<int>(divisors.size()) - 1)];
  int d_k = size(160), d_v = chance(0.3) ? d_k : size(160);
  const double shape = std::uniform_real_distribution<double>(0, 1)(gen);
  int m = size(300), n = m;
  if (shape >= 0.5 && shape < 0.85) n = std::max(1, std::min(m, size(m)));  // decode: n <= m
  else if (shape >= 0.85) n = size(300);                                   // any n (n > m often)
  // Within the budget: the keys first, then the queries, then the head dims.
  const auto work = [&] { return static_cast<double>(heads) * n * m * std::max(d_k, d_v); };
  while (work() > kWorkBudget && m > 1) m = std::max(1, m * 3 / 4), n = std::min(n, shape < 0.5 ? m : n);
  while (work() > kWorkBudget && n > 1) n = std::max(1, n * 3 / 4);
  while (work() > kWorkBudget) d_k = std::max(1, d_k / 2), d_v = std::max(1, d_v / 2);

  Draw d;
  std::ostringstream what;
  what << "seed " << seed << ": heads " << heads << " over " << kv_heads << ", n " << n << ", m " << m << ", d_k "
       << d_k << ", d_v " << d_v;
  d.p = random_problem(std::min(n, m), m, d_k, d_v, seed, heads, kv_heads);
  Problem& p = d.p;
  if (n > m) {  // more queries than keys (files may hold that shape; random_problem refuses it)
    std::mt19937_64 qg(seed ^ 0x51ull);
    ProblemInputs& in = p.edit();
    fill_standard_normal(in.q, static_cast<Eigen::Index>(heads) * n, d_k, qg);
    in.query_tokens = index_tokens(n);
  }
  p.temperature = log_uniform(0.05, 20);
  what << ", T " << p.temperature;
  if (chance(0.2)) {
    p.scale = log_uniform(0.01, 1);
    what << ", scale " << *p.scale;
  }
  const double mask = std::uniform_real_distribution<double>(0, 1)(gen);
  if (mask < 0.35 && n <= m) {
    p.mask = MaskKind::Causal;
    what << ", causal";
  } else if (mask >= 0.85) {
    p.mask = MaskKind::Custom;
    MatrixF c = MatrixF::Zero(n, m);
    const double closed = std::uniform_real_distribution<double>(0.1, 0.7)(gen);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j)
        if (chance(closed)) c(i, j) = -std::numeric_limits<float>::infinity();
    // Every row keeps one key, so that the file alone never empties a row.
    for (int i = 0; i < n; ++i) c(i, uniform(0, m - 1)) = 0.f;
    p.edit().custom_mask = c;
    what << ", custom mask (" << closed << " closed)";
  }
  if (d_k % 2 == 0 && chance(0.25)) {
    static constexpr double kTheta[] = {10000, 500, 1e6};
    p.mods.rope_theta = kTheta[uniform(0, 2)];
    what << ", rope " << p.mods.rope_theta;
  }
  if (chance(0.25)) {
    p.mods.alibi = true;
    const int kind = uniform(0, 2);  // standard, one slope, one per head
    if (kind == 1) p.mods.alibi_slopes = {log_uniform(0.001, 1)};
    if (kind == 2)
      for (int h = 0; h < heads; ++h) p.mods.alibi_slopes.push_back(log_uniform(0.001, 1));
    what << ", alibi" << (kind == 0 ? "" : kind == 1 ? " (one slope)" : " (per head)");
  }
  if (chance(0.25)) {
    p.mods.softcap = log_uniform(0.5, 50);
    what << ", softcap " << p.mods.softcap;
  }
  if (chance(0.2)) {
    const bool per_head = heads > 1 && chance(0.5);
    std::mt19937_64 bg(seed ^ 0xB1A5ull);  // normals times a drawn size
    MatrixF bias;
    fill_standard_normal(bias, per_head ? heads * n : n, m, bg);
    p.edit().bias = bias * static_cast<float>(log_uniform(0.1, 3));
    what << ", bias (" << (per_head ? "per head" : "shared") << ")";
  }
  if (chance(0.25)) {
    p.mods.window = size(m);
    what << ", window " << p.mods.window;
  }
  if (chance(0.15)) {
    p.mods.prefix = size(m);
    what << ", prefix " << p.mods.prefix;
  }
  if (chance(0.15)) {
    std::vector<int>& docs = p.edit().documents;
    if (chance(0.5)) {  // runs of neighbouring positions, as packed sequences are
      int id = 0;
      for (int j = 0; j < m; ++j) {
        if (j > 0 && chance(0.03)) ++id;
        docs.push_back(id);
      }
      what << ", documents (runs, " << id + 1 << ")";
    } else {
      const int ids = uniform(1, 3);
      for (int j = 0; j < m; ++j) docs.push_back(uniform(0, ids - 1));
      what << ", documents (scattered, " << ids << " ids)";
    }
  }
  d.what = what.str();
  return d;
}

}  // namespace attnlab::test
