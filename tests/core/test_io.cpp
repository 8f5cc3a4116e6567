// Tests of core/io: the CSV and .npy readers (every accepted variant and every rejected input with
// the position its message must name), bit-exact CSV and .npy round trips, a float64 .npy file
// built byte by byte (no numpy needed), mask files holding -inf, and token lists.
// Files go to a fresh test::TempDir per test (mkdtemp), because ctest runs tests (and the sanitizer
// copy of this suite) in parallel; the last test checks that such a directory goes away.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/io.h"
#include "core/messages.h"
#include "tests/test_util.h"

namespace {

using attnlab::InputError;
using attnlab::MatrixF;
using attnlab::test::le_bytes;
using attnlab::test::message_of;
using attnlab::test::npy_bytes;
using attnlab::test::npy_dict;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The message of the InputError `f` throws; a failure when it throws nothing or something else.
template <class F>
std::string error_of(F&& f, std::source_location at = std::source_location::current()) {
  return message_of<InputError>(std::forward<F>(f), at);
}

std::string csv_error(std::string_view text, const std::string& name = "q.csv",
                      std::source_location at = std::source_location::current()) {
  return error_of([&] { attnlab::parse_csv(text, name); }, at);
}

std::string npy_error(std::string_view bytes, const std::string& name = "x.npy",
                      std::source_location at = std::source_location::current()) {
  return error_of([&] { attnlab::parse_npy(bytes, name); }, at);
}

MatrixF rows_of(std::initializer_list<std::initializer_list<float>> rows) {
  MatrixF m(static_cast<Eigen::Index>(rows.size()),
            static_cast<Eigen::Index>(rows.begin()->size()));
  Eigen::Index r = 0;
  for (const auto& row : rows) {
    Eigen::Index c = 0;
    for (float v : row) m(r, c++) = v;
    ++r;
  }
  return m;
}

// Same shape and the same bits in every entry (so -0.0 vs 0.0 and the last ulp count).
void expect_bit_equal(const MatrixF& a, const MatrixF& b) {
  ASSERT_EQ(a.rows(), b.rows());
  ASSERT_EQ(a.cols(), b.cols());
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(a.data()[i]), std::bit_cast<std::uint32_t>(b.data()[i]))
        << "entry " << i << ": " << a.data()[i] << " vs " << b.data()[i];
  }
}

// A fresh directory per test, removed afterwards.
class IoFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& leaf) const { return dir_.file(leaf); }
  std::string dir() const { return dir_.path().string(); }
  std::string write(const std::string& leaf, std::string_view bytes) const {
    return attnlab::test::write_file(dir_.file(leaf), bytes);
  }
  attnlab::test::TempDir dir_{"attnlab-io"};
};

class IoCsvFile : public IoFiles {};
class IoNpyFile : public IoFiles {};
class IoMaskFile : public IoFiles {};
class IoTokensFile : public IoFiles {};

// ---- CSV parsing -------------------------------------------------------------------------------

TEST(IoCsv, CommaSeparated) {
  expect_bit_equal(attnlab::parse_csv("1,2,3\n4,5,6\n", "q.csv"), rows_of({{1, 2, 3}, {4, 5, 6}}));
}

TEST(IoCsv, WhitespaceSeparatedAndMixedPerLine) {
  const MatrixF m = attnlab::parse_csv("1 2\t3\n4, 5 ,6\n  7,8   9  \n", "q.csv");
  expect_bit_equal(m, rows_of({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}));
}

TEST(IoCsv, CommentsBlankLinesCrlfAndBom) {
  const std::string text =
      "\xEF\xBB\xBF# Q for the demo\r\n"
      "\r\n"
      "1.5, -2.25  # trailing comment\r\n"
      "   \t \r\n"
      "# another comment\r\n"
      "3e-1 4E2\r\n";
  expect_bit_equal(attnlab::parse_csv(text, "q.csv"), rows_of({{1.5f, -2.25f}, {0.3f, 400.0f}}));
}

TEST(IoCsv, LoneCrLineEndsAndNoFinalNewline) {
  expect_bit_equal(attnlab::parse_csv("1,2\r3,4", "q.csv"), rows_of({{1, 2}, {3, 4}}));
}

TEST(IoCsv, NumberSpellings) {
  // A leading '+', the Unicode minus U+2212 of web pages, ".5", "5.", exponents.
  const MatrixF m = attnlab::parse_csv(
      "+1 \xE2\x88\x92"
      "2 .5 5. 1e3 -0",
      "q.csv");
  expect_bit_equal(m, rows_of({{1, -2, 0.5f, 5, 1000, -0.0f}}));
}

TEST(IoCsv, ValuesRoundToNearestFloat) {
  const MatrixF m = attnlab::parse_csv("0.1 0.85 3.4028235e38 1e-50 1e-400", "q.csv");
  EXPECT_EQ(m(0, 0), 0.1f);
  EXPECT_EQ(m(0, 1), 0.85f);
  EXPECT_EQ(m(0, 2), std::numeric_limits<float>::max());
  EXPECT_EQ(m(0, 3), 0.0f);  // below float's range: flushed, not an error
  EXPECT_EQ(m(0, 4), 0.0f);  // below even double's range
}

