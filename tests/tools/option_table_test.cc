// The tools' shared options agree with the table (loader/option_specs.h): for every
// tool in $TILEFEED_OPTION_TOOLS (NAME=PATH,NAME=PATH...) and every shared flag its --help
// lists, the help line carries the table's help text, its choices and its default, and the tool
// refuses a value just outside the table's range with the table's words:
// "NAME: --flag must be RANGE, got VALUE", exit code 2. A tool that starts from another default
// on purpose says so in ExpectedDefault below. The same holds for each key of a group flag
// (--remote cache-limit=...) that a tool's --help lists under it.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "loader/option_specs.h"

namespace tilefeed::loader {
namespace {

// The default `tool` shows for `spec`: the table's, unless the tool starts from another on
// purpose ("" when it shows none).
std::string ExpectedDefault(const std::string& tool, const OptionSpec& spec) {
  static const std::map<std::pair<std::string, std::string>, std::string> kToolDefaults = {
      {{"train", "--batch-size"}, "32"},
      {{"tilefeed-serve", "--batch-size"}, "32"},
      {{"loader_bench", "--split"}, ""},  // none: val with --mode eval, else train
      {{"loader_bench", "--epochs"}, "1"},
  };
  const auto special = kToolDefaults.find({tool, std::string(spec.flag)});
  return special != kToolDefaults.end() ? special->second : std::string(spec.default_text);
}

struct Output {
  int status = -1;
  std::string text;
};

// Runs `command` under /bin/sh; `text` is what it wrote to its standard output.
Output RunShell(const std::string& command) {
  Output out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.text.append(buffer, n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string Quote(const std::string& text) { return "'" + text + "'"; }

std::vector<std::pair<std::string, std::string>> Tools() {
  std::vector<std::pair<std::string, std::string>> tools;
  const char* list = std::getenv("TILEFEED_OPTION_TOOLS");
  std::stringstream in(list != nullptr ? list : "");
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t eq = item.find('=');
    if (eq != std::string::npos) tools.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return tools;
}

// An option as CLI11 2.1's --help lists it: "  --flag TYPE:CHECK=DEFAULT  help", the help on
// the next line when the first is long.
struct HelpEntry {
  std::string head;  // "--flag TYPE:CHECK=DEFAULT"; empty when the tool has no such option
  std::string help;
};

HelpEntry FindHelp(const std::string& help, std::string_view flag) {
  std::stringstream in(help);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t begin = line.find_first_not_of(' ');
    if (begin == std::string::npos || line[begin] != '-') continue;
    std::stringstream names(line.substr(begin, line.find(' ', begin) - begin));
    std::string name;
    bool found = false;
    while (std::getline(names, name, ',')) found = found || name == flag;
    if (!found) continue;
    HelpEntry entry;
    const std::size_t gap = line.find("  ", begin);
    if (gap != std::string::npos) {
      entry.head = line.substr(begin, gap - begin);
      entry.help = line.substr(line.find_first_not_of(' ', gap));
      return entry;
    }
    std::string next;
    // CLI11 pads the head to column 30: a head ending at column 29 leaves one space before
    // the help; a longer head has its help on the next line.
    constexpr std::size_t kColumn = 30;
    const bool more = static_cast<bool>(std::getline(in, next));
    const std::size_t indent = more ? next.find_first_not_of(' ') : std::string::npos;
    if (indent != std::string::npos && indent >= kColumn) {
      entry.head = line.substr(begin);
      entry.help = next.substr(indent);
    } else if (line.size() > kColumn) {
      entry.head = line.substr(begin, kColumn - 1 - begin);
      entry.help = line.substr(kColumn);
    } else {
      entry.head = line.substr(begin);
    }
    return entry;
  }
  return {};
}

// Values just outside the spec's range, as a command line writes them.
std::vector<std::string> OutOfRange(const OptionSpec& spec) {
  std::vector<std::string> values;
  const auto text = [](double v) {
    std::ostringstream out;
    out << std::setprecision(15) << v;
    return out.str();
  };
  const bool whole = spec.kind == OptionKind::kInteger || spec.kind == OptionKind::kSize;
  const double step = whole ? 1 : spec.min == 0 ? 0.5 : spec.min / 2;
  if (spec.min_exclusive) {
    values.push_back(text(spec.min));
  } else if (!(whole && spec.min == 0 && spec.kind == OptionKind::kSize)) {
    values.push_back(text(spec.min - step));
  }
  if (spec.max != kNoMax) values.push_back(text(spec.max + (whole ? 1 : spec.max / 2)));
  return values;
}

void CheckOption(const std::string& name, const std::string& path, const HelpEntry& entry,
                 const OptionSpec& spec) {
  SCOPED_TRACE(name + " " + std::string(spec.flag) + ": " + entry.head + " | " + entry.help);
  EXPECT_NE(entry.help.find(spec.help), std::string::npos) << "help differs from the table's";
  for (std::string_view choice : spec.choices) {
    EXPECT_NE(entry.head.find(choice), std::string::npos) << "choice " << choice << " missing";
  }
  const std::string expected = ExpectedDefault(name, spec);
  if (!expected.empty() && spec.kind != OptionKind::kFlag) {
    std::string head = entry.head.substr(0, entry.head.find(" Excludes"));
    head = head.substr(0, head.find(" REQUIRED"));
    const std::size_t eq = head.rfind('=');
    ASSERT_NE(eq, std::string::npos) << "no default shown";
    EXPECT_EQ(head.substr(eq + 1), expected);
  }
  if (spec.kind == OptionKind::kChoice || spec.kind == OptionKind::kFlag ||
      spec.kind == OptionKind::kText || spec.kind == OptionKind::kSlice) {
    return;
  }
  const std::string flag(spec.flag);
  for (const std::string& value : OutOfRange(spec)) {
    const Output out = RunShell(Quote(path) + " " + flag + " " + Quote(value) + " 2>&1 >/dev/null");
    EXPECT_EQ(out.status, 2) << out.text;
    // --image-size takes a schedule, whose parser quotes the text it refuses.
    std::string expected = name;
    expected.append(": ").append(flag);
    if (spec.flag == kImageSize.flag) expected.append(": '").append(value).append("': size");
    expected.append(" must be ").append(RangeText(spec)).append(", got ").append(value);
    EXPECT_EQ(out.text, expected.append("\n"));
  }
}

// A group flag's key as --help lists it under the flag: "  KEY (RANGE, default D): HELP".
std::string FindKeyHelp(const std::string& help, std::string_view flag, std::string_view key) {
  const HelpEntry group = FindHelp(help, flag);
  if (group.head.empty()) return {};
  std::stringstream in(help.substr(help.find(std::string("  ") + std::string(flag) + " ")));
  std::string line;
  std::getline(in, line);  // the flag's own line
  while (std::getline(in, line)) {
    const std::size_t begin = line.find_first_not_of(' ');
    if (begin == std::string::npos || line[begin] == '-') break;  // the next flag
    if (line.compare(begin, key.size() + 1, std::string(key) + " ") == 0 ||
        line.compare(begin, key.size() + 1, std::string(key) + ":") == 0) {
      return line.substr(begin);
    }
  }
  return {};
}

// Each key of a group flag the tool takes: its help line carries the spec's range, default
// and help, and a value just outside the range is refused with the table's words,
// "NAME: --group KEY must be RANGE, got VALUE".
void CheckGroupKey(const std::string& name, const std::string& path, const OptionGroup& group,
                   const OptionGroupKey& key, const std::string& line) {
  const OptionSpec& spec = key.spec;
  SCOPED_TRACE(name + " " + std::string(group.flag) + " " + std::string(key.key) + ": " + line);
  EXPECT_NE(line.find(spec.help), std::string::npos) << "help differs from the table's";
  const std::string range = RangeText(spec);
  if (!range.empty()) {
    EXPECT_NE(line.find("(" + range), std::string::npos) << "no range";
  }
  if (!spec.default_text.empty()) {
    EXPECT_NE(line.find("default " + std::string(spec.default_text)), std::string::npos)
        << "default differs from the table's";
  }
  for (std::string_view choice : spec.choices) {
    EXPECT_NE(line.find(choice), std::string::npos) << "choice " << choice << " missing";
  }
  if (range.empty() || spec.kind == OptionKind::kSize) return;
  const std::string prefix = std::string(group.flag) + " " + std::string(key.key);
  for (const std::string& value : OutOfRange(spec)) {
    std::string command = Quote(path);
    command.append(" ").append(group.flag).append(" ");
    command.append(Quote(std::string(key.key).append("=").append(value)))
        .append(" 2>&1 >/dev/null");
    const Output out = RunShell(command);
    EXPECT_EQ(out.status, 2) << out.text;
    std::string expected = name;
    expected.append(": ").append(prefix).append(" must be ").append(range);
    EXPECT_EQ(out.text, expected.append(", got ").append(value).append("\n"));
  }
}

TEST(OptionTable, ToolsShowAndCheckTheTablesGroups) {
  const auto tools = Tools();
  ASSERT_FALSE(tools.empty()) << "set TILEFEED_OPTION_TOOLS";
  for (const auto& [name, path] : tools) {
    const Output help = RunShell(Quote(path) + " --help 2>&1");
    ASSERT_EQ(help.status, 0) << name << ": " << help.text;
    for (const OptionGroup* group : kOptionGroups) {
      if (FindHelp(help.text, group->flag).head.empty()) continue;
      int keys = 0;
      for (const OptionGroupKey& key : group->keys) {
        const std::string line = FindKeyHelp(help.text, group->flag, key.key);
        if (line.empty()) continue;  // a driver may take some of a group's keys
        ++keys;
        CheckGroupKey(name, path, *group, key, line);
      }
      EXPECT_GT(keys, 0) << name << " " << group->flag << " lists none of its keys";
    }
  }
}

TEST(OptionTable, ToolsShowAndCheckTheTablesOptions) {
  const auto tools = Tools();
  ASSERT_FALSE(tools.empty()) << "set TILEFEED_OPTION_TOOLS";
  for (const auto& [name, path] : tools) {
    const Output help = RunShell(Quote(path) + " --help 2>&1");
    ASSERT_EQ(help.status, 0) << name << ": " << help.text;
    int shared = 0;
    for (const OptionSpec& spec : SharedOptions()) {
      const HelpEntry entry = FindHelp(help.text, spec.flag);
      if (!entry.head.empty()) {
        ++shared;
        const bool pack_workers = name == "tilefeed-pack" && spec.flag == kWorkers.flag;
        CheckOption(name, path, entry, pack_workers ? kPackWorkers : spec);
      }
    }
    EXPECT_GT(shared, 0) << name << " lists no shared option";
  }
}

}  // namespace
}  // namespace tilefeed::loader
