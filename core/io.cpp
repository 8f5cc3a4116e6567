// Matrix input/output: CSV text and .npy files (versions 1.0, 2.0 and 3.0), token label lists.
//
// CSV: values separated by commas or whitespace (a line may mix them), '#' starts a comment
// anywhere on a line, blank lines are skipped, CRLF/CR line ends and a UTF-8 BOM are tolerated.
// Numbers are read with std::from_chars (strict and locale-free: "1.2x" is an error) and must fit
// float32. Error positions are "file:line:column", where the column is the 1-based position of
// the value within its line (the matrix column a learner thinks in), not a character offset.
//
// .npy: little-endian float32 ('<f4') or float64 ('<f8'), C order, exactly 2-D. Everything read
// from a file is treated as hostile: the header parser never reads past the header, and the shape
// is checked against the bytes actually present before anything is allocated, so a bogus shape
// cannot trigger a huge allocation (the libFuzzer targets in tests/fuzz/ hammer exactly this).
//
// Files: every reader goes through read_input_file, which refuses an input larger than
// kMaxInputFileBytes (core/io.h says where the bound comes from) before reading it all: a regular
// file by its size, a stream (FIFO, pipe, character device) after one byte past the bound.
//
// Masks (read_mask, parse_mask) take the same formats but hold only 0 and -inf; every other
// matrix must be finite. This file depends on nothing from core/ beyond the header-only error
// types, the message catalogue and core/format's numbers, so the fuzz targets can compile it
// with those two alone, with clang.
#include "core/io.h"

#include "core/format.h"
#include "core/messages.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attnlab {

