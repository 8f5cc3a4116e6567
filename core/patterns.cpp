// The synthetic patterns of core/patterns.h. Each builds logits s(i, j) = q_i . k_j / sqrt(d_k)
// (the default scale; Q carries the factor sqrt(d_k)) from bounded features:
//   f(x) = [cos(w_r x), sin(w_r x)]_r  so  f(a) . f(b) = g(a - b) = sum_r cos(w_r (a - b)),
// a function of the offset only, at most R (the number of frequencies) and equal to R at 0.
// The strength A of each pattern is computed from the exact gap between the logits it wants and
// the best competitor over every offset |d| < n, so the structure holds at any n the lab accepts.
#include "core/patterns.h"

#include "core/messages.h"
#include "core/types.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace attnlab {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Standard normals from mt19937_64 + Box-Muller written out, as random_problem.
struct Normal {
  std::mt19937_64 gen;
  bool has_spare = false;
  double spare = 0;
  explicit Normal(std::uint64_t seed) : gen(seed) {}
  double uniform() { return (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53; }
  double operator()() {
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double th = 2.0 * kPi * uniform();
    spare = r * std::sin(th);
    has_spare = true;
    return r * std::cos(th);
  }
};

void fill_normal(MatrixF& a, Eigen::Index rows, Eigen::Index cols, Normal& rng, double sigma = 1) {
  a.resize(rows, cols);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < cols; ++c) a(r, c) = static_cast<float>(sigma * rng());
}

// previous: frequencies drawn once from a fixed generator, uniform in (0.05 pi, pi): unlike a
// geometric (RoPE) ladder, whose low frequencies keep g near R for small offsets, random
// frequencies leave g(d) for d != 0 near sqrt(R ln n) at most, far below g(0) = R.
std::vector<double> random_frequencies(int count) {
  std::mt19937_64 gen(0x5eed'f00d);
  std::vector<double> w(count);
  for (double& x : w) x = kPi * (0.05 + 0.95 * (static_cast<double>(gen() >> 11) * 0x1.0p-53));
  return w;
}

// local: a geometric ladder from 1 rad down to pi / n (no frequency wraps over n positions): the
// box sum over offsets then stays high over the window and falls off outside it.
std::vector<double> ladder_frequencies(int count, int n) {
  std::vector<double> w(count);
  const double hi = 1.0, lo = kPi / std::max(n, 4);
  for (int r = 0; r < count; ++r)
    w[r] = hi * std::pow(lo / hi, count == 1 ? 0.0 : static_cast<double>(r) / (count - 1));
  return w;
}

// Sets columns [0, 2R) of row `row` to coef_r * [cos(w_r x), sin(w_r x)].
void put_features(MatrixF& a, Eigen::Index row, const std::vector<double>& w,
                  const std::vector<double>& coef, double x) {
  for (std::size_t r = 0; r < w.size(); ++r) {
    a(row, 2 * r) = static_cast<float>(coef[r] * std::cos(w[r] * x));
    a(row, 2 * r + 1) = static_cast<float>(coef[r] * std::sin(w[r] * x));
  }
}

// sum_r coef_r cos(w_r d)
double response(const std::vector<double>& w, const std::vector<double>& coef, double d) {
  double s = 0;
  for (std::size_t r = 0; r < w.size(); ++r) s += coef[r] * std::cos(w[r] * d);
  return s;
}

int induction_len(int n) { return std::max(1, n / 2); }

// The exact gap check failed: the minimum is not known in closed form, so no number is promised.
InputError no_gap(const Pattern& p, int n, int d_k) {
  return InputError(p.kind == PatternKind::Local ? Msg::PatternNoGapWindow : Msg::PatternNoGapPrevious,
                    {pattern_name(p), std::to_string(n), std::to_string(d_k)});
}

InputError too_small(const Pattern& p, int need, int d_k) {
  return InputError(Msg::PatternDk, {pattern_name(p), std::to_string(need), std::to_string(d_k)});
}

}  // namespace

Pattern parse_pattern(const std::string& text) {
  const auto refuse = [&text] { return InputError(Msg::PatternUnknown, {text}); };
  if (text == "noise") return {PatternKind::Noise, 0};
  if (text == "sink") return {PatternKind::Sink, 0};
  if (text == "previous") return {PatternKind::Previous, 0};
  if (text == "induction") return {PatternKind::Induction, 0};
  if (text.rfind("local:", 0) == 0) {
    const std::string w = text.substr(6);
    if (w.empty() || w.size() > 7 || w.find_first_not_of("0123456789") != std::string::npos)
      throw refuse();
    return {PatternKind::Local, std::stoi(w)};
  }
  throw refuse();
}

