// The kernels' configuration switches (kernels/tile_config.h: ATTNLAB_FUSED_CONFIG,
// ATTNLAB_STAGED_CONFIG), parsed on the host: valid values pick the index, anything else is
// refused with the variable, the value and the valid range.
#include "kernels/tile_config.h"

#include "core/types.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

constexpr const char* kVar = "ATTNLAB_TEST_TILE_CONFIG";

int parse(const char* value, int count) {
  if (value == nullptr)
    unsetenv(kVar);
  else
    setenv(kVar, value, 1);
  return attnlab::cuda::config_from_env(kVar, count);
}

TEST(TileConfig, UnsetEmptyAndZeroMeanTheDefault) {
  EXPECT_EQ(parse(nullptr, 3), 0);
  EXPECT_EQ(parse("", 3), 0);
  EXPECT_EQ(parse("0", 3), 0);
}

TEST(TileConfig, ValidNumbersPickThatConfiguration) {
  EXPECT_EQ(parse("1", 3), 1);
  EXPECT_EQ(parse("2", 3), 2);
  EXPECT_EQ(parse("06", 7), 6);
}

TEST(TileConfig, AnythingElseIsRefusedWithTheRange) {
  for (const char* bad : {"3", "-1", "1x", " 1", "1.0", "fast", "0001"}) {
    try {
      parse(bad, 3);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const attnlab::InputError& e) {
      EXPECT_EQ(std::string(e.what()), std::string(kVar) + "=" + bad +
                                           ": unknown configuration; valid: 0..2");
    }
  }
  unsetenv(kVar);
}

}  // namespace
