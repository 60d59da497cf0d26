// index_bench: how long ImageFolder::Open takes to index an ImageNet-sized tree.
//
//   index_bench --make-tree /tmp/inet --files 1281167 --classes 1000   # build a tree
//   index_bench /tmp/inet                                               # time indexing
//   rm -rf /tmp/inet                                                    # 1.28 M inodes
//
// The tree holds empty files named like ImageNet's (n00000042/n00000042_17.JPEG): the
// indexer reads directories, never file contents, so sizes do not matter. Timing runs
// Open() --runs times with the page cache warm from the previous run and prints the
// first (coldest) run and the median; with --serial it also times a one-thread TBB arena
// in the same process and prints the parallel speed-up as a ratio.

#include <fcntl.h>
#include <sys/stat.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loader/image_folder.h"
#include "tools/cli_checks.h"

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Takes errno by value, read before any string is built.
std::string ErrorText(const char* operation, const std::string& path, int error) {
  return std::string(operation) + " " + path + ": " + std::strerror(error);
}

// Creates `files` empty files spread evenly over `classes` class directories, with
// `threads` threads each taking whole classes.
void MakeTree(const std::string& root, long files, int classes, int threads) {
  if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error(ErrorText("mkdir", root, errno));
  }
  const int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) throw std::runtime_error(ErrorText("open", root, errno));
  std::atomic<int> next_class{0};
  std::atomic<bool> failed{false};
  std::string first_error;  // written only by the thread that set `failed`
  {
    std::vector<std::jthread> workers;
    workers.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        char name[64];
        for (int c = next_class++; c < classes && !failed; c = next_class++) {
          const long count = files / classes + (c < files % classes ? 1 : 0);
          char class_name[16];
          std::snprintf(class_name, sizeof(class_name), "n%08d", c);
          if (::mkdirat(root_fd, class_name, 0755) != 0 && errno != EEXIST) {
            const int error = errno;
            if (!failed.exchange(true)) first_error = ErrorText("mkdir", class_name, error);
            return;
          }
          const int class_fd = ::openat(root_fd, class_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
          for (long i = 0; i < count && class_fd >= 0; ++i) {
            std::snprintf(name, sizeof(name), "%s_%ld.JPEG", class_name, i);
            const int fd = ::openat(class_fd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
            if (fd < 0) {
              const int error = errno;
              if (!failed.exchange(true)) first_error = ErrorText("create", name, error);
              break;
            }
            ::close(fd);
          }
          if (class_fd >= 0) ::close(class_fd);
        }
      });
    }
  }
  ::close(root_fd);
  if (failed) throw std::runtime_error(first_error);
}

struct Timing {
  double first_s = 0;
  double median_s = 0;
  std::size_t files = 0;
  std::size_t classes = 0;
  std::size_t warnings = 0;
};

Timing TimeOpen(const std::string& root, int threads, int runs) {
  tbb::task_arena arena(threads);
  std::vector<double> seconds;
  Timing timing;
  for (int r = 0; r < runs; ++r) {
    arena.execute([&] {
      const auto start = Clock::now();
      const auto folder = tilefeed::loader::ImageFolder::Open(root);
      seconds.push_back(SecondsSince(start));
      timing.files = folder->size();
      timing.classes = folder->class_names().size();
      timing.warnings = folder->warnings().size();
    });
  }
  timing.first_s = seconds.front();
  std::sort(seconds.begin(), seconds.end());
  timing.median_s = seconds[seconds.size() / 2];
  return timing;
}

void Print(const char* label, int threads, const Timing& t) {
  std::printf(
      "%-8s threads=%d files=%zu classes=%zu warnings=%zu first=%.3fs median=%.3fs "
      "(%.0f files/s)\n",
      label, threads, t.files, t.classes, t.warnings, t.first_s, t.median_s,
      static_cast<double>(t.files) / t.median_s);
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  CLI::App app{
      "Times ImageFolder::Open on a class-per-directory image tree, or makes such a tree "
      "of empty files (--make-tree)."};
  std::string root;
  std::string make_tree;
  long files = 1281167;
  int classes = 1000;
  int runs = 3;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool serial = false;
  app.add_option("root", root, "Tree to index: ROOT/<class>/<file>.JPEG");
  app.add_option("--make-tree", make_tree,
                 "Create a tree of empty files in this directory and exit (delete it "
                 "afterwards: it uses one inode per file)");
  app.add_option("--files", files, "Files to create with --make-tree (ImageNet train: 1281167)")
      ->capture_default_str()
      ->check(tilefeed::tools::AtLeast(1));
  app.add_option("--classes", classes, "Class directories to create with --make-tree")
      ->capture_default_str()
      ->check(tilefeed::tools::AtLeast(1));
  app.add_option("--runs", runs, "Timed Open() calls; the median is reported")
      ->capture_default_str()
      ->check(tilefeed::tools::AtLeast(1));
  app.add_option("--threads", threads, "Threads for indexing (TBB arena) and --make-tree")
      ->capture_default_str()
      ->check(tilefeed::tools::Between(1, 1024));
  app.add_flag("--serial", serial, "Also time a one-thread arena and print the speed-up");
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "index_bench")) return *rc;
  if (root.empty() == make_tree.empty()) {
    std::fprintf(stderr, "give exactly one of ROOT or --make-tree DIR (see --help)\n");
    return 2;
  }

  try {
    if (!make_tree.empty()) {
      const auto start = Clock::now();
      MakeTree(make_tree, files, classes, threads);
      std::printf("made %ld files in %d classes under %s in %.1fs\n", files, classes,
                  make_tree.c_str(), SecondsSince(start));
      return 0;
    }
    const Timing parallel = TimeOpen(root, threads, runs);
    Print("parallel", threads, parallel);
    if (serial) {
      const Timing one = TimeOpen(root, 1, runs);
      Print("serial", 1, one);
      std::printf("speed-up (serial median / parallel median): %.2fx\n",
                  one.median_s / parallel.median_s);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "index_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "index_bench: %s\n", e.what());
    return 1;
  }
}