namespace {

// What values a matrix may hold: ordinary inputs must be finite; masks hold 0 or -inf only.
enum class Values { Finite, Mask };

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";  // U+2212, as web pages print "−1"
constexpr std::string_view kInfinitySign = "\xE2\x88\x9E";  // U+221E

constexpr std::string_view kNpyMagic = "\x93NUMPY";

bool ends_with_npy(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".npy";
}

// .npy by the name, else by the magic's first byte (a pipe has no name to go by): the rule by
// which read_input_file's InputFormat::Matrix chose what to check, so that a cut-short magic is
// parsed (and refused) as a .npy, not as CSV.
bool is_npy(std::string_view bytes, const std::string& name) {
  return ends_with_npy(name) || (!bytes.empty() && bytes[0] == kNpyMagic[0]);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (is_space(s.front()) || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

}  // namespace

// A token as it appears in a message: quoted, at most ~40 bytes (cut on a UTF-8 boundary), control
// bytes and bytes that are no UTF-8 escaped (printable), so that a fuzzed or binary file still
// gives a one-line, readable message.
std::string quote(std::string_view token) {
  constexpr std::size_t kMax = 40;
  bool cut = false;
  if (token.size() > kMax) {
    std::size_t end = kMax;
    while (end > 0 && (static_cast<unsigned char>(token[end]) & 0xC0) == 0x80) --end;
    token = token.substr(0, end);
    cut = true;
  }
  return "'" + printable(token) + (cut ? "...'" : "'");
}

namespace {

// ---- files -------------------------------------------------------------------------------------

// ---- numbers -----------------------------------------------------------------------------------

// from_chars reports both overflow and underflow as result_out_of_range. Underflow is harmless
// (the value is 0 at float precision anyway); overflow is an error. Decide by the order of
// magnitude of the first nonzero digit: its place in the digits (10^2 in "123.4", 10^-3 in
// "0.001") plus the exponent, below 0 for an underflow ("1000...0e-410" is an overflow, and
// "0.000...1e+10" an underflow, whatever the exponent's sign).
bool is_underflow(std::string_view t) {
  const std::size_t e = std::min(t.find_first_of("eE"), t.size());
  long long place = 0;  // of the first nonzero digit, once seen
  bool point = false, nonzero = false;
  for (char c : t.substr(0, e)) {
    if (c == '.') {
      point = true;
    } else if (c >= '0' && c <= '9') {
      if (!nonzero && c != '0') {
        nonzero = true;
        place = point ? place - 1 : 0;
      } else if (nonzero && !point) {
        ++place;
      } else if (!nonzero && point) {
        --place;
      }
    }
  }
  long long exponent = 0;  // saturated: only its sign against the place matters
  bool negative = false;
  for (char c : e < t.size() ? t.substr(e + 1) : std::string_view()) {
    if (c == '-') negative = true;
    if (c >= '0' && c <= '9') exponent = std::min(exponent * 10 + (c - '0'), 1000000000LL);
  }
  return place + (negative ? -exponent : exponent) < 0;
}

enum class NumStatus { Ok, NotANumber, OutOfRange };

// Parses the whole token as a double. Accepts a leading '+' and the Unicode minus U+2212, which
// from_chars alone does not.
NumStatus parse_double(std::string_view token, double& out) {
  std::string buf;
  if (token.starts_with(kUnicodeMinus)) {
    buf = "-";
    buf.append(token.substr(kUnicodeMinus.size()));
    token = buf;
  } else if (token.size() > 1 && token[0] == '+' && token[1] != '-' && token[1] != '+') {
    token.remove_prefix(1);
  }
  if (token.empty()) return NumStatus::NotANumber;
  double v = 0;
  const char* first = token.data();
  const char* last = first + token.size();
  auto r = std::from_chars(first, last, v, std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range && r.ptr == last) {
    if (!is_underflow(token)) return NumStatus::OutOfRange;
    out = token[0] == '-' ? -0.0 : 0.0;
    return NumStatus::Ok;
  }
  if (r.ec != std::errc() || r.ptr != last) return NumStatus::NotANumber;
  out = v;
  return NumStatus::Ok;
}

// The spellings of -inf a mask file may use besides what from_chars reads ("-inf", "-Infinity",
// any case): the mathematical signs as printed on the page.
bool is_minus_infinity_sign(std::string_view t) {
  return (t.starts_with(kUnicodeMinus) && t.substr(kUnicodeMinus.size()) == kInfinitySign) ||
         (t.starts_with("-") && t.substr(1) == kInfinitySign);
}

// ---- CSV ---------------------------------------------------------------------------------------

// "file:line:col" (col omitted when 0), built only when a message needs it.
std::string csv_where(const std::string& name, std::size_t line, std::size_t col) {
  std::string out = name + ":" + std::to_string(line);
  if (col > 0) out += ":" + std::to_string(col);
  return out;
}

// Converts one CSV token, the col-th value of its line, to the float it stands for.
float csv_value(std::string_view token, const std::string& name, std::size_t line, std::size_t col,
                Values mode) {
  const auto where = [&] { return csv_where(name, line, col); };
  if (mode == Values::Mask && is_minus_infinity_sign(token)) {
    return -std::numeric_limits<float>::infinity();
  }
  double d = 0;
  switch (parse_double(token, d)) {
    case NumStatus::NotANumber:
      throw InputError(Msg::NotANumber, {where(), quote(token)});
    case NumStatus::OutOfRange:
      throw InputError(Msg::ValueOutOfRange, {where(), quote(token)});
    case NumStatus::Ok:
      break;
  }
  if (mode == Values::Mask) {
    if (d == 0) return 0.0f;
    if (std::isinf(d) && d < 0) return -std::numeric_limits<float>::infinity();
    // Unquoted as a learner would write it, unless it is too long for a one-line message.
    throw InputError(Msg::CsvMaskEntry, {where(), token.size() <= 40 ? std::string(token) : quote(token)});
  }
  if (!std::isfinite(d)) throw InputError(Msg::ValueNotFinite, {where(), quote(token)});
  const float f = static_cast<float>(d);
  if (std::isinf(f)) {
    throw InputError(Msg::ValueOutOfRange, {where(), quote(token)});
  }
  return f;
}

MatrixF parse_csv_values(std::string_view text, const std::string& name, Values mode) {
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
  std::vector<float> values;
  std::size_t cols = 0;
  std::size_t rows = 0;
  std::size_t first_row_line = 0;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    // One line; "\r\n", "\n" and a lone "\r" all end it.
    std::size_t end = pos;
    while (end < text.size() && text[end] != '\n' && text[end] != '\r') ++end;
    std::string_view line = text.substr(pos, end - pos);
    pos = end;
    if (pos < text.size() && text[pos] == '\r') ++pos;
    if (pos < text.size() && text[pos] == '\n') ++pos;
    ++line_no;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }

    std::size_t col = 0;
    bool after_comma = false;
    std::size_t i = 0;
    for (;;) {
      while (i < line.size() && is_space(line[i])) ++i;
      if (i == line.size()) {
        if (after_comma) {
          throw InputError(Msg::EmptyValueAtEnd, {csv_where(name, line_no, col + 1)});
        }
        break;
      }
      if (line[i] == ',') {
        if (col == 0 || after_comma) {
          throw InputError(Msg::EmptyValueCommas, {csv_where(name, line_no, col + 1)});
        }
        after_comma = true;
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < line.size() && !is_space(line[j]) && line[j] != ',') ++j;
      ++col;
      after_comma = false;
      values.push_back(csv_value(line.substr(i, j - i), name, line_no, col, mode));
      i = j;
    }
    if (col == 0) continue;  // blank or comment-only line
    if (rows == 0) {
      cols = col;
      first_row_line = line_no;
    } else if (col != cols) {
      throw InputError(Msg::RowLength, {csv_where(name, line_no, 0), std::to_string(col), std::to_string(cols),
                                        std::to_string(first_row_line)});
    }
    ++rows;
  }
  if (rows == 0) {
    if (trim(text).empty()) throw InputError(Msg::EmptyFile, {name});
    throw InputError(Msg::OnlyComments, {name});
  }
  MatrixF m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  std::copy(values.begin(), values.end(), m.data());
  return m;
}

// ---- .npy header -------------------------------------------------------------------------------

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
};

