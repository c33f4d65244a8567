// The README's "Plug in your own model" snippet, compiled exactly as printed
// (CMake extracts it into readme_plug_in_snippet.inc), run with a toy adapter
// and checked against autoregressive decoding.
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

namespace readme {
using MyModel = specdec::test::ToyLM;
#include "readme_plug_in_snippet.inc"
}  // namespace readme

TEST_CASE("the README's plug-in snippet compiles and generates a stop-terminated continuation", "[readme]") {
    readme::MyModel big({.vocab = 30, .seed = 3}), small({.vocab = 30, .seed = 3, .noise_seed = 1, .noise = 0.5});
    const std::vector<specdec::Token> prompt{1, 2, 3};
    const specdec::Token eos = 7;
    const std::vector<specdec::Token> tokens = readme::continue_text(big, small, prompt, eos);
    REQUIRE(!tokens.empty());
    CHECK(tokens.size() <= 256);
    // It stops at the first eos, or after 256 tokens.
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) CHECK(tokens[i] != eos);
    if (tokens.size() < 256) CHECK(tokens.back() == eos);
}
