// Misuse from user code gets a clear specdec::Error: adapters that break the
// CausalLM contract (wrong number of logits rows, rows of the wrong width,
// non-finite logits) and drafters that break the Drafter contract (ids outside
// the vocabulary, distributions of the wrong width).
#include <cmath>
#include <limits>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

using specdec::Token;
using specdec::test::ToyLM;

namespace {

enum class Fault { none, one_row_short, narrow_rows, wide_rows };

// A user adapter over ToyLM that breaks the contract of forward() one way.
class FaultyAdapter {
public:
    FaultyAdapter(std::size_t vocab, Fault fault) : model_({.vocab = vocab}), fault_(fault) {}

    std::size_t vocab_size() const { return model_.vocab_size(); }
    std::size_t context_length() const { return model_.context_length(); }
    std::size_t cached_tokens() const { return model_.cached_tokens(); }
    void truncate(std::size_t n) { model_.truncate(n); }

    specdec::LogitsView forward(std::span<const Token> tokens) {
        specdec::LogitsView logits = model_.forward(tokens);
        switch (fault_) {
            case Fault::none: break;
            case Fault::one_row_short: logits.rows -= 1; break;
            case Fault::narrow_rows: logits.vocab -= 1; break;  // stride unchanged: rows of vocab - 1 values
            case Fault::wide_rows:
                widened_.assign(logits.rows * (logits.vocab + 1), 0.0f);
                logits = specdec::dense_logits(widened_, logits.rows, logits.vocab + 1);
                break;
        }
        return logits;
    }

private:
    ToyLM model_;
    Fault fault_;
    std::vector<float> widened_;
};

static_assert(specdec::CausalLM<FaultyAdapter>);

// A drafter whose distributions q have the wrong width.
struct WrongWidthDrafter {
    std::size_t width;
    void reset() {}
    specdec::DraftProposal propose(const specdec::DraftRequest&) {
        return {.tokens = {1}, .probabilities = std::vector<float>(width, 1.0f / static_cast<float>(width)), .vocab = width,
                .forward_passes = 1};
    }
};

const std::vector<Token> kMisusePrompt{1, 2, 3};

}  // namespace

TEST_CASE("an adapter whose forward returns the wrong number of rows is reported, as target or draft", "[errors][misuse]") {
    for (const double temperature : {0.0, 1.0}) {
        INFO("temperature " << temperature);
        const specdec::DecodingOptions options{.sampling = {.temperature = temperature}, .max_new_tokens = 8};
        FaultyAdapter bad_target(10, Fault::one_row_short), good_draft(10, Fault::none);
        specdec::SpeculativeDecoder with_bad_target(specdec::target(bad_target), specdec::draft(good_draft), options);
        CHECK_THROWS_WITH(with_bad_target.generate(kMisusePrompt),
                          Catch::Contains("model forward returned") && Catch::Contains("expected one row per token"));
        FaultyAdapter good_target(10, Fault::none), bad_draft(10, Fault::one_row_short);
        specdec::SpeculativeDecoder with_bad_draft(specdec::target(good_target), specdec::draft(bad_draft), options);
        CHECK_THROWS_WITH(with_bad_draft.generate(kMisusePrompt),
                          Catch::Contains("model forward returned") && Catch::Contains("expected one row per token"));
        FaultyAdapter bad_alone(10, Fault::one_row_short);
        specdec::AutoregressiveDecoder autoregressive(bad_alone, options);
        // The prefill runs the prompt but its last token: one row short of 2.
        CHECK_THROWS_WITH(autoregressive.generate(kMisusePrompt), Catch::Contains("model forward returned 1 logits rows for 2 tokens"));
    }
}

TEST_CASE("an adapter whose logits rows are narrower or wider than its vocabulary is reported", "[errors][misuse]") {
    for (const Fault fault : {Fault::narrow_rows, Fault::wide_rows}) {
        for (const double temperature : {0.0, 1.0}) {
            const specdec::DecodingOptions options{.sampling = {.temperature = temperature}, .max_new_tokens = 8};
            FaultyAdapter bad_target(10, fault), good_draft(10, Fault::none);
            specdec::SpeculativeDecoder with_bad_target(specdec::target(bad_target), specdec::draft(good_draft), options);
            const char* width = fault == Fault::narrow_rows ? "logits rows of 9 values" : "logits rows of 11 values";
            CHECK_THROWS_WITH(with_bad_target.generate(kMisusePrompt),
                              Catch::Contains(width) && Catch::Contains("expected vocab_size() = 10"));
            FaultyAdapter good_target(10, Fault::none), bad_draft(10, fault);
            specdec::SpeculativeDecoder with_bad_draft(specdec::target(good_target), specdec::draft(bad_draft), options);
            CHECK_THROWS_WITH(with_bad_draft.generate(kMisusePrompt), Catch::Contains(width));
            FaultyAdapter bad_alone(10, fault);
            specdec::AutoregressiveDecoder autoregressive(bad_alone, options);
            CHECK_THROWS_WITH(autoregressive.generate(kMisusePrompt), Catch::Contains(width));
        }
    }
}