// A parser for the one Python literal a .npy header holds, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// It accepts exactly the dict numpy writes (keys descr, fortran_order, shape; either quote style;
// trailing commas; Python 2's "3L" integers) and rejects anything else with a message, never
// indexing outside `text`.
class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) fail(Msg::NpyDuplicateKey, quote(key));
        if (peek() == '[') fail(Msg::NpyStructured);
        h.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) fail(Msg::NpyDuplicateKey, quote(key));
        h.fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) fail(Msg::NpyDuplicateKey, quote(key));
        h.shape = tuple();
        have_shape = true;
      } else {
        fail(Msg::NpyUnexpectedKey, quote(key));
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail(Msg::NpyExpected, "',' / '}'");
    }
    expect('}');
    // numpy pads the header with spaces and ends it with '\n'; anything else is not a header.
    skip_ws();
    if (pos_ != s_.size()) fail(Msg::NpyTrailingBytes);
    if (!have_descr) fail(Msg::NpyMissingKey, quote("descr"));
    if (!have_order) fail(Msg::NpyMissingKey, quote("fortran_order"));
    if (!have_shape) fail(Msg::NpyMissingKey, quote("shape"));
    return h;
  }

 private:
  [[noreturn]] void fail(Msg id, const std::string& arg = {}) const {
    throw InputError(id, arg.empty() ? std::vector<std::string>{name_} : std::vector<std::string>{name_, arg});
  }
  // '\0' stands for "end of header"; a literal NUL inside the header is rejected wherever it lands.
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (is_space(s_[pos_]) || s_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c || pos_ >= s_.size()) fail(Msg::NpyExpected, std::string("'") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    const char q = peek();
    if (pos_ >= s_.size() || (q != '\'' && q != '"')) fail(Msg::NpyExpectedString);
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) break;
      }
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) fail(Msg::NpyUnterminated);
    ++pos_;
    return out;
  }
  bool boolean() {
    const std::string_view rest = s_.substr(pos_);
    if (rest.starts_with("True")) {
      pos_ += 4;
      return true;
    }
    if (rest.starts_with("False")) {
      pos_ += 5;
      return false;
    }
    fail(Msg::NpyFortranValue);
  }
  std::vector<std::uint64_t> tuple() {
    // More dimensions than this is certainly not a matrix; the cap keeps the vector small.
    constexpr std::size_t kMaxRank = 32;
    expect('(');
    std::vector<std::uint64_t> dims;
    for (;;) {
      skip_ws();
      if (peek() == ')') break;
      if (dims.size() == kMaxRank) fail(Msg::NpyRankTooHigh, std::to_string(kMaxRank));
      dims.push_back(integer());
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail(Msg::NpyExpected, "',' / ')'");
    }
    expect(')');
    return dims;
  }
  std::uint64_t integer() {
    const char* first = s_.data() + pos_;
    const char* last = s_.data() + s_.size();
    std::uint64_t v = 0;
    auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc::result_out_of_range) fail(Msg::NpyDimTooLarge);
    if (r.ec != std::errc()) fail(Msg::NpyDimNotInteger);
    pos_ += static_cast<std::size_t>(r.ptr - first);
    if (peek() == 'L') ++pos_;
    return v;
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

