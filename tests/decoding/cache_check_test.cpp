// A user's adapter whose truncate() does not roll its cache back, or rolls it
// back too far, or whose forward() does not grow the cache by the tokens fed,
// is caught by the decoders right after the call (decoding/cache_checks.hpp)
// and reported as a specdec::Error naming the model: its name() when it has
// one, else its role and type, and the sequence slot of a multi-sequence model.
// Without the check such an adapter goes unnoticed at T = 0 and T = 1 (the
// next pass appends at the wrong positions).
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/slot_models.hpp"
#include "support/toy_models.hpp"

namespace cache_check_test {

using specdec::DecodingOptions;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

enum class CacheBug {
    none,
    truncate_ignored,   // truncate(n) does nothing
    truncate_too_far,   // truncate(n) keeps n - 1 positions
    forward_drops_one,  // forward(tokens) caches one token fewer than it was fed
};

// A ToyLM behind an adapter with one of the bugs above. Named adapters say
// who they are through name(); unnamed ones are labelled by role and type.
template <bool Named>
class BuggyAdapter {
public:
    BuggyAdapter(ToyLMOptions options, CacheBug bug) : model_(options), bug_(bug) {}

    [[nodiscard]] std::string_view name() const
        requires Named
    {
        return "my-engine:tiny.gguf";
    }

    [[nodiscard]] std::size_t vocab_size() const { return model_.vocab_size(); }
    [[nodiscard]] std::size_t context_length() const { return model_.context_length(); }
    [[nodiscard]] std::size_t cached_tokens() const { return model_.cached_tokens(); }

    specdec::LogitsView forward(std::span<const Token> tokens) {
        const specdec::LogitsView rows = model_.forward(tokens);
        if (bug_ == CacheBug::forward_drops_one && !tokens.empty()) model_.truncate(model_.cached_tokens() - 1);
        return rows;
    }

    void truncate(std::size_t n) {
        switch (bug_) {
            case CacheBug::truncate_ignored: return;
            case CacheBug::truncate_too_far: model_.truncate(n > 0 ? n - 1 : 0); return;
            default: model_.truncate(n);
        }
    }

    specdec::LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents) {
        return model_.forward_tree(tokens, parents);
    }
    void commit_tree(std::span<const std::int32_t> path) { model_.commit_tree(path); }

private:
    ToyLM model_;
    CacheBug bug_;
};

constexpr std::size_t kVocab = 6;
ToyLMOptions target_options() { return {.vocab = kVocab, .seed = 11, .sharpness = 1.3}; }
ToyLMOptions draft_options() { return {.vocab = kVocab, .seed = 11, .sharpness = 1.3, .noise_seed = 4, .noise = 0.9}; }

const std::vector<Token> kPrompt{1, 4, 2};
const std::vector<SamplingOptions> kSamplings{{.temperature = 0.0}, {.temperature = 1.0}};

DecodingOptions options_for(const SamplingOptions& sampling) {
    return {.draft_tokens = 4, .sampling = sampling, .seed = 3, .max_new_tokens = 48};
}


TEST_CASE("a target whose truncate() does not roll back is named in the error, at T = 0 and T = 1",
          "[decoder][cache-checks][errors]") {
    for (const SamplingOptions& sampling : kSamplings) {
        CAPTURE(sampling.temperature);
        BuggyAdapter<true> target(target_options(), CacheBug::truncate_ignored);
        ToyLM draft(draft_options());
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options_for(sampling),
                                            specdec::TokenwiseRejection{}, specdec::FixedLength{});
        CHECK_THROWS_WITH(decoder.generate(kPrompt),
                          Catch::Contains("target model \"my-engine:tiny.gguf\": truncate(") &&
                              Catch::Contains("the cache was not rolled back"));
    }
}

TEST_CASE("a target whose truncate() rolls back too far is caught, labelled by role and type",
          "[decoder][cache-checks][errors]") {
    for (const SamplingOptions& sampling : kSamplings) {
        CAPTURE(sampling.temperature);
        BuggyAdapter<false> target(target_options(), CacheBug::truncate_too_far);
        ToyLM draft(draft_options());
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options_for(sampling),
                                            specdec::TokenwiseRejection{}, specdec::FixedLength{});
        CHECK_THROWS_WITH(decoder.generate(kPrompt),
                          Catch::Contains("target model (type cache_check_test::BuggyAdapter<false>)") &&
                              Catch::Contains("the cache was rolled back too far"));
    }
}

TEST_CASE("a draft model whose truncate() is broken is named as the draft", "[decoder][cache-checks][errors]") {
    for (const CacheBug bug : {CacheBug::truncate_ignored, CacheBug::truncate_too_far}) {
        for (const SamplingOptions& sampling : kSamplings) {
            CAPTURE(sampling.temperature);
            ToyLM target(target_options());
            BuggyAdapter<true> draft(draft_options(), bug);
            specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options_for(sampling),
                                                specdec::TokenwiseRejection{}, specdec::FixedLength{});
            CHECK_THROWS_WITH(decoder.generate(kPrompt), Catch::Contains("draft model \"my-engine:tiny.gguf\": truncate("));
        }
    }
}

