#pragma once
// A small seeded generator for tests that draw random cases (strings, token
// walks): splitmix64, so that a case is the same on every platform and
// standard library, which std::uniform_int_distribution does not promise.
#include <cstddef>
#include <cstdint>

namespace specdec::test {

struct TestRandom {
    std::uint64_t state;
    std::uint64_t next() {
        state += 0x9E3779B97F4A7C15ull;
        std::uint64_t x = state;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        return x ^ (x >> 31);
    }
    std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

}  // namespace specdec::test
