#pragma once
// One include for Catch2 v2 (Debian 12's `catch2`) and v3 (newer distributions).
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define SPECDEC_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#endif
