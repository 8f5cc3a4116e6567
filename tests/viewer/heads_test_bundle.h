// A bundle for the heads view's tests (core/bundle.h's format, written as tests/test_bundle.cpp
// writes its own): two calls whose heads differ, built from the lab's synthetic patterns.
//   layer 0 "blocks.0.attn": 4 heads, n = m = 40, d_k 16, d_v 8, bidirectional:
//                            local:2, sink, previous, noise
//   layer 1 "blocks.1.attn": 4 query heads over 2 key/value heads (grouped-query), n = m = 130
//                            (pooled in a 96-pixel thumbnail), causal: heads 0 and 1 read the sink
//                            pattern's keys (their own queries), heads 2 and 3 the previous-token
//                            pattern's (head 3 with random queries)
#pragma once

#include "core/io.h"
#include "core/patterns.h"
#include "core/problem.h"
#include "tests/test_util.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace attnlab::test {

// Head h of a problem of one head each: rows stacked in head order.
inline MatrixF stack_rows(const std::vector<const MatrixF*>& parts) {
  Eigen::Index rows = 0;
  for (const MatrixF* p : parts) rows += p->rows();
  MatrixF out(rows, parts.front()->cols());
  Eigen::Index at = 0;
  for (const MatrixF* p : parts) {
    out.middleRows(at, p->rows()) = *p;
    at += p->rows();
  }
  return out;
}

inline void write_heads_bundle(const std::string& dir) {
  using Json = nlohmann::json;
  const auto pat = [](const char* name, int n, std::uint64_t seed) {
    return pattern_problem(parse_pattern(name), n, 16, 8, seed);
  };
  // Layer 0: four heads, each its own pattern.
  const Problem l0[] = {pat("local:2", 40, 1), pat("sink", 40, 2), pat("previous", 40, 3), pat("noise", 40, 4)};
  write_npy(dir + "/0_q.npy", stack_rows({&l0[0].q(), &l0[1].q(), &l0[2].q(), &l0[3].q()}));
  write_npy(dir + "/0_k.npy", stack_rows({&l0[0].k(), &l0[1].k(), &l0[2].k(), &l0[3].k()}));
  write_npy(dir + "/0_v.npy", stack_rows({&l0[0].v(), &l0[1].v(), &l0[2].v(), &l0[3].v()}));
  // Layer 1: two key/value heads, each read by two query heads.
  const Problem sink1 = pat("sink", 130, 5), sink2 = pat("sink", 130, 6), prev = pat("previous", 130, 7),
                noise = pat("noise", 130, 8);
  write_npy(dir + "/1_q.npy", stack_rows({&sink1.q(), &sink2.q(), &prev.q(), &noise.q()}));
  write_npy(dir + "/1_k.npy", stack_rows({&sink1.k(), &prev.k()}));
  write_npy(dir + "/1_v.npy", stack_rows({&sink1.v(), &prev.v()}));
  const auto call = [](const std::string& name, int i, int kv, int n, bool causal) {
    const std::string f = std::to_string(i);
    return Json{{"name", name},   {"heads", 4},         {"kv_heads", kv},     {"n", n},       {"m", n},
                {"d_k", 16},      {"d_v", 8},           {"scale", nullptr},   {"causal", causal},
                {"mask", nullptr}, {"q", f + "_q.npy"}, {"k", f + "_k.npy"}, {"v", f + "_v.npy"},
                {"output", nullptr}};
  };
  const Json j = {{"format", "attnlab-bundle"},
                  {"version", 1},
                  {"model", "synthetic"},
                  {"tokens", Json::array()},
                  {"calls", Json::array({call("blocks.0.attn", 0, 4, 40, false), call("blocks.1.attn", 1, 2, 130, true)})}};
  write_file(dir + "/manifest.json", j.dump(1));
}

}  // namespace attnlab::test
