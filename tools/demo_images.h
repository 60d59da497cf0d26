#pragma once

// The demo dataset's images: each class is one visual concept (a shape in a dominant
// hue) drawn at a random position, size and rotation over a random gradient background
// with clutter and noise, then JPEG-encoded with a randomly chosen but realistic set of
// options. A small classifier learns the classes in a few epochs; a loader meets varied
// sizes, aspect ratios, subsamplings and progressive files.
//
// Every function is pure: the same arguments give byte-identical output on any thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tilefeed::tools {

struct DemoClass {
  std::string name;  // folder name, e.g. "c00_red_circle"; sorted names = label order
  int shape = 0;     // index into the shape table
  double hue = 0;    // dominant hue in degrees
};

// How many distinct classes (shape x hue pairs) exist.
int MaxDemoClasses();

// The first `count` classes. Consecutive classes differ in both shape and hue, so a
// model cannot get far on either cue alone. REQUIRES: 1 <= count <= MaxDemoClasses().
std::vector<DemoClass> DemoClasses(int count);

// The JPEG for one image of `demo_class`; `seed` picks everything that varies.
std::vector<std::byte> MakeDemoJpeg(const DemoClass& demo_class, std::uint64_t seed);

// Mixes the dataset seed with an image's coordinates into that image's seed.
std::uint64_t DemoImageSeed(std::uint64_t dataset_seed, int split, int class_index, int index);

}  // namespace tilefeed::tools