TEST(IoCsv, SingleValueAndSingleColumn) {
  expect_bit_equal(attnlab::parse_csv("42", "q.csv"), rows_of({{42}}));
  expect_bit_equal(attnlab::parse_csv("1\n2\n3\n", "q.csv"), rows_of({{1}, {2}, {3}}));
}

// ---- CSV errors: each names the file, the line and (for a value) the column ------------------

TEST(IoCsv, NotANumberNamesLineAndColumn) {
  const std::string e = csv_error("1,2,3\n4,5,6\n7,abc,9\n");
  EXPECT_NE(e.find("q.csv:3:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("'abc' is not a number"), std::string::npos) << e;
}

TEST(IoCsv, LineNumbersCountCommentsAndBlankLines) {
  const std::string e = csv_error("# header\n\n1 2\n3 x\n");
  EXPECT_NE(e.find("q.csv:4:2:"), std::string::npos) << e;
}

TEST(IoCsv, StrictNumbers) {
  for (const char* bad : {"1.2x", "1,2.3.4", "0x10", "1e", "--1", "1_000", "１"}) {
    const std::string e = csv_error(bad);
    EXPECT_NE(e.find("is not a number"), std::string::npos) << bad << " -> " << e;
    EXPECT_NE(e.find("q.csv:1:"), std::string::npos) << bad << " -> " << e;
  }
}

TEST(IoCsv, RaggedRowNamesLineAndCounts) {
  const std::string e = csv_error("1,2,3\n4,5,6\n\n7,8\n");
  EXPECT_NE(e.find("q.csv:4:"), std::string::npos) << e;
  EXPECT_NE(e.find("row has 2 values but earlier rows have 3"), std::string::npos) << e;
}

TEST(IoCsv, EmptyInputs) {
  EXPECT_NE(csv_error("").find("q.csv: no numbers (empty file)"), std::string::npos);
  EXPECT_NE(csv_error("\xEF\xBB\xBF\n\n").find("q.csv: no numbers (empty file)"),
            std::string::npos);
  const std::string e = csv_error("# only a comment\n\n");
  EXPECT_NE(e.find("q.csv: no numbers"), std::string::npos) << e;
}

TEST(IoCsv, EmptyValues) {
  std::string e = csv_error("1,,2\n");
  EXPECT_NE(e.find("q.csv:1:2: empty value"), std::string::npos) << e;
  e = csv_error("1,2\n,3,4\n");
  EXPECT_NE(e.find("q.csv:2:1: empty value"), std::string::npos) << e;
  e = csv_error("1,2,\n");
  EXPECT_NE(e.find("q.csv:1:3: empty value"), std::string::npos) << e;
}

TEST(IoCsv, NonFiniteValuesRejected) {
  std::string e = csv_error("1 2\ninf 3\n");
  EXPECT_NE(e.find("q.csv:2:1: value 'inf' is not finite"), std::string::npos) << e;
  e = csv_error("1 -inf\n");
  EXPECT_NE(e.find("q.csv:1:2: value '-inf' is not finite"), std::string::npos) << e;
  e = csv_error("nan\n");
  EXPECT_NE(e.find("q.csv:1:1: value 'nan' is not finite"), std::string::npos) << e;
}

TEST(IoCsv, OutOfFloatRangeRejected) {
  std::string e = csv_error("1 2 1e39\n");
  EXPECT_NE(e.find("q.csv:1:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("out of float32 range"), std::string::npos) << e;
  e = csv_error("-1e400\n");
  EXPECT_NE(e.find("q.csv:1:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("out of float32 range"), std::string::npos) << e;
  // Beyond double's range the digits' place counts with the exponent: 1 and 400 zeros times
  // 1e-10 is 1e390 (it had been read as 0, its exponent being negative) ...
  e = csv_error("1" + std::string(400, '0') + "e-10\n");
  EXPECT_NE(e.find("out of float32 range"), std::string::npos) << e;
  // ... and 0.000...1 times 1e10 is 1e-391, below range: 0 (it had been refused).
  const MatrixF tiny = attnlab::parse_csv("0." + std::string(400, '0') + "1e+10 2", "q.csv");
  EXPECT_EQ(tiny(0, 0), 0.0f);
  EXPECT_EQ(tiny(0, 1), 2.0f);
}

TEST(IoCsv, LongOrBinaryTokensAreShortenedAndEscaped) {
  const std::string e = csv_error(std::string(1000, 'z') + "\x01");
  EXPECT_LT(e.size(), 120u) << e;
  const std::string e2 =
      csv_error(std::string("a\x01"
                            "b"));
  EXPECT_NE(e2.find("'a\\x01b'"), std::string::npos) << e2;
}

// ---- CSV files ---------------------------------------------------------------------------------

TEST_F(IoCsvFile, MissingFile) {
  const std::string p = path("x.csv");
  const std::string e = error_of([&] { attnlab::read_matrix(p); });
  EXPECT_NE(e.find("cannot open '" + p + "': No such file or directory"), std::string::npos) << e;
}

TEST_F(IoCsvFile, DirectoryIsNotAFile) {
  const std::string e = error_of([&] { attnlab::read_matrix(dir_.path().string()); });
  EXPECT_NE(e.find(dir_.path().string()), std::string::npos) << e;
}

TEST_F(IoCsvFile, ErrorsNameThePathAsGiven) {
  const std::string p = write("q.csv", "1 2\n3 oops\n");
  const std::string e = error_of([&] { attnlab::read_matrix(p); });
  EXPECT_NE(e.find(p + ":2:2: 'oops' is not a number"), std::string::npos) << e;
}

TEST_F(IoCsvFile, RoundTripIsBitExact) {
  MatrixF m(4, 5);
  // Values whose shortest decimal form needs all 9 digits, plus extremes and signed zero.
  const float specials[] = {0.1f,
                            -0.0f,
                            1.0f / 3.0f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::max(),
                            std::nextafter(1.0f, 2.0f),
                            16777217.0f,
                            0.85f};
  std::uint32_t state = 12345;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    if (i < static_cast<Eigen::Index>(std::size(specials))) {
      m.data()[i] = specials[i];
    } else {
      state = state * 1664525u + 1013904223u;  // random bit patterns, kept finite
      float f = std::bit_cast<float>(state);
      m.data()[i] = std::isfinite(f) ? f : 1.5f;
    }
  }
  const std::string p = path("m.csv");
  attnlab::write_csv(p, m);
  expect_bit_equal(attnlab::read_matrix(p), m);
}

TEST_F(IoCsvFile, WriteCsvLayout) {
  const std::string p = path("m.csv");
  attnlab::write_csv(p, rows_of({{1, 0.5f}, {-2, 0.85f}}));
  const std::string text = attnlab::test::read_file(p);
  EXPECT_EQ(text, "1,0.5\n-2,0.85\n");
}

TEST_F(IoCsvFile, WriteToMissingDirectoryFails) {
  const std::string p = path("no/such/dir/m.csv");
  const std::string e = error_of([&] { attnlab::write_csv(p, rows_of({{1}})); });
  EXPECT_NE(e.find("cannot write '" + p + "'"), std::string::npos) << e;
}

// ---- .npy --------------------------------------------------------------------------------------

TEST(IoNpy, HeaderLayoutMatchesNumpy) {
  const std::string b = attnlab::to_npy_bytes(rows_of({{1, 2, 3}, {4, 5, 6}}));
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_len = static_cast<unsigned char>(b[8]) |
                                 (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = b.substr(10, header_len);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (2, 3)"), std::string::npos) << header;
  EXPECT_EQ(b.size(), 10 + header_len + 6 * 4);
  // First value 1.0f little-endian: 00 00 80 3F.
  EXPECT_EQ(b.substr(10 + header_len, 4), std::string("\x00\x00\x80\x3F", 4));
}

TEST(IoNpy, Float64BuiltByHand) {
  const std::vector<double> values = {1.25, -2.5, 0.1, 1e-3, 3.0, 123456.789};
  const std::string b = npy_bytes(npy_dict("(3, 2)", "<f8"), le_bytes(values));
  const MatrixF m = attnlab::parse_npy(b, "x.npy");
  ASSERT_EQ(m.rows(), 3);
  ASSERT_EQ(m.cols(), 2);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m.data()[i], static_cast<float>(values[i])) << i;
  EXPECT_EQ(m(1, 0), 0.1f);  // row-major: the third value is row 1, column 0
}

TEST(IoNpy, Versions2And3AndHeaderVariants) {
  const std::string data = le_bytes(std::vector<float>{1, 2, 3, 4});
  for (int major : {2, 3}) {
    const MatrixF m = attnlab::parse_npy(npy_bytes(npy_dict("(2, 2)"), data, major), "x.npy");
    expect_bit_equal(m, rows_of({{1, 2}, {3, 4}}));
  }
  // Double quotes, another key order, no trailing comma, Python 2 longs, spaces.
  const std::string dict = "{ \"shape\" : (2L,2L) , \"fortran_order\":False,\"descr\":\"<f4\" }";
  expect_bit_equal(attnlab::parse_npy(npy_bytes(dict, data), "x.npy"), rows_of({{1, 2}, {3, 4}}));
}

TEST(IoNpy, UnalignedHeaderIsAccepted) {
  // Writers other than numpy may skip the 64-byte padding; the data offset is what the length says.
  const std::string dict = npy_dict("(1, 2)") + "\n";
  std::string b = "\x93NUMPY\x01";
  b += '\0';
  b += static_cast<char>(dict.size());
  b += '\0';
  b += dict + le_bytes(std::vector<float>{7, 8});
  expect_bit_equal(attnlab::parse_npy(b, "x.npy"), rows_of({{7, 8}}));
}

TEST(IoNpy, RejectsFortranOrder) {
  const std::string e = npy_error(
      npy_bytes(npy_dict("(2, 2)", "<f4", "True"), le_bytes(std::vector<float>{1, 2, 3, 4})));
  EXPECT_NE(e.find("x.npy: Fortran-order arrays are not supported; save with "
                   "np.ascontiguousarray"),
            std::string::npos)
      << e;
}

// Integers as np.save writes them (document ids, whole-number matrices): read exactly, signed ones
// sign-extended from their width.
TEST(IoNpy, ReadsLittleEndianIntegers) {
  const std::string i8 = npy_bytes(npy_dict("(1, 3)", "<i8"), std::string("\x05\0\0\0\0\0\0\0", 8) +
                                                                 std::string(8, '\xff') + std::string("\0\0\0\0\0\0\x10\0", 8));
  const MatrixF a = attnlab::parse_npy(i8, "x.npy");
  EXPECT_EQ(a(0, 0), 5.f);
  EXPECT_EQ(a(0, 1), -1.f);
  EXPECT_EQ(a(0, 2), static_cast<float>(std::ldexp(1.0, 52)));
  const MatrixF b = attnlab::parse_npy(npy_bytes(npy_dict("(2, 1)", "|i1"), std::string("\x80\x7f", 2)), "x.npy");
  EXPECT_EQ(b(0, 0), -128.f);
  EXPECT_EQ(b(1, 0), 127.f);
  const MatrixF c = attnlab::parse_npy(npy_bytes(npy_dict("(1, 2)", "<u2"), std::string("\xff\xff\x01\0", 4)), "x.npy");
  EXPECT_EQ(c(0, 0), 65535.f);
  EXPECT_EQ(c(0, 1), 1.f);
  const MatrixF d = attnlab::parse_npy(npy_bytes(npy_dict("(1, 1)", "<i4"), std::string("\xfe\xff\xff\xff", 4)), "x.npy");
  EXPECT_EQ(d(0, 0), -2.f);
}

TEST(IoNpy, RejectsOtherDtypes) {
  for (const char* descr : {">f8", ">f4", ">i4", "|b1", "<f2", "<c8", "=f4", "<i3"}) {
    const std::string e = npy_error(npy_bytes(npy_dict("(1, 1)", descr), std::string(8, '\0')));
    EXPECT_NE(e.find("x.npy:"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("dtype '") + descr + "'"), std::string::npos) << e;
  }
  const std::string e = npy_error(npy_bytes(
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1, 1)}", std::string(4, '\0')));
  EXPECT_NE(e.find("structured dtypes are not supported"), std::string::npos) << e;
}

TEST(IoNpy, RejectsRanksOtherThanTwo) {
  std::string e = npy_error(npy_bytes(npy_dict("(2, 3, 4)"), std::string(96, '\0')));
  EXPECT_NE(e.find("x.npy: expected a 2-D array, got rank 3 (shape (2, 3, 4))"), std::string::npos)
      << e;
  e = npy_error(npy_bytes(npy_dict("(5,)"), std::string(20, '\0')));
  EXPECT_NE(e.find("rank 1 (shape (5,))"), std::string::npos) << e;
  e = npy_error(npy_bytes(npy_dict("()"), std::string(4, '\0')));
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
}

TEST(IoNpy, RejectsTruncatedAndOversizedData) {
  std::string e = npy_error(npy_bytes(npy_dict("(3, 4)"), std::string(20, '\0')));
  EXPECT_NE(e.find("x.npy: data is truncated"), std::string::npos) << e;
  e = npy_error(npy_bytes(npy_dict("(1, 2)"), std::string(12, '\0')));
  EXPECT_NE(e.find("unexpected bytes after the data"), std::string::npos) << e;
}

TEST(IoNpy, BogusHugeShapeFailsWithoutAllocating) {
  // 2^31-1 squared float64 would be 32 EiB: must be refused from the byte count alone.
  std::string e =
      npy_error(npy_bytes(npy_dict("(2147483647, 2147483647)", "<f8"), std::string(64, '\0')));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  e = npy_error(npy_bytes(npy_dict("(99999999999999999999, 2)"), std::string(8, '\0')));
  EXPECT_NE(e.find("too large"), std::string::npos) << e;
  e = npy_error(npy_bytes(npy_dict("(4294967296, 1)"), std::string(8, '\0')));
  EXPECT_NE(e.find("too large"), std::string::npos) << e;
  e = npy_error(npy_bytes(npy_dict("(0, 3)"), ""));
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
}

TEST(IoNpy, RejectsBadMagicVersionAndHeader) {
  std::string e = npy_error("1,2,3\n");
  EXPECT_NE(e.find("x.npy: not a .npy file"), std::string::npos) << e;
  e = npy_error("");
  EXPECT_NE(e.find("x.npy: not a .npy file"), std::string::npos) << e;
  std::string b = npy_bytes(npy_dict("(1, 1)"), std::string(4, '\0'));
  b[6] = 4;
  e = npy_error(b);
  EXPECT_NE(e.find("version 4.0 is not supported"), std::string::npos) << e;
  // Header length pointing past the end of the file.
  b = npy_bytes(npy_dict("(1, 1)"), "");
  b[9] = '\x7F';
  e = npy_error(b);
  EXPECT_NE(e.find("x.npy: .npy header is truncated"), std::string::npos) << e;
  for (const char* dict :
       {"", "{", "{'descr': '<f4'", "{'descr': '<f4', 'shape': (1, 1)}",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1, 1)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, -1)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'x': 1}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1)} junk",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1, 1)}",
        "{'descr: '<f4', 'fortran_order': False, 'shape': (1, 1)}"}) {
    e = npy_error(npy_bytes(dict, std::string(4, '\0')));
    EXPECT_NE(e.find("x.npy: malformed .npy header"), std::string::npos) << dict << " -> " << e;
    // Under --lang zh the whole line is Chinese: each finding is a catalogued message.
    try {
      attnlab::parse_npy(npy_bytes(dict, std::string(4, '\0')), "x.npy");
      ADD_FAILURE() << dict << " was taken";
    } catch (const InputError& ie) {
      const std::string zh = attnlab::render_message(ie.id, ie.args, attnlab::Lang::Zh);
      EXPECT_EQ(zh.rfind("x.npy：.npy 文件头格式错误：", 0), 0u) << dict << " -> " << zh;
      EXPECT_EQ(zh.find("expected"), std::string::npos) << zh;
      EXPECT_EQ(zh.find("missing"), std::string::npos) << zh;
    }
  }
  const auto zh_of = [](const std::string& dict) {
    try {
      attnlab::parse_npy(npy_bytes(dict, std::string(4, '\0')), "x.npy");
    } catch (const InputError& ie) {
      return attnlab::render_message(ie.id, ie.args, attnlab::Lang::Zh);
    }
    return std::string();
  };
  EXPECT_EQ(zh_of("{'descr': '<f4', 'shape': (1, 1)}"), "x.npy：.npy 文件头格式错误：缺少键“fortran_order”");
  EXPECT_EQ(zh_of("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"),
            "x.npy：.npy 文件头格式错误：不支持结构化 dtype；请保存普通浮点数组");
  EXPECT_EQ(zh_of("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'x': 1}"),
            "x.npy：.npy 文件头格式错误：多余的键“x”");
  EXPECT_EQ(zh_of("{'descr': '<f4' 'fortran_order': False, 'shape': (1, 1)}"),
            "x.npy：.npy 文件头格式错误：此处应为 ',' / '}'");
}

