#pragma once

// GCC 12's AVX-512 headers (avx512fintrin.h, avx512bwintrin.h) pass an undefined vector as
// the merge source of their plain (unmasked) intrinsics and then warn that it is
// uninitialised (GCC bug 105593): -Wuninitialized at -O3, -Wmaybe-uninitialized at -O2,
// errors under -Werror. Code that uses those intrinsics sits between
// TILEFEED_AVX512_WARNINGS_OFF and TILEFEED_AVX512_WARNINGS_ON (or uses the maskz forms,
// which have no merge source). Clang knows no -Wmaybe-uninitialized, so it is named for GCC
// alone.

#if defined(__clang__)
#define TILEFEED_AVX512_WARNINGS_OFF \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#else
#define TILEFEED_AVX512_WARNINGS_OFF                                                   \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#endif
#define TILEFEED_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")
