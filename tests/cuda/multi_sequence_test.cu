// The MultiSequenceLM contract on the device: forward_batch() scores several
// sequences, each in a cache slot of its own, in one pass; its rows equal what
// forward() gives each sequence alone, truncate(slot, n) touches one slot, and
// every bad batch is rejected before any cache changes.
//
// Tolerances: forward_batch runs the weight GEMMs once over the whole pass,
// so a row is computed by a cuBLAS GEMM of another width than the same row in
// a single-sequence forward(), and cuBLAS may pick another algorithm (another
// summation order) for another width. In fp32 the rows then agree to fp32
// rounding, 1e-4 on logits of magnitude ~10 (the bound of the batched vs
// token-by-token test in model_behaviour_test.cu, for the same reason). In
// fp16 a different fp32 sum can round an activation to the neighbouring fp16
// value before the next GEMM, so the rows agree to fp16 rounding: the relative
// L2 bound of fp16 against fp32 (logits_agreement_test.cu), 1e-2. A row read
// from the wrong slot or at the wrong position is off by O(1). Two passes of
// the same shape on the same device are bitwise equal (cuBLAS is
// deterministic for a given shape, architecture and stream), which the
// truncation and validation tests use.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/models/synthetic.hpp"

using specdec::LogitsView;
using specdec::SequenceFeed;
using specdec::Token;
using specdec::cuda::CudaLlamaModel;
using specdec::cuda::Precision;

namespace {

using SlotRows = std::vector<std::vector<float>>;

CudaLlamaModel slotted_model(Precision precision, std::size_t sequences, std::size_t max_context = 64) {
    return CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 4, 0,
                                     {.precision = precision, .max_context = max_context, .sequences = sequences});
}

SlotRows rows_of(const LogitsView& view) {
    SlotRows rows;
    for (std::size_t i = 0; i < view.rows; ++i) rows.emplace_back(view.row(i).begin(), view.row(i).end());
    return rows;
}

float largest_difference(std::span<const float> a, std::span<const float> b) {
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

// A batched row against the same row computed by a single-sequence forward().
void check_batched_row(std::span<const float> batched, std::span<const float> alone, Precision precision) {
    REQUIRE(batched.size() == alone.size());
    if (precision == Precision::f32) {
        CHECK(largest_difference(batched, alone) <= 1e-4f);
    } else {
        CHECK(specdec::test::relative_l2_error(batched, alone) <= 1e-2);
    }
}

std::vector<std::size_t> cached_per_slot(const CudaLlamaModel& model) {
    std::vector<std::size_t> cached;
    for (std::size_t slot = 0; slot < model.sequence_slots(); ++slot) cached.push_back(model.cached_tokens(slot));
    return cached;
}

}  // namespace

