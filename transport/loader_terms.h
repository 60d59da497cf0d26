#pragma once

// The one mapping between a loader's options and the session terms of a disaggregated job
// (tilefeed/transport/session.h). A trainer states the terms its own loader would have
// served on; a reader offers the terms of the loader it was started with; the agreed
// terms become the options of the loader that serves one session. Both sides call these
// functions, so a loader option that decides which samples a trainer gets cannot be
// compared on one side and forgotten on the other.
//
// Pure functions of their arguments; thread-safe.

#include <cstdint>

#include "tilefeed/loader/loader.h"
#include "tilefeed/transport/session.h"

namespace tilefeed::transport {

// The terms on which the batches of a loader with `options` started at `start` are served:
// its slice, seed, image size, batch size, mode, remainder, drop-last and first epoch and
// position (start's; its seed is options.seed), for the job that ends before epoch
// `end_epoch` (absolute, exclusive: train --epochs), of `dataset` (loader::Identify's, its
// class count left out; 0 samples: unknown, not compared). position_pinned is false; a
// reader started at a fixed position sets it.
// REQUIRES: options.batch_size and the slice fit 32 bits.
SessionTerms TermsOf(const loader::LoaderOptions& options, const loader::DatasetIdentity& dataset,
                     std::uint64_t end_epoch, const loader::LoaderState& start = {});

// The loader that serves `agreed` from a dataset of `dataset_size` samples: `options`
// running to the agreed end epoch, started at the agreed first epoch and position (a
// position past the dataset's end is its end). Throws std::invalid_argument when the agreed
// first epoch is not before the end epoch.
struct SessionLoader {
  loader::LoaderOptions options;
  loader::LoaderState start;
};
SessionLoader SessionLoaderOf(loader::LoaderOptions options, const SessionTerms& agreed,
                              std::uint64_t dataset_size);

}  // namespace tilefeed::transport
