// The attention problem, independent of any backend: inputs (shared between copies, copied on
// write), temperature, mask, labels, heads; its validation (clear InputError messages), the fixed
// 5-token demo and seeded random problems.
//
// Shapes (one head):  Q (n, d_k)   K (m, d_k)   V (m, d_v)   custom mask (n, m) of 0 / -inf.
// With heads = B*H > 1 the heads are stacked along rows: Q (heads*n, d_k), and G = heads / kv_group
// key/value heads K (G*m, d_k), V (G*m, d_v); query head h owns rows [h*n, (h+1)*n) of Q and reads
// key/value head h / kv_group, rows [g*m, (g+1)*m) of K and V (grouped-query attention; kv_group 1
// gives every query head its own). Every head uses the same mask and temperature. Token labels
// describe one head (n query, m key labels).
// Decode shapes: n <= m, the n queries are the last n positions of the sequence of m keys; a
// causal mask lets query i see keys j <= i + (m - n) (bottom-right aligned; n == m is the square
// causal mask).
#pragma once

#include "core/modifications.h"
#include "core/types.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace attnlab {

// K and V stored in bf16 (bit patterns, the layout of K and V): what a cache kept in bf16 holds.
struct Bf16KV {
  std::vector<std::uint16_t> k, v;
};

// A problem's data: Q, K, V, their labels and a custom mask's values. Held by Problem behind a
// shared pointer, so that problems that differ only in their settings (temperature, mask kind,
// scale: the viewer's every slider move) share one copy of it.
struct ProblemInputs {
  MatrixF q, k, v;                        // inputs at the lab's working precision (fp32)
  std::vector<std::string> query_tokens;  // n labels (default "0", "1", ...)
  std::vector<std::string> key_tokens;    // m labels
  MatrixF custom_mask;                    // (n, m), only for MaskKind::Custom: 0 or -inf
  // Modifications' data (core/modifications.h), in use when present: an additive bias on the
  // scaled scores, (n, m) shared by every head or (heads n, m) one per head, finite; and the
  // document id of every position (m ids: query i is at position i + m - n).
  MatrixF bias;
  std::vector<int> documents;

  // Data derived from these inputs alone (Problem::derived: K and V in bf16, K in the decode
  // kernel's panels), made on first use and kept with them; never copied with them (a copy is
  // about to be edited) and dropped by Problem::edit().
  struct DerivedSlot {
    DerivedSlot() = default;
    DerivedSlot(const DerivedSlot&) {}
    DerivedSlot& operator=(const DerivedSlot&) {
      items.clear();
      return *this;
    }
    std::mutex mu;
    std::map<std::string, std::shared_ptr<const void>> items;
  };
  mutable DerivedSlot derived;
};

struct Problem {
  // The inputs, read-only. A copy of a Problem shares them: copying one copies no matrix.
  const MatrixF& q() const { return in_->q; }
  const MatrixF& k() const { return in_->k; }
  const MatrixF& v() const { return in_->v; }
  const std::vector<std::string>& query_tokens() const { return in_->query_tokens; }
  const std::vector<std::string>& key_tokens() const { return in_->key_tokens; }
  const MatrixF& custom_mask() const { return in_->custom_mask; }
  const MatrixF& bias() const { return in_->bias; }
  const std::vector<int>& documents() const { return in_->documents; }
  // The inputs for changing them: copied first when another Problem shares them (copy on write),
  // so a change never shows in another problem. Only while no other thread reads this Problem.
  ProblemInputs& edit();
  // Q alone, for changing it (the decode view's next token against the same cache): copied first
  // when shared, like edit(), but the derived data of K and V alone (keys "kv/…": the bf16 copy of
  // the cache, the decode kernel's panels) stays.
  MatrixF& edit_q();
  // The bias alone, as edit_q (the decode view's next token: its row of the input's bias).
  MatrixF& edit_bias();
  // Data derived from the inputs, made by `make` the first time `key` is asked for (one thread
  // makes it, the others wait) and kept with the inputs until they are edited: a KV cache stored
  // in bf16, which the decode kernel's bf16 path reads at half the bytes; K in the decode
  // kernel's panels. A key names one type: every caller of a key asks for the same T; a key that
  // starts with "kv/" depends on K and V alone (edit_q keeps it). With a
  // `family` (a prefix of the key), making a new entry drops the family's others: RoPE's rotation
  // at one θ replaces the one at the θ before (a slider dragged through many values keeps one).
  template <class T>
  std::shared_ptr<const T> derived(const std::string& key, const std::function<T(const ProblemInputs&)>& make,
                                   const std::string& family = {}) const {
    std::lock_guard<std::mutex> lk(in_->derived.mu);
    auto& items = in_->derived.items;
    if (auto it = items.find(key); it != items.end()) return std::static_pointer_cast<const T>(it->second);
    // Made before anything is stored: a `make` that throws (memory, a refusal) leaves no entry, and
    // the next call makes it again.
    auto made = std::make_shared<const T>(make(*in_));
    if (!family.empty())
      std::erase_if(items, [&](const auto& kv) { return kv.first.rfind(family, 0) == 0; });
    items[key] = made;
    return made;
  }
  // Replaces the inputs (a problem built from new data: a head of several, a file read).
  void set_inputs(ProblemInputs in);
  // The shared inputs themselves: two problems with the same pointer hold the same data.
  const ProblemInputs* inputs() const { return in_.get(); }