TEST_CASE("forward_batch rows equal forward() of each sequence alone on the GPU", "[cuda][model][multi_sequence]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    // Four slots; slot 1 starts in the second pass, so the first pass leaves it empty.
    const std::vector<std::vector<Token>> prompts{{1, 17, 200, 3, 3}, {}, {511, 42, 7, 99, 0, 5, 64, 8, 300}, {250}};
    const std::vector<std::vector<Token>> continuations{{9, 10, 11}, {400, 401}, {77}, {2, 4, 6, 8}};
    for (const Precision precision : {Precision::f32, Precision::f16}) {
        INFO("precision " << specdec::cuda::precision_name(precision));
        CudaLlamaModel batched = slotted_model(precision, 4);
        REQUIRE(batched.sequence_slots() == 4);

        // Pass 1 (prefills, mixed row modes): slot 2 last row only, slot 0 every row, slot 3 every row.
        const std::vector<SequenceFeed> prefill{{.slot = 2, .tokens = prompts[2], .last_row_only = true},
                                                {.slot = 0, .tokens = prompts[0]},
                                                {.slot = 3, .tokens = prompts[3]}};
        const SlotRows first = rows_of(batched.forward_batch(prefill));
        REQUIRE(first.size() == 1 + prompts[0].size() + prompts[3].size());
        CHECK(cached_per_slot(batched) == std::vector<std::size_t>{5, 0, 9, 1});
        CHECK(batched.cached_tokens() == batched.cached_tokens(0));

        // Pass 2 (decode-like steps of different widths, a new sequence in slot 1, slot 3 last row only).
        const std::vector<SequenceFeed> step{{.slot = 0, .tokens = continuations[0]},
                                             {.slot = 3, .tokens = continuations[3], .last_row_only = true},
                                             {.slot = 2, .tokens = continuations[2]},
                                             {.slot = 1, .tokens = continuations[1]}};
        const SlotRows second = rows_of(batched.forward_batch(step));
        REQUIRE(second.size() == 3 + 1 + 1 + 2);
        CHECK(cached_per_slot(batched) == std::vector<std::size_t>{8, 2, 10, 5});

        // Each sequence alone, in a model of one slot, through forward().
        std::vector<SlotRows> prompt_rows(4), continuation_rows(4);
        for (std::size_t slot = 0; slot < 4; ++slot) {
            CudaLlamaModel alone = slotted_model(precision, 1);
            if (!prompts[slot].empty()) prompt_rows[slot] = rows_of(alone.forward(prompts[slot]));
            continuation_rows[slot] = rows_of(alone.forward(continuations[slot]));
        }
        // Pass 1's rows: slot 2's last, slot 0's five, slot 3's one.
        {
            INFO("pass 1, slot 2, last row");
            check_batched_row(first[0], prompt_rows[2].back(), precision);
        }
        for (std::size_t j = 0; j < prompts[0].size(); ++j) {
            INFO("pass 1, slot 0, row " << j);
            check_batched_row(first[1 + j], prompt_rows[0][j], precision);
        }
        {
            INFO("pass 1, slot 3, row 0");
            check_batched_row(first[6], prompt_rows[3][0], precision);
        }
        // Pass 2's rows: slot 0's three, slot 3's last, slot 2's one, slot 1's two.
        for (std::size_t j = 0; j < 3; ++j) {
            INFO("pass 2, slot 0, row " << j);
            check_batched_row(second[j], continuation_rows[0][j], precision);
        }
        {
            INFO("pass 2, slot 3, last row");
            check_batched_row(second[3], continuation_rows[3].back(), precision);
        }
        {
            INFO("pass 2, slot 2, row 0");
            check_batched_row(second[4], continuation_rows[2][0], precision);
        }
        for (std::size_t j = 0; j < 2; ++j) {
            INFO("pass 2, slot 1, row " << j);
            check_batched_row(second[5 + j], continuation_rows[1][j], precision);
        }

        // forward() continues slot 0 where forward_batch left it (and runs its
        // captured graphs at a shape forward_batch never used).
        const std::vector<Token> more{13, 14};
        std::vector<Token> whole = prompts[0];
        whole.insert(whole.end(), continuations[0].begin(), continuations[0].end());
        CudaLlamaModel reference = slotted_model(precision, 1);
        (void)reference.forward(whole);
        for (int round = 0; round < 3; ++round) {  // the first run of a shape is eager, later ones replay a graph
            const SlotRows continued = rows_of(batched.forward(more));
            const SlotRows expected = rows_of(reference.forward(more));
            for (std::size_t j = 0; j < more.size(); ++j) {
                INFO("forward() on slot 0 after forward_batch, round " << round << ", row " << j);
                check_batched_row(continued[j], expected[j], precision);
            }
            batched.truncate(whole.size());
            reference.truncate(whole.size());
        }
        CHECK(cached_per_slot(batched) == std::vector<std::size_t>{8, 2, 10, 5});
    }
}