std::uint32_t read_le(std::string_view bytes, std::size_t at, int count) {
  std::uint32_t v = 0;
  for (int i = count - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
  }
  return v;
}

// Element `index` of the data, assembled byte by byte so that neither alignment nor the host's
// byte order matters.
// The dtypes read: little-endian floats and integers (np.save of document ids, or of a matrix of
// whole numbers, writes '<i8'), one byte's either order.
struct NpyType {
  std::size_t item = 0;  // 0: not read
  char kind = 'f';       // 'f' float, 'i' signed, 'u' unsigned
};
NpyType npy_type(const std::string& descr) {
  if (descr.size() != 3 || !(descr[0] == '<' || (descr[0] == '|' && descr[2] == '1'))) return {};
  const char kind = descr[1];
  const std::size_t item = static_cast<std::size_t>(descr[2] - '0');
  if (kind == 'f' && descr[0] == '<' && (item == 4 || item == 8)) return {item, kind};
  if ((kind == 'i' || kind == 'u') && (item == 1 || item == 2 || item == 4 || item == 8)) return {item, kind};
  return {};
}

std::string npy_type_name(NpyType t) {
  return std::string(t.kind == 'f' ? "float" : t.kind == 'i' ? "int" : "uint") + std::to_string(8 * t.item);
}

double npy_element(const char* data, std::size_t index, NpyType t) {
  std::uint64_t bits = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(data + index * t.item);
  for (std::size_t b = t.item; b-- > 0;) bits = (bits << 8) | p[b];
  if (t.kind == 'u') return static_cast<double>(bits);
  if (t.kind == 'i') {
    const unsigned shift = static_cast<unsigned>(64 - 8 * t.item);  // sign-extend from the item's width
    return static_cast<double>(static_cast<std::int64_t>(bits << shift) >> shift);
  }
  if (t.item == 4) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  return std::bit_cast<double>(bits);
}