TEST_CASE("a forward() that does not cache every token fed is caught at the first pass", "[decoder][cache-checks][errors]") {
    BuggyAdapter<true> target(target_options(), CacheBug::forward_drops_one);
    ToyLM draft(draft_options());
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options_for({.temperature = 1.0}),
                                        specdec::TokenwiseRejection{}, specdec::FixedLength{});
    CHECK_THROWS_WITH(decoder.prefill(kPrompt),
                      Catch::Contains("target model \"my-engine:tiny.gguf\": forward of 2 tokens on a cache of 0 "
                                      "positions left 1, expected 2"));
    specdec::AutoregressiveDecoder plain(target, options_for({.temperature = 0.0}));
    CHECK_THROWS_WITH(plain.generate(kPrompt), Catch::Contains("target model \"my-engine:tiny.gguf\": forward of"));
}

TEST_CASE("the correct adapter passes the checks and decodes as the bare model does", "[decoder][cache-checks]") {
    for (const SamplingOptions& sampling : kSamplings) {
        BuggyAdapter<true> target(target_options(), CacheBug::none);
        ToyLM bare(target_options()), draft(draft_options()), bare_draft(draft_options());
        specdec::SpeculativeDecoder wrapped(specdec::target(target), specdec::draft(draft), options_for(sampling),
                                            specdec::TokenwiseRejection{}, specdec::FixedLength{});
        specdec::SpeculativeDecoder reference(specdec::target(bare), specdec::draft(bare_draft), options_for(sampling),
                                              specdec::TokenwiseRejection{}, specdec::FixedLength{});
        CHECK(wrapped.generate(kPrompt).tokens == reference.generate(kPrompt).tokens);
    }
}

TEST_CASE("the tree decoder catches a broken truncate() when a new prompt rolls the cache back",
          "[decoder][tree][cache-checks][errors]") {
    // The tree decoder commits accepted paths without truncating; the
    // rollback comes with a prompt that shares only a prefix with the cache.
    const std::vector<Token> next_prompt{1, 4, 5, 0};
    for (const CacheBug bug : {CacheBug::truncate_ignored, CacheBug::truncate_too_far}) {
        for (const SamplingOptions& sampling : kSamplings) {
            CAPTURE(sampling.temperature);
            BuggyAdapter<true> target(target_options(), bug);
            ToyLM draft(draft_options());
            specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options_for(sampling),
                                                    specdec::TreeShape::from_branching({2, 2, 1}));
            (void)decoder.generate(kPrompt);
            CHECK_THROWS_WITH(decoder.generate(next_prompt),
                              Catch::Contains("target model \"my-engine:tiny.gguf\": truncate(2)"));
        }
    }
}

TEST_CASE("BatchedDecoder: a slot whose truncate(slot, n) is broken fails its request, naming the slot; the others finish",
          "[batched][cache-checks][errors]") {
    using Target = specdec::test::MultiSlot<BuggyAdapter<false>>;
    using Draft = specdec::test::MultiSlot<ToyLM>;
    std::size_t made = 0;
    Target target(3, [&made] {
        return BuggyAdapter<false>(target_options(), made++ == 1 ? CacheBug::truncate_ignored : CacheBug::none);
    });
    Draft draft(3, [] { return ToyLM(draft_options()); });
    specdec::BatchedDecoder<Target, Draft, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
        specdec::target(target), specdec::draft(draft));
    const std::vector<std::vector<Token>> prompts{{1, 4, 2}, {3, 0, 5}, {2, 2, 1}};
    const DecodingOptions options = options_for({.temperature = 1.0});
    for (const auto& prompt : prompts) (void)decoder.submit(prompt, options);
    const std::vector<specdec::RequestResult> results = decoder.run();
    REQUIRE(results.size() == 3);
    std::size_t failed = 0;
    for (const specdec::RequestResult& result : results) {
        const std::vector<Token>& prompt = prompts[result.id - 1];
        if (result.status == specdec::RequestStatus::failed) {
            ++failed;
            CHECK(result.id == 2);  // admitted into slot 1
            CHECK_THAT(result.error, Catch::Contains("(sequence slot 1): truncate(") &&
                                         Catch::Contains("target model (type specdec::test::MultiSlot<") &&
                                         Catch::Contains("the cache was not rolled back"));
        } else {
            CHECK(result.status == specdec::RequestStatus::finished);
            ToyLM alone(target_options()), alone_draft(draft_options());
            specdec::SpeculativeDecoder reference(specdec::target(alone), specdec::draft(alone_draft), options,
                                                  specdec::TokenwiseRejection{}, specdec::FixedLength{});
            CHECK(result.generation.tokens == reference.generate(prompt).tokens);
        }
    }
    CHECK(failed == 1);
}

}  // namespace cache_check_test
