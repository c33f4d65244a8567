#pragma once
// One include for Catch2 v2 (Debian 12's `catch2`) and v3 (newer distributions).
// Tests write v2 spellings (Approx, Catch::Contains); v3 gets aliases.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#include <string>
#define SPECDEC_CATCH_V3 1
using Catch::Approx;
namespace Catch {
inline auto Contains(const std::string& text) { return Catch::Matchers::ContainsSubstring(text); }
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