MatrixF parse_npy_values(std::string_view bytes, const std::string& name, Values mode, bool vector_ok = false) {
  if (!bytes.starts_with(kNpyMagic)) throw InputError(Msg::NotNpy, {name});
  // The magic and no version bytes after it: a header cut short.
  if (bytes.size() < kNpyMagic.size() + 2) throw InputError(Msg::NpyHeaderTruncated, {name});
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3) {
    throw InputError(Msg::NpyVersion, {name, std::to_string(major), std::to_string(minor)});
  }
  // Version 1.0 stores the header length in 2 bytes, 2.0 and 3.0 (UTF-8 header) in 4.
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + len_bytes;
  if (bytes.size() < header_start) throw InputError(Msg::NpyHeaderTruncated, {name});
  const std::size_t header_len = read_le(bytes, 8, static_cast<int>(len_bytes));
  if (header_len > bytes.size() - header_start) {
    throw InputError(Msg::NpyHeaderClaims,
                     {name, std::to_string(header_len), std::to_string(bytes.size() - header_start)});
  }
  const NpyHeader h = NpyHeaderParser(bytes.substr(header_start, header_len), name).parse();

  const NpyType type = npy_type(h.descr);
  const std::size_t item = type.item;
  if (item == 0) {
    throw InputError(Msg::NpyDtype, {name, quote(h.descr)});
  }
  if (h.fortran_order) {
    throw InputError(Msg::NpyFortran, {name});
  }
  // A vector where one is asked for (document ids) reads as one row.
  if (h.shape.size() != 2 && !(vector_ok && h.shape.size() == 1)) {
    throw InputError(Msg::NpyRank, {name, std::to_string(h.shape.size()), shape_text(h.shape)});
  }
  const std::uint64_t rows = h.shape.size() == 1 ? 1 : h.shape[0], cols = h.shape.back();
  if (rows == 0 || cols == 0) {
    throw InputError(Msg::NpyEmpty, {name, shape_text(h.shape)});
  }
  constexpr std::uint64_t kMaxDim = std::numeric_limits<int>::max();
  if (rows > kMaxDim || cols > kMaxDim) {
    throw InputError(Msg::NpyShapeTooLarge, {name, shape_text(h.shape)});
  }
  // rows, cols < 2^31 so the count fits in 64 bits; dividing the bytes present (instead of
  // multiplying by the item size) keeps the check itself free of overflow.
  const std::uint64_t count = rows * cols;
  const std::size_t data_start = header_start + header_len;
  const std::size_t present = bytes.size() - data_start;
  if (count > present / item) {
    throw InputError(Msg::NpyDataTruncated, {name, shape_text(h.shape), npy_type_name(type),
                                             std::to_string(count), std::to_string(item), std::to_string(present)});
  }
  if (count * item != present) {
    throw InputError(Msg::NpyTrailing, {name, std::to_string(present - count * item), shape_text(h.shape)});
  }

  MatrixF m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  const char* data = bytes.data() + data_start;
  for (std::uint64_t i = 0; i < count; ++i) {
    const double d = npy_element(data, i, type);
    const auto at = [&](Msg id) {
      return InputError(id, {name, shortest_text(d), std::to_string(i / cols), std::to_string(i % cols)});
    };
    float f = 0.0f;
    if (mode == Values::Mask) {
      if (d == 0) {
        f = 0.0f;
      } else if (std::isinf(d) && d < 0) {
        f = -std::numeric_limits<float>::infinity();
      } else {
        throw at(Msg::NpyMaskEntry);
      }
    } else {
      if (!std::isfinite(d)) {
        throw at(Msg::NpyValueNotFinite);
      }
      f = static_cast<float>(d);
      if (std::isinf(f)) {
        throw at(Msg::NpyValueOutOfRange);
      }
    }
    m.data()[i] = f;
  }
  return m;
}

}  // namespace

namespace {

// Writes all of `data` to descriptor fd; false (errno set) on a short or failed write.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

void write_file(const std::string& path, std::string_view data) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A symbolic link is followed: the file it names is the one replaced.
  fs::path target = path;
  if (fs::is_symlink(target, ec)) {
    const fs::path resolved = fs::weakly_canonical(target, ec);
    if (!ec) target = resolved;
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw InputError(Msg::CannotWrite, {path, std::strerror(EISDIR)});
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device or a pipe (/dev/stdout, /dev/full) cannot be replaced: it is written as it is.
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(Msg::CannotWrite, {path, std::strerror(errno)});
    const bool ok = write_all(fd, data);
    const int err = errno;
    ::close(fd);
    if (!ok) throw InputError(Msg::CannotWrite, {path, std::strerror(err)});
    return;
  }
  // A temporary file beside the target, renamed over it once every byte is written: a reader
  // never sees half a file, and a write that fails leaves no partial file and the old one as it
  // was. open(2) with mode 0666 lets the umask decide the new file's permissions, as fopen does;
  // a replaced file keeps its own.
  static std::atomic<unsigned> counter{0};
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on "." + std::string.
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(counter++);
  const fs::path tmp = dir / name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw InputError(Msg::CannotWrite, {path, std::strerror(errno)});
  bool ok = write_all(fd, data);
  int err = errno;
  if (ok && fs::exists(st) && ::fchmod(fd, static_cast<mode_t>(st.permissions()) & 07777) != 0) {
    ok = false;
    err = errno;
  }
  // A full disk may only show when the data reaches it.
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), target.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    throw InputError(Msg::CannotWrite, {path, std::strerror(err)});
  }
}

// ---- public API --------------------------------------------------------------------------------

