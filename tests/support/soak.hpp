#pragma once
// What the soak tests share: resident memory and the token budget
// (SPECDEC_SOAK_TOKENS, default 100,000); kUnderSanitizer (a sanitizer's
// allocator inflates resident memory) comes from support/sanitizers.hpp.
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <fstream>

#include "support/sanitizers.hpp"

namespace specdec::test {

// Resident set size in bytes (the second field of /proc/self/statm, in pages).
inline std::size_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::size_t total_pages = 0, resident_pages = 0;
    statm >> total_pages >> resident_pages;
    return resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

inline std::size_t soak_token_budget() {
    if (const char* text = std::getenv("SPECDEC_SOAK_TOKENS")) return std::strtoull(text, nullptr, 10);
    return 100000;
}

}  // namespace specdec::test
