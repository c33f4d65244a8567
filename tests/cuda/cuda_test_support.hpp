#pragma once
// Shared by the CUDA tests: the run-time device check, and comparisons of
// logits rows.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "specdec/backends/cuda/device.hpp"
#include "specdec/core/types.hpp"
#include "support/catch.hpp"

// Every CUDA test starts with this: without a device it records one line,
// counts the test as skipped and returns. The binary's main (main.cpp here)
// then exits with kSkippedExitCode, which CTest reports as "Skipped".
#define SPECDEC_REQUIRE_CUDA_DEVICE()                                                 \
    do {                                                                              \
        if (!::specdec::cuda::available()) {                                          \
            WARN("skipped: " << ::specdec::cuda::device_description());               \
            ++::specdec::test::skipped_without_device;                                \
            return;                                                                   \
        }                                                                             \
    } while (0)

namespace specdec::test {

// The exit code of a run in which tests were skipped for lack of a device
// (SKIP_RETURN_CODE of these tests in tests/cuda/CMakeLists.txt).
inline constexpr int kSkippedExitCode = 77;
inline int skipped_without_device = 0;

inline float max_abs_difference(const LogitsView& a, std::size_t row_a, const LogitsView& b, std::size_t row_b) {
    const std::span<const float> x = a.row(row_a), y = b.row(row_b);
    float worst = 0.0f;
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
    return worst;
}

// ||x - y|| / ||y||: the error of a reduced-precision row relative to the reference row y.
inline double relative_l2_error(std::span<const float> x, std::span<const float> y) {
    double difference = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        difference += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        norm += static_cast<double>(y[i]) * y[i];
    }
    return std::sqrt(difference / std::max(norm, 1e-30));
}

}  // namespace specdec::test