TEST(IoNpy, RejectsNonFiniteAndOutOfRangeValues) {
  std::string e = npy_error(
      npy_bytes(npy_dict("(1, 2)"),
                le_bytes(std::vector<float>{1, std::numeric_limits<float>::quiet_NaN()})));
  EXPECT_NE(e.find("x.npy: value nan at [0, 1] is not finite"), std::string::npos) << e;
  e = npy_error(
      npy_bytes(npy_dict("(2, 1)", "<f8"),
                le_bytes(std::vector<double>{1, -std::numeric_limits<double>::infinity()})));
  EXPECT_NE(e.find("x.npy: value -inf at [1, 0] is not finite"), std::string::npos) << e;
  e = npy_error(npy_bytes(npy_dict("(1, 1)", "<f8"), le_bytes(std::vector<double>{1e300})));
  EXPECT_NE(e.find("out of float32 range"), std::string::npos) << e;
}

TEST_F(IoNpyFile, RoundTripIsExact) {
  MatrixF m(7, 3);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    m.data()[i] = std::ldexp(static_cast<float>(i) - 10.3f, static_cast<int>(i % 9) - 4);
  }
  m(0, 0) = -0.0f;
  m(6, 2) = std::numeric_limits<float>::denorm_min();
  const std::string p = path("m.npy");
  attnlab::write_npy(p, m);
  expect_bit_equal(attnlab::read_matrix(p), m);
}

