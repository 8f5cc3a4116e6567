// Helpers shared by the GoogleTest files (tests/, tests/gpu/ and tests/viewer/), so each is written
// once:
//   pattern_mask, make_problem   the random multi-head problems of the fused parity sweeps, with
//                                a fixed custom-mask pattern (or one the caller supplies)
//   fp32_tolerance               what "fp32-accurate" allows for a problem (1e-5 + logit rounding)
//   ATTNLAB_REQUIRE_CUDA()       GTEST_SKIP ("no CUDA device: <reason>") where no device answers
//   lines_of, contains           text checks the CLI and report tests share
//   message_of<E>(f)             the message of the E that f() throws; a failure at the caller's
//                                line when it throws nothing or something else
//   ScopedEnv                    an environment variable set for one scope, then restored
//   TempDir                      a fresh directory under the system temp dir, removed with its
//                                contents when the object goes
//   read_file, write_file        a whole file as bytes, and back
//   npy_dict, npy_bytes,         .npy files built byte by byte, independently of core/io's
//   le_bytes                     writer, so the reader is checked against numpy's layout and not
//                                against itself (and malformed files can be made)
//   run_binary                   runs a binary with quoted arguments, stdin from /dev/null and both
//                                streams captured, and returns its exit code
//   run_attnlab                  run_binary on the real `attnlab` binary
// The attnlab binary is found through the environment variable ATTNLAB_BINARY when it is set and
// non-empty (a build carried to another machine), else through the compile-time macro of the same
// name: a path relative to the build folder (cli/attnlab), which is the folder above the test
// binary's own. (No absolute path is compiled in, so a compiler cache serves every clone.) The
// window's binary likewise: ATTNLAB_VIEW_BINARY, view_binary(). Each function exists only where
// its macro is defined.
#pragma once

#include "core/backend.h"
#include "core/pooled.h"
#include "core/problem.h"
#include "core/types.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

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

// The message of the E that f() throws. When f throws nothing, or an exception of another type,
// records a failure at the caller's line and returns "".
template <class E, class F>
std::string message_of(F&& f, std::source_location at = std::source_location::current()) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE_AT(at.file_name(), at.line())
        << "the call threw an exception of another type than expected: " << e.what();
    return {};
  } catch (...) {
    ADD_FAILURE_AT(at.file_name(), at.line()) << "the call threw something not a std::exception";
    return {};
  }
  ADD_FAILURE_AT(at.file_name(), at.line()) << "the call threw nothing; an exception was expected";
  return {};
}

// Source cells [lo, hi) onto `pixels` pixels, as the viewer maps an axis: each pixel the cells
// its span starts in, at least one (so that magnified pixels share a cell).
inline PoolAxis pool_axis(int lo, int hi, int pixels) {
  PoolAxis a;
  const long len = hi - lo;
  for (int p = 0; p < pixels; ++p) {
    const int b = lo + static_cast<int>(p * len / pixels);
    const int e = std::max(lo + static_cast<int>((p + 1) * len / pixels), b + 1);
    a.begin.push_back(b);
    a.end.push_back(std::min(e, hi));
  }
  return a;
}

// Sets an environment variable for one scope, restoring the previous value (or its absence).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A new empty directory `<system temp dir>/<stem>-XXXXXX` (mkdtemp, so parallel tests never share
// one), removed with everything in it when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& stem = "attnlab-test") {
    std::string name = (std::filesystem::temp_directory_path() / (stem + "-XXXXXX")).string();
    if (mkdtemp(name.data()) == nullptr)
      throw std::runtime_error("mkdtemp " + name + ": " + std::strerror(errno));
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory (the file itself is not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Writes `bytes` to p (replacing it) and returns p as a string.
inline std::string write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p.string();
}

// ---- .npy files built by hand ------------------------------------------------------------------

// A .npy header dict: `shape` as Python tuple text ("(2, 3)"), `descr` e.g. "<f4" or "<f8",
// `fortran_order` "False" or "True".
inline std::string npy_dict(const std::string& shape, const std::string& descr = "<f4",
                            const std::string& fortran_order = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran_order + ", 'shape': " + shape +
         ", }";
}

// A .npy file: magic, version `major`.0, header length, the dict padded with spaces and '\n' to a
// multiple of 64, then the raw data, exactly as numpy lays it out.
inline std::string npy_bytes(const std::string& dict, std::string_view data, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t n = header.size();
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>((n >> 8) & 0xFF);
  if (major != 1) {
    out += static_cast<char>((n >> 16) & 0xFF);
    out += static_cast<char>((n >> 24) & 0xFF);
  }
  out += header;
  out.append(data);
  return out;
}

// The little-endian bytes of float or double values (a .npy file's "<f4" / "<f8" data).
template <class T>
std::string le_bytes(const std::vector<T>& values) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  std::string out;
  for (T v : values) {
    using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    const auto bits = std::bit_cast<Bits>(v);
    for (std::size_t b = 0; b < sizeof(T); ++b) out += static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  return out;
}

}  // namespace attnlab::test

namespace attnlab {
// gtest finds these by argument-dependent lookup: test names and failure messages show the enums
// as words ("causal"), not as the default printer's "4-byte object <01-00 00-00>".
inline void PrintTo(MaskKind m, std::ostream* os) { *os << to_string(m); }
inline void PrintTo(Variant v, std::ostream* os) { *os << to_string(v); }
inline void PrintTo(Precision p, std::ostream* os) { *os << to_string(p); }
}  // namespace attnlab

