#pragma once

// Split: which part of a dataset is wanted, the one split enum of the library. A split root
// (a directory with train/ and val/) and CIFAR-10 (training batches, test_batch.bin) are
// opened for one split (tilefeed/loader/dataset.h, Cifar10::Open). CIFAR-10's "test" batch
// is Split::kVal: the held-out part, whatever a dataset calls it.
//
// Pure values and functions (defined in dataset.cc); thread-safe.

#include <optional>
#include <string>

namespace tilefeed::loader {

enum class Split { kTrain, kVal };

// "train", "val".
const char* ToString(Split split);
// "train" or "val" ("test" is accepted for val, as CIFAR-10 names it); nullopt otherwise.
std::optional<Split> ParseSplit(const std::string& name);

}  // namespace tilefeed::loader