TEST_F(IoNpyFile, ExtensionIsCaseInsensitive) {
  const MatrixF m = rows_of({{1, 2}});
  const std::string p = path("M.NPY");
  attnlab::write_npy(p, m);
  expect_bit_equal(attnlab::read_matrix(p), m);
  // Under another name a .npy is known by its magic; other binary bytes still fail as CSV (a NUL
  // byte), not silently.
  expect_bit_equal(attnlab::read_matrix(write("m.dat", attnlab::to_npy_bytes(m))), m);
  const std::string q = write("b.dat", std::string("1,2\n\0", 5));
  EXPECT_NE(error_of([&] { attnlab::read_matrix(q); }).find(q + ": byte 4"), std::string::npos);
  EXPECT_NE(error_of([&] { attnlab::read_matrix(q); }).find("no CSV or text file"), std::string::npos);
}

TEST_F(IoNpyFile, ErrorsNameThePath) {
  const std::string p = write("bad.npy", "not numpy");
  const std::string e = error_of([&] { attnlab::read_matrix(p); });
  EXPECT_NE(e.find(p + ": not a .npy file"), std::string::npos) << e;
}

// ---- masks -------------------------------------------------------------------------------------

TEST_F(IoMaskFile, CsvAcceptsEverySpellingOfMinusInfinity) {
  const std::string p = write("mask.csv",
                              "0 -inf -Inf -infinity\n"
                              "-Infinity \xE2\x88\x92\xE2\x88\x9E -\xE2\x88\x9E 0.0\n");
  const MatrixF m = attnlab::read_mask(p);
  ASSERT_EQ(m.rows(), 2);
  ASSERT_EQ(m.cols(), 4);
  const float expected[] = {0, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m.data()[i], expected[i]) << i;
}