TEST_CASE("truncate(slot, n) rolls one GPU slot back and leaves the other slots' rows unchanged",
          "[cuda][model][multi_sequence]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<std::vector<Token>> prompts{{5, 6, 7, 8}, {20, 21, 22, 23, 24, 25, 26}, {90, 91, 92}};
    auto prefill = [&](CudaLlamaModel& model) {
        const std::vector<SequenceFeed> feeds{{.slot = 0, .tokens = prompts[0]},
                                              {.slot = 1, .tokens = prompts[1]},
                                              {.slot = 2, .tokens = prompts[2]}};
        (void)model.forward_batch(feeds);
    };
    CudaLlamaModel rolled = slotted_model(Precision::f32, 3);
    CudaLlamaModel untouched = slotted_model(Precision::f32, 3);
    prefill(rolled);
    prefill(untouched);

    rolled.truncate(1, 3);
    CHECK(cached_per_slot(rolled) == std::vector<std::size_t>{4, 3, 3});
    REQUIRE_THROWS_WITH(rolled.truncate(1, 4), Catch::Contains("beyond the 3 cached positions of slot 1"));
    REQUIRE_THROWS_WITH(rolled.truncate(3, 0), Catch::Contains("slot 3 is out of range [0, 3)"));
    REQUIRE_THROWS_WITH(rolled.cached_tokens(3), Catch::Contains("slot 3 is out of range [0, 3)"));
    CHECK(cached_per_slot(rolled) == std::vector<std::size_t>{4, 3, 3});

    // The other slots continue exactly as in a model whose slot 1 was never rolled back.
    const std::vector<Token> next0{30, 31}, next2{40, 41, 42};
    const std::vector<SequenceFeed> others{{.slot = 0, .tokens = next0}, {.slot = 2, .tokens = next2}};
    const SlotRows after_rollback = rows_of(rolled.forward_batch(others));
    const SlotRows without_rollback = rows_of(untouched.forward_batch(others));
    REQUIRE(after_rollback.size() == 5);
    for (std::size_t j = 0; j < after_rollback.size(); ++j) {
        INFO("row " << j);
        CHECK(largest_difference(after_rollback[j], without_rollback[j]) == 0.0f);  // same shapes: bitwise
    }

    // Slot 1 continues from its first three positions, like a fresh sequence of those tokens.
    const std::vector<Token> next1{100, 101, 102, 103};
    const std::vector<SequenceFeed> resumed{{.slot = 1, .tokens = next1}};
    const SlotRows continued = rows_of(rolled.forward_batch(resumed));
    std::vector<Token> sequence(prompts[1].begin(), prompts[1].begin() + 3);
    sequence.insert(sequence.end(), next1.begin(), next1.end());
    CudaLlamaModel fresh = slotted_model(Precision::f32, 1);
    const SlotRows expected = rows_of(fresh.forward(sequence));
    for (std::size_t j = 0; j < next1.size(); ++j) {
        INFO("resumed slot 1, row " << j);
        CHECK(largest_difference(continued[j], expected[3 + j]) <= 1e-4f);
    }

    // truncate(slot, 0) frees the slot: a new sequence there is scored from position 0.
    rolled.truncate(2, 0);
    CHECK(cached_per_slot(rolled) == std::vector<std::size_t>{6, 7, 0});
    const std::vector<SequenceFeed> restarted{{.slot = 2, .tokens = next1}};
    const SlotRows new_sequence = rows_of(rolled.forward_batch(restarted));
    CudaLlamaModel fresh_new = slotted_model(Precision::f32, 1);
    const SlotRows expected_new = rows_of(fresh_new.forward(next1));
    for (std::size_t j = 0; j < next1.size(); ++j) {
        INFO("new sequence in slot 2, row " << j);
        CHECK(largest_difference(new_sequence[j], expected_new[j]) <= 1e-4f);
    }

    // truncate(n) is slot 0's.
    rolled.truncate(1);
    CHECK(cached_per_slot(rolled) == std::vector<std::size_t>{1, 7, 4});
}

