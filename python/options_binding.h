#pragma once

// tilefeed.Loader's keyword arguments as the C++ loader takes them. The option table
// (loader/option_specs.h) gives each keyword's range, default and help; the
// ranges are checked once, by loader::OptionsProblem and RemoteOptionsProblem, and a bad
// value is a ValueError (TypeError for the wrong type) "tilefeed.Loader: NAME must be
// RANGE, got VALUE" in the table's words. Call with the GIL held.

#include <pybind11/pybind11.h>

#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/remote.h"

namespace tilefeed::python {

// LoaderOptions from the keyword dict tilefeed/__init__.py builds (each key a Loader
// keyword or a JpegOptions field).
// Throws TypeError for an unknown key, ValueError for a value out of range.
loader::LoaderOptions ParseOptions(const pybind11::dict& kwargs);

// RemoteOptions from the dict tilefeed/__init__.py's _remote_options builds; absent keys
// keep the defaults. Throws ValueError for a value out of range.
loader::RemoteOptions ToRemoteOptions(const pybind11::dict& remote);

// The option table by Python keyword: flag, kind, range, default, help, choices.
pybind11::dict OptionSpecs();

// LoaderOptions' defaults under their Python names (Loader's signature is built from it).
pybind11::dict DefaultOptions();

// "nhwc"/"nchw" and "uint8"/"float16"/"bfloat16"/"float32", as Python spells them.
const char* LayoutName(loader::Layout layout);
const char* DTypeName(loader::OutputDType dtype);

}  // namespace tilefeed::python
