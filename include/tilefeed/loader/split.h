#pragma once

// Split: which part of a dataset is wanted, the one split enum of the library, resolved in one
// place only (loader::ResolveDataset, tilefeed/loader/dataset.h), which every door calls. A
// split root (a directory with any of train/, val/ and test/) is opened for one split: its
// folder of that name. CIFAR-10 has two parts: its training batches are kTrain, and its one
// held-out batch, test_batch.bin, answers both kVal and kTest (CIFAR-10 calls it "test";
// evaluation code asks for "val"; both mean the held-out part).
//
// Pure values and functions (defined in dataset.cc); thread-safe.

#include <optional>
#include <string>

namespace tilefeed::loader {

enum class Split { kTrain, kVal, kTest };

// "train", "val", "test": also the name of the split's folder in a split root.
const char* ToString(Split split);
// The inverse of ToString; nullopt for any other name.
std::optional<Split> ParseSplit(const std::string& name);

}  // namespace tilefeed::loader
