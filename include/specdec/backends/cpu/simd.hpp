#pragma once
// Runtime selection of the x86 AVX2/FMA/F16C code paths. The library is built
// without any -march flag: kernels that use these instructions are compiled
// per function with SPECDEC_AVX2_TARGET and are only called when the running
// CPU reports all three features; every kernel keeps a portable scalar twin.
#include "specdec/core/cpu_features.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPECDEC_HAS_X86_KERNELS 1
#define SPECDEC_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
// The same 256-bit instructions, EVEX-encoded: 32 vector registers. Kernels
// compiled with it compute exactly what their AVX2 twins compute (same
// operations in the same order); only register allocation differs.
#define SPECDEC_EVEX_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))
#else
#define SPECDEC_HAS_X86_KERNELS 0
#define SPECDEC_AVX2_TARGET
#define SPECDEC_EVEX_TARGET
#endif

namespace specdec::cpu {

// True when the AVX2 + FMA + F16C kernels may run on this CPU (none under
// SPECDEC_DISABLE_SIMD, see core/cpu_features.hpp).
[[nodiscard]] inline bool avx2_available() noexcept { return cpu_features().f16c; }

// True when the SPECDEC_EVEX_TARGET kernels may run (AVX-512 F + VL; none
// under SPECDEC_DISABLE_AVX512).
[[nodiscard]] inline bool evex_available() noexcept { return cpu_features().avx512vl; }

#if SPECDEC_HAS_X86_KERNELS
namespace detail {
// Sum of the 8 lanes of an AVX register.
SPECDEC_AVX2_TARGET inline float horizontal_sum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    const __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 shuf = _mm_movehdup_ps(lo);
    __m128 sums = _mm_add_ps(lo, shuf);
    shuf = _mm_movehl_ps(shuf, sums);
    sums = _mm_add_ss(sums, shuf);
    return _mm_cvtss_f32(sums);
}
}  // namespace detail
#endif

}  // namespace specdec::cpu
