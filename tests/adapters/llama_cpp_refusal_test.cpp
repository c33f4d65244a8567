// What the llama.cpp adapter refuses, and that a refusal leaves the cache as
// it was: mismatched vocabularies, context overflow, ids out of range, a
// decode that fails inside llama.cpp (stopped by the abort callback after
// part of the batch was stored), truncation past the cache, a file llama.cpp
// cannot load, and a memory that cannot roll back.
//
// No recurrent or hybrid GGUF is at hand, so the rollback probe is tested on
// its own against memories that refuse or misreport a partial removal; on
// every real model loaded here it passes (the load would throw otherwise).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "adapters/llama_cpp_test_support.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

namespace llama_cpp_refusal {

using Catch::Matchers::Contains;
using specdec::LlamaCppModel;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

std::vector<Token> some_tokens(std::size_t n, Token first = 300) {
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < n; ++i) tokens.push_back(static_cast<Token>(first + (i * 7) % 50));
    return tokens;
}

std::vector<float> last_row(const specdec::LogitsView& view) {
    const auto row = view.last_row();
    return {row.begin(), row.end()};
}

// A memory for the rollback probe: `removes` whether llama_memory_seq_rm
// succeeds, `left` the last position it then reports.
struct FakeMemory {
    bool decodes = true;
    bool removes = true;
    int left = 0;
    bool cleared = false;
    bool decode_two_tokens() { return decodes; }
    bool remove_from(int position) {
        CHECK(position == 1);
        return removes;
    }
    int last_position() { return left; }
    void clear() { cleared = true; }
};

// Stops llama_decode once the context's sequence 0 reaches `position`: the
// first physical batches are then in the cache when it returns.
struct AbortAt {
    llama_context* context;
    llama_pos position;
    static bool callback(void* data) {
        const auto* self = static_cast<const AbortAt*>(data);
        return llama_memory_seq_pos_max(llama_get_memory(self->context), 0) >= self->position;
    }
};

}  // namespace llama_cpp_refusal

using namespace llama_cpp_refusal;

TEST_CASE("llama.cpp adapter: the rollback probe refuses a memory that cannot drop a suffix", "[llama_cpp][refusal]") {
    FakeMemory fine;
    CHECK(specdec::llama_cpp::probe_partial_rollback(fine).partial_rollback);
    CHECK(fine.cleared);

    FakeMemory recurrent{.removes = false};
    const auto refused = specdec::llama_cpp::probe_partial_rollback(recurrent);
    CHECK_FALSE(refused.partial_rollback);
    CHECK_THAT(refused.reason, Contains("refused to remove"));
    CHECK(recurrent.cleared);

    FakeMemory misreporting{.left = 1};  // claims success but keeps the position
    const auto wrong = specdec::llama_cpp::probe_partial_rollback(misreporting);
    CHECK_FALSE(wrong.partial_rollback);
    CHECK_THAT(wrong.reason, Contains("ends at position 1"));

    FakeMemory broken{.decodes = false};
    CHECK_FALSE(specdec::llama_cpp::probe_partial_rollback(broken).partial_rollback);
}

TEST_CASE("llama.cpp adapter: llama_decode's return codes are told apart by what they leave in the cache",
          "[llama_cpp][refusal]") {
    using specdec::llama_cpp::DecodeOutcome;
    using specdec::llama_cpp::decode_outcome;
    using specdec::llama_cpp::leaves_partial_batch;
    CHECK(decode_outcome(0) == DecodeOutcome::ok);
    CHECK(decode_outcome(1) == DecodeOutcome::no_slot);
    CHECK(decode_outcome(2) == DecodeOutcome::aborted);
    CHECK(decode_outcome(-1) == DecodeOutcome::invalid_batch);
    CHECK(decode_outcome(-3) == DecodeOutcome::fatal);
    CHECK(decode_outcome(7) == DecodeOutcome::warning);
    // Aborted and fatal decodes keep the ubatches they stored; the others restore the memory.
    CHECK(leaves_partial_batch(DecodeOutcome::aborted));
    CHECK(leaves_partial_batch(DecodeOutcome::fatal));
    CHECK_FALSE(leaves_partial_batch(DecodeOutcome::no_slot));
    CHECK_FALSE(leaves_partial_batch(DecodeOutcome::invalid_batch));
    CHECK_THAT(specdec::llama_cpp::describe_decode_code(1), Contains("returned 1") && Contains("no KV cache slot"));
    CHECK_THAT(specdec::llama_cpp::describe_decode_code(-2), Contains("fatal"));

    // A batch without a KV slot is split between sequences, nearest the middle.
    using specdec::llama_cpp::sequence_boundary_near_middle;
    const std::vector<std::int32_t> three{0, 0, 0, 1, 1, 2, 2, 2};
    CHECK(sequence_boundary_near_middle(three) == 3);
    const std::vector<std::int32_t> lopsided{4, 4, 4, 4, 4, 4, 4, 1};
    CHECK(sequence_boundary_near_middle(lopsided) == 7);
    const std::vector<std::int32_t> alone{2, 2, 2, 2};
    CHECK(sequence_boundary_near_middle(alone) == 0);
}

