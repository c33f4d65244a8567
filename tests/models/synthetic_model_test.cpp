// The synthetic family: deterministic in its seed, shaped like a language
// model (peaked, non-degenerate), with drafts whose acceptance is realistic
// and a control whose acceptance is near zero.
#include <set>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/decoding/pair_statistics.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"

namespace {

using specdec::LlamaModel;
using specdec::SyntheticDraftKind;
using specdec::Token;

const std::vector<Token> kPrompt = {1, 17, 230, 42, 99, 5};

}  // namespace

TEST_CASE("a synthetic model is a pure function of its seed", "[model][synthetic]") {
    LlamaModel a = specdec::make_synthetic_target({.size = "tiny", .seed = 11});
    LlamaModel b = specdec::make_synthetic_target({.size = "tiny", .seed = 11, .threads = 1});
    LlamaModel c = specdec::make_synthetic_target({.size = "tiny", .seed = 12});
    const auto& wa = a.weights().layers[1].ffn_up;
    const auto& wb = b.weights().layers[1].ffn_up;
    REQUIRE(wa.byte_size() == wb.byte_size());
    CHECK(std::equal(wa.data, wa.data + wa.byte_size(), wb.data));  // identical bytes whatever the thread count
    const auto logits_a = specdec::test::copy_rows(a.forward(kPrompt));
    const auto logits_b = specdec::test::copy_rows(b.forward(kPrompt));
    const auto logits_c = specdec::test::copy_rows(c.forward(kPrompt));
    for (std::size_t i = 0; i < kPrompt.size(); ++i) {
        CHECK(logits_a[i] == logits_b[i]);
        CHECK(specdec::test::max_abs_difference(logits_a[i], logits_c[i]) > 0.5f);
    }
}

TEST_CASE("the tiny synthetic target is peaked like a language model and its greedy output does not collapse",
          "[model][synthetic]") {
    LlamaModel target = specdec::make_synthetic_target({.size = "tiny"});
    LlamaModel draft = specdec::make_synthetic_draft({.size = "tiny"});
    const auto stats = specdec::measure_pair(target, draft, {.positions = 128});
    INFO("entropy " << stats.target_entropy << " top-1 " << stats.target_top1 << " distinct " << stats.greedy_distinct_fraction);
    CHECK(stats.target_entropy > 1.0);  // nats; log(512) = 6.2 would be flat
    CHECK(stats.target_entropy < 4.0);
    CHECK(stats.target_top1 > 0.3);
    CHECK(stats.greedy_distinct_fraction > 0.3);
    CHECK(target.cached_tokens() == 0);  // measure_pair resets both models
}

TEST_CASE("the default synthetic draft is accepted at a realistic rate and the unrelated control is not",
          "[model][synthetic]") {
    const specdec::SyntheticOptions options{.size = "tiny", .seed = 2};
    LlamaModel target = specdec::make_synthetic_target(options);
    LlamaModel draft = specdec::make_synthetic_draft(options);
    LlamaModel control = specdec::make_synthetic_draft(options, SyntheticDraftKind::unrelated);
    const auto main_pair = specdec::measure_pair(target, draft, {.positions = 128});
    const auto control_pair = specdec::measure_pair(target, control, {.positions = 128});
    INFO("draft acceptance " << main_pair.acceptance << ", control acceptance " << control_pair.acceptance);
    CHECK(main_pair.acceptance > 0.5);
    CHECK(main_pair.acceptance < 0.97);
    CHECK(control_pair.acceptance < 0.15);
    CHECK(draft.weights().bytes_read_per_forward() < target.weights().bytes_read_per_forward() / 2);
}

TEST_CASE("every synthetic draft kind builds a model with the target's vocabulary", "[model][synthetic]") {
    const specdec::SyntheticOptions options{.size = "tiny"};
    LlamaModel target = specdec::make_synthetic_target(options);
    for (const auto kind : {SyntheticDraftKind::quantized_q4, SyntheticDraftKind::quantized_q8, SyntheticDraftKind::early_exit,
                            SyntheticDraftKind::early_exit_q4, SyntheticDraftKind::early_exit_q8,
                            SyntheticDraftKind::unrelated}) {
        INFO(specdec::synthetic_draft_kind_name(kind));
        LlamaModel draft = specdec::make_synthetic_draft(options, kind);
        CHECK(draft.vocab_size() == target.vocab_size());
        CHECK(draft.forward(kPrompt).rows == kPrompt.size());
        CHECK(draft.weight_bytes() <= target.weight_bytes());
    }
}

TEST_CASE("make_synthetic_pair builds the default draft on the target's thread pool", "[model][synthetic]") {
    auto pair = specdec::make_synthetic_pair({.size = "tiny", .threads = 2});
    CHECK(pair.draft.weights().layers[0].query.type == specdec::WeightType::q8_0);
    CHECK(pair.draft.config().layer_count == specdec::synthetic_shape("tiny").early_exit_layers);
    CHECK(pair.target.threads() == 2);
    CHECK(pair.draft.threads() == 2);
    CHECK(pair.target.forward(kPrompt).rows == kPrompt.size());
    CHECK(pair.draft.forward(kPrompt).rows == kPrompt.size());
}