std::string pattern_name(const Pattern& p) {
  switch (p.kind) {
    case PatternKind::Noise: return "noise";
    case PatternKind::Local: return "local:" + std::to_string(p.window);
    case PatternKind::Sink: return "sink";
    case PatternKind::Previous: return "previous";
    case PatternKind::Induction: return "induction";
  }
  return "noise";
}

int pattern_min_dk(const Pattern& p, int n) {
  switch (p.kind) {
    case PatternKind::Noise: return 1;
    case PatternKind::Sink: return 2;
    case PatternKind::Local:
    case PatternKind::Previous: return 16;
    case PatternKind::Induction: {
      // One-hot embeddings while the sequence fits in d_k; beyond that random unit vectors, whose
      // largest cross product over L tokens is about sqrt(4 ln L / d_k): keep it <= 0.75.
      const int len = induction_len(n);
      const int random_need = static_cast<int>(std::ceil(4.0 * std::log(len) / (0.75 * 0.75)));
      return std::max(2, std::min(len, random_need));
    }
  }
  return 1;
}

void check_pattern(const Pattern& pattern, int n, int d_k) {
  const int need = pattern_min_dk(pattern, n);
  if (d_k < need) throw too_small(pattern, need, d_k);
  if (pattern.kind == PatternKind::Local && pattern.window >= n)
    throw InputError(Msg::PatternWindow, {std::to_string(pattern.window), std::to_string(n)});
}

