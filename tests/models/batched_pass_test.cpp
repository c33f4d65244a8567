// The multi-sequence pass of LlamaModel (specdec::MultiSequenceLM): every row
// of forward_batch must be BITWISE the row the same sequence gets alone, from
// forward() on a one-slot model that was fed the same calls, whatever its
// batch mates, the batch size, the slot, the weight storage type; rolling one
// slot back must leave the others as they were; every bad input must throw
// before any cache changes. A negative control shows that the comparison
// catches a path whose rows depend on the pass width.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"
#include "support/sanitizers.hpp"

namespace {

using specdec::LlamaModel;
using specdec::LogitsView;
using specdec::SequenceFeed;
using specdec::Token;
using specdec::WeightType;

using Rows = std::vector<std::vector<float>>;

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One single-slot model per slot of the batched model (replicas over the
// same weights), fed the same calls through forward(), forward_last() and
// truncate(): each holds its sequence exactly as if decoded alone.
std::vector<LlamaModel> alone_models(const LlamaModel& alone, std::size_t count) {
    std::vector<LlamaModel> models;
    for (std::size_t i = 0; i < count; ++i) models.push_back(alone.replica());
    return models;
}

Rows feed_alone(LlamaModel& alone, std::span<const Token> tokens, bool last_row_only) {
    return specdec::test::copy_rows(last_row_only ? alone.forward_last(tokens) : alone.forward(tokens));
}

std::vector<Token> random_tokens(std::mt19937& rng, std::size_t count, std::size_t vocab) {
    std::vector<Token> tokens(count);
    for (Token& t : tokens) t = static_cast<Token>(rng() % vocab);
    return tokens;
}

specdec::SyntheticOptions tiny(WeightType storage, std::size_t sequences, bool batch_invariant = true) {
    return {.size = "tiny", .seed = 9, .target_storage = storage, .threads = 2, .sequences = sequences,
            .batch_invariant = batch_invariant};
}

// A batch of random slots with random feeds, run through forward_batch; each
// returned row is compared with the sequence's rows alone. Returns how many
// rows differed bitwise (0 expected on the invariant path).
struct BatchRun {
    std::size_t rows = 0, mismatched_rows = 0;
};

BatchRun run_and_compare(LlamaModel& batched, std::vector<LlamaModel>& alone, std::mt19937& rng,
                         std::size_t batch_size, std::size_t max_feed, bool allow_wide_feed) {
    const std::size_t vocab = batched.vocab_size();
    std::vector<std::size_t> slots(batched.sequence_slots());
    std::iota(slots.begin(), slots.end(), std::size_t{0});
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(batch_size);
    std::vector<std::vector<Token>> tokens(batch_size);
    std::vector<SequenceFeed> feeds(batch_size);
    for (std::size_t i = 0; i < batch_size; ++i) {
        // Ragged: 1..max_feed tokens, now and then a prompt longer than
        // cpu::kWideColumns admitted among the short feeds.
        const bool wide = allow_wide_feed && rng() % 8 == 0;
        const std::size_t count = wide ? specdec::cpu::kWideColumns + 1 + rng() % 12 : 1 + rng() % max_feed;
        tokens[i] = random_tokens(rng, count, vocab);
        feeds[i] = SequenceFeed{.slot = slots[i], .tokens = tokens[i], .last_row_only = rng() % 4 == 0};
    }
    std::vector<std::size_t> cached_before(batched.sequence_slots());
    for (std::size_t s = 0; s < cached_before.size(); ++s) cached_before[s] = batched.cached_tokens(s);

    const Rows rows = specdec::test::copy_rows(batched.forward_batch(feeds));

    BatchRun run;
    std::size_t row = 0;
    for (std::size_t i = 0; i < batch_size; ++i) {
        const SequenceFeed& feed = feeds[i];
        INFO("feed " << i << " of " << batch_size << ": slot " << feed.slot << ", " << feed.tokens.size() << " tokens after "
                     << cached_before[feed.slot] << (feed.last_row_only ? ", last row only" : ""));
        REQUIRE(alone[feed.slot].cached_tokens() == cached_before[feed.slot]);
        const Rows expected = feed_alone(alone[feed.slot], feed.tokens, feed.last_row_only);
        REQUIRE(row + expected.size() <= rows.size());
        for (std::size_t j = 0; j < expected.size(); ++j, ++row) {
            ++run.rows;
            if (!bitwise_equal(rows[row], expected[j])) ++run.mismatched_rows;
        }
    }
    REQUIRE(row == rows.size());
    for (std::size_t s = 0; s < cached_before.size(); ++s) {
        const auto fed = std::find_if(feeds.begin(), feeds.end(), [s](const SequenceFeed& f) { return f.slot == s; });
        CHECK(batched.cached_tokens(s) == cached_before[s] + (fed == feeds.end() ? 0 : fed->tokens.size()));
    }
    return run;
}

// Prompts of 0..40 tokens, each prefilled alone in its slot (a single-feed
// forward_batch, i.e. forward_last): some longer than cpu::kWideColumns, so
// on dense weights they take the blocked products, as forward_last does.
void prefill_prompts(LlamaModel& batched, std::vector<LlamaModel>& alone, std::mt19937& rng) {
    for (std::size_t slot = 0; slot < batched.sequence_slots(); ++slot) {
        const std::size_t length = rng() % 41;
        if (length == 0) continue;
        const std::vector<Token> prompt = random_tokens(rng, length, batched.vocab_size());
        const SequenceFeed feed{.slot = slot, .tokens = prompt, .last_row_only = true};
        const Rows rows = specdec::test::copy_rows(batched.forward_batch(std::span<const SequenceFeed>(&feed, 1)));
        REQUIRE(rows.size() == 1);
        REQUIRE(bitwise_equal(rows[0], feed_alone(alone[slot], prompt, true)[0]));
    }
}

}  // namespace

TEST_CASE("forward_batch rows are bitwise the rows of each sequence alone, for every batch size, slot and storage type",
          "[model][batch]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0);
    INFO("storage " << specdec::weight_type_name(storage));
    constexpr std::size_t kSlots = 32;
    LlamaModel batched = specdec::make_synthetic_target(tiny(storage, kSlots));
    std::vector<LlamaModel> alone = alone_models(specdec::make_synthetic_target(tiny(storage, 1)), kSlots);
    REQUIRE(batched.sequence_slots() == kSlots);
    REQUIRE(alone[0].sequence_slots() == 1);
    std::mt19937 rng(static_cast<std::uint32_t>(storage) + 17);
    prefill_prompts(batched, alone, rng);

    // Every batch size 1..32 in a random order, so that a slot meets
    // different batch mates, batch sizes and cached lengths; between rounds
    // some sequences roll back (rejected drafts) as a decoder would.
    // Under ThreadSanitizer: the smallest sizes and the widest.
    std::vector<std::size_t> sizes(kSlots);
    std::iota(sizes.begin(), sizes.end(), std::size_t{1});
    if (specdec::test::kUnderThreadSanitizer) sizes = {1, 2, 3, kSlots - 1, kSlots};
    std::shuffle(sizes.begin(), sizes.end(), rng);
    std::size_t rows = 0, mismatched = 0;
    for (const std::size_t batch_size : sizes) {
        INFO("batch of " << batch_size);
        const BatchRun run = run_and_compare(batched, alone, rng, batch_size, 9, /*allow_wide_feed=*/true);
        rows += run.rows;
        mismatched += run.mismatched_rows;
        for (std::size_t slot = 0; slot < kSlots; ++slot) {
            const std::size_t cached = batched.cached_tokens(slot);
            if (cached == 0 || rng() % 3 != 0) continue;
            const std::size_t keep = cached - 1 - rng() % std::min<std::size_t>(cached, 4);
            batched.truncate(slot, keep);
            alone[slot].truncate(keep);
        }
    }
    INFO(mismatched << " of " << rows << " rows differ bitwise from the sequence alone");
    CHECK(rows > (specdec::test::kUnderThreadSanitizer ? 60 : 500));
    CHECK(mismatched == 0);
}

TEST_CASE("a one-feed forward_batch is forward() on its slot: a prompt prefilled alone in slot 5 has slot 0's keys and values",
          "[model][batch]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::f16, WeightType::q8_0);
    INFO("storage " << specdec::weight_type_name(storage));
    LlamaModel model = specdec::make_synthetic_target(tiny(storage, 6));
    std::mt19937 rng(3);
    // 40 tokens: wider than cpu::kWideColumns, the blocked path on dense weights.
    const std::vector<Token> prompt = random_tokens(rng, 40, model.vocab_size());
    const std::vector<Token> next = random_tokens(rng, 3, model.vocab_size());
    const Rows last = specdec::test::copy_rows(model.forward_last(prompt));
    const Rows continued = specdec::test::copy_rows(model.forward(next));
    const SequenceFeed prefill{.slot = 5, .tokens = prompt, .last_row_only = true};
    const Rows batch_last = specdec::test::copy_rows(model.forward_batch(std::span<const SequenceFeed>(&prefill, 1)));
    REQUIRE(batch_last.size() == 1);
    CHECK(bitwise_equal(batch_last[0], last[0]));
    // The same keys and values: the next pass over both slots gives the same rows.
    const SequenceFeed step{.slot = 5, .tokens = next};
    const Rows batch_continued = specdec::test::copy_rows(model.forward_batch(std::span<const SequenceFeed>(&step, 1)));
    REQUIRE(batch_continued.size() == continued.size());
    for (std::size_t j = 0; j < continued.size(); ++j) CHECK(bitwise_equal(batch_continued[j], continued[j]));
    CHECK(model.cached_tokens() == 43);
    CHECK(model.cached_tokens(5) == 43);
    CHECK(model.cached_tokens(3) == 0);
}

TEST_CASE("truncate(slot, n) leaves every other slot bitwise as it was", "[model][batch]") {
    const WeightType storage = GENERATE(WeightType::f16, WeightType::q4_0);
    INFO("storage " << specdec::weight_type_name(storage));
    LlamaModel model = specdec::make_synthetic_target(tiny(storage, 4));
    std::mt19937 rng(11);
    std::vector<std::vector<Token>> prompts;
    for (std::size_t slot = 0; slot < 4; ++slot) {
        prompts.push_back(random_tokens(rng, 6 + 5 * slot, model.vocab_size()));
        const SequenceFeed feed{.slot = slot, .tokens = prompts.back()};
        (void)model.forward_batch(std::span<const SequenceFeed>(&feed, 1));
    }
    const std::vector<Token> a = random_tokens(rng, 4, model.vocab_size()), b = random_tokens(rng, 2, model.vocab_size()),
                             c = random_tokens(rng, 7, model.vocab_size());
    const SequenceFeed probe[] = {{.slot = 3, .tokens = a}, {.slot = 0, .tokens = b}, {.slot = 1, .tokens = c}};
    std::size_t before[4];
    for (std::size_t s = 0; s < 4; ++s) before[s] = model.cached_tokens(s);
    auto run_probe = [&] {
        const Rows rows = specdec::test::copy_rows(model.forward_batch(probe));
        for (const SequenceFeed& feed : probe) model.truncate(feed.slot, before[feed.slot]);
        return rows;
    };
    const Rows reference = run_probe();
    REQUIRE(reference.size() == 13);

    // Slot 2 rolls back and takes other tokens over the positions it freed;
    // then it is freed entirely and reused for a new, longer sequence.
    model.truncate(2, 3);
    CHECK(model.cached_tokens(2) == 3);
    const std::vector<Token> other = random_tokens(rng, 9, model.vocab_size());
    const SequenceFeed refill{.slot = 2, .tokens = other};
    (void)model.forward_batch(std::span<const SequenceFeed>(&refill, 1));
    for (const std::size_t s : {0, 1, 3}) CHECK(model.cached_tokens(s) == before[s]);
    const Rows after_refill = run_probe();
    model.truncate(2, 0);
    const std::vector<Token> longer = random_tokens(rng, 30, model.vocab_size());
    const SequenceFeed reuse{.slot = 2, .tokens = longer};
    (void)model.forward_batch(std::span<const SequenceFeed>(&reuse, 1));
    const Rows after_reuse = run_probe();
    for (std::size_t j = 0; j < reference.size(); ++j) {
        INFO("row " << j);
        CHECK(bitwise_equal(after_refill[j], reference[j]));
        CHECK(bitwise_equal(after_reuse[j], reference[j]));
    }
    CHECK_THROWS_AS(model.truncate(2, 31), specdec::Error);
    CHECK_THROWS_WITH(model.truncate(4, 0), Catch::Contains("slot 4") && Catch::Contains("[0, 4)"));
    CHECK_THROWS_WITH(model.cached_tokens(7), Catch::Contains("slot 7"));
}

TEST_CASE("a forward_batch over slot 0 discards a pending tree; one over other slots keeps it", "[model][batch]") {
    LlamaModel model = specdec::make_synthetic_target(tiny(WeightType::f32, 3));
    const std::vector<Token> prompt = {1, 2, 3, 4}, tree = {5, 6, 7};
    const std::vector<std::int32_t> parents = {-1, 0, 0};
    (void)model.forward(prompt);
    (void)model.forward_tree(tree, parents);
    REQUIRE(model.pending_tree_nodes() == 3);
    const SequenceFeed other{.slot = 2, .tokens = prompt};
    (void)model.forward_batch(std::span<const SequenceFeed>(&other, 1));
    CHECK(model.pending_tree_nodes() == 3);
    const std::vector<std::int32_t> path = {0, 2};
    model.commit_tree(path);
    CHECK(model.cached_tokens() == 6);
    (void)model.forward_tree(tree, parents);
    const SequenceFeed both[] = {{.slot = 1, .tokens = prompt}, {.slot = 0, .tokens = tree}};
    (void)model.forward_batch(both);
    CHECK(model.pending_tree_nodes() == 0);
    CHECK(model.cached_tokens() == 9);
}

TEST_CASE("forward_batch rejects bad feeds before touching any cache", "[model][batch]") {
    // A short context so that a feed can overflow its slot.
    specdec::SyntheticOptions options = tiny(WeightType::f16, 3);
    options.max_context = 24;
    LlamaModel model = specdec::make_synthetic_target(options);
    const std::vector<Token> history0 = {3, 1, 4, 1, 5}, history1 = {9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3};
    for (const auto& [slot, history] : {std::pair{std::size_t{0}, &history0}, std::pair{std::size_t{1}, &history1}}) {
        const SequenceFeed feed{.slot = slot, .tokens = *history};
        (void)model.forward_batch(std::span<const SequenceFeed>(&feed, 1));
    }
    const std::vector<Token> good = {7, 7, 2}, fits = {1, 2, 3, 4}, too_long = {1, 2, 3, 4, 5};
    const std::vector<Token> negative = {4, -1}, too_large = {2, static_cast<Token>(model.vocab_size())};
    const std::vector<Token> none;
    const SequenceFeed probe[] = {{.slot = 0, .tokens = good}, {.slot = 1, .tokens = fits}, {.slot = 2, .tokens = good}};
    const std::size_t before[] = {5, 20, 0};
    auto run_probe = [&] {
        const Rows rows = specdec::test::copy_rows(model.forward_batch(probe));
        for (const SequenceFeed& feed : probe) model.truncate(feed.slot, before[feed.slot]);
        return rows;
    };
    const Rows reference = run_probe();

    struct BadCase {
        const char* what;
        std::vector<SequenceFeed> feeds;
        std::vector<std::string> message_names;
    };
    const BadCase cases[] = {
        {"slot out of range", {{.slot = 0, .tokens = good}, {.slot = 3, .tokens = good}}, {"feed 1", "slot 3", "[0, 3)"}},
        {"repeated slot", {{.slot = 2, .tokens = good}, {.slot = 0, .tokens = good}, {.slot = 2, .tokens = good}},
         {"feed 2", "repeats slot 2"}},
        {"empty feed", {{.slot = 0, .tokens = good}, {.slot = 1, .tokens = none}}, {"feed 1", "slot 1", "no tokens"}},
        {"negative id", {{.slot = 2, .tokens = good}, {.slot = 0, .tokens = negative}}, {"feed 1", "token id -1", "index 1"}},
        {"id past the vocabulary", {{.slot = 0, .tokens = good}, {.slot = 2, .tokens = too_large}},
         {"token id " + std::to_string(model.vocab_size()), "[0, " + std::to_string(model.vocab_size()) + ")"}},
        {"overflow", {{.slot = 0, .tokens = good}, {.slot = 1, .tokens = too_long}},
         {"feed 1 of 5 tokens", "20 cached positions in slot 1", "context length 24", "at most 4"}},
    };
    for (const BadCase& bad : cases) {
        INFO(bad.what);
        try {
            (void)model.forward_batch(bad.feeds);
            FAIL("no error");
        } catch (const specdec::Error& e) {
            const std::string message = e.what();
            for (const std::string& part : bad.message_names) {
                INFO(message);
                CHECK(message.find(part) != std::string::npos);
            }
        }
        for (std::size_t s = 0; s < 3; ++s) CHECK(model.cached_tokens(s) == before[s]);
        const Rows rows = run_probe();
        REQUIRE(rows.size() == reference.size());
        for (std::size_t j = 0; j < rows.size(); ++j) CHECK(bitwise_equal(rows[j], reference[j]));
    }
    // No feeds: no rows, nothing changes.
    CHECK(model.forward_batch({}).rows == 0);
    for (std::size_t s = 0; s < 3; ++s) CHECK(model.cached_tokens(s) == before[s]);
    CHECK_THROWS_WITH(specdec::make_synthetic_target(tiny(WeightType::f32, 0)), Catch::Contains("sequences is 0"));
}

TEST_CASE("the KV cache is sequences x context x bytes per position, allocated at construction; replicas keep the slots",
          "[model][batch]") {
    specdec::SyntheticOptions options = tiny(WeightType::f32, 5);
    options.max_context = 100;
    const LlamaModel model = specdec::make_synthetic_target(options);
    const specdec::LlamaConfig& c = model.config();
    CHECK(model.kv_bytes_per_position() == c.layer_count * 2 * c.kv_dim() * sizeof(float));
    CHECK(model.kv_cache_bytes() == 5 * 100 * model.kv_bytes_per_position());
    const LlamaModel copy = model.replica();
    CHECK(copy.sequence_slots() == 5);
    CHECK(copy.context_length() == 100);
    CHECK(copy.kv_cache_bytes() == model.kv_cache_bytes());
    CHECK(copy.batch_invariant());
}

TEST_CASE("negative control: a width-dependent path is caught by the same bitwise comparison", "[model][batch]") {
    // batch_invariant = false runs a pass wider than cpu::kWideColumns over
    // dense weights as one blocked product, equal to the tile path only up to
    // rounding: the rows of the same sequences must now differ somewhere.
    constexpr std::size_t kSlots = 32;
    LlamaModel batched = specdec::make_synthetic_target(tiny(WeightType::f32, kSlots, /*batch_invariant=*/false));
    std::vector<LlamaModel> alone = alone_models(specdec::make_synthetic_target(tiny(WeightType::f32, 1)), kSlots);
    std::mt19937 rng(5);
    prefill_prompts(batched, alone, rng);
    std::size_t rows = 0, mismatched = 0;
    for (int round = 0; round < 3; ++round) {
        const BatchRun run = run_and_compare(batched, alone, rng, kSlots, 9, /*allow_wide_feed=*/false);
        rows += run.rows;
        mismatched += run.mismatched_rows;
    }
    INFO(mismatched << " of " << rows << " rows differ bitwise");
    CHECK(mismatched > 0);

    // The kernel underneath: the blocked product of 40 columns against the
    // same columns one at a time (bitwise different somewhere), and the tile
    // path over the 40 columns (bitwise equal to one at a time).
    constexpr std::size_t kRows = 64, kCols = 96, kColumns = 40;
    static_assert(kColumns > specdec::cpu::kWideColumns);
    std::normal_distribution<float> normal;
    std::vector<float> weights(kRows * kCols), x(kColumns * kCols);
    for (float& v : weights) v = normal(rng);
    for (float& v : x) v = normal(rng);
    const specdec::WeightMatrix w{WeightType::f32, kRows, kCols, reinterpret_cast<const std::byte*>(weights.data())};
    specdec::cpu::ThreadPool pool(2);
    std::vector<float> blocked(kColumns * kRows), tiles(kColumns * kRows), one_by_one(kColumns * kRows);
    specdec::cpu::matmul(pool, w, x.data(), kCols, kColumns, blocked.data(), kRows, false, /*allow_blocked=*/true);
    specdec::cpu::matmul(pool, w, x.data(), kCols, kColumns, tiles.data(), kRows, false, /*allow_blocked=*/false);
    for (std::size_t col = 0; col < kColumns; ++col) {
        specdec::cpu::matmul(pool, w, x.data() + col * kCols, kCols, 1, one_by_one.data() + col * kRows, kRows);
    }
    CHECK(bitwise_equal(tiles, one_by_one));
    CHECK_FALSE(bitwise_equal(blocked, one_by_one));
    CHECK(specdec::test::relative_difference(blocked, one_by_one) < 1e-5f);
}

TEST_CASE("from_gguf gives a model of LlamaOptions::sequences slots whose batch rows equal its forward()", "[model][batch]") {
    const LlamaModel source = specdec::make_synthetic_target(tiny(WeightType::f16, 1));
    specdec::test::TemporaryFile file("batched-slots.gguf");
    specdec::test::llama_gguf_writer(source.weights()).write(file.path);
    LlamaModel loaded = LlamaModel::from_gguf(file.path, {.threads = 2, .max_context = 64, .sequences = 3});
    CHECK(loaded.sequence_slots() == 3);
    CHECK(loaded.kv_cache_bytes() == 3 * 64 * loaded.kv_bytes_per_position());
    const std::vector<Token> a = {5, 9, 1}, b = {7, 7};
    const Rows alone_a = specdec::test::copy_rows(loaded.forward(a));
    loaded.truncate(0);
    const Rows alone_b = specdec::test::copy_rows(loaded.forward_last(b));
    loaded.truncate(0);
    const SequenceFeed feeds[] = {{.slot = 2, .tokens = b, .last_row_only = true}, {.slot = 0, .tokens = a}};
    const Rows rows = specdec::test::copy_rows(loaded.forward_batch(feeds));
    REQUIRE(rows.size() == 4);
    CHECK(bitwise_equal(rows[0], alone_b[0]));
    for (std::size_t j = 0; j < 3; ++j) CHECK(bitwise_equal(rows[1 + j], alone_a[j]));
}
