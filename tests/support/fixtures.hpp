#pragma once
// Locates the real model files used by some tests: $SPECDEC_FIXTURES, else
// ../shared/fixtures next to the source tree. Tests call fixture_path() and
// skip (SPECDEC_SKIP) when it returns nothing.
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "support/skip.hpp"

namespace specdec::test {

inline std::optional<std::filesystem::path> fixture_path(const std::string& file_name) {
    std::filesystem::path dir;
    if (const char* env = std::getenv("SPECDEC_FIXTURES"); env != nullptr && *env != '\0') {
        dir = env;
    } else {
#ifdef SPECDEC_DEFAULT_FIXTURES
        dir = SPECDEC_DEFAULT_FIXTURES;
#endif
    }
    if (dir.empty()) return std::nullopt;
    std::filesystem::path path = dir / file_name;
    if (!std::filesystem::exists(path)) return std::nullopt;
    return path;
}

}  // namespace specdec::test

// Skips the current test case (reported as skipped by CTest, see
// support/skip.hpp) when a fixture is absent.
#define SPECDEC_REQUIRE_FIXTURE(var, name)                                                             \
    const auto var##_optional = ::specdec::test::fixture_path(name);                                  \
    if (!var##_optional) {                                                                             \
        SPECDEC_SKIP("fixture " name " not found (set SPECDEC_FIXTURES or provide ../shared/fixtures)"); \
    }                                                                                                  \
    const std::filesystem::path var = *var##_optional
