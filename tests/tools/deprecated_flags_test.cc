// Old spellings of options (tools/deprecated_flags.h): the same value as the new option, one
// warning line after a successful parse, none for the new spelling, a bad value refused
// like the new option's before any warning, and --help listing the old spellings apart.

#include "tools/deprecated_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace tilefeed::tools {
namespace {

using ::testing::HasSubstr;

// A tool with --timeout SECONDS (old: --timeout-ms) and --slice TEXT (old: --shard).
struct Tool {
  CLI::App app{"test"};
  DeprecatedFlags deprecated;
  double timeout = 5;
  std::string slice;

  Tool() {
    CLI::Option* seconds = app.add_option("--timeout", timeout, "seconds")->check(AtLeast(0.001));
    deprecated.AddMilliseconds(app, seconds, "--timeout-ms", timeout);
    const CLI::Validator slash(
        [](std::string& text) -> std::string {
          return text.find('/') == std::string::npos ? "must be INDEX/COUNT" : "";
        },
        "INDEX/COUNT");
    CLI::Option* current = app.add_option("--slice", slice, "INDEX/COUNT")->check(slash);
    deprecated.AddAlias(app, current, "--shard", slice, slash);
  }

  // ParseArgs's exit code (nullopt: parsed), and what parsing and Warn() wrote on stderr.
  std::pair<std::optional<int>, std::vector<std::string>> Run(std::vector<const char*> args) {
    args.insert(args.begin(), "tool");
    ::testing::internal::CaptureStderr();
    const std::optional<int> rc =
        ParseArgs(app, static_cast<int>(args.size()), args.data(), "tool");
    if (!rc) deprecated.Warn("tool");
    const std::string err = ::testing::internal::GetCapturedStderr();
    std::vector<std::string> lines;
    for (std::size_t begin = 0; begin < err.size();) {
      const std::size_t end = err.find('\n', begin);
      lines.push_back(err.substr(begin, end - begin));
      begin = end == std::string::npos ? err.size() : end + 1;
    }
    return {rc, lines};
  }
};

TEST(DeprecatedFlags, TheOldSpellingSetsTheSameValueAndWarnsOnce) {
  Tool old_spelling;
  const auto [rc, lines] = old_spelling.Run({"--timeout-ms", "2500", "--shard", "1/2"});
  ASSERT_FALSE(rc);
  Tool new_spelling;
  const auto [new_rc, new_lines] = new_spelling.Run({"--timeout", "2.5", "--slice", "1/2"});
  ASSERT_FALSE(new_rc);
  EXPECT_EQ(old_spelling.timeout, new_spelling.timeout);
  EXPECT_EQ(old_spelling.timeout, 2.5);
  EXPECT_EQ(old_spelling.slice, new_spelling.slice);
  EXPECT_TRUE(new_lines.empty()) << new_lines.front();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "tool: warning: --timeout-ms is deprecated; use --timeout 2.5 (seconds)");
  EXPECT_EQ(lines[1], "tool: warning: --shard is deprecated; use --slice 1/2");
}

TEST(DeprecatedFlags, ABadOldValueIsRefusedLikeTheNewOneWithoutAWarning) {
  Tool tool;
  const auto [rc, lines] = tool.Run({"--timeout-ms", "0"});
  EXPECT_EQ(rc, 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "tool: --timeout-ms must be at least 1, got 0");
  Tool shard;
  const auto [shard_rc, shard_lines] = shard.Run({"--shard", "3"});
  EXPECT_EQ(shard_rc, 2);
  ASSERT_EQ(shard_lines.size(), 1u);
  EXPECT_THAT(shard_lines[0], HasSubstr("--shard must be INDEX/COUNT"));
}

TEST(DeprecatedFlags, BothSpellingsAtOnceAreRefused) {
  Tool tool;
  const auto [rc, lines] = tool.Run({"--timeout-ms", "100", "--timeout", "1"});
  EXPECT_EQ(rc, 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("excludes"));
}

TEST(DeprecatedFlags, HelpListsTheOldSpellingsApart) {
  Tool tool;
  const std::string help = tool.app.help();
  const std::size_t apart = help.find(DeprecatedFlags::kGroup);
  ASSERT_NE(apart, std::string::npos) << help;
  EXPECT_GT(help.find("--timeout-ms"), apart) << help;
  EXPECT_GT(help.find("--shard"), apart) << help;
  EXPECT_LT(help.find("--timeout "), apart) << help;
}

}  // namespace
}  // namespace tilefeed::tools