  double temperature = 1.0;               // finite, > 0
  // The softmax scale applied to Q K^T before the temperature: empty = the default 1/sqrt(d_k);
  // set = an explicit scale (a captured model's `scale=`), finite and > 0.
  std::optional<double> scale;
  MaskKind mask = MaskKind::None;         // Custom: the inputs' custom_mask
  // RoPE, ALiBi, soft-capping, windows, prefixes (core/modifications.h; a bias and document ids
  // are in the inputs).
  Modifications mods;
  int heads = 1;                          // B*H independent heads stacked along rows
  // Query heads per key/value head: heads / kv_group key/value heads (grouped-query attention).
  int kv_group = 1;
  std::string sentence;                   // the demo's sentence; empty for other problems
  // Where the inputs come from when that is not obvious (a bundle's layer and heads, a synthetic
  // pattern); every text output shows it. Empty for the demo, files and plain random problems.
  std::string source;
  std::string source_zh;  // the same in Chinese (the texts' --lang zh, the viewer in 中文)
  const std::string& source_in(Lang lang) const {
    return lang == Lang::Zh && !source_zh.empty() ? source_zh : source;
  }

  int n() const { return static_cast<int>(q().rows()) / heads; }  // queries per head
  int kv_heads() const { return kv_group >= 1 && heads % kv_group == 0 ? heads / kv_group : heads; }
  int m() const { return static_cast<int>(k().rows()) / kv_heads(); }  // keys per head
  // The key/value head query head h reads, and its first row of K and V.
  int kv_head(int h) const { return kv_heads() == heads ? h : h / kv_group; }
  Eigen::Index kv_row(int h) const { return static_cast<Eigen::Index>(kv_head(h)) * m(); }
  // Causal: query i sees keys j <= i + causal_offset() (0 for n == m).
  int causal_offset() const { return m() - n(); }
  int d_k() const { return static_cast<int>(q().cols()); }
  int d_v() const { return static_cast<int>(v().cols()); }
  // The scale in use, in double: *scale, or 1/sqrt(d_k).
  double scale_value() const { return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d_k())); }

 private:
  ProblemInputs& edit_keeping_kv();  // edit_q's and edit_bias's copy on write
  std::shared_ptr<ProblemInputs> in_ = std::make_shared<ProblemInputs>();
};

// The divisor of the staged chain's stage 2 (scaled = scores / divisor) in type T: sqrt(d_k)
// computed in T for the default scale (the expression every backend used before the scale was
// explicit, so default runs stay bit-identical), 1 / scale rounded once to T otherwise.
template <class T>
T scale_divisor(const Problem& p) {
  return p.scale ? static_cast<T>(1.0 / *p.scale) : std::sqrt(static_cast<T>(p.d_k()));
}

// The fused kernels' constant scale / T rounded once to fp32: 1 / (sqrt(d_k) T) taken in double
// for the default scale, *scale / T otherwise.
float fused_scale(const Problem& p);

// Whether s can be a problem's scale: finite, > 0 and at most fp32's largest number (the kernels
// multiply by it in fp32).
bool scale_fits(double s);

// Throws InputError naming what is wrong: temperature not finite or <= 0; empty inputs;
// "K has 3 columns but Q has 4"; V rows != K rows; causal with n > m; kv_group not dividing heads; custom mask shape or
// values other than 0/-inf; a fully masked row ("row 2 (上下文) is fully masked"); non-finite
// values in Q, K or V (which matrix, row, column); token label counts; heads not dividing rows.
void validate(const Problem& p);

// The label of position i: tokens[i], or "i" when there is no such label.
std::string token_label(const std::vector<std::string>& tokens, int i);
// That label with its index, as the viewer names a query or a key: "上下文 (#2)".
std::string indexed_label(const std::vector<std::string>& tokens, int i);

// Throws InputError unless t is finite and > 0: "temperature must be a finite number > 0, got 0".
void validate_temperature(double t);

// "source: …" ("来源：…" in Chinese, the English text where no Chinese one is kept): the line with
// which the texts of a problem (run, verify, the walks) name its source; "" without one.
std::string source_line(const std::string& source, const std::string& source_zh, Lang lang);