namespace {

// A byte count as the size refusals print it: whole MiB when it is a multiple of one (the real
// bound), else one decimal place ("1.5 MiB"), and plain bytes below 1 MiB (a test's bound).
// "1024 MiB", "3.5 MiB", "512 bytes"; a size just above `above` (a limit) with as many decimals as
// tell it from the limit ("1024.000001 MiB, more than 1024 MiB", not "1024.0 MiB, more than ...").
std::string mib_text(std::uint64_t bytes, std::uint64_t above = 0) {
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes < kMiB) return std::to_string(bytes) + " bytes";
  const double mib = static_cast<double>(bytes) / static_cast<double>(kMiB);
  char buf[64];
  for (int decimals = 1; decimals <= 7; ++decimals) {
    std::snprintf(buf, sizeof buf, "%.*f MiB", decimals, mib);
    if (bytes <= above || std::strtod(buf, nullptr) * static_cast<double>(kMiB) > static_cast<double>(above)) break;
  }
  return buf;
}

// Closes the descriptor on every path out of read_input_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_input_file(const std::string& path, std::uint64_t limit) {
  return read_input_file(path, InputFormat::Bytes, limit);
}

std::string read_input_file(const std::string& path, InputFormat format, std::uint64_t limit) {
  // open(2), not fopen: fstat on the descriptor tells a regular file (judged by its size before
  // anything is read) from a stream, and read(2) never buffers more than asked for.
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw InputError(Msg::CannotOpen, {path, std::strerror(errno)});
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw InputError(Msg::CannotRead, {path, std::strerror(errno)});
  const bool regular = S_ISREG(st.st_mode);
  if (regular && static_cast<std::uint64_t>(st.st_size) > limit) {
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size >= (std::uint64_t{1} << 20))
      throw InputError(Msg::FileTooLargeMiB, {path, std::to_string(size), mib_text(size, limit), mib_text(limit)});
    throw InputError(Msg::FileTooLarge, {path, std::to_string(size), mib_text(limit)});
  }
  // A regular file is read at its size in one allocation. A stream comes in pieces, joined once
  // at its end as each piece is freed: while it comes the reader holds about what has come (one
  // refused at the limit, the limit), where one string doubling as it came would hold its old and
  // new buffers at once (half as much again); the join briefly holds the pieces and the whole.
  constexpr std::size_t kStreamPiece = std::size_t{16} << 20;
  std::string data;
  std::vector<std::string> pieces;
  if (regular) data.reserve(static_cast<std::size_t>(st.st_size));
  std::uint64_t total = 0;
  char buf[1 << 16];
  for (;;) {
    // At most one byte past the limit is asked for: enough to know the input is too large.
    const std::uint64_t room = limit - total;
    const std::size_t want = room >= sizeof buf ? sizeof buf : static_cast<std::size_t>(room) + 1;
    const ssize_t got = ::read(f.fd, buf, want);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputError(Msg::CannotRead, {path, std::strerror(errno)});
    }
    if (got == 0) break;
    // The byte past the limit is never stored, so nothing held grows beyond `limit`. A regular
    // file that grew while it was read is refused like a stream.
    const auto n = static_cast<std::size_t>(got);
    // A matrix is .npy or text by its first byte.
    if (format == InputFormat::Matrix) format = buf[0] == kNpyMagic[0] ? InputFormat::Npy : InputFormat::Text;
    // Bytes that cannot be the format end the read at once.
    if (format == InputFormat::Text) {
      if (const void* nul = std::memchr(buf, '\0', n))
        throw InputError(Msg::NotText, {path, std::to_string(total + (static_cast<const char*>(nul) - buf))});
    } else if (format == InputFormat::Npy && total < kNpyMagic.size()) {
      const std::size_t k = std::min<std::size_t>(n, kNpyMagic.size() - total);
      if (std::string_view(buf, k) != kNpyMagic.substr(total, k)) throw InputError(Msg::NotNpy, {path});
    }
    if (total + n > limit) throw InputError(Msg::InputTooLarge, {path, mib_text(limit)});
    total += n;
    if (regular) {
      data.append(buf, n);
      continue;
    }
    if (pieces.empty() || pieces.back().size() + n > kStreamPiece) pieces.emplace_back().reserve(kStreamPiece);
    pieces.back().append(buf, n);
  }
  if (!regular) {
    data.reserve(static_cast<std::size_t>(total));
    for (std::string& piece : pieces) {
      data += piece;
      std::string().swap(piece);
    }
  }
  return data;
}

MatrixF parse_csv(std::string_view text, const std::string& name) {
  return parse_csv_values(text, name, Values::Finite);
}

