#pragma once
// Skipping a test that cannot run on this machine (a missing fixture, no CUDA
// device). SPECDEC_SKIP(reason) prints one line "SPECDEC_SKIPPED: <reason>" and
// returns from the test case; CTest reports every test whose output holds that
// marker as skipped, not passed (SKIP_REGULAR_EXPRESSION on the discovered
// tests in tests/CMakeLists.txt). `reason` may be a stream expression:
//   SPECDEC_SKIP("no CUDA device: " << description);
// Use it only at the top of a test case (it returns from the enclosing function).
#include <iostream>
#include <sstream>

#include "support/catch.hpp"

#define SPECDEC_SKIPPED_MARKER "SPECDEC_SKIPPED"

#define SPECDEC_SKIP(reason)                                                      \
    do {                                                                          \
        std::ostringstream specdec_skip_reason_;                                  \
        specdec_skip_reason_ << reason;                                           \
        std::cout << SPECDEC_SKIPPED_MARKER ": " << specdec_skip_reason_.str()    \
                  << std::endl;                                                   \
        WARN("skipped: " << specdec_skip_reason_.str());                          \
        return;                                                                   \
    } while (0)
