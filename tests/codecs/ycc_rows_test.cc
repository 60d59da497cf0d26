// The fused upsampling and colour kernel against libjpeg-turbo's arithmetic written out
// plainly from its C source (jdsample.c h2v2_fancy_upsample and h2v1_fancy_upsample, with
// their special first and last columns; jdcolor.c build_ycc_rgb_table and
// ycc_rgb_convert), not from the kernel's formulas. The coefficient-store tests compare
// whole decodes against libjpeg's own; these reach every width's tail and every value.

#include "codecs/ycc_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tilefeed::codecs::detail {
namespace {

using Row = std::vector<std::uint8_t>;

// jdcolor.c's tables: SCALEBITS 16, FIX(x) = (long)(x * 65536 + 0.5), ONE_HALF 1 << 15,
// RIGHT_SHIFT an arithmetic shift.
struct Tables {
  std::array<int, 256> cr_r{}, cb_b{};
  std::array<long, 256> cr_g{}, cb_g{};
  Tables() {
    // libjpeg's FIX macro as written (truncation after adding 0.5).
    const auto fix = [](double v) {
      return static_cast<long>(v * 65536 + 0.5);  // NOLINT(bugprone-incorrect-roundings)
    };
    for (int i = 0; i < 256; ++i) {
      const long x = i - 128;
      cr_r[i] = static_cast<int>((fix(1.40200) * x + 32768) >> 16);
      cb_b[i] = static_cast<int>((fix(1.77200) * x + 32768) >> 16);
      cr_g[i] = -fix(0.71414) * x;
      cb_g[i] = -fix(0.34414) * x + 32768;
    }
  }
};

std::uint8_t Clamp(long v) { return static_cast<std::uint8_t>(std::clamp(v, 0L, 255L)); }

// jdsample.c's h2v1 fancy upsampling of one row of `in` (in.size() samples, > 2).
Row H2v1(const Row& in) {
  Row out;
  const std::size_t n = in.size();
  out.push_back(in[0]);
  out.push_back(static_cast<std::uint8_t>((in[0] * 3 + in[1] + 2) >> 2));
  for (std::size_t x = 1; x + 1 < n; ++x) {
    out.push_back(static_cast<std::uint8_t>((in[x] * 3 + in[x - 1] + 1) >> 2));
    out.push_back(static_cast<std::uint8_t>((in[x] * 3 + in[x + 1] + 2) >> 2));
  }
  out.push_back(static_cast<std::uint8_t>((in[n - 1] * 3 + in[n - 2] + 1) >> 2));
  out.push_back(in[n - 1]);
  return out;
}

// jdsample.c's h2v2 fancy upsampling of one output row from its nearer and further rows.
Row H2v2(const Row& nearer, const Row& further) {
  Row out;
  const std::size_t n = nearer.size();
  std::vector<int> sum(n);
  for (std::size_t x = 0; x < n; ++x) sum[x] = nearer[x] * 3 + further[x];
  out.push_back(static_cast<std::uint8_t>((sum[0] * 4 + 8) >> 4));
  out.push_back(static_cast<std::uint8_t>((sum[0] * 3 + sum[1] + 7) >> 4));
  for (std::size_t x = 1; x + 1 < n; ++x) {
    out.push_back(static_cast<std::uint8_t>((sum[x] * 3 + sum[x - 1] + 8) >> 4));
    out.push_back(static_cast<std::uint8_t>((sum[x] * 3 + sum[x + 1] + 7) >> 4));
  }
  out.push_back(static_cast<std::uint8_t>((sum[n - 1] * 3 + sum[n - 2] + 8) >> 4));
  out.push_back(static_cast<std::uint8_t>((sum[n - 1] * 4 + 7) >> 4));
  return out;
}

Row Expected(ChromaSampling s, const Row& y, const Row& cb_near, const Row& cb_far,
             const Row& cr_near, const Row& cr_far, int width) {
  static const Tables kTables;
  Row cb = cb_near, cr = cr_near;
  if (s == ChromaSampling::k422) {
    cb = H2v1(cb_near);
    cr = H2v1(cr_near);
  } else if (s == ChromaSampling::k420) {
    cb = H2v2(cb_near, cb_far);
    cr = H2v2(cr_near, cr_far);
  }
  Row rgb;
  for (int x = 0; x < width; ++x) {
    const long luma = y[x];
    rgb.push_back(Clamp(luma + kTables.cr_r[cr[x]]));
    rgb.push_back(Clamp(luma + ((kTables.cb_g[cb[x]] + kTables.cr_g[cr[x]]) >> 16)));
    rgb.push_back(Clamp(luma + kTables.cb_b[cb[x]]));
  }
  return rgb;
}

// A plane row as the decoder lays it out: kYccRowSlack bytes of junk either side, and for
// the upsampled layouts the first and last samples repeated just outside.
struct Padded {
  std::vector<std::uint8_t> bytes;
  std::uint8_t* row;
  Padded(const Row& samples, bool repeat_ends, std::mt19937& rng)
      : bytes(samples.size() + 2 * kYccRowSlack) {
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    row = bytes.data() + kYccRowSlack;
    std::copy(samples.begin(), samples.end(), row);
    if (repeat_ends) {
      row[-1] = samples.front();
      row[samples.size()] = samples.back();
    }
  }
};

Row RandomRow(std::size_t n, std::mt19937& rng, int mode) {
  Row r(n);
  for (auto& b : r) {
    switch (mode) {
      case 0:  // anything
        b = static_cast<std::uint8_t>(rng());
        break;
      case 1:  // the extremes, where the clamps and the rounding edges are
        b = static_cast<std::uint8_t>(rng() % 2 ? (rng() % 4) : 252 + rng() % 4);
        break;
      default:  // smooth, as photographs are
        b = static_cast<std::uint8_t>(100 + rng() % 40);
    }
  }
  return r;
}

const char* Name(ChromaSampling s) {
  return s == ChromaSampling::k444 ? "4:4:4" : s == ChromaSampling::k422 ? "4:2:2" : "4:2:0";
}

TEST(YccRows, KernelMatchesLibjpegsArithmeticAtEveryWidth) {
  if (!YccKernelAvailable()) GTEST_SKIP() << "this CPU lacks AVX-512 BW + VBMI";
  std::mt19937 rng(7);
  for (const ChromaSampling s :
       {ChromaSampling::k444, ChromaSampling::k422, ChromaSampling::k420}) {
    const bool half = s != ChromaSampling::k444;
    for (int width = half ? 5 : 1; width <= 300; ++width) {
      for (int mode = 0; mode < 3; ++mode) {
        const std::size_t chroma = half ? (width + 1) / 2 : width;
        const Row y = RandomRow(width, rng, mode);
        const Row cbn = RandomRow(chroma, rng, mode), cbf = RandomRow(chroma, rng, mode);
        const Row crn = RandomRow(chroma, rng, mode), crf = RandomRow(chroma, rng, mode);
        const Padded py(y, false, rng), pcbn(cbn, half, rng), pcbf(cbf, half, rng),
            pcrn(crn, half, rng), pcrf(crf, half, rng);
        // Output bytes past the row's end must stay as they were.
        Row out(3 * static_cast<std::size_t>(width) + 64, 0xA5);
        YccToRgbRow(s, py.row, pcbn.row, pcbf.row, pcrn.row, pcrf.row, width, out.data());
        const Row want = Expected(s, y, cbn, cbf, crn, crf, width);
        ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin()))
            << Name(s) << " width " << width << " mode " << mode;
        ASSERT_TRUE(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(want.size()), out.end(),
                                [](std::uint8_t b) { return b == 0xA5; }))
            << Name(s) << " width " << width << ": wrote past the row";
      }
    }
  }
}

