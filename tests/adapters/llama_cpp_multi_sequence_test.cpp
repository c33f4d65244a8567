// The llama.cpp adapter as a MultiSequenceLM: one forward_batch over several
// sequences gives each sequence the rows forward() gives it alone, truncation
// is per slot, and inputs longer than llama.cpp's batch are fed in chunks.
//
// Tolerance: llama.cpp's CPU kernels are not batch invariant (a product over
// 1 row and over 12 rows may accumulate in different orders), so rows of the
// same token in different passes agree up to rounding, not bitwise: here
// within 1e-4 (absolute, logits of magnitude ~10 on the F32 synthetic model),
// and with the same argmax. Rows of the same pass shapes are bitwise equal.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "adapters/llama_cpp_test_support.hpp"
#include "support/catch.hpp"

namespace llama_cpp_multi_sequence {

using specdec::LlamaCppModel;
using specdec::LogitsView;
using specdec::SequenceFeed;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

constexpr float kTolerance = 1e-4f;

std::vector<Token> tokens_from(Token first, std::size_t n) {
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < n; ++i) tokens.push_back(static_cast<Token>(first + (i * 13) % 100));
    return tokens;
}

using Rows = std::vector<std::vector<float>>;
Rows copy_rows(const LogitsView& view, std::size_t first = 0, std::size_t count = SIZE_MAX) {
    Rows rows;
    for (std::size_t r = first; r < view.rows && r - first < count; ++r) {
        const auto row = view.row(r);
        rows.emplace_back(row.begin(), row.end());
    }
    return rows;
}

void check_close(const Rows& a, const Rows& b, float tolerance = kTolerance) {
    REQUIRE(a.size() == b.size());
    for (std::size_t r = 0; r < a.size(); ++r) {
        INFO("row " << r);
        REQUIRE(a[r].size() == b[r].size());
        float worst = 0.0f;
        for (std::size_t i = 0; i < a[r].size(); ++i) worst = std::max(worst, std::abs(a[r][i] - b[r][i]));
        CHECK(worst <= tolerance);
        CHECK(std::max_element(a[r].begin(), a[r].end()) - a[r].begin() ==
              std::max_element(b[r].begin(), b[r].end()) - b[r].begin());
    }
}

struct Files {
    support::TempFolder folder{"multi-sequence"};
    support::ExportedPair pair = support::export_synthetic_pair(folder.path());
};

}  // namespace llama_cpp_multi_sequence

using namespace llama_cpp_multi_sequence;

TEST_CASE("llama.cpp adapter: forward_batch gives each sequence the rows forward gives it alone, and truncate is per slot",
          "[llama_cpp][multi-sequence]") {
    const Files files;
    // A cache stream per sequence (the default) and one unified cache.
    const bool unified = GENERATE(false, true);
    INFO("unified cache: " << unified);
    // In one unified cache a rollback leaves holes that the next pass fills,
    // so a sequence's keys no longer lie in position order and attention sums
    // them in another order: rows then agree to ~2e-3 (still the same argmax).
    const float tolerance = unified ? 5e-3f : kTolerance;
    specdec::LlamaCppOptions multi_options = support::small_options(3, 128);
    multi_options.unified_cache = unified;
    LlamaCppModel single = LlamaCppModel::from_gguf(files.pair.target.string(), support::small_options(1, 128));
    LlamaCppModel multi = LlamaCppModel::from_gguf(files.pair.target.string(), multi_options);
    REQUIRE(multi.sequence_slots() == 3);
    REQUIRE(single.sequence_slots() == 1);
    // A ragged pass splits in cache streams only, and one slot is never ragged.
    CHECK(multi.ragged_passes_split() == !unified);
    CHECK_FALSE(single.ragged_passes_split());

    const std::vector<Token> a = tokens_from(300, 9), b = tokens_from(400, 5), c = tokens_from(350, 12);
    // Prompts of the three sequences in one pass, slot order scrambled; slot 2 wants only its last row.
    const SequenceFeed prompts[] = {{.slot = 1, .tokens = b}, {.slot = 0, .tokens = a},
                                    {.slot = 2, .tokens = c, .last_row_only = true}};
    const LogitsView batch = multi.forward_batch(prompts);
    REQUIRE(batch.rows == b.size() + a.size() + 1);
    const Rows batch_b = copy_rows(batch, 0, b.size()), batch_a = copy_rows(batch, b.size(), a.size()),
               batch_c = copy_rows(batch, b.size() + a.size(), 1);
    CHECK(multi.cached_tokens(0) == a.size());
    CHECK(multi.cached_tokens(1) == b.size());
    CHECK(multi.cached_tokens(2) == c.size());

    check_close(batch_a, copy_rows(single.forward(a)));
    single.truncate(0);
    check_close(batch_b, copy_rows(single.forward(b)));
    single.truncate(0);
    check_close(batch_c, copy_rows(single.forward_last(c)));

    // Verification-shaped pass: each sequence appends 4 tokens after a
    // rollback of its own; the others stay as they are.
    multi.truncate(1, 3);
    CHECK(multi.cached_tokens(0) == a.size());
    CHECK(multi.cached_tokens(1) == 3);
    CHECK(multi.cached_tokens(2) == c.size());
    const std::vector<Token> next_a = tokens_from(310, 4), next_b = tokens_from(410, 4);
    const SequenceFeed step[] = {{.slot = 0, .tokens = next_a}, {.slot = 1, .tokens = next_b}};
    const LogitsView rows = multi.forward_batch(step);
    REQUIRE(rows.rows == 8);
    CHECK(multi.cached_tokens(2) == c.size());  // not fed, untouched

    single.truncate(0);
    single.forward(a);
    check_close(copy_rows(rows, 0, 4), copy_rows(single.forward(next_a)), tolerance);
    single.truncate(0);
    single.forward(std::span<const Token>(b).first(3));
    check_close(copy_rows(rows, 4, 4), copy_rows(single.forward(next_b)), tolerance);

    // Slot 2 continues where its prompt ended, unaffected by the others' rollbacks.
    const std::vector<Token> next_c{305};
    const SequenceFeed third{.slot = 2, .tokens = next_c};
    const Rows continued = copy_rows(multi.forward_batch({&third, 1}));
    single.truncate(0);
    single.forward(c);
    check_close(continued, copy_rows(single.forward(next_c)), tolerance);

    // truncate(slot, 0) frees a slot; an empty pass changes nothing.
    multi.truncate(0, 0);
    CHECK(multi.cached_tokens(0) == 0);
    CHECK(multi.forward_batch({}).rows == 0);
    CHECK(multi.cached_tokens(1) == 7);
}

