#pragma once
// Which x86 vector extensions the running CPU (and its OS) supports, read
// once with CPUID. The library is built without any -march flag: vectorised
// kernels are compiled per function and chosen at run time from these flags,
// so one binary runs on any x86-64 CPU. Setting the environment variable
// SPECDEC_DISABLE_SIMD reports none of them (tests use it to compare the
// vectorised kernels with their scalar twins); SPECDEC_DISABLE_AVX512 reports
// everything but AVX-512 (the 16-register kernels on a CPU that has more).
#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SPECDEC_X86 1
#else
#define SPECDEC_X86 0
#endif

namespace specdec {

struct CpuFeatures {
    bool avx2_fma = false;  // AVX2 and FMA, with the OS saving the YMM registers
    bool f16c = false;      // half <-> float conversions
    // AVX-512 F and VL, with the OS saving the ZMM state: the 256-bit kernels
    // may then use 32 vector registers instead of 16 (EVEX encoding).
    bool avx512vl = false;
};

namespace detail {

inline CpuFeatures query_cpu_features() noexcept {
    CpuFeatures features;
    if (const char* off = std::getenv("SPECDEC_DISABLE_SIMD"); off != nullptr && *off != '\0' && *off != '0')
        return features;
#if SPECDEC_X86
    // CPUID rather than __builtin_cpu_supports, which older Clang lacks "f16c" for.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return features;
    const bool fma = (ecx >> 12) & 1u, osxsave = (ecx >> 27) & 1u, avx = (ecx >> 28) & 1u, f16c = (ecx >> 29) & 1u;
    if (!(fma && osxsave && avx)) return features;
    // The OS must save the YMM registers on context switches (XCR0 bits 1 and 2).
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    const std::uint64_t xcr0 = (std::uint64_t{xcr0_high} << 32) | xcr0_low;
    if ((xcr0 & 0x6u) != 0x6u) return features;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return features;
    features.avx2_fma = (ebx >> 5) & 1u;
    features.f16c = features.avx2_fma && f16c;
    // Registers 16-31 and the opmasks are saved only where XCR0 has bits 5-7.
    const bool zmm_state = (xcr0 & 0xE0u) == 0xE0u;
    const bool avx512f = (ebx >> 16) & 1u, avx512vl = (ebx >> 31) & 1u;
    const char* no_avx512 = std::getenv("SPECDEC_DISABLE_AVX512");
    const bool avx512_off = no_avx512 != nullptr && *no_avx512 != '\0' && *no_avx512 != '0';
    features.avx512vl = features.f16c && zmm_state && avx512f && avx512vl && !avx512_off;
#endif
    return features;
}

}  // namespace detail

[[nodiscard]] inline const CpuFeatures& cpu_features() noexcept {
    static const CpuFeatures features = detail::query_cpu_features();
    return features;
}

}  // namespace specdec
