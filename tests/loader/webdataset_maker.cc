#include "tests/loader/webdataset_maker.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "tests/support/jpeg_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::testing {
namespace {

namespace fs = std::filesystem;

// Reads <scratch>/members/<n>.<ext> as listed in <scratch>/list.txt ("key\text\tn" lines) and
// writes the shards as webdataset's TarWriter would.
constexpr const char* kScript = R"PY(
import io, sys, tarfile
scratch, pattern, per_shard, fmt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
formats = {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT, "ustar": tarfile.USTAR_FORMAT}
samples = []
for line in open(scratch + "/list.txt"):
    key, ext, n = line.rstrip("\n").split("\t")
    if not samples or samples[-1][0] != key:
        samples.append((key, []))
    samples[-1][1].append((ext, n))
for s in range(0, len(samples), per_shard):
    with tarfile.open(pattern % (s // per_shard), "w", format=formats[fmt]) as tar:
        for key, members in samples[s:s + per_shard]:
            for ext, n in sorted(members):
                data = open("%s/members/%s" % (scratch, n), "rb").read()
                info = tarfile.TarInfo(key + "." + ext)
                info.size, info.mtime, info.mode = len(data), 1700000000, 0o644
                info.uname, info.gname = "bigdata", "bigdata"
                tar.addfile(info, io.BytesIO(data))
)PY";

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::vector<fs::path> WriteWebDataset(const fs::path& scratch, const std::string& pattern,
                                      const std::vector<TarSample>& samples, std::size_t per_shard,
                                      const std::string& format) {
  fs::remove_all(scratch);
  fs::create_directories(scratch / "members");
  std::string list;
  int n = 0;
  for (const TarSample& s : samples) {
    for (const TarMember& m : s.members) {
      WriteFile(scratch / "members" / std::to_string(n), m.bytes);
      list += s.key + "\t" + m.extension + "\t" + std::to_string(n++) + "\n";
    }
  }
  WriteFile(scratch / "list.txt", std::as_bytes(std::span(list.data(), list.size())));
  const std::string_view script(kScript);
  WriteFile(scratch / "make_tars.py", std::as_bytes(std::span(script.data(), script.size())));
  const std::string command = std::string(TILEFEED_TEST_PYTHON) + " " +
                              Quote((scratch / "make_tars.py").string()) + " " +
                              Quote(scratch.string()) + " " + Quote(pattern) + " " +
                              std::to_string(per_shard) + " " + format;
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  std::vector<fs::path> out;
  for (std::size_t s = 0; s * per_shard < samples.size(); ++s) {
    char name[4096];
    std::snprintf(name, sizeof(name), pattern.c_str(), static_cast<int>(s));
    out.emplace_back(name);
  }
  return out;
}

std::vector<TarSample> MakeImageSamples(int count, int classes, const std::string& prefix) {
  std::vector<TarSample> out;
  for (int i = 0; i < count; ++i) {
    codecs::EncodeOptions o;
    o.progressive = i % 5 == 2;
    const std::string label = std::to_string(i % classes);
    out.push_back({prefix + "sample_" + std::to_string(i),
                   {{"cls", std::vector<std::byte>(
                                reinterpret_cast<const std::byte*>(label.data()),
                                reinterpret_cast<const std::byte*>(label.data()) + label.size())},
                    {"jpg", MakeJpeg(16 + (i * 13) % 40, 16 + (i * 7) % 30, o, i)}}});
  }
  return out;
}

}  // namespace tilefeed::testing