TEST_F(IoMaskFile, CausalMaskCsv) {
  const std::string p = write("causal.csv", "0,-inf,-inf\n0,0,-inf\n0,0,0\n");
  const MatrixF m = attnlab::read_mask(p);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(m(r, c), c > r ? kNegInf : 0.0f) << r << "," << c;
  }
}

TEST_F(IoMaskFile, CsvRejectsOtherValues) {
  const std::string p = write("mask.csv", "0 -inf 0.5\n");
  std::string e = error_of([&] { attnlab::read_mask(p); });
  EXPECT_NE(e.find(p + ":1:3: mask entries must be 0 or -inf, got 0.5"), std::string::npos) << e;
  for (const char* bad : {"inf", "+inf", "1", "nan", "\xE2\x88\x9E"}) {
    e = error_of([&] { attnlab::parse_mask(std::string("0 ") + bad, "mask.csv"); });
    EXPECT_NE(e.find("mask.csv:1:2:"), std::string::npos) << bad << " -> " << e;
  }
}

TEST_F(IoMaskFile, ReadMatrixStillRejectsMinusInfinity) {
  const std::string p = write("mask.csv", "0 -inf\n");
  EXPECT_NE(error_of([&] { attnlab::read_matrix(p); }).find(":1:2: value '-inf' is not finite"),
            std::string::npos);
}