TEST_CASE("a drafter whose distributions have the wrong width is reported", "[errors][misuse]") {
    ToyLM target({.vocab = 10});
    WrongWidthDrafter drafter{12};
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(drafter), {.draft_tokens = 2, .sampling = {.temperature = 1.0}});
    CHECK_THROWS_WITH(decoder.generate(kMisusePrompt), Catch::Contains("draft distributions have vocabulary 12 but the target has 10"));
}

TEST_CASE("a drafter proposing a negative id is reported", "[errors][misuse]") {
    struct NegativeDrafter {
        void reset() {}
        specdec::DraftProposal propose(const specdec::DraftRequest&) { return {.tokens = {3, -1}}; }
    } drafter;
    ToyLM target({.vocab = 10});
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(drafter), {.draft_tokens = 2});
    CHECK_THROWS_WITH(decoder.generate(kMisusePrompt), Catch::Contains("draft token -1 is outside the target vocabulary [0, 10)"));
}

TEST_CASE("non-finite logits name the model and the position of the token they predict", "[errors][misuse]") {
    // ToyLM's NaN sits in the row after position 4, the row that predicts position 5.
    for (const double temperature : {0.0, 1.0}) {
        INFO("temperature " << temperature);
        const specdec::DecodingOptions options{.draft_tokens = 3, .sampling = {.temperature = temperature}, .max_new_tokens = 20};
        ToyLM bad_target({.vocab = 10, .nan_at_position = 4}), draft({.vocab = 10});
        specdec::SpeculativeDecoder with_bad_target(specdec::target(bad_target), specdec::draft(draft), options);
        CHECK_THROWS_WITH(with_bad_target.generate(kMisusePrompt), Catch::Contains("target model logits at position 5 contain NaN at token 0"));
        ToyLM target({.vocab = 10}), bad_draft({.vocab = 10, .nan_at_position = 4});
        specdec::SpeculativeDecoder with_bad_draft(specdec::target(target), specdec::draft(bad_draft), options);
        CHECK_THROWS_WITH(with_bad_draft.generate(kMisusePrompt), Catch::Contains("draft model logits at position 5 contain NaN"));
        ToyLM bad_alone({.vocab = 10, .nan_at_position = 4});
        specdec::AutoregressiveDecoder autoregressive(bad_alone, options);
        CHECK_THROWS_WITH(autoregressive.generate(kMisusePrompt), Catch::Contains("target model logits at position 5 contain NaN"));
    }
}

TEST_CASE("the acceptance rule rejects non-finite or negative probabilities instead of sampling from them", "[errors][misuse]") {
    const specdec::CounterRng rng{1};
    specdec::DraftProposal draft{.tokens = {1}};
    std::vector<float> p{0.25f, 0.25f, 0.5f, 0.0f, 0.5f, 0.5f};
    const specdec::DistributionRows rows{p.data(), 2, 3};
    CHECK_NOTHROW(specdec::accept_rejection_sampling(draft, rows, rng, 0));
    p[4] = std::nanf("");
    CHECK_THROWS_WITH(specdec::accept_rejection_sampling(draft, rows, rng, 0),
                      Catch::Contains("target distribution row 1 holds nan at token 1"));
    p[4] = -0.5f;
    CHECK_THROWS_WITH(specdec::accept_rejection_sampling(draft, rows, rng, 0), Catch::Contains("holds -0.5"));
    p[4] = 0.5f;
    draft.vocab = 3;
    draft.probabilities = {0.0f, std::numeric_limits<float>::infinity(), 0.0f};
    CHECK_THROWS_WITH(specdec::accept_rejection_sampling(draft, rows, rng, 0),
                      Catch::Contains("draft distribution row 0 holds inf at token 1"));
    // Block verification checks both sides the same way.
    CHECK_THROWS_WITH(specdec::accept_block_verification(draft, rows, rng, 0),
                      Catch::Contains("draft distribution row 0 holds inf at token 1"));
    draft.probabilities = {0.0f, 1.0f, 0.0f};
    CHECK_NOTHROW(specdec::accept_block_verification(draft, rows, rng, 0));
    p[1] = std::nanf("");
    CHECK_THROWS_WITH(specdec::accept_block_verification(draft, rows, rng, 0),
                      Catch::Contains("target distribution row 0 holds nan at token 1"));
    p[1] = 0.25f;
    CHECK_THROWS_WITH(specdec::sample_from_distribution(std::vector<float>{0.5f, std::nanf("")}, 0.5),
                      Catch::Contains("probability nan of token 1"));
    CHECK_THROWS_WITH(specdec::sample_from_distribution(std::vector<float>{0.5f, 0.5f}, 1.0), Catch::Contains("u = 1"));
}
