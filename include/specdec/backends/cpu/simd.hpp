#pragma once
// Runtime selection of the x86 AVX2/FMA/F16C code paths. The library is built
// without any -march flag: kernels that use these instructions are compiled
// per function with SPECDEC_AVX2_TARGET and are only called when the running
// CPU reports all three features; every kernel keeps a portable scalar twin.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SPECDEC_HAS_X86_KERNELS 1
#define SPECDEC_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#define SPECDEC_HAS_X86_KERNELS 0
#define SPECDEC_AVX2_TARGET
#endif

namespace specdec::cpu {

// True when the AVX2 + FMA + F16C kernels may run on this CPU. Setting the
// environment variable SPECDEC_DISABLE_SIMD forces the scalar kernels (tests
// use it to compare both paths).
[[nodiscard]] bool avx2_available() noexcept;

namespace detail {
bool query_avx2() noexcept;
}

}  // namespace specdec::cpu

#include <cstdlib>

namespace specdec::cpu {

inline bool detail::query_avx2() noexcept {
    if (const char* off = std::getenv("SPECDEC_DISABLE_SIMD"); off != nullptr && *off != '\0' && *off != '0') return false;
#if SPECDEC_HAS_X86_KERNELS
    // CPUID rather than __builtin_cpu_supports, which older Clang lacks "f16c" for.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const bool fma = (ecx >> 12) & 1u, osxsave = (ecx >> 27) & 1u, avx = (ecx >> 28) & 1u, f16c = (ecx >> 29) & 1u;
    if (!(fma && osxsave && avx && f16c)) return false;
    // The OS must save the YMM registers on context switches (XCR0 bits 1 and 2).
    unsigned xcr0_low = 0, xcr0_high = 0;  // xgetbv writes both halves; only the low one matters
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    (void)xcr0_high;
    if ((xcr0_low & 0x6u) != 0x6u) return false;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    return (ebx >> 5) & 1u;  // AVX2
#else
    return false;
#endif
}

inline bool avx2_available() noexcept {
    static const bool available = detail::query_avx2();
    return available;
}

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