TEST_F(IoMaskFile, NpyAcceptsZeroAndMinusInfinityOnly) {
  MatrixF mask = rows_of({{0, kNegInf}, {0, 0}});
  const std::string p = path("mask.npy");
  attnlab::write_npy(p, mask);
  expect_bit_equal(attnlab::read_mask(p), mask);

  const std::string p8 = write(
      "mask8.npy",
      npy_bytes(npy_dict("(1, 2)", "<f8"),
                le_bytes(std::vector<double>{-std::numeric_limits<double>::infinity(), 0.0})));
  expect_bit_equal(attnlab::read_mask(p8), rows_of({{kNegInf, 0}}));

  attnlab::write_npy(p, rows_of({{0, 0.5f}}));
  const std::string e = error_of([&] { attnlab::read_mask(p); });
  EXPECT_NE(e.find(p + ": mask entries must be 0 or -inf, got 0.5 at [0, 1]"), std::string::npos)
      << e;
}

// ---- tokens ------------------------------------------------------------------------------------

TEST(IoTokens, SplitTrimsEachToken) {
  EXPECT_EQ(attnlab::split_tokens("a,b,c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(attnlab::split_tokens(" 模型 , 根据,上下文 "),
            (std::vector<std::string>{"模型", "根据", "上下文"}));
  EXPECT_EQ(attnlab::split_tokens("one"), (std::vector<std::string>{"one"}));
}

TEST(IoTokens, SplitRejectsEmptyTokens) {
  std::string e = error_of([] { attnlab::split_tokens("a,,c"); });
  EXPECT_NE(e.find("empty token at position 2"), std::string::npos) << e;
  e = error_of([] { attnlab::split_tokens("a,b, "); });
  EXPECT_NE(e.find("empty token at position 3"), std::string::npos) << e;
  e = error_of([] { attnlab::split_tokens(""); });
  EXPECT_NE(e.find("empty token at position 1"), std::string::npos) << e;
}

TEST_F(IoTokensFile, OnePerLineTrimmedBlankLinesSkipped) {
  const std::string p =
      write("tokens.txt", "\xEF\xBB\xBF模型\r\n  根据  \n\n\t\n上下文\n分配\n权重");
  EXPECT_EQ(attnlab::read_tokens_file(p),
            (std::vector<std::string>{"模型", "根据", "上下文", "分配", "权重"}));
}

TEST_F(IoTokensFile, MissingAndEmptyFiles) {
  const std::string missing = path("none.txt");
  std::string e = error_of([&] { attnlab::read_tokens_file(missing); });
  EXPECT_NE(e.find("cannot open '" + missing + "'"), std::string::npos) << e;
  const std::string blank = write("blank.txt", "\n \n");
  e = error_of([&] { attnlab::read_tokens_file(blank); });
  EXPECT_NE(e.find(blank + ": no tokens"), std::string::npos) << e;
}

// ---- the size bound on every input file ----------------------------------------------------------

// A sparse regular file of `size` bytes (ftruncate: no data blocks are written).
std::string sparse_file(const std::string& p, std::uint64_t size) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("open " + p + ": " + std::strerror(errno));
  const int rc = ::ftruncate(fd, static_cast<off_t>(size));
  ::close(fd);
  if (rc != 0) throw std::runtime_error("ftruncate " + p + ": " + std::strerror(errno));
  return p;
}

// Writes `chunk` into the FIFO at `path` over and over (forever = until the reader closes its
// end), or `repeat` times and then closes it. SIGPIPE is blocked in this thread only, so a closed
// reader ends the loop with EPIPE instead of killing the test.
class FifoWriter {
 public:
  FifoWriter(std::string path, std::string chunk, long long repeat = -1)
      : thread_([this, path = std::move(path), chunk = std::move(chunk), repeat] {
          sigset_t pipe;
          sigemptyset(&pipe);
          sigaddset(&pipe, SIGPIPE);
          pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
          const int fd = ::open(path.c_str(), O_WRONLY);  // waits for the reader to open
          if (fd < 0) return;
          for (long long i = 0; repeat < 0 || i < repeat; ++i) {
            const ssize_t n = ::write(fd, chunk.data(), chunk.size());
            if (n < 0) break;
            written_ += static_cast<std::uint64_t>(n);
          }
          ::close(fd);
        }) {}
  ~FifoWriter() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t written() const { return written_; }

 private:
  std::atomic<std::uint64_t> written_{0};
  std::thread thread_;
};