MatrixF parse_npy(std::string_view bytes, const std::string& name) {
  return parse_npy_values(bytes, name, Values::Finite);
}

MatrixF parse_mask(std::string_view bytes, const std::string& name) {
  return is_npy(bytes, name) ? parse_npy_values(bytes, name, Values::Mask) : parse_csv_values(bytes, name, Values::Mask);
}

MatrixF read_matrix(const std::string& path) {
  const std::string bytes = read_input_file(path, ends_with_npy(path) ? InputFormat::Npy : InputFormat::Matrix);
  return is_npy(bytes, path) ? parse_npy(bytes, path) : parse_csv(bytes, path);
}

MatrixF read_vector(const std::string& path) {
  const std::string bytes = read_input_file(path, ends_with_npy(path) ? InputFormat::Npy : InputFormat::Matrix);
  return is_npy(bytes, path) ? parse_npy_values(bytes, path, Values::Finite, true) : parse_csv(bytes, path);
}

MatrixF read_mask(const std::string& path) {
  return parse_mask(read_input_file(path, ends_with_npy(path) ? InputFormat::Npy : InputFormat::Matrix), path);
}

// (rows, cols) -> one line per row, values comma separated. Each value is the shortest text that
// reads back as the same float (std::to_chars), so the round trip is bit-exact, "0.85" stays
// readable instead of "0.850000024", and no locale can turn the decimal point into a comma.
void write_csv(const std::string& path, const MatrixF& m) {
  std::string out;
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    for (Eigen::Index c = 0; c < m.cols(); ++c) {
      if (c > 0) out += ',';
      out += shortest_text(m(r, c));
    }
    out += '\n';
  }
  write_file(path, out);
}

// (rows, cols) -> .npy version 1.0, '<f4', C order. Like numpy, the header (magic, version,
// length, dict, padding, '\n') is padded with spaces to a multiple of 64 bytes so that the data
// is aligned for memory mapping.
std::string to_npy_bytes(const MatrixF& m) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                     std::to_string(m.rows()) + ", " + std::to_string(m.cols()) + "), }";
  const std::size_t prefix = kNpyMagic.size() + 4;  // magic, version 1.0, 2-byte length
  const std::size_t unpadded = prefix + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  const std::size_t header_len = dict.size();

  std::string out(kNpyMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header_len & 0xFF);
  out += static_cast<char>((header_len >> 8) & 0xFF);
  out += dict;
  out.reserve(out.size() + static_cast<std::size_t>(m.size()) * 4);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const auto bits = std::bit_cast<std::uint32_t>(m.data()[i]);
    for (int b = 0; b < 4; ++b) out += static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  return out;
}

void write_npy(const std::string& path, const MatrixF& m) { write_file(path, to_npy_bytes(m)); }

// A label is printed in tables and on one line: a control character (a line break, a tab) in it
// would break them, so it is refused (TokenControl), the label quoted with its escapes; bytes that
// are no UTF-8 would make the outputs invalid text (TokenUtf8).
void check_label(std::string_view label, std::size_t position) {
  for (char c : label) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) throw InputError(Msg::TokenControl, {std::to_string(position), quote(label)});
  }
  if (!valid_utf8(label)) throw InputError(Msg::TokenUtf8, {std::to_string(position), quote(label)});
}

std::vector<std::string> split_tokens(std::string_view csv) {
  std::vector<std::string> tokens;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = csv.find(',', start);
    const std::string_view item =
        trim(csv.substr(start, comma == std::string_view::npos ? csv.npos : comma - start));
    if (item.empty()) {
      throw InputError(Msg::EmptyToken, {std::to_string(tokens.size() + 1), quote(csv)});
    }
    check_label(item, tokens.size() + 1);
    tokens.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return tokens;
}

std::vector<std::string> read_tokens_file(const std::string& path) {
  const std::string data = read_input_file(path, InputFormat::Text);
  std::string_view text = data;
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
  std::vector<std::string> tokens;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view item = trim(text.substr(start, nl - start));
    if (!item.empty()) {
      check_label(item, tokens.size() + 1);
      tokens.emplace_back(item);
    }
    start = nl + 1;
  }
  if (tokens.empty()) throw InputError(Msg::NoTokens, {path});
  return tokens;
}

}  // namespace attnlab