// Every (Y, Cb, Cr) triple through the 4:4:4 kernel: 256 Cb x 256 Cr rows of 256 pixels.
TEST(YccRows, EveryColourConvertsAsLibjpegsTablesDo) {
  if (!YccKernelAvailable()) GTEST_SKIP() << "this CPU lacks AVX-512 BW + VBMI";
  std::mt19937 rng(11);
  Row y(256);
  for (int i = 0; i < 256; ++i) y[i] = static_cast<std::uint8_t>(i);
  const Padded py(y, false, rng);
  Row out(std::size_t{3} * 256);
  for (int cb = 0; cb < 256; ++cb) {
    const Padded pcb(Row(256, static_cast<std::uint8_t>(cb)), false, rng);
    for (int cr = 0; cr < 256; ++cr) {
      const Row crs(256, static_cast<std::uint8_t>(cr));
      const Padded pcr(crs, false, rng);
      YccToRgbRow(ChromaSampling::k444, py.row, pcb.row, pcb.row, pcr.row, pcr.row, 256,
                  out.data());
      const Row want = Expected(ChromaSampling::k444, y, Row(256, static_cast<std::uint8_t>(cb)),
                                {}, crs, {}, 256);
      ASSERT_EQ(out, want) << "Cb " << cb << " Cr " << cr;
    }
  }
}

}  // namespace
}  // namespace tilefeed::codecs::detail