Problem pattern_problem(const Pattern& pattern, int n, int d_k, int d_v, std::uint64_t seed,
                        int heads) {
  if (pattern.kind == PatternKind::Noise) return random_problem(n, d_k, d_v, seed, heads);
  if (n < 1 || d_k < 1 || d_v < 1 || heads < 1) throw InputError(Msg::RandomDims, {});
  check_pattern(pattern, n, d_k);

  Normal rng(seed);
  Problem p;
  ProblemInputs& in = p.edit();
  MatrixF q = MatrixF::Zero(n, d_k), k = MatrixF::Zero(n, d_k);
  const double root_d = std::sqrt(static_cast<double>(d_k));
  const double log_n = std::log(static_cast<double>(n));
  in.query_tokens = index_tokens(n);
  in.key_tokens = p.query_tokens();

  switch (pattern.kind) {
    case PatternKind::Noise: break;
    case PatternKind::Sink: {
      // Dimension 0 gives key 0 a logit ln n + 3 above the others; the rest is small noise
      // (logits of spread about 0.25), so key 0 takes about e^3 / (e^3 + 1) of every row.
      MatrixF qn, kn;
      fill_normal(qn, n, d_k - 1, rng, 0.5);
      fill_normal(kn, n, d_k - 1, rng, 0.5);
      q.rightCols(d_k - 1) = qn;
      k.rightCols(d_k - 1) = kn;
      for (int i = 0; i < n; ++i) q(i, 0) = static_cast<float>(root_d * (log_n + 3));
      k(0, 0) = 1;
      break;
    }
    case PatternKind::Previous: {
      // q_i = A f(i-1), k_j = f(j): logit A g(i-1-j), largest at j = i-1 by A (R - max g(d != 0)).
      const int count = d_k / 2;
      const std::vector<double> w = random_frequencies(count);
      const std::vector<double> one(count, 1.0);
      double best = -std::numeric_limits<double>::infinity();
      for (int d = 1; d < n; ++d) best = std::max(best, response(w, one, d));
      const double gap = n > 1 ? count - best : count;
      if (gap < 0.05 * count) throw no_gap(pattern, n, d_k);
      const double a = (log_n + 2) / gap;
      const std::vector<double> qa(count, root_d * a);
      for (int i = 0; i < n; ++i) {
        put_features(q, i, w, qa, i - 1);
        put_features(k, i, w, one, i);
      }
      break;
    }
    case PatternKind::Local: {
      // q_i = A sum_{|o| <= W} f(i+o), k_j = f(j): logit A h(i-j), h the box sum of g, whose
      // coefficients are the Dirichlet kernel sum_o cos(w_r o). A makes the lowest logit inside
      // the window ln n + 3 above the highest outside, so the window holds >= e^3/(e^3+1) of each
      // row; inside it the weight still peaks at the diagonal (h is not flat).
      const int count = d_k / 2, win = pattern.window;
      const std::vector<double> w = ladder_frequencies(count, n);
      std::vector<double> box(count);  // sum_{|o| <= W} cos(w o) = sin((W + 1/2) w) / sin(w / 2)
      for (int r = 0; r < count; ++r) box[r] = std::sin((win + 0.5) * w[r]) / std::sin(w[r] / 2);
      double inside = std::numeric_limits<double>::infinity();
      double outside = -std::numeric_limits<double>::infinity();
      for (int d = 0; d < n; ++d) {
        const double h = response(w, box, d);
        if (d <= win) inside = std::min(inside, h);
        else outside = std::max(outside, h);
      }
      const double h0 = response(w, box, 0);
      const double gap = outside == -std::numeric_limits<double>::infinity() ? h0 : inside - outside;
      if (!(gap > 0.01 * std::abs(h0))) throw no_gap(pattern, n, d_k);
      const double a = (log_n + 3) / gap;
      std::vector<double> qa(count);
      for (int r = 0; r < count; ++r) qa[r] = root_d * a * box[r];
      const std::vector<double> one(count, 1.0);
      for (int i = 0; i < n; ++i) {
        // sum_o f(i+o) = box_r * [cos(w_r i), sin(w_r i)]: the window is symmetric.
        put_features(q, i, w, qa, i);
        put_features(k, i, w, one, i);
      }
      break;
    }
    case PatternKind::Induction: {
      // t_i = s[i mod L], s = L distinct tokens drawn from a vocabulary of 2L; q_i = A e(t_i),
      // k_j = e(t_{j-1}) (k_0 = 0). Under the causal mask a query of the second half finds its
      // own token only at the key after its previous occurrence.
      const int len = induction_len(n), vocab = 2 * len;
      std::vector<int> ids(vocab);
      for (int t = 0; t < vocab; ++t) ids[t] = t;
      for (int t = 0; t < len; ++t) {  // partial Fisher-Yates, the generator's bits only
        const int pick = t + static_cast<int>(rng.gen() % static_cast<std::uint64_t>(vocab - t));
        std::swap(ids[t], ids[pick]);
      }
      MatrixF emb = MatrixF::Zero(len, d_k);
      double cross = 0;
      if (len <= d_k) {
        for (int t = 0; t < len; ++t) emb(t, t) = 1;
      } else {
        for (int t = 0; t < len; ++t) {
          double norm = 0;
          for (int c = 0; c < d_k; ++c) {
            const double x = rng();
            emb(t, c) = static_cast<float>(x);
            norm += x * x;
          }
          emb.row(t) /= static_cast<float>(std::sqrt(norm));
        }
        cross = std::min(0.75, std::sqrt(4.0 * std::log(len) / d_k));
      }
      const double a = (log_n + 2) / (1 - cross);
      for (int i = 0; i < n; ++i) {
        q.row(i) = emb.row(i % len) * static_cast<float>(root_d * a);
        if (i > 0) k.row(i) = emb.row((i - 1) % len);
        // Appended, not "w" + to_string(...): GCC 12 reports a false -Wrestrict on the latter.
        in.query_tokens[i] = "w";
        in.query_tokens[i] += std::to_string(ids[i % len]);
      }
      in.key_tokens = p.query_tokens();
      p.mask = MaskKind::Causal;
      break;
    }
  }

  p.heads = heads;
  in.q.resize(static_cast<Eigen::Index>(heads) * n, d_k);
  in.k.resize(static_cast<Eigen::Index>(heads) * n, d_k);
  for (int h = 0; h < heads; ++h) {
    in.q.middleRows(static_cast<Eigen::Index>(h) * n, n) = q;
    in.k.middleRows(static_cast<Eigen::Index>(h) * n, n) = k;
  }
  fill_normal(in.v, static_cast<Eigen::Index>(heads) * n, d_v, rng);
  p.temperature = 1.0;
  p.source = "synthetic pattern '" + pattern_name(pattern) + "' (not a trained model)";
  p.source_zh = "合成模式“" + pattern_name(pattern) + "”（不是训练得到的模型）";
  return p;
}

}  // namespace attnlab