class IoBound : public IoFiles {
 protected:
  std::string fifo(const std::string& leaf) const {
    const std::string p = path(leaf);
    if (::mkfifo(p.c_str(), 0600) != 0)
      throw std::runtime_error("mkfifo " + p + ": " + std::strerror(errno));
    return p;
  }
};

// The bound is the one constant of core/io.h, and every reader obeys it.
TEST_F(IoBound, RegularFilesAboveTheBoundAreRefusedFromTheirSize) {
  const std::uint64_t over = attnlab::kMaxInputFileBytes + 1;
  const std::string csv = sparse_file(path("huge.csv"), over);
  const std::string npy = sparse_file(path("huge.npy"), over);
  const std::string tokens = sparse_file(path("huge.txt"), over);
  const std::string expected = ": the file has " + std::to_string(over) +
                               " bytes (1024.000001 MiB), more than 1024 MiB (the largest input a "
                               "problem can have); not read";
  EXPECT_EQ(error_of([&] { attnlab::read_matrix(csv); }), csv + expected);
  EXPECT_EQ(error_of([&] { attnlab::read_matrix(npy); }), npy + expected);
  EXPECT_EQ(error_of([&] { attnlab::read_mask(npy); }), npy + expected);
  EXPECT_EQ(error_of([&] { attnlab::read_tokens_file(tokens); }), tokens + expected);
}

TEST_F(IoBound, RegularFilesUpToTheBoundAreRead) {
  const std::string p = write("small.csv", std::string(100, '1'));
  EXPECT_EQ(attnlab::read_input_file(p, 100), std::string(100, '1'));
  EXPECT_EQ(attnlab::read_input_file(p, 101), std::string(100, '1'));
  EXPECT_EQ(error_of([&] { attnlab::read_input_file(p, 99); }),
            p + ": the file has 100 bytes, more than 99 bytes (the largest input a "
                "problem can have); not read");
  const std::string empty = write("empty.csv", "");
  EXPECT_EQ(attnlab::read_input_file(empty, 0), "");
}

// /dev/zero never ends: it is read to one byte past the bound, no further.
TEST_F(IoBound, EndlessCharacterDeviceIsRefusedAtTheBound) {
  EXPECT_EQ(error_of([] { attnlab::read_input_file("/dev/zero", 1 << 20); }),
            "/dev/zero: more than 1 MiB (the largest input a problem can have); not read further");
}

// A FIFO fed forever is refused once it passes the bound, and the reader closing its end stops
// the writer: the reader did not wait for an end that never comes.
TEST_F(IoBound, EndlessFifoIsRefusedAtTheBound) {
  const std::string p = fifo("q.csv");
  std::string line;
  for (int i = 0; i < 4096; ++i) line += "1,2,3\n";
  FifoWriter writer(p, line);
  constexpr std::uint64_t kLimit = 1 << 20;
  EXPECT_EQ(error_of([&] { attnlab::read_input_file(p, kLimit); }),
            p + ": more than 1 MiB (the largest input a problem can have); not read further");
  writer.join();
  EXPECT_GT(writer.written(), kLimit);
}

// Bytes that cannot be the format end the read at once, whatever the bound: a NUL byte is no CSV
// or text (the offset is named, also past the first 64 KiB read), and a .npy starts with its
// magic; an endless device is refused at its first bytes instead of after the bound.
TEST_F(IoBound, InputThatCannotBeTheFormatIsRefusedAtItsFirstWrongBytes) {
  EXPECT_EQ(error_of([] { attnlab::read_input_file("/dev/zero", attnlab::InputFormat::Text); }),
            "/dev/zero: byte 0 is a NUL byte, so this is no CSV or text file (binary data?); not read further");
  EXPECT_EQ(error_of([] { attnlab::read_input_file("/dev/zero", attnlab::InputFormat::Npy); }),
            "/dev/zero: not a .npy file (it does not start with the magic \\x93NUMPY)");
  std::string text(70000, '1');
  text[69999] = '\0';
  const std::string late = write("late.csv", text);
  EXPECT_EQ(error_of([&] { attnlab::read_matrix(late); }),
            late + ": byte 69999 is a NUL byte, so this is no CSV or text file (binary data?); not read further");
  // The same bytes are read as they are when nothing is asked of them.
  EXPECT_EQ(attnlab::read_input_file(late).size(), 70000u);
  // A .npy is judged by its magic as soon as its first bytes come, one at a time from a FIFO too.
  const std::string p = fifo("slow.npy");
  FifoWriter writer(p, "\x93NUMQ", 1);
  EXPECT_EQ(error_of([&] { attnlab::read_matrix(p); }), p + ": not a .npy file (it does not start with the magic \\x93NUMPY)");
  writer.join();
}

// A FIFO that ends below the bound is an ordinary input (process substitution, a pipe).
TEST_F(IoBound, FiniteFifoIsRead) {
  const std::string p = fifo("q.csv");
  FifoWriter writer(p, "1,2\n3,4\n", 3);
  const MatrixF m = attnlab::read_matrix(p);
  writer.join();
  ASSERT_EQ(m.rows(), 6);
  ASSERT_EQ(m.cols(), 2);
  EXPECT_EQ(m(5, 1), 4.0f);
}

