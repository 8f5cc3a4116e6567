// Helpers shared by the GoogleTest files (tests/ and tests/gpu/), so each is written once:
//   pattern_mask, make_problem   the random multi-head problems of the fused parity sweeps, with
//                                a fixed custom-mask pattern (or one the caller supplies)
//   fp32_tolerance               what "fp32-accurate" allows for a problem (1e-5 + logit rounding)
//   ATTNLAB_REQUIRE_CUDA()       GTEST_SKIP ("no CUDA device: <reason>") where no device answers
//   lines_of, contains           text checks the CLI and report tests share
//   run_attnlab                  runs the real `attnlab` binary with quoted arguments, stdin from
//                                /dev/null and both streams captured, and returns its exit code
// The binary is found through the environment variable ATTNLAB_BINARY when it is set and
// non-empty (a build carried to another machine), else through the compile-time macro of the same
// name. The ASan build compiles the unit tests without that macro, so the binary-running part is
// only defined where ATTNLAB_BINARY is.
#pragma once

#include "core/backend.h"
#include "core/problem.h"
#include "core/types.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#ifdef ATTNLAB_BINARY
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#endif

namespace attnlab::test {

// The lines of s, without their '\n'.
inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace attnlab::test

// A GPU test's first line: without a device it SKIPs visibly with the reason, never passes.
#define ATTNLAB_REQUIRE_CUDA()                                             \
  do {                                                                     \
    std::string attnlab_reason_;                                           \
    if (!::attnlab::cuda_available(&attnlab_reason_))                      \
      GTEST_SKIP() << "no CUDA device: " << attnlab_reason_;               \
  } while (0)

namespace attnlab::test {

// fp32-accurate means: 1e-5, plus what rounding the logits to fp32 alone implies. A logit is
// s * scale with |s| <= sum |q_i k_i|; one fp32 rounding of it moves the weights by about
// u * scale * |s|, which at T = 1e-3 (scale ~ 1e3) exceeds 1e-5 for any fp32 chain, staged too.
inline double fp32_tolerance(const Problem& p) {
  const double u = std::ldexp(1.0, -24);
  double smax = 0;
  for (int h = 0; h < p.heads; ++h) {
    const MatrixF qa = p.q.middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n()).cwiseAbs();
    const MatrixF ka = p.k.middleRows(static_cast<Eigen::Index>(h) * p.m(), p.m()).cwiseAbs();
    smax = std::max(smax, static_cast<double>((qa * ka.transpose()).maxCoeff()));
  }
  const double scale = 1.0 / (std::sqrt(static_cast<double>(p.d_k())) * p.temperature);
  return 1e-5 + 4.0 * u * scale * smax;
}

// (n, n) mask: every other key of a row blocked in a fixed pattern, the diagonal always kept.
inline MatrixF pattern_mask(int n) {
  MatrixF m = MatrixF::Zero(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (j != i && (i * 7 + j * 3) % 5 < 2) m(i, j) = -std::numeric_limits<float>::infinity();
  return m;
}

// Random problem: q (heads*n, d_k), k (heads*n, d_k), v (heads*n, d_v) from `seed`, temperature
// and mask as given; a Custom mask is custom_mask(n), (n, n), shared by all heads.
inline Problem make_problem(int n, int d_k, int d_v, int heads, MaskKind mask, double temperature,
                            std::uint64_t seed, MatrixF (*custom_mask)(int n) = pattern_mask) {
  Problem p = random_problem(n, d_k, d_v, seed, heads);
  p.temperature = temperature;
  p.mask = mask;
  if (mask == MaskKind::Custom) p.custom_mask = custom_mask(n);
  return p;
}

#ifdef ATTNLAB_BINARY
// What one run of the binary left behind: exit code (128 + signal when killed, -1 when it could
// not be started), stdout and stderr.
struct BinaryRun {
  int code = -1;
  std::string out, err;
};

// s in single quotes for /bin/sh, embedded quotes escaped.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

// The attnlab binary: $ATTNLAB_BINARY if set and non-empty, else the path the build compiled in.
inline std::string attnlab_binary() {
  const char* env = std::getenv("ATTNLAB_BINARY");
  return env != nullptr && env[0] != '\0' ? std::string(env) : std::string(ATTNLAB_BINARY);
}

// A new empty file under gtest's temporary directory (mkstemp, so parallel tests never share one).
inline std::string unique_temp_file(const std::string& stem) {
  std::string path = ::testing::TempDir() + stem + "-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return {};
  close(fd);
  return path;
}

inline std::string read_and_remove(const std::string& path) {
  std::ostringstream s;
  {
    std::ifstream f(path, std::ios::binary);
    s << f.rdbuf();
  }
  std::remove(path.c_str());
  return s.str();
}

// Runs `attnlab args...` (each argument quoted as one word) under `env` when it is non-empty
// (shell text for env(1), e.g. "LANG=C.UTF-8 ATTNLAB_CUDA_FAULT=launch"), stdin from /dev/null.
inline BinaryRun run_attnlab(const std::vector<std::string>& args, const std::string& env = "") {
  BinaryRun r;
  const std::string out = unique_temp_file("attnlab-stdout");
  const std::string err = unique_temp_file("attnlab-stderr");
  if (out.empty() || err.empty()) {
    if (!out.empty()) std::remove(out.c_str());
    if (!err.empty()) std::remove(err.c_str());
    return r;
  }
  std::string cmd = env.empty() ? std::string() : "env " + env + " ";
  cmd += shell_quote(attnlab_binary());
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  cmd += " </dev/null >" + shell_quote(out) + " 2>" + shell_quote(err);
  const int status = std::system(cmd.c_str());
  if (status != -1) {
    if (WIFEXITED(status))
      r.code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      r.code = 128 + WTERMSIG(status);
  }
  r.out = read_and_remove(out);
  r.err = read_and_remove(err);
  return r;
}
#endif  // ATTNLAB_BINARY

}  // namespace attnlab::test