TEST_CASE("llama.cpp adapter: an input longer than llama.cpp's batch is fed in chunks with the same rows",
          "[llama_cpp][multi-sequence]") {
    const Files files;
    specdec::LlamaCppOptions chunked = support::small_options(2, 128);
    chunked.batch = 16;
    LlamaCppModel small_batches = LlamaCppModel::from_gguf(files.pair.target.string(), chunked);
    LlamaCppModel one_batch = LlamaCppModel::from_gguf(files.pair.target.string(), support::small_options(2, 128));
    REQUIRE(small_batches.batch_capacity() == 16);

    const std::vector<Token> long_prompt = tokens_from(300, 50);
    const Rows expected = copy_rows(one_batch.forward(long_prompt));
    check_close(copy_rows(small_batches.forward(long_prompt)), expected);
    CHECK(small_batches.cached_tokens() == 50);
    small_batches.truncate(0);
    const auto last = small_batches.forward_last(long_prompt);
    REQUIRE(last.rows == 1);
    check_close(copy_rows(last), {expected.back()});

    // Two sequences of 30 tokens in one forward_batch of 60 > 16 tokens.
    small_batches.truncate(0);
    one_batch.truncate(0);
    const std::vector<Token> other = tokens_from(410, 30);
    const SequenceFeed feeds[] = {{.slot = 0, .tokens = std::span<const Token>(long_prompt).first(30)},
                                  {.slot = 1, .tokens = other}};
    check_close(copy_rows(small_batches.forward_batch(feeds)), copy_rows(one_batch.forward_batch(feeds)));
    CHECK(small_batches.cached_tokens(0) == 30);
    CHECK(small_batches.cached_tokens(1) == 30);
}

TEST_CASE("llama.cpp adapter: new_context shares the loaded weights with a cache of its own and keeps their placement",
          "[llama_cpp][multi-sequence]") {
    const Files files;
    std::optional<LlamaCppModel> loaded = LlamaCppModel::from_gguf(files.pair.target.string(), support::small_options(1, 128));
    LlamaCppModel fresh = LlamaCppModel::from_gguf(files.pair.target.string(), support::small_options(1, 128));
    LlamaCppModel shared = loaded->new_context(support::small_options(4, 64));
    CHECK(shared.model() == loaded->model());  // the same weights, not a second load
    CHECK(shared.context() != loaded->context());
    CHECK(shared.sequence_slots() == 4);
    CHECK(shared.context_length() == 64);
    CHECK(shared.name() == loaded->name());

    const std::vector<Token> a = tokens_from(300, 9), b = tokens_from(420, 6);
    const Rows expected_a = copy_rows(fresh.forward(a));
    loaded->forward(b);  // the loading model's cache holds something else
    const SequenceFeed feed{.slot = 3, .tokens = a};
    check_close(copy_rows(shared.forward_batch({&feed, 1})), expected_a);
    CHECK(shared.cached_tokens(3) == a.size());
    CHECK(shared.cached_tokens(0) == 0);
    CHECK(loaded->cached_tokens() == b.size());

    // The weights outlive the model that loaded them.
    loaded.reset();
    shared.truncate(3, 4);
    fresh.truncate(4);
    const std::vector<Token> next = tokens_from(330, 3);
    const SequenceFeed step{.slot = 3, .tokens = next};
    check_close(copy_rows(shared.forward_batch({&step, 1})), copy_rows(fresh.forward(next)));

    // Contexts of other sizes, and a placement the loaded weights do not have.
    CHECK_THROWS_WITH(shared.new_context(support::small_options(0, 64)),
                      Catch::Matchers::Contains("LlamaCppOptions::sequences is 0"));
    specdec::LlamaCppOptions elsewhere = support::small_options(1, 64);
    elsewhere.gpu_layers = -1;
    CHECK_THROWS_WITH(shared.new_context(elsewhere), Catch::Matchers::Contains("new_context cannot move the loaded weights"));
    elsewhere.gpu_layers = 0;
    elsewhere.rpc_servers = {"127.0.0.1:1"};
    CHECK_THROWS_WITH(shared.new_context(elsewhere), Catch::Matchers::Contains("new_context cannot move the loaded weights"));
}