// A .npy under a name that does not say so (a pipe's /dev/stdin, a FIFO, a file renamed) is known
// by its magic; a mask too. Text under such a name is still CSV.
TEST_F(IoBound, ANpyUnderAnotherNameIsKnownByItsMagic) {
  const MatrixF m = rows_of({{1, 2}, {3, 4}});
  const std::string npy = path("m.npy");
  attnlab::write_npy(npy, m);
  const std::string bytes = attnlab::read_input_file(npy);
  const std::string p = fifo("q");
  FifoWriter writer(p, bytes, 1);
  expect_bit_equal(attnlab::read_matrix(p), m);
  writer.join();
  expect_bit_equal(attnlab::read_matrix(write("renamed.csv", bytes)), m);
  const MatrixF mask = rows_of({{0, -std::numeric_limits<float>::infinity()}});
  attnlab::write_npy(npy, mask);
  expect_bit_equal(attnlab::read_mask(write("mask", attnlab::read_input_file(npy))), mask);
  expect_bit_equal(attnlab::read_matrix(write("plain", "1,2\n3,4\n")), m);
}

// A FIFO of exactly the bound is accepted; one byte more is not.
TEST_F(IoBound, FifoAtTheBoundIsReadAndOneByteMoreIsNot) {
  const std::string at = fifo("at.txt");
  FifoWriter exact(at, std::string(1000, 'a'), 10);
  EXPECT_EQ(attnlab::read_input_file(at, 10000).size(), 10000u);
  exact.join();
  const std::string over = fifo("over.txt");
  FifoWriter one_more(over, std::string(10001, 'a'), 1);
  EXPECT_NE(error_of([&] { attnlab::read_input_file(over, 10000); }).find("not read further"),
            std::string::npos);
  one_more.join();
}

// ---- writing: atomic, or nothing ---------------------------------------------------------------

// The files of a folder, sorted (what a failed write must not have added to).
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(IoFiles, AWriteReplacesTheFileWholeAndLeavesNothingBeside) {
  const std::string p = write("out.csv", "old\n");
  ::chmod(p.c_str(), 0640);
  attnlab::write_file(p, "new\n");
  EXPECT_EQ(attnlab::read_input_file(p), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "a replaced file keeps its permissions";
  EXPECT_EQ(listing(dir()), std::vector<std::string>{"out.csv"}) << "no temporary file left";
  // Through a symbolic link: the file it names is replaced, the link stays.
  const std::string link = path("link.csv");
  std::filesystem::create_symlink(p, link);
  attnlab::write_file(link, "via link\n");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(attnlab::read_input_file(p), "via link\n");
}

// A write that fails says why and leaves neither a partial file nor a changed old one: a full
// device, a folder given as the file, a missing folder, and a disk that fills half-way (a file
// size limit of 1000 bytes, SIGXFSZ ignored, in this test's own process).
TEST_F(IoFiles, AFailedWriteLeavesNoPartialFileAndTheOldOneUnchanged) {
  EXPECT_EQ(error_of([] { attnlab::write_file("/dev/full", "x"); }),
            "cannot write '/dev/full': No space left on device");
  EXPECT_EQ(error_of([&] { attnlab::write_file(dir(), "x"); }), "cannot write '" + dir() + "': Is a directory");
  const std::string missing = path("no/such/folder/out.csv");
  EXPECT_EQ(error_of([&] { attnlab::write_file(missing, "x"); }),
            "cannot write '" + missing + "': No such file or directory");
  const std::string p = write("keep.csv", "old\n");
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = error_of([&] { attnlab::write_file(p, std::string(5000, '1')); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(e, "cannot write '" + p + "': File too large");
  EXPECT_EQ(attnlab::read_input_file(p), "old\n");
  EXPECT_EQ(listing(dir()), std::vector<std::string>{"keep.csv"});
}

// ---- the tests' own temporary directory ---------------------------------------------------------

TEST(IoTempDir, IsFreshAndGoesAwayWithItsContents) {
  std::filesystem::path a_path, b_path;
  {
    const attnlab::test::TempDir a("attnlab-io"), b("attnlab-io");
    a_path = a.path();
    b_path = b.path();
    EXPECT_NE(a_path, b_path);
    EXPECT_TRUE(std::filesystem::equivalent(a_path.parent_path(),
                                            std::filesystem::temp_directory_path()))
        << a_path;
    EXPECT_EQ(a_path.filename().string().rfind("attnlab-io-", 0), 0u) << a_path;
    ASSERT_TRUE(std::filesystem::is_directory(a_path));
    EXPECT_TRUE(std::filesystem::is_empty(a_path));
    EXPECT_EQ(a.file("x.csv"), (a_path / "x.csv").string());
    std::filesystem::create_directories(a_path / "sub" / "deeper");
    attnlab::test::write_file(a.file("x.csv"), "1,2\n");
    attnlab::test::write_file(a_path / "sub" / "deeper" / "y.npy", "bytes");
    ASSERT_TRUE(std::filesystem::exists(a_path / "sub" / "deeper" / "y.npy"));
  }
  EXPECT_FALSE(std::filesystem::exists(a_path)) << a_path;
  EXPECT_FALSE(std::filesystem::exists(b_path)) << b_path;
}

}  // namespace
