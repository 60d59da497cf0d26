#include "loader/option_specs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "loader/list_source.h"
#include "tests/support/jpeg_maker.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/remote.h"

namespace tilefeed::loader {
namespace {

std::string Default(const OptionSpec& spec) { return std::string(spec.default_text); }

// The table's defaults are LoaderOptions' and RemoteOptions' own: a front end that shows the
// table's default runs with the library's.
TEST(OptionSpecs, DefaultsAreTheLibrarys) {
  const LoaderOptions o;
  EXPECT_EQ(Default(kBatchSize), std::to_string(o.batch_size));
  EXPECT_EQ(Default(kImageSize), o.image_size.text());
  EXPECT_EQ(Default(kMode), o.mode == Mode::kTrain ? "train" : "eval");
  EXPECT_EQ(Default(kEvalResize), std::to_string(o.eval_resize));
  EXPECT_EQ(Default(kDecodeScaling), "exact");
  EXPECT_EQ(o.jpeg.decode_scaling, codecs::DecodeScaling::kExact);
  EXPECT_EQ(ParseAugmentSpec(kAugment.default_text), o.augment);
  EXPECT_EQ(Default(kAugment), AugmentSpecText(o.augment));
  EXPECT_EQ(Default(kWorkers), std::to_string(o.workers));
  EXPECT_EQ(Default(kPrefetchDepth), std::to_string(o.prefetch_depth));
  EXPECT_EQ(Default(kSeed), std::to_string(o.seed));
  EXPECT_FALSE(o.drop_last_batch);
  EXPECT_EQ(Default(kBadSamplePolicy),
            o.bad_sample_policy == BadSamplePolicy::kSkip ? "skip" : "fail");
  EXPECT_EQ(Default(kMaxSubstituteAttempts), std::to_string(o.max_substitute_attempts));
  const RemoteOptions remote;
  EXPECT_EQ(ParseByteSize(kCacheLimit.default_text), remote.cache_limit);
  EXPECT_EQ(Default(kRemoteRetries), std::to_string(remote.retries));
  EXPECT_EQ(Default(kRemoteInFlight), std::to_string(remote.max_in_flight));
}

TEST(OptionSpecs, EveryEntryIsComplete) {
  std::set<std::string> flags;
  for (const OptionSpec& spec : SharedOptions()) {
    SCOPED_TRACE(std::string(spec.flag));
    EXPECT_EQ(spec.flag.substr(0, 2), "--");
    EXPECT_TRUE(flags.insert(std::string(spec.flag)).second) << "listed twice";
    EXPECT_FALSE(spec.help.empty());
    EXPECT_EQ(FindOption(spec.flag)->flag, spec.flag);
    if (!spec.keyword.empty()) {
      EXPECT_EQ(FindOption(spec.keyword)->flag, spec.flag);
    }
    if (spec.kind == OptionKind::kChoice) {
      EXPECT_FALSE(spec.choices.empty());
      EXPECT_THAT(spec.choices, ::testing::Contains(spec.default_text));
    }
    if (spec.kind == OptionKind::kSeconds && spec.default_text.size() > 0) {
      EXPECT_TRUE(InRange(spec, std::stod(std::string(spec.default_text))));
    }
  }
  EXPECT_EQ(FindOption("--no-such-option"), nullptr);
  EXPECT_EQ(FindOption("--shard"), nullptr);  // no old spellings: the project has no release
  ASSERT_NE(FindOption("slice"), nullptr);
  EXPECT_EQ(FindOption("slice")->flag, "--slice");
}

TEST(OptionSpecs, RangeTextAndProblems) {
  EXPECT_EQ(RangeText(kBatchSize), "at least 1");
  EXPECT_EQ(RangeText(kImageSize), "between 1 and 16384");
  EXPECT_EQ(RangeText(kPrefetchDepth), "auto or between 1 and 1048576");
  EXPECT_EQ(RangeText(kCpuShare), "above 0 and at most 1");
  EXPECT_EQ(RangeText(kEvalResize), "at least 1");
  EXPECT_EQ(RangeText(kCacheLimit), "at least 4MiB");
  EXPECT_EQ(RangeText(kHeartbeat), "between 0.001 and 3600");
  EXPECT_EQ(RangeText(kSplit), "");
  EXPECT_EQ(RangeProblem(kImageSize, "--image-size", 224), std::nullopt);
  EXPECT_EQ(RangeProblem(kImageSize, "--image-size", 0),
            "--image-size must be between 1 and 16384, got 0");
  EXPECT_EQ(RangeProblem(kEvalResize, "eval_resize", 0), "eval_resize must be at least 1, got 0");
  EXPECT_FALSE(InRange(kEvalResize, std::numeric_limits<double>::quiet_NaN()));
  OptionSpec above = kBatchSize;
  above.min = 0;
  above.min_exclusive = true;
  EXPECT_EQ(RangeText(above), "above 0");
  EXPECT_FALSE(InRange(above, 0));
  EXPECT_TRUE(InRange(above, 1e-9));
}

TEST(OptionSpecs, ParseByteSize) {
  EXPECT_EQ(ParseByteSize("10GiB"), std::uint64_t{10} << 30);
  EXPECT_EQ(ParseByteSize("512M"), std::uint64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("1g"), std::uint64_t{1} << 30);
  EXPECT_EQ(ParseByteSize("1000KB"), std::uint64_t{1000000});
  EXPECT_EQ(ParseByteSize("1000000"), std::uint64_t{1000000});
  EXPECT_EQ(ParseByteSize("2TiB"), std::uint64_t{2} << 40);
  EXPECT_EQ(ParseByteSize(""), std::nullopt);
  EXPECT_EQ(ParseByteSize("GiB"), std::nullopt);
  EXPECT_EQ(ParseByteSize("-1"), std::nullopt);
  EXPECT_EQ(ParseByteSize("10 GiB"), std::nullopt);
  EXPECT_EQ(ParseByteSize("10PiB"), std::nullopt);
  EXPECT_EQ(ParseByteSize("99999999999999999999"), std::nullopt);
  EXPECT_EQ(ParseByteSize("17179869184GiB"), std::nullopt);  // 2^64 bytes
  EXPECT_EQ(ByteSizeText(std::uint64_t{10} << 30), "10GiB");
  EXPECT_EQ(ByteSizeText(1000), "1000");
}

TEST(OptionSpecs, ParseSliceText) {
  EXPECT_EQ(ParseSliceText("0/1"), std::pair(0, 1));
  EXPECT_EQ(ParseSliceText("3/4"), std::pair(3, 4));
  EXPECT_EQ(ParseSliceText("4/4"), std::nullopt);
  EXPECT_EQ(ParseSliceText("0/0"), std::nullopt);
  EXPECT_EQ(ParseSliceText("-1/2"), std::nullopt);
  EXPECT_EQ(ParseSliceText("1"), std::nullopt);
  EXPECT_EQ(ParseSliceText("1/2/3"), std::nullopt);
  EXPECT_EQ(ParseSliceText("/2"), std::nullopt);
}

std::unique_ptr<Source> TwoImages() {
  std::vector<ListSample> samples(2);
  for (ListSample& sample : samples) sample.bytes = testing::MakeJpeg(32, 24, {});
  return std::make_unique<ListSource>(std::move(samples), std::vector<std::string>{});
}

// The library refuses exactly what the table refuses, with the table's words.
TEST(OptionSpecs, LoaderChecksTheTablesRanges) {
  const auto refusal = [](LoaderOptions o) -> std::string {
    o.batch_size = 2;
    o.epochs = 1;
    try {
      Loader loader(TwoImages(), o);
      return "";
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  };
  LoaderOptions o;
  o.image_size = static_cast<int>(kImageSize.max) + 1;
  EXPECT_EQ(refusal(o), "LoaderOptions: image_size must be between 1 and 16384, got 16385");
  o.image_size = static_cast<int>(kImageSize.min) - 1;
  EXPECT_EQ(refusal(o), "LoaderOptions: image_size must be between 1 and 16384, got 0");
  o.image_size = static_cast<int>(kImageSize.min);
  EXPECT_EQ(refusal(o), "");  // 1 x 1 images: the bottom of the range works
  o = {};
  o.workers = static_cast<int>(kWorkers.max) + 1;
  EXPECT_EQ(refusal(o), "LoaderOptions: workers must be auto or between 0 and 1024, got 1025");
  o = {};
  o.prefetch_depth = kAutoDepth;  // 0: "auto", the tuner's
  EXPECT_EQ(refusal(o), "");
  o.cpu_share = 1.5;
  EXPECT_EQ(refusal(o), "LoaderOptions: cpu_share must be above 0 and at most 1, got 1.5");
  o = {};
  o.augment[1].p = 1.5;
  EXPECT_EQ(refusal(o),
            "LoaderOptions: augment: RandomHorizontalFlip p must be between 0 and 1, got 1.5");
  o = {};
  o.held_slots_timeout = std::chrono::milliseconds(-500);
  EXPECT_EQ(refusal(o),
            "LoaderOptions: held_slots_timeout must be between 0 and 1000000000, "
            "got -0.5");
}

// OptionsProblem, the one check of LoaderOptions (Python calls it before opening a dataset):
// the table's ranges and the rules between fields, each named as Python's keyword.
TEST(OptionSpecs, OptionsProblemNamesTheFirstBadField) {
  EXPECT_EQ(OptionsProblem(LoaderOptions{}), std::nullopt);
  LoaderOptions o;
  o.eval_resize = 0;
  EXPECT_EQ(OptionsProblem(o), "eval_resize must be at least 1, got 0");
  o = {};
  o.mode = Mode::kEval;
  o.eval_resize = 100;
  EXPECT_EQ(OptionsProblem(o),
            "eval_resize must be at least image_size (224) in eval mode, got 100");
  o = {};
  o.image_size = SizeSchedule(ImageSize{8, 16385});
  EXPECT_EQ(OptionsProblem(o), "image_size must be between 1 and 16384, got 16385");
  o = {};
  o.augment[0].scale_min = 0.5;
  o.augment[0].scale_max = 0.1;
  EXPECT_EQ(OptionsProblem(o),
            "augment: RandomResizedCrop scale=(min, max) needs min <= max, got (0.5, 0.1)");
  o = {};
  o.augment = ParseAugmentSpec("RandomResizedCrop(), RandomErasing()");
  o.mode = Mode::kEval;
  EXPECT_EQ(OptionsProblem(o),
            "augment applies to mode=train only (eval is Resize + CenterCrop), got "
            "'RandomResizedCrop(), RandomErasing()'");
  o = {};
  o.slice = {2, 2};
  EXPECT_EQ(OptionsProblem(o),
            "slice=(index, count) needs count >= 1 and 0 <= index < count, got (2, 2)");
  o = {};
  o.jpeg.max_scans = 0;
  EXPECT_EQ(OptionsProblem(o), "max_scans must be at least 1, got 0");
  o = {};
  o.output.dtype = OutputDType::kFloat16;
  o.output.std = {1.0f, 0.0f, 0.2f};
  EXPECT_EQ(OptionsProblem(o), "std must be finite and > 0, got (1, 0, 0.2)");
  o.output.std = {1.0f, 1.0f, 1.0f};
  o.output.mean = {std::nanf(""), 0.5f, 0.0f};
  EXPECT_EQ(OptionsProblem(o), "mean must be finite, got (nan, 0.5, 0)");
  o.output = {};
  o.output.mean = kImageNetMean;  // uint8 output is not normalised
  EXPECT_EQ(OptionsProblem(o),
            "mean and std must be 0 and 1 for dtype uint8 (ask for a float dtype to normalise), "
            "got (0.485, 0.456, 0.406) and (1, 1, 1)");

  RemoteOptions remote;
  EXPECT_EQ(RemoteOptionsProblem(remote), std::nullopt);
  remote.cache_limit = 5;
  EXPECT_EQ(RemoteOptionsProblem(remote), "cache_limit must be at least 4MiB, got 5");
  remote = {};
  remote.retries = 21;
  EXPECT_EQ(RemoteOptionsProblem(remote), "remote_retries must be between 0 and 20, got 21");
}

}  // namespace
}  // namespace tilefeed::loader