TEST_CASE("an early-exit draft shares the target's first layers exactly", "[model][synthetic]") {
    const specdec::SyntheticOptions options{.size = "tiny"};
    LlamaModel target = specdec::make_synthetic_target(options);
    LlamaModel draft = specdec::make_synthetic_draft(options, SyntheticDraftKind::early_exit);
    REQUIRE(draft.config().layer_count < target.config().layer_count);
    const auto& t = target.weights().layers[0].query;
    const auto& d = draft.weights().layers[0].query;
    CHECK(std::equal(t.data, t.data + t.byte_size(), d.data));
}

TEST_CASE("an unknown synthetic size is an error naming it", "[model][synthetic]") {
    CHECK_THROWS_WITH(specdec::make_synthetic_target({.size = "huge"}), Catch::Contains("huge"));
    CHECK_THROWS_AS(specdec::make_synthetic_draft({.size = "tiny", .early_exit_layers = 9}, SyntheticDraftKind::early_exit),
                    specdec::Error);
}

TEST_CASE("the 100m synthetic target has the shape and bytes of a 110M F16 Llama", "[model][synthetic][slow]") {
    LlamaModel target = specdec::make_synthetic_target({.size = "100m", .max_context = 64});
    CHECK(target.vocab_size() == 32000);
    CHECK(target.parameter_count() > 100'000'000);
    CHECK(target.weights().layers[0].query.type == specdec::WeightType::f16);
    CHECK(target.context_length() == 64);
    const auto view = target.forward(kPrompt);
    CHECK(view.rows == kPrompt.size());
}

TEST_CASE("the 100m pair: a realistic target, a default draft at realistic acceptance for a tenth of the bytes",
          "[model][synthetic][slow]") {
    const specdec::SyntheticOptions options{.size = "100m", .max_context = 80};
    LlamaModel target = specdec::make_synthetic_target(options);
    LlamaModel draft = specdec::make_synthetic_draft(options);
    LlamaModel control = specdec::make_synthetic_draft(options, SyntheticDraftKind::unrelated);
    const auto stats = specdec::measure_pair(target, draft, {.positions = 64});
    const auto control_stats = specdec::measure_pair(target, control, {.positions = 64});
    INFO("entropy " << stats.target_entropy << " top-1 " << stats.target_top1 << " distinct " << stats.greedy_distinct_fraction
                    << " acceptance " << stats.acceptance << " control " << control_stats.acceptance);
    CHECK(stats.target_entropy > 1.5);  // nats; log(32000) = 10.4 would be flat
    CHECK(stats.target_entropy < 4.5);
    CHECK(stats.target_top1 > 0.3);
    CHECK(stats.greedy_distinct_fraction > 0.3);
    CHECK(stats.acceptance > 0.7);
    CHECK(stats.acceptance < 0.95);
    CHECK(control_stats.acceptance < 0.05);
    CHECK(draft.weights().bytes_read_per_forward() * 5 < target.weights().bytes_read_per_forward());
}

TEST_CASE("a replica shares its model's weights and keeps a cache of its own", "[model][synthetic]") {
    LlamaModel model = specdec::make_synthetic_target({.size = "tiny", .seed = 4, .max_context = 48});
    LlamaModel replica = model.replica();
    CHECK(replica.weights().layers[0].query.data == model.weights().layers[0].query.data);  // not copied
    CHECK(replica.weights().output.data == model.weights().output.data);
    CHECK(replica.context_length() == 48);
    CHECK(replica.threads() == model.threads());
    CHECK(replica.name() == model.name());
    CHECK(replica.cached_tokens() == 0);

    // Two sequences advanced in turn give what each gives alone.
    const std::vector<Token> other = {7, 300, 2, 2, 81};
    LlamaModel alone = specdec::make_synthetic_target({.size = "tiny", .seed = 4, .max_context = 48});
    const auto expected_first = specdec::test::copy_rows(alone.forward(std::span(kPrompt).first(3)));
    const auto expected_rest = specdec::test::copy_rows(alone.forward(std::span(kPrompt).subspan(3)));
    alone.truncate(0);
    const auto expected_other = specdec::test::copy_rows(alone.forward(other));

    const auto first = specdec::test::copy_rows(model.forward(std::span(kPrompt).first(3)));
    const auto replica_rows = specdec::test::copy_rows(replica.forward(other));
    const auto rest = specdec::test::copy_rows(model.forward(std::span(kPrompt).subspan(3)));
    CHECK(model.cached_tokens() == kPrompt.size());
    CHECK(replica.cached_tokens() == other.size());
    CHECK(first == expected_first);
    CHECK(rest == expected_rest);
    CHECK(replica_rows == expected_other);
    CHECK(specdec::test::max_abs_difference(replica_rows[0], first[0]) > 0.0f);  // different inputs, different rows
}
