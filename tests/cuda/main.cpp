// The CUDA tests' entry point: Catch2's runner, then exit code 77 when tests
// were skipped for lack of a device, so that CTest counts them as skipped
// instead of passed. A failure keeps its own exit code.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include "cuda/cuda_test_support.hpp"

int main(int argc, char* argv[]) {
    const int result = Catch::Session().run(argc, argv);
    if (result == 0 && specdec::test::skipped_without_device > 0) return specdec::test::kSkippedExitCode;
    return result;
}