// A temperature as typed (the CLI's --temperature, the viewer's flag and entry): surrounding
// spaces ignored, the rest must be one number in plain decimal notation (optional sign, digits,
// optional fraction and exponent: "0.85", "+2", "1e-3"; not "0x10", "inf" or "nan"), then
// validate_temperature. "abc", "1x" and "0x10" get the same sentence, naming what was typed
// ("got 'abc'"); spellings of infinity and NaN get validate_temperature's ("got inf").
double parse_temperature(const std::string& text);
// A number in that plain decimal notation (surrounding spaces ignored), or nothing.
std::optional<double> parse_plain_number(const std::string& text);
// text without its leading and trailing blanks (space, tab, CR, LF): how every number typed into
// an option or a spec is read.
std::string trim_blanks(const std::string& text);

// The page's 5-token demo: 模型 根据 上下文 分配 权重, d_k 3, d_v 2, T 0.85, mask none.
Problem demo_problem();
constexpr int kDemoDefaultQuery = 2;  // 上下文
// The most queries and the most keys a problem may have per head (validate refuses more): far
// beyond what the lab shows, and what every input path is held to (random, files, bundles).
constexpr int kMaxTokens = 1 << 20;

// Q, K, V with standard-normal entries from a fixed generator (std::mt19937_64 + Box-Muller
// written out, so every platform and run gives the same numbers for the same seed). heads
// stacks B*H heads. Tokens default to "0", "1", ....
Problem random_problem(int n, int d_k, int d_v, std::uint64_t seed, int heads = 1);
// The generator behind random_problem: `a` resized to (rows, cols) and filled row-major with
// standard normals from `gen`, two at a time (Box-Muller: r cos θ, then r sin θ). Every random
// matrix of the lab (Q, K, V of a random problem, the backward's random dO) comes from here.
void fill_standard_normal(MatrixF& a, Eigen::Index rows, Eigen::Index cols, std::mt19937_64& gen);
// Elements first .. first + count - 1 of the stream fill_standard_normal writes from `gen` (a copy:
// the caller's generator does not move), without the elements before them: O(first) draws, no memory.
std::vector<float> standard_normal_range(std::mt19937_64 gen, Eigen::Index first, Eigen::Index count);
// A decode-shaped random problem: n queries (the last n positions) against m keys, `heads` query
// heads over kv_heads key/value heads (kv_heads divides heads). Q, K, V are filled in that order
// from the same generator, so n == m with kv_heads == heads is random_problem(n, ...) exactly.
// Query labels are the positions m-n .. m-1, key labels 0 .. m-1.
Problem random_problem(int n, int m, int d_k, int d_v, std::uint64_t seed, int heads, int kv_heads);

// Head `head` of a problem of stacked heads as a problem of one head: its rows of Q, K and V, the
// shared mask, labels and temperature; its source names the head ("…, head 2 of 8"). What
// `--random N --heads H --head h` runs, and the viewer's head of a random problem. InputError
// ("--head must be between 0 and 7, got 9") outside 0..heads-1.
Problem one_head(const Problem& all, int head);

// A problem's sizes, all its memory estimates need (cpu/cpu_backend.h): known before its inputs
// are made (a random problem's from its options), so that a run too large is refused before they
// are generated.
struct ProblemSize {
  int heads = 1, kv_heads = 1, n = 0, m = 0, d_k = 0, d_v = 0;  // n queries, m keys per head
  bool rope = false;                                           // Q and K turned besides
  int score_stages = 0;  // the score mods' (n, m) stages a staged chain keeps besides (biased, capped)
};
ProblemSize size_of(const Problem& p);
// Q, K and V of a problem of size s, in fp32 bytes.
double input_bytes(const ProblemSize& s);

// The same problem with every query head given its own copy of its key/value head (kv_group 1):
// K (heads*m, d_k), V (heads*m, d_v). What a backend whose kernels know no grouped heads runs, at
// the cost that it reads the shared cache once per query head. p itself when kv_group is 1.
Problem expand_kv_heads(const Problem& p);

// The decode shape of a prefill problem (n == m, kv_group 1): the last `queries` query rows of
// each head, against all m keys, and kv_heads key/value heads, key/value head g being that of
// query head g * (heads / kv_heads). Its output rows are the prefill's last rows when every query
// head of a group had the same keys (and under a causal mask, the prefill's own).
Problem decode_view(const Problem& prefill, int queries, int kv_heads);

// Refuses (InputError) a split-KV split count outside 1..keys: more splits than keys would leave
// splits without a key, and the lab does not quietly run fewer than it was asked for.
void check_split_count(int splits, int keys);

// Default labels "0", "1", ..., "count-1".
std::vector<std::string> index_tokens(int count);

// Resolves a query given as a token label or a 0-based index, the label first: with labels
// 3,2,1,0, "1" is the row labelled 1 (row 2). Throws InputError for a label that names more than
// one row ("label 'a' names 4 rows; give the index") and for what is neither
// ("query '你好' is not a token of this problem; tokens are: 模型, 根据, ..."). Blanks around the
// text are dropped, as around the labels.
int resolve_query(const Problem& p, const std::string& token_or_index);

// The effective additive mask of one head, (n, m): 0 keeps, -inf blocks: the mask kind and the
// mask mods (window, documents, prefix).
MatrixF mask_matrix(const Problem& p);

}  // namespace attnlab
