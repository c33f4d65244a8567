// Tree decoding on the reference CPU model: greedy tree decoding reproduces
// greedy autoregressive decoding token for token (the synthetic tiny pair and
// stories260K with its Q4_0 copy as the draft), and after tree steps at T > 0
// the target's next-token logits equal those of a fresh model fed the
// committed tokens (the accepted paths were committed without recomputing).
#include <algorithm>
#include <cmath>
#include <vector>

#include "specdec/cpu.hpp"
#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using specdec::LlamaModel;
using specdec::Token;
using specdec::TreeShape;

namespace {

template <class Model>
void check_greedy_equivalence(Model& target, Model& draft, Model& reference, const std::vector<Token>& prompt,
                              std::size_t new_tokens) {
    specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = new_tokens});
    const auto expected = autoregressive.generate(prompt).tokens;
    for (const TreeShape& shape : {TreeShape::chain(3), TreeShape::from_branching({3, 2, 1}), TreeShape::from_branching({4, 1, 1, 1})}) {
        specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                                {.sampling = {.temperature = 0.0}, .max_new_tokens = new_tokens}, shape);
        const auto result = decoder.generate(prompt);
        INFO("shape " << shape.describe() << ": accepted " << result.stats.draft_tokens_accepted << " of "
                      << result.stats.draft_tokens_proposed << " nodes in " << result.stats.target_forward_passes
                      << " passes");
        CHECK(result.tokens == expected);
        CHECK(result.stats.draft_tokens_accepted > 0);
    }
    specdec::TreeSpeculativeDecoder automatic(specdec::target(target), specdec::draft(draft),
                                              {.sampling = {.temperature = 0.0}, .max_new_tokens = new_tokens},
                                              specdec::AutoTree({.max_nodes = 12, .max_depth = 4}));
    CHECK(automatic.generate(prompt).tokens == expected);
}

template <class Model>
void check_cache_after_tree_steps(Model& target, Model& draft, Model& fresh, const std::vector<Token>& prompt) {
    for (const double temperature : {0.0, 1.0}) {
        specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                                {.sampling = {.temperature = temperature}, .seed = 3, .max_new_tokens = 30},
                                                TreeShape::from_branching({3, 2, 1}));
        (void)decoder.generate(prompt);
        const std::vector<Token> sequence(decoder.sequence().begin(), decoder.sequence().end());
        REQUIRE(target.cached_tokens() + 1 == sequence.size());
        const specdec::LogitsView next = target.forward(std::span<const Token>(&sequence.back(), 1));
        const std::vector<float> after(next.last_row().begin(), next.last_row().end());
        fresh.truncate(0);
        const specdec::LogitsView expected = fresh.forward(sequence);
        float worst = 0.0f;
        for (std::size_t v = 0; v < after.size(); ++v) worst = std::max(worst, std::abs(after[v] - expected.last_row()[v]));
        INFO("T " << temperature << ", " << sequence.size() << " tokens: largest logit difference " << worst);
        CHECK(worst < 1e-4f);
        target.truncate(0);
    }
}

static_assert(specdec::TreeLM<LlamaModel>, "the CPU LlamaModel has the tree pass these tests use");

}  // namespace

TEST_CASE("greedy tree decoding on the synthetic tiny pair equals greedy autoregressive decoding", "[model][tree]") {
    specdec::SyntheticPair pair = specdec::make_synthetic_pair({.size = "tiny", .threads = 1});
    LlamaModel reference = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
    check_greedy_equivalence(pair.target, pair.draft, reference, std::vector<Token>{1, 17, 42, 5}, 40);
}

TEST_CASE("greedy tree decoding on stories260K (Q4_0 draft) equals greedy autoregressive decoding", "[model][tree][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    SPECDEC_REQUIRE_FIXTURE(q4_path, "stories260K-q4_0.gguf");
    LlamaModel target = LlamaModel::from_gguf(path, {.threads = 1});
    LlamaModel reference = LlamaModel::from_gguf(path, {.threads = 1});
    LlamaModel draft = LlamaModel::from_gguf(q4_path, {.threads = 1});
    check_greedy_equivalence(target, draft, reference, std::vector<Token>{1, 403, 407, 261}, 48);
}

TEST_CASE("after tree steps the target's next logits equal a fresh model's on the committed tokens", "[model][tree]") {
    specdec::SyntheticPair pair = specdec::make_synthetic_pair({.size = "tiny", .threads = 1});
    LlamaModel fresh = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
    check_cache_after_tree_steps(pair.target, pair.draft, fresh, std::vector<Token>{1, 17, 42, 5});
}
