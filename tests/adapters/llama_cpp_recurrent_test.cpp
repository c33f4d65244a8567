// Recurrent and hybrid models through the llama.cpp adapter: a state that
// every token overwrites cannot drop its last positions, so the adapter rolls
// back by restoring a checkpoint sequence and replaying tokens
// (llama_cpp_recurrent.hpp). Tested on tiny models the test writes itself
// (llama_cpp_recurrent_models.hpp): llama.cpp's "mamba" (recurrent state
// only), "jamba" (Mamba blocks and attention layers: a hybrid memory) and
// "lfm2" (short convolutions and attention), the last also with llama.cpp's
// own rollback within a pass (LlamaCppOptions::recurrent_snapshots).
//  - a rollback leaves the rows a fresh pass over the kept tokens gives, at,
//    above and below the checkpoint, and in one slot of several;
//  - greedy decoding (autoregressive, speculative, batched over 3 sequences)
//    equals a plain llama.h greedy loop, with rollbacks replaying tokens;
//  - speculative sampling at T = 1 passes the sequence chi-square harness
//    (seen through a window of 3 token ids) with every draft position
//    reached and accepted; a rollback that replays a wrong token is caught.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "adapters/llama_cpp_recurrent_models.hpp"
#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"

namespace llama_cpp_recurrent {

using specdec::DecodingOptions;
using specdec::LlamaCppModel;
using specdec::LogitsView;
using specdec::SamplingOptions;
using specdec::Token;
namespace support = specdec::test::llama_cpp;
using support::RecurrentArchitecture;

const char* name_of(RecurrentArchitecture architecture) {
    switch (architecture) {
        case RecurrentArchitecture::mamba: return "mamba";
        case RecurrentArchitecture::jamba: return "jamba";
        case RecurrentArchitecture::lfm2: return "lfm2";
    }
    return "?";
}

// An architecture, and the snapshots asked of llama.cpp (0: checkpoints and replay only).
struct Case {
    RecurrentArchitecture architecture;
    std::size_t snapshots;
};
constexpr Case kCases[] = {{RecurrentArchitecture::mamba, 0},
                           {RecurrentArchitecture::jamba, 0},
                           {RecurrentArchitecture::lfm2, 0},
                           {RecurrentArchitecture::lfm2, 4}};

specdec::LlamaCppOptions options_for(const Case& c, std::size_t sequences = 1, std::size_t context = 256) {
    specdec::LlamaCppOptions options = support::small_options(sequences, context);
    options.recurrent_snapshots = c.snapshots;
    return options;
}

struct RecurrentPair {
    explicit RecurrentPair(RecurrentArchitecture architecture, double draft_noise = 0.08) : folder(name_of(architecture)) {
        support::write_tiny_recurrent_gguf({.architecture = architecture, .seed = 11}, target);
        support::write_tiny_recurrent_gguf({.architecture = architecture, .seed = 11, .noise = draft_noise}, draft);
    }
    support::TempFolder folder;
    std::filesystem::path target = folder.path() / "target.gguf";
    std::filesystem::path draft = folder.path() / "draft.gguf";
};

std::vector<float> copy_row(const LogitsView& rows, std::size_t r) {
    const auto row = rows.row(r);
    return {row.begin(), row.end()};
}

float largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    float d = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

// The last row of a fresh pass over `tokens` in a model of its own.
std::vector<float> fresh_last_row(const std::filesystem::path& gguf, const std::vector<Token>& tokens) {
    LlamaCppModel model = LlamaCppModel::from_gguf(gguf.string(), support::small_options());
    return copy_row(model.forward_last(tokens), 0);
}

DecodingOptions greedy_options(const LlamaCppModel& target, std::size_t max_new, std::size_t k) {
    return {.draft_tokens = k, .sampling = {.temperature = 0.0}, .seed = 1, .max_new_tokens = max_new,
            .stop_tokens = target.stop_tokens()};
}

// --- the chi-square harness through a window of 3 token ids ---
using Window = support::VocabularyWindow<LlamaCppModel>;
constexpr Token kWindowStart = 300;
constexpr std::size_t kWindow = 3;
constexpr std::size_t kDraftTokens = 3;
constexpr std::size_t kSamples = 4000;
constexpr std::size_t kControlSamples = 2000;

// The negative control: a rollback that replays a wrong last token. It rolls
// the model back one position further than asked and feeds the kept last
// token's neighbour in the window instead: the decoder sees the right count,
// the state is that of another text.
class WrongReplay {
public:
    explicit WrongReplay(Window& model) : model_(&model) {}
    std::size_t vocab_size() const { return model_->vocab_size(); }
    std::size_t context_length() const { return model_->context_length(); }
    std::size_t cached_tokens() const { return model_->cached_tokens(); }
    LogitsView forward(std::span<const Token> tokens) {
        tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
        return model_->forward(tokens);
    }
    void truncate(std::size_t n) {
        if (n == 0 || n == tokens_.size()) {
            model_->truncate(n);
            tokens_.resize(n);
            return;
        }
        tokens_.resize(n);
        model_->truncate(n - 1);
        const Token wrong = static_cast<Token>((tokens_.back() + 1) % static_cast<Token>(kWindow));
        model_->forward(std::span<const Token>(&wrong, 1));
    }

private:
    Window* model_;
    std::vector<Token> tokens_;
};

specdec::test::ExactnessSetup setup_for(Window& target, const SamplingOptions& sampling, const std::string& name,
                                        std::size_t samples) {
    return support::window_exactness_setup(target, kWindow, kDraftTokens, sampling, name, samples);
}

// The test cases stay inside the namespace: the adapter's test files are
// compiled as one unit, and others bring their own kWindow, greedy_options...
TEST_CASE("llama.cpp adapter: a recurrent or hybrid model rolls back to the rows of a fresh pass, at, above and below "
          "its checkpoint and per slot",
          "[llama_cpp][recurrent]") {
    for (const Case& c : kCases) {
        INFO(name_of(c.architecture) << ", snapshots " << c.snapshots);
        RecurrentPair files(c.architecture);
        const std::vector<Token> text{1, 300, 301, 302, 303, 304, 305, 306, 307};
        LlamaCppModel model = LlamaCppModel::from_gguf(files.target.string(), options_for(c, 2));
        REQUIRE(model.rolls_back_by_replay());
        REQUIRE(model.recurrent_snapshots() == c.snapshots);
        const std::vector<Token> head(text.begin(), text.begin() + 4);
        const std::vector<Token> tail(text.begin() + 4, text.end());
        model.forward(head);
        model.forward(tail);  // a checkpoint before this pass, at 4 positions
        // Above the checkpoint: back to 6 positions, then a token other than
        // text[6] (with snapshots: llama.cpp's own rollback within the pass).
        model.truncate(6);
        CHECK(model.snapshot_rollbacks() == (c.snapshots > 0 ? 1u : 0u));
        CHECK(model.cached_tokens() == 6);
        const std::vector<float> above = copy_row(model.forward(std::vector<Token>{310}), 0);
        std::vector<Token> expected(text.begin(), text.begin() + 6);
        expected.push_back(310);
        CHECK(largest_difference(above, fresh_last_row(files.target, expected)) < 1e-3f);
        // One token a pass (no new checkpoint), then back past two passes.
        model.forward(std::vector<Token>{311});
        model.forward(std::vector<Token>{312});
        model.truncate(7);
        const std::vector<float> two_passes_back = copy_row(model.forward(std::vector<Token>{313}), 0);
        expected.push_back(313);
        CHECK(largest_difference(two_passes_back, fresh_last_row(files.target, expected)) < 1e-3f);
        // Below the checkpoint: replayed from nothing.
        model.truncate(2);
        const std::vector<float> below = copy_row(model.forward(std::vector<Token>{314}), 0);
        CHECK(largest_difference(below, fresh_last_row(files.target, {text[0], text[1], 314})) < 1e-3f);
        CHECK(model.replayed_tokens() > 0);
        // Two rollbacks before the next pass: llama.cpp's snapshots serve one
        // only, the second restores the checkpoint.
        model.forward(std::vector<Token>{315, 315, 315});
        const std::size_t own_before = model.snapshot_rollbacks();
        model.truncate(5);
        model.truncate(4);
        CHECK(model.snapshot_rollbacks() - own_before == (c.snapshots > 0 ? 1u : 0u));
        CHECK(largest_difference(copy_row(model.forward(std::vector<Token>{316}), 0),
                                 fresh_last_row(files.target, {text[0], text[1], 314, 315, 316})) < 1e-3f);

        // Per slot: slot 1 rolls back inside a batch pass, slot 0 is untouched.
        model.truncate(0, 0);
        const specdec::SequenceFeed feeds[] = {{.slot = 0, .tokens = head}, {.slot = 1, .tokens = text}};
        model.forward_batch(feeds);
        model.truncate(1, 5);
        const std::vector<Token> next{316};
        const specdec::SequenceFeed again[] = {{.slot = 0, .tokens = next}, {.slot = 1, .tokens = next}};
        const LogitsView rows = model.forward_batch(again);
        std::vector<Token> slot0 = head, slot1(text.begin(), text.begin() + 5);
        slot0.push_back(316);
        slot1.push_back(316);
        CHECK(largest_difference(copy_row(rows, 0), fresh_last_row(files.target, slot0)) < 1e-3f);
        CHECK(largest_difference(copy_row(rows, 1), fresh_last_row(files.target, slot1)) < 1e-3f);
        CHECK(model.cached_tokens(0) == 5);
        CHECK(model.cached_tokens(1) == 6);
    }
}

TEST_CASE("llama.cpp adapter: greedy decoders on a recurrent and a hybrid model equal a plain llama.h greedy loop",
          "[llama_cpp][recurrent][greedy]") {
    for (const Case& c : kCases) {
        INFO(name_of(c.architecture) << ", snapshots " << c.snapshots);
        RecurrentPair files(c.architecture);
        const std::vector<Token> prompt{1, 300, 305, 310};
        const std::size_t n = 40;
        const std::vector<Token> expected = support::plain_greedy(files.target, prompt, n);
        LlamaCppModel target = LlamaCppModel::from_gguf(files.target.string(), options_for(c));
        LlamaCppModel draft = LlamaCppModel::from_gguf(files.draft.string(), options_for(c));
        specdec::check_same_vocabulary(target, draft);
        {
            INFO("autoregressive");
            specdec::AutoregressiveDecoder<LlamaCppModel> decoder(target, greedy_options(target, n, 1));
            CHECK(decoder.generate(prompt).tokens == expected);
        }
        for (const std::size_t k : {1, 3, 6}) {
            INFO("speculative, k = " << k);
            const auto rollbacks = [&] {
                return target.replayed_tokens() + draft.replayed_tokens() + target.snapshot_rollbacks() +
                       draft.snapshot_rollbacks();
            };
            const std::size_t rollbacks_before = rollbacks();
            // A fixed k: each length's rollbacks are what the loop covers.
            specdec::SpeculativeDecoder<LlamaCppModel, LlamaCppModel, specdec::TokenwiseRejection, specdec::FixedLength> decoder(
                specdec::target(target), specdec::draft(draft), greedy_options(target, n, k));
            const specdec::GenerationResult result = decoder.generate(prompt);
            CHECK(result.tokens == expected);
            CHECK(result.stats.draft_tokens_accepted > 0);
            CHECK(result.stats.draft_tokens_accepted < result.stats.draft_tokens_proposed);  // rollbacks happened
            CHECK(rollbacks() > rollbacks_before);
        }
        // With snapshots the target's verification passes roll back without a replay.
        CHECK((target.snapshot_rollbacks() > 0) == (c.snapshots > 0));
        {
            INFO("batched over 3 sequences");
            LlamaCppModel targets = LlamaCppModel::from_gguf(files.target.string(), options_for(c, 3));
            LlamaCppModel drafts = LlamaCppModel::from_gguf(files.draft.string(), options_for(c, 3));
            specdec::BatchedDecoder<LlamaCppModel, LlamaCppModel> decoder(specdec::target(targets), specdec::draft(drafts));
            std::size_t submitted = 0, finished = 0;
            while (submitted < 3 || !decoder.idle()) {
                if (submitted < 3) {
                    decoder.submit(prompt, greedy_options(target, n, 1 + 2 * submitted));
                    ++submitted;
                }
                decoder.step();
                for (const specdec::RequestResult& result : decoder.take_finished()) {
                    INFO("request " << result.id << ": " << result.error);
                    REQUIRE(result.status == specdec::RequestStatus::finished);
                    CHECK(result.generation.tokens == expected);
                    ++finished;
                }
            }
            CHECK(finished == 3);
            // The slots a step rolls back replay together, in one pass before
            // the next (with snapshots the target's rollbacks need no replay).
            if (c.snapshots == 0) {
                CHECK(targets.replayed_rollbacks() > 0);
                CHECK(targets.replay_passes() < targets.replayed_rollbacks());
            }
        }
    }
}

TEST_CASE("llama.cpp adapter: speculative sampling on a recurrent and a hybrid model passes the sequence chi-square "
          "with every draft position reached, and a rollback that replays a wrong token is caught",
          "[llama_cpp][recurrent][exactness]") {
    for (const Case& c : kCases) {
        const std::string name = std::string(name_of(c.architecture)) + ", snapshots " + std::to_string(c.snapshots);
        INFO(name);
        RecurrentPair files(c.architecture, 0.1);
        LlamaCppModel target = LlamaCppModel::from_gguf(files.target.string(), options_for(c, 1, 64));
        LlamaCppModel draft = LlamaCppModel::from_gguf(files.draft.string(), options_for(c, 1, 64));
        Window target_window{target, kWindowStart, kWindow};
        Window draft_window{draft, kWindowStart, kWindow};
        const SamplingOptions sampling{.temperature = 1.0};
        const DecodingOptions options{.draft_tokens = kDraftTokens, .sampling = sampling,
                                      .max_new_tokens = kDraftTokens + 1};
        {
            const auto setup = setup_for(target_window, sampling,
                                         "llama.cpp adapter, " + name + ", token-wise, k 3",
                                         kSamples);
            const auto report = specdec::test::run_exactness(
                setup, specdec::test::speculative_runner(target_window, draft_window, options, setup.prompt));
            specdec::test::check_exact(report, kDraftTokens);
            for (std::size_t i = 0; i < kDraftTokens; ++i) CHECK(report.accepted[i] > 0);
            CHECK(draft.replayed_tokens() > 0);
            if (c.snapshots == 0) CHECK(target.replayed_tokens() > 0);
            else CHECK(target.snapshot_rollbacks() > 0);
        }
        {
            WrongReplay buggy(target_window);
            const auto setup = setup_for(target_window, sampling,
                                         "negative control, " + name + ": a replay of a wrong token",
                                         kControlSamples);
            const auto report = specdec::test::run_exactness(
                setup, specdec::test::speculative_runner(buggy, draft_window, options, setup.prompt));
            specdec::test::check_caught(report, kDraftTokens);
        }
    }
}

}  // namespace llama_cpp_recurrent
