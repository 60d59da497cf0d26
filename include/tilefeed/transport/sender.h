#pragma once

// Deprecated: the reader's end of the transport is transport::ReaderEndpoint, declared in
// tilefeed/transport/reader_endpoint.h. This header stays for one release so that code written
// against BatchSender keeps compiling; include reader_endpoint.h instead.

#include "tilefeed/transport/reader_endpoint.h"  // IWYU pragma: export
