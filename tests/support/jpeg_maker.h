#pragma once

// Test data made at run time: synthetic photographs, JPEGs of them with any encoder
// option, small valid files of other formats, and PSNR for comparing decode paths.
//
// SyntheticPhoto content compresses like a photograph (smooth gradients, a few soft blobs
// and edges, mild low-amplitude texture), so JPEG artefacts stay small and two decode
// paths of the same file (full vs. DCT-scaled, ROI vs. whole) can be compared by PSNR.
// Everything is a pure function of its arguments: the same seed gives the same bytes.
//
// Note: inside namespace tilefeed, `testing::Test` names this namespace; write
// `::testing::Test` for GoogleTest's.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::testing {

// Interleaved width x height x channels pixels, rows packed. channels: 1 (gray), 3 (RGB)
// or 4 (CMYK in Adobe's inverted convention, C * K / 255 ~ R, as EncodeJpeg expects).
// REQUIRES: width, height > 0; channels is 1, 3 or 4.
std::vector<std::uint8_t> SyntheticPhoto(int width, int height, int channels, std::uint64_t seed);

// A JPEG of SyntheticPhoto(width, height, channels, seed) encoded with `options`
// (for channels == 4 set options.jpeg_color_space to kCmyk or kYcck).
// Throws codecs::EncodeError for options the encoder refuses.
std::vector<std::byte> MakeJpeg(int width, int height, const codecs::EncodeOptions& options,
                                std::uint64_t seed = 1, int channels = 3);

// A JPEG of SyntheticPhoto(width, height, 3, seed) encoded by libjpeg with luma sampling
// factors h_samp x v_samp and 1x1 chroma: sampling EncodeOptions cannot express, e.g.
// 4x2 (4:1:0) and 2x4. REQUIRES: 1 <= h_samp, v_samp <= 4.
std::vector<std::byte> MakeJpegSampled(int width, int height, int h_samp, int v_samp,
                                       std::uint64_t seed = 1, int quality = 92);

// A whole image decoded by libjpeg alone at scale n/8, with the accurate DCT and fancy
// upsampling, no crop and no skipped rows: the pixels a crop decode at that scale must
// reproduce. RGB, rows packed. REQUIRES: a valid 8-bit JPEG (gray, YCbCr or RGB);
// 1 <= n <= 8.
struct ScaledImage {
  std::vector<std::uint8_t> pixels;
  int width = 0;
  int height = 0;
};
ScaledImage DecodeScaledWithLibjpeg(std::span<const std::byte> jpeg, int n);

// A valid RGB PNG (zlib stored blocks, correct CRCs and Adler-32) of a gradient.
std::vector<std::byte> MakePngBytes(int width = 8, int height = 8);
// CRC-32 as PNG chunks (and zlib) define it.
std::uint32_t PngCrc32(const std::byte* data, std::size_t n);
// A valid 1x1 GIF89a.
std::vector<std::byte> MakeGifBytes();
// A valid 2x2 24-bit BMP.
std::vector<std::byte> MakeBmpBytes();
// Plain ASCII text, a frequent stray file in image folders.
std::vector<std::byte> MakeTextBytes();

// Peak signal-to-noise ratio in dB of two n-byte uint8 buffers; +infinity when they are
// equal. REQUIRES: n > 0.
// A named encoding for table-driven tests: every encoding the decoder meets.
struct NamedEncoding {
  const char* name;
  codecs::EncodeOptions options;
  int channels = 3;
};

// 4:2:0, 4:2:2, 4:4:4, 4:4:0, 4:1:1, gray, CMYK, YCCK, RGB, progressive (two), restart
// markers (two), optimized tables and, with `arithmetic`, arithmetic coding.
std::vector<NamedEncoding> CommonEncodings(int quality, bool arithmetic = true);

double Psnr(const std::uint8_t* a, const std::uint8_t* b, std::size_t n);

}  // namespace tilefeed::testing
