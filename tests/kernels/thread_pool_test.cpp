// The kernels' thread pool: every task runs exactly once per section, across
// many short sections (a forward pass makes hundreds), and errors propagate.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "specdec/backends/cpu/thread_pool.hpp"
#include "support/catch.hpp"

TEST_CASE("the thread pool runs every task exactly once in many short sections", "[model]") {
    const std::size_t threads = GENERATE(std::size_t{1}, std::size_t{2}, std::size_t{3});
    specdec::cpu::ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    std::size_t wrong = 0;
    for (std::size_t section = 0; section < 20000; ++section) {
        std::vector<int> runs(1 + section % 37, 0);
        pool.parallel_for(runs.size(), [&](std::size_t task) { ++runs[task]; });
        for (const int r : runs) wrong += r != 1;
    }
    CHECK(wrong == 0);
    // More tasks than one claim word holds (65535) are run in several rounds.
    std::vector<int> many(150000, 0);
    pool.parallel_for(many.size(), [&](std::size_t task) { ++many[task]; });
    CHECK(std::count(many.begin(), many.end(), 1) == static_cast<long>(many.size()));
}

TEST_CASE("an exception thrown by a task reaches the caller and the pool stays usable", "[model]") {
    specdec::cpu::ThreadPool pool(2);
    CHECK_THROWS_AS(pool.parallel_for(10, [](std::size_t task) {
        if (task == 7) throw std::runtime_error("task 7 failed");
    }), std::runtime_error);
    std::vector<int> runs(10, 0);
    pool.parallel_for(runs.size(), [&](std::size_t task) { ++runs[task]; });
    CHECK(std::count(runs.begin(), runs.end(), 1) == 10);
}
