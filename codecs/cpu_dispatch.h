#pragma once

// The codecs' SIMD kernels and the CPUs that run them, in one place. Each kernel set is a
// target attribute (TILEFEED_TARGET_*) and a run-time question (CpuRuns) that name the same
// features, so what a kernel is compiled for and what the CPU is asked for cannot drift
// apart; a kernel function carries its set's attribute and is called only after
// CpuRuns(its set) (and never when a caller asked for the portable kernels). Every CPU is
// asked once per set and process.
//
// Pure functions; thread-safe (the answers are constant function-local statics).

#if defined(__x86_64__) || defined(__i386__)

#define TILEFEED_TARGET_POPCNT __attribute__((target("popcnt")))
#define TILEFEED_TARGET_AVX2 __attribute__((target("avx2")))
#define TILEFEED_TARGET_AVX512 __attribute__((target("avx512f")))
// The fused upsampling and colour pass (ycc_rows.cc): byte permutes across the register.
#define TILEFEED_TARGET_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
// The block unpack (coef_blocks.cc): masked expands and the bit tricks around them.
#define TILEFEED_TARGET_AVX512_VBMI2 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,bmi,bmi2,popcnt")))

namespace tilefeed::codecs::detail {

enum class KernelSet { kPopcnt, kAvx2, kAvx512, kAvx512Vbmi, kAvx512Vbmi2 };

// Whether this CPU has every feature of `set`'s TILEFEED_TARGET_* attribute.
inline bool CpuRuns(KernelSet set) {
  switch (set) {
    case KernelSet::kPopcnt: {
      static const bool kRuns = __builtin_cpu_supports("popcnt");
      return kRuns;
    }
    case KernelSet::kAvx2: {
      static const bool kRuns = __builtin_cpu_supports("avx2");
      return kRuns;
    }
    case KernelSet::kAvx512: {
      static const bool kRuns = __builtin_cpu_supports("avx512f");
      return kRuns;
    }
    case KernelSet::kAvx512Vbmi: {
      static const bool kRuns = __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vbmi");
      return kRuns;
    }
    case KernelSet::kAvx512Vbmi2: {
      static const bool kRuns =
          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2") &&
          __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
          __builtin_cpu_supports("popcnt");
      return kRuns;
    }
  }
  return false;
}

}  // namespace tilefeed::codecs::detail

#endif  // x86

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