TEST_CASE("forward_batch rejects a bad batch on the GPU before any cache changes", "[cuda][errors][multi_sequence]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    REQUIRE_THROWS_WITH(slotted_model(Precision::f32, 0), Catch::Contains("sequences must be at least 1, got 0"));

    const std::vector<Token> six{1, 2, 3, 4, 5, 6}, two{7, 8};
    const std::vector<SequenceFeed> setup{{.slot = 0, .tokens = six}, {.slot = 1, .tokens = two}};
    CudaLlamaModel model = slotted_model(Precision::f32, 3, /*max_context=*/8);
    CudaLlamaModel twin = slotted_model(Precision::f32, 3, /*max_context=*/8);  // sees no bad call
    (void)model.forward_batch(setup);
    (void)twin.forward_batch(setup);
    const std::vector<std::size_t> before{6, 2, 0};
    REQUIRE(cached_per_slot(model) == before);

    // Every bad batch starts with a valid feed: validation comes first, so it is not applied either.
    const std::vector<Token> one{9}, three{10, 11, 12}, none{};
    const std::vector<Token> too_large{10, 512}, negative{-1};
    const std::vector<SequenceFeed> slot_out_of_range{{.slot = 1, .tokens = one}, {.slot = 3, .tokens = one}};
    REQUIRE_THROWS_WITH(model.forward_batch(slot_out_of_range),
                        Catch::Contains("feed 1: slot 3 is out of range [0, 3)"));
    const std::vector<SequenceFeed> repeated{{.slot = 1, .tokens = one}, {.slot = 2, .tokens = one},
                                             {.slot = 1, .tokens = one}};
    REQUIRE_THROWS_WITH(model.forward_batch(repeated), Catch::Contains("feed 2 repeats slot 1 of feed 0"));
    const std::vector<SequenceFeed> empty{{.slot = 1, .tokens = one}, {.slot = 2, .tokens = none}};
    REQUIRE_THROWS_WITH(model.forward_batch(empty), Catch::Contains("feed 1 (slot 2) has no tokens"));
    const std::vector<SequenceFeed> id_too_large{{.slot = 2, .tokens = one}, {.slot = 1, .tokens = too_large}};
    REQUIRE_THROWS_WITH(model.forward_batch(id_too_large),
                        Catch::Contains("feed 1 (slot 1): token id 512 at index 1 is outside the vocabulary [0, 512)"));
    const std::vector<SequenceFeed> id_negative{{.slot = 2, .tokens = one}, {.slot = 1, .tokens = negative}};
    REQUIRE_THROWS_WITH(model.forward_batch(id_negative), Catch::Contains("token id -1 at index 0"));
    const std::vector<SequenceFeed> overflow{{.slot = 1, .tokens = one}, {.slot = 0, .tokens = three}};
    REQUIRE_THROWS_WITH(model.forward_batch(overflow),
                        Catch::Contains("feed 1 of 3 tokens after 6 cached positions in slot 0 overflows its context "
                                        "length 8"));
    REQUIRE_THROWS_AS(model.forward_batch(overflow), specdec::Error);
    CHECK(cached_per_slot(model) == before);

    // An empty batch is a pass over nothing.
    CHECK(model.forward_batch(std::span<const SequenceFeed>{}).rows == 0);
    CHECK(cached_per_slot(model) == before);

    // The caches' contents are unchanged too: the next pass equals the twin's, bit for bit.
    const std::vector<Token> last_two{13, 14};
    const std::vector<SequenceFeed> next{{.slot = 0, .tokens = last_two}, {.slot = 1, .tokens = three},
                                         {.slot = 2, .tokens = one}};
    const SlotRows rows = rows_of(model.forward_batch(next));
    const SlotRows expected = rows_of(twin.forward_batch(next));
    REQUIRE(rows.size() == 6);
    for (std::size_t j = 0; j < rows.size(); ++j) {
        INFO("row " << j);
        CHECK(largest_difference(rows[j], expected[j]) == 0.0f);
    }
    CHECK(cached_per_slot(model) == std::vector<std::size_t>{8, 5, 1});
    // A full slot rejects one more token, naming it.
    const std::vector<SequenceFeed> full{{.slot = 0, .tokens = one}};
    REQUIRE_THROWS_WITH(model.forward_batch(full), Catch::Contains("1 tokens after 8 cached positions in slot 0"));
}