TEST_CASE("llama.cpp adapter: mismatched vocabularies are refused, naming both models", "[llama_cpp][refusal]") {
    const support::TempFolder folder("vocabulary");
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());
    const LlamaCppModel synthetic = LlamaCppModel::from_gguf(files.target.string(), support::small_options());
    const LlamaCppModel draft = LlamaCppModel::from_gguf(files.draft.string(), support::small_options());
    CHECK_NOTHROW(specdec::check_same_vocabulary(synthetic, draft));
    for (const std::string other : {"llama3-f32.gguf", "qwen2-f32.gguf"}) {
        const LlamaCppModel model = LlamaCppModel::from_gguf(support::repo_fixture(other).string(), support::small_options());
        INFO(other);
        CHECK_THROWS_WITH(specdec::check_same_vocabulary(synthetic, model),
                          Contains(synthetic.name()) && Contains(model.name()) && Contains("vocabular"));
    }
}

TEST_CASE("llama.cpp adapter: overflow, ids out of range and truncation past the cache throw and change nothing",
          "[llama_cpp][refusal]") {
    const support::TempFolder folder("overflow");
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());
    LlamaCppModel model = LlamaCppModel::from_gguf(files.target.string(), support::small_options(2, 32));
    CHECK(model.context_length() == 32);
    const std::vector<Token> prompt = some_tokens(20);
    const std::vector<float> before = last_row(model.forward(prompt));
    REQUIRE(model.cached_tokens() == 20);

    CHECK_THROWS_WITH(model.forward(some_tokens(13)), Contains("overflows the context length 32"));
    CHECK_THROWS_WITH(model.forward_last(some_tokens(13)), Contains("overflows"));
    CHECK_THROWS_WITH(model.forward(std::vector<Token>{5, static_cast<Token>(model.vocab_size())}),
                      Contains("outside the vocabulary"));
    CHECK_THROWS_WITH(model.forward(std::vector<Token>{-1}), Contains("outside the vocabulary"));
    const std::vector<Token> too_many = some_tokens(33);
    const specdec::SequenceFeed too_long{.slot = 1, .tokens = too_many};
    CHECK_THROWS_WITH(model.forward_batch({&too_long, 1}), Contains("overflows"));
    const std::vector<Token> one = some_tokens(1);
    const specdec::SequenceFeed no_slot{.slot = 2, .tokens = one};
    CHECK_THROWS_WITH(model.forward_batch({&no_slot, 1}), Contains("out of range"));
    CHECK_THROWS_WITH(model.truncate(21), Contains("expected n <= cached_tokens()"));
    CHECK_THROWS(model.truncate(5, 0));
    CHECK_THROWS(model.cached_tokens(2));
    CHECK(model.cached_tokens() == 20);
    CHECK(model.cached_tokens(1) == 0);

    // The cache is intact: rolling back one position and feeding it again
    // gives the row it gave before (up to the rounding of a pass of another
    // width: llama.cpp's kernels are not batch invariant).
    model.truncate(19);
    const std::vector<float> again = last_row(model.forward(std::span<const Token>(prompt).last(1)));
    REQUIRE(again.size() == before.size());
    for (std::size_t i = 0; i < again.size(); ++i) REQUIRE(std::abs(again[i] - before[i]) <= 1e-4f);
    // Exactly full is allowed.
    CHECK(model.forward(some_tokens(12)).rows == 12);
    CHECK(model.cached_tokens() == 32);
}

TEST_CASE("llama.cpp adapter: a decode that fails inside llama.cpp throws with its meaning and leaves the cache as it was",
          "[llama_cpp][refusal]") {
    const support::TempFolder folder("abort");
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());
    // Physical batches of 8: a pass of 40 tokens is stored 8 at a time, so
    // an abort after the first leaves some of it in llama.cpp's memory.
    specdec::LlamaCppOptions options = support::small_options(1, 128);
    options.batch = 64;
    options.ubatch = 8;
    LlamaCppModel model = LlamaCppModel::from_gguf(files.target.string(), options);
    const std::vector<Token> prompt = some_tokens(10);
    model.forward(prompt);
    const std::vector<Token> more = some_tokens(40, 320);
    const std::vector<float> expected = last_row(model.forward(more));
    model.truncate(10);

    AbortAt abort{model.context(), 10 + 8};
    llama_set_abort_callback(model.context(), &AbortAt::callback, &abort);
    CHECK_THROWS_WITH(model.forward(more), Contains(model.name()) && Contains("aborted"));
    CHECK(model.cached_tokens() == 10);
    CHECK(llama_memory_seq_pos_max(llama_get_memory(model.context()), 0) == 9);
    llama_set_abort_callback(model.context(), nullptr, nullptr);

    // Still usable, and the rows are those of the undisturbed pass.
    CHECK(last_row(model.forward(more)) == expected);
    CHECK(model.cached_tokens() == 50);
}

TEST_CASE("llama.cpp adapter: a file llama.cpp cannot load is refused with its name", "[llama_cpp][refusal]") {
    const support::TempFolder folder("not-gguf");
    const std::filesystem::path path = folder.path() / "not-a-model.gguf";
    std::ofstream(path) << "this is not a GGUF file";
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(path.string()), Contains("not-a-model.gguf"));
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf((folder.path() / "missing.gguf").string()), Contains("no such file"));
    // What llama.cpp logged about the failure reaches the message.
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(support::repo_fixture("llama-gqa-f32.gguf").string()),
                      Contains("llama-gqa-f32.gguf") && Contains("unknown pre-tokenizer type"));
    specdec::LlamaCppOptions no_sequences;
    no_sequences.sequences = 0;
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(support::repo_fixture("llama3-q8_0.gguf").string(), no_sequences),
                      Contains("sequences is 0"));
}
