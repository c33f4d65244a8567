#pragma once
// What the soak tests share: resident memory, whether a sanitizer inflates
// it, and the token budget (SPECDEC_SOAK_TOKENS, default 100,000).
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <fstream>

namespace specdec::test {

// Resident set size in bytes (the second field of /proc/self/statm, in pages).
inline std::size_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::size_t total_pages = 0, resident_pages = 0;
    statm >> total_pages >> resident_pages;
    return resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

inline std::size_t soak_token_budget() {
    if (const char* text = std::getenv("SPECDEC_SOAK_TOKENS")) return std::strtoull(text, nullptr, 10);
    return 100000;
}

}  // namespace specdec::test