TEST_CASE("the GPU KV cache holds sequences x context x bytes per position, allocated at construction",
          "[cuda][model][multi_sequence]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const specdec::LlamaConfig config = specdec::synthetic_shape("tiny").config;
    const std::size_t per_position = config.layer_count * 2 * config.kv_dim() * sizeof(float);
    CudaLlamaModel one = slotted_model(Precision::f16, 1, 16);
    CudaLlamaModel five = slotted_model(Precision::f16, 5, 16);
    CHECK(one.kv_bytes_per_position() == per_position);
    CHECK(one.kv_cache_bytes() == 16 * per_position);
    CHECK(five.sequence_slots() == 5);
    CHECK(five.kv_cache_bytes() == 5 * 16 * per_position);
    CHECK(five.context_length() == 16);  // per slot
}

TEST_CASE("a model sharing another's device weights computes the same rows with a cache of its own",
          "[cuda][model][multi_sequence]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> prompt{1, 17, 200, 3, 3, 42};
    const std::vector<Token> next{9, 10};
    // What a model of these weights computes: prompt, then the next tokens.
    CudaLlamaModel reference = slotted_model(Precision::f32, 1);
    (void)reference.forward(prompt);
    const SlotRows expected = rows_of(reference.forward(next));

    std::optional<CudaLlamaModel> base(slotted_model(Precision::f32, 1));
    CudaLlamaModel shared = base->sharing_weights({.precision = Precision::f32, .max_context = 32, .sequences = 3});
    CHECK(shared.device_weight_bytes() == base->device_weight_bytes());
    CHECK(shared.sequence_slots() == 3);
    CHECK(shared.context_length() == 32);
    CHECK(shared.kv_cache_bytes() == 3 * 32 * base->kv_bytes_per_position());
    CHECK(shared.name() == base->name());

    // The shared model's passes leave the base's cache alone, and the other way round.
    (void)base->forward(prompt);
    const std::vector<SequenceFeed> feeds{{.slot = 2, .tokens = prompt}};
    (void)shared.forward_batch(feeds);
    CHECK(base->cached_tokens() == prompt.size());
    CHECK(shared.cached_tokens(2) == prompt.size());
    CHECK(shared.cached_tokens(0) == 0);
    const SlotRows from_base = rows_of(base->forward(next));
    REQUIRE(from_base.size() == expected.size());
    for (std::size_t r = 0; r < expected.size(); ++r) CHECK(largest_difference(from_base[r], expected[r]) <= 1e-4f);

    // The weights outlive the model they were made for.
    base.reset();
    const std::vector<SequenceFeed> step{{.slot = 2, .tokens = next}};
    const SlotRows from_shared = rows_of(shared.forward_batch(step));
    REQUIRE(from_shared.size() == expected.size());
    for (std::size_t r = 0; r < expected.size(); ++r) CHECK(largest_difference(from_shared[r], expected[r]) <= 1e-4f);

    // The weights are stored in one precision: asking for another is an error, not a conversion.
    try {
        (void)shared.sharing_weights({.precision = Precision::f16});
        FAIL("no error");
    } catch (const specdec::Error& error) {
        CHECK(std::string(error.what()).find("sharing_weights") != std::string::npos);
        CHECK(std::string(error.what()).find("f32") != std::string::npos);
    }
}
