#pragma once
// Everything x86-specific that the vectorised code needs, in one leaf with no
// dependency: which vector extensions the running CPU and its OS support
// (CPUID and XCR0, read once), the function attributes that compile one
// kernel for them, and the horizontal reductions those kernels end with.
//
// The library is built without any -march flag: a vectorised function is
// compiled for its extensions with SPECDEC_AVX2_TARGET (or _EVEX_) and only
// called when avx2_available() (or evex_available()) says so, and every such
// function has a portable scalar twin. One binary therefore runs on any
// x86-64 CPU, and on other architectures SPECDEC_X86 is 0 and only the twins
// are compiled. Used by sampling/ (the per-row passes) and backends/cpu/.
//
// Environment, read once:
//   SPECDEC_DISABLE_SIMD    reports no extension: every caller runs its scalar
//                           twin (tests compare the two that way)
//   SPECDEC_DISABLE_AVX512  reports everything but AVX-512: the 16-register
//                           AVX2 kernels on a CPU that has 32 registers
#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SPECDEC_X86 1
// AVX2 with FMA and F16C: every x86 CPU with AVX2 has the other two.
#define SPECDEC_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
// AVX-512 F and VL: 32 vector registers for the 256-bit instructions
// (EVEX-encoded) and the 512-bit ones. A kernel compiled with it computes
// exactly what its AVX2 twin computes (the same operations in the same order,
// a 512-bit operation being sixteen lanes of the scalar one); only register
// allocation and vector width differ.
#define SPECDEC_EVEX_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))
#else
#define SPECDEC_X86 0
#define SPECDEC_AVX2_TARGET
#define SPECDEC_EVEX_TARGET
#endif

namespace specdec::platform {

// What the running CPU may execute, after the environment overrides above.
struct X86Features {
    // AVX2, FMA and F16C, with the OS saving the YMM registers on context
    // switches: SPECDEC_AVX2_TARGET functions may run.
    bool avx2 = false;
    // Also AVX-512 F and VL, with the OS saving the ZMM state:
    // SPECDEC_EVEX_TARGET functions may run.
    bool evex = false;
};

namespace detail {

// A set environment variable other than "" or "0".
inline bool environment_flag(const char* name) noexcept {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' && *value != '0';
}

inline X86Features query_x86_features() noexcept {
    X86Features features;
    if (environment_flag("SPECDEC_DISABLE_SIMD")) return features;
#if SPECDEC_X86
    // CPUID rather than __builtin_cpu_supports, which older Clang lacks "f16c" for.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return features;
    const bool fma = (ecx >> 12) & 1u, osxsave = (ecx >> 27) & 1u, avx = (ecx >> 28) & 1u, f16c = (ecx >> 29) & 1u;
    if (!(fma && osxsave && avx && f16c)) return features;
    // The OS must save the YMM registers (XCR0 bits 1 and 2).
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    const std::uint64_t xcr0 = (std::uint64_t{xcr0_high} << 32) | xcr0_low;
    if ((xcr0 & 0x6u) != 0x6u) return features;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return features;
    features.avx2 = (ebx >> 5) & 1u;
    // Registers 16-31 and the opmasks are saved only where XCR0 has bits 5-7.
    const bool zmm_state = (xcr0 & 0xE0u) == 0xE0u;
    const bool avx512f = (ebx >> 16) & 1u, avx512vl = (ebx >> 31) & 1u;
    features.evex = features.avx2 && zmm_state && avx512f && avx512vl &&
                    !environment_flag("SPECDEC_DISABLE_AVX512");
#endif
    return features;
}

}  // namespace detail

[[nodiscard]] inline const X86Features& x86_features() noexcept {
    static const X86Features features = detail::query_x86_features();
    return features;
}

// Whether SPECDEC_AVX2_TARGET functions may run (never under SPECDEC_DISABLE_SIMD).
[[nodiscard]] inline bool avx2_available() noexcept { return x86_features().avx2; }

// Whether SPECDEC_EVEX_TARGET functions may run (never under either variable).
[[nodiscard]] inline bool evex_available() noexcept { return x86_features().evex; }

#if SPECDEC_X86
// Horizontal reductions of one register. Float sums come in two orders
// because results computed with each are relied on bitwise: changing one
// would move every value computed with it by a rounding. Both start by adding
// the upper half onto the lower, h_i = v_i + v_(i+4).

// (h0 + h1) + (h2 + h3): the order of the CPU kernels (backends/cpu/).
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

// (h0 + h2) + (h1 + h3), folding in halves again: the order of sampling's
// per-row sums (sampling/row_kernels.hpp).
SPECDEC_AVX2_TARGET inline float horizontal_sum_folded(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// (v0 + v2) + (v1 + v3) of four doubles.
SPECDEC_AVX2_TARGET inline double horizontal_sum(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

// The largest of the 8 lanes.
SPECDEC_AVX2_TARGET inline float horizontal_max(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
#endif

}  // namespace specdec::platform