// A GPU test's first line: without a device it SKIPs visibly with the reason, never passes
// (cuda_available is engine/registry.h's: the test includes it).
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
// Up to 2^26 cells per head, max |s| is taken exactly from the (n, m) products; above that (long
// sequences, where that matrix would not fit in memory) from an upper bound that needs no such
// matrix: the smaller of Cauchy-Schwarz's (largest |q_i| times largest |k_j|) and the sum over the
// dimensions of the largest |q_ik| times the largest |k_jk|. The tolerance is then no tighter.
inline double fp32_tolerance(const Problem& p) {
  const double u = std::ldexp(1.0, -24);
  double smax = 0;
  for (int h = 0; h < p.heads; ++h) {
    const MatrixF qa = p.q().middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n()).cwiseAbs();
    const MatrixF ka = p.k().middleRows(p.kv_row(h), p.m()).cwiseAbs();
    if (static_cast<double>(p.n()) * p.m() <= 67108864.0) {
      smax = std::max(smax, static_cast<double>((qa * ka.transpose()).maxCoeff()));
      continue;
    }
    const MatrixD qd = qa.cast<double>(), kd = ka.cast<double>();
    const double norms = qd.rowwise().norm().maxCoeff() * kd.rowwise().norm().maxCoeff();
    const double dims = qd.colwise().maxCoeff().cwiseProduct(kd.colwise().maxCoeff()).sum();
    smax = std::max(smax, std::min(norms, dims));
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
  if (mask == MaskKind::Custom) p.edit().custom_mask = custom_mask(n);
  return p;
}

// The first `keys` keys of every key/value head of p (and of a custom mask's and a bias's
// columns, the documents of those positions), as a problem of its own: what a decode over a
// cache's first keys must equal.
inline Problem first_keys(const Problem& p, int keys) {
  Problem r = p;
  ProblemInputs in;
  in.q = p.q();
  const int m = p.m(), G = p.kv_heads();
  in.k.resize(static_cast<Eigen::Index>(G) * keys, p.d_k());
  in.v.resize(static_cast<Eigen::Index>(G) * keys, p.d_v());
  for (int g = 0; g < G; ++g) {
    in.k.middleRows(static_cast<Eigen::Index>(g) * keys, keys) = p.k().middleRows(static_cast<Eigen::Index>(g) * m, keys);
    in.v.middleRows(static_cast<Eigen::Index>(g) * keys, keys) = p.v().middleRows(static_cast<Eigen::Index>(g) * m, keys);
  }
  if (p.mask == MaskKind::Custom) in.custom_mask = p.custom_mask().leftCols(keys);
  if (p.bias().size() > 0) in.bias = p.bias().leftCols(keys);
  if (!p.documents().empty()) in.documents.assign(p.documents().begin(), p.documents().begin() + keys);
  r.set_inputs(std::move(in));
  return r;
}

// ---- running binaries --------------------------------------------------------------------------

// What one run of a binary left behind: exit code (128 + signal when killed, -1 when it could
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

// Runs `path args...` (each argument quoted as one word; a path without '/' is looked up on PATH)
// without LC_ALL and LC_MESSAGES, under `env` (shell text for env(1), e.g.
// "LANG=C.UTF-8 ATTNLAB_CUDA_FAULT=launch" or "-u DISPLAY"), stdin from /dev/null, both streams
// captured through files in a TempDir of its own.
inline BinaryRun run_binary(const std::string& path, const std::vector<std::string>& args,
                            const std::string& env = "") {
  BinaryRun r;
  const TempDir streams("attnlab-run");
  const std::string out = streams.file("stdout"), err = streams.file("stderr");
  std::string cmd;
  // The caller's LC_ALL and LC_MESSAGES would outrank a LANG in `env` (the lab's language follows
  // POSIX's precedence): every run starts without them, and `env` may set them again.
  cmd.append("env -u LC_ALL -u LC_MESSAGES ").append(env).append(" ");
  cmd += shell_quote(path);
  for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" </dev/null >").append(shell_quote(out)).append(" 2>").append(shell_quote(err));
  const int status = std::system(cmd.c_str());
  if (status != -1) {
    if (WIFEXITED(status))
      r.code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      r.code = 128 + WTERMSIG(status);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// $`variable` when set and non-empty; else `built`, relative to the build folder (the folder
// above the one the running test binary is in) unless it is absolute.
inline std::string built_binary(const char* variable, const char* built) {
  if (const char* env = std::getenv(variable); env != nullptr && env[0] != '\0') return env;
  const std::filesystem::path p(built);
  if (p.is_absolute()) return p.string();
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? p.string() : (self.parent_path().parent_path() / p).string();
}

#ifdef ATTNLAB_VIEW_BINARY
// The window's binary: $ATTNLAB_VIEW_BINARY, else the build's.
inline std::string view_binary() { return built_binary("ATTNLAB_VIEW_BINARY", ATTNLAB_VIEW_BINARY); }
#endif

#ifdef ATTNLAB_BINARY
// The attnlab binary: $ATTNLAB_BINARY if set and non-empty, else the build's.
inline std::string attnlab_binary() { return built_binary("ATTNLAB_BINARY", ATTNLAB_BINARY); }

// Runs `attnlab args...` under `env` (see run_binary).
inline BinaryRun run_attnlab(const std::vector<std::string>& args, const std::string& env = "") {
  return run_binary(attnlab_binary(), args, env);
}
#endif  // ATTNLAB_BINARY

}  // namespace attnlab::test
