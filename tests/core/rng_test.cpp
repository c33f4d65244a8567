#include <set>

#include "specdec/core/rng.hpp"
#include "support/catch.hpp"

using specdec::RandomPurpose;

TEST_CASE("Philox4x32-10 reproduces the Random123 known-answer vectors", "[rng]") {
    using specdec::detail::Philox4x32;
    using specdec::detail::philox4x32_10;
    const Philox4x32 zeros = philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
    CHECK(zeros.c[0] == 0x6627e8d5u);
    CHECK(zeros.c[1] == 0xe169c58du);
    CHECK(zeros.c[2] == 0xbc57ac4cu);
    CHECK(zeros.c[3] == 0x9b00dbd8u);
    const Philox4x32 ones = philox4x32_10(Philox4x32{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu,
                                          0xffffffffu);
    CHECK(ones.c[0] == 0x408f276du);
    CHECK(ones.c[1] == 0x41c83b0eu);
    CHECK(ones.c[2] == 0xa20bc7c6u);
    CHECK(ones.c[3] == 0x6d5451fdu);
    const Philox4x32 pi = philox4x32_10(Philox4x32{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
                                        0x299f31d0u);
    CHECK(pi.c[0] == 0xd16cfe09u);
    CHECK(pi.c[1] == 0x94fdccebu);
    CHECK(pi.c[2] == 0x5001e420u);
    CHECK(pi.c[3] == 0x24126ea1u);
}

TEST_CASE("counter uniforms lie in the unit interval, are reproducible, and differ across seeds, positions and purposes", "[rng]") {
    const specdec::CounterRng rng{42};
    std::set<double> seen;
    double sum = 0.0;
    const int count = 20000;
    for (int i = 0; i < count; ++i) {
        const double u = rng.uniform(static_cast<std::uint64_t>(i), RandomPurpose::accept_test);
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
        REQUIRE(u == specdec::counter_uniform(42, static_cast<std::uint64_t>(i), RandomPurpose::accept_test));
        seen.insert(u);
        sum += u;
    }
    CHECK(seen.size() == static_cast<std::size_t>(count));
    // Mean of 20000 U(0,1): standard error 0.002; allow 5 sigma.
    CHECK(std::abs(sum / count - 0.5) < 0.01);
    CHECK(rng.uniform(7, RandomPurpose::accept_test) != rng.uniform(7, RandomPurpose::draft_sample));
    CHECK(rng.uniform(7, RandomPurpose::accept_test) != specdec::CounterRng{43}.uniform(7, RandomPurpose::accept_test));
    CHECK(rng.uniform(7, RandomPurpose::accept_test, 0) != rng.uniform(7, RandomPurpose::accept_test, 1));
}
