// specdec-server's warm-up (server/engine.hpp: Engine::warm_up): after it the
// length policy has left its own warm-up, the engine is idle with every slot
// free, and it serves requests as an engine that was not warmed up does.
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "server/engine.hpp"
#include "server/metrics.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "support/catch.hpp"
#include "support/slot_models.hpp"
#include "support/toy_models.hpp"

namespace engine_warm_up {

using specdec::RequestResult;
using specdec::RequestStatus;
using specdec::Token;
using specdec::server::Channel;
using specdec::server::Job;
using specdec::test::MultiSlot;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

constexpr std::size_t kSlots = 4;

ToyLMOptions target_options() { return {.vocab = 32, .seed = 8, .sharpness = 2.0}; }
ToyLMOptions draft_options() { return {.vocab = 32, .seed = 8, .sharpness = 2.0, .noise_seed = 3, .noise = 0.4}; }

using ToySlots = MultiSlot<ToyLM>;
using Engine = specdec::server::Engine<ToySlots, ToySlots>;

// Greedy requests through a running engine: each one's tokens.
std::vector<std::vector<Token>> serve_greedy(Engine& engine, const std::vector<std::vector<Token>>& prompts) {
    std::thread loop([&] { engine.run(); });
    std::vector<std::shared_ptr<Channel>> channels;
    for (const std::vector<Token>& prompt : prompts) {
        Job job;
        job.prompt = prompt;
        job.options = specdec::DecodingOptions{.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 20};
        job.channel = std::make_shared<Channel>();
        channels.push_back(job.channel);
        REQUIRE_FALSE(engine.enqueue(std::move(job), 64).has_value());
    }
    std::vector<std::vector<Token>> tokens;
    for (const std::shared_ptr<Channel>& channel : channels) {
        std::optional<RequestResult> done;
        for (std::size_t seen = 0; !done;) seen += channel->next(seen, std::chrono::milliseconds(1000), done).tokens.size();
        CHECK(done->status == RequestStatus::finished);
        tokens.push_back(done->generation.tokens);
    }
    engine.stop();
    loop.join();
    return tokens;
}

TEST_CASE("the server's warm-up runs the length policy past its own warm-up and leaves the engine as it found it",
          "[server][batched]") {
    const std::vector<std::vector<Token>> prompts{{1, 2, 3}, {4, 5}, {6}, {7, 8, 9, 10}, {11, 12}};
    const specdec::AutoBatchOptions defaults{};

    ToySlots cold_target(kSlots, [] { return ToyLM(target_options()); });
    ToySlots cold_draft(kSlots, [] { return ToyLM(draft_options()); });
    specdec::server::Metrics cold_metrics;
    Engine cold(cold_target, cold_draft, cold_metrics, kSlots, 0);
    cold.warm_up();  // the one request through both models, no policy steps
    // That request drafts a fixed length, so the policy only counted its steps.
    CHECK(cold.policy().steps_observed() < defaults.warmup_steps);

    ToySlots warm_target(kSlots, [] { return ToyLM(target_options()); });
    ToySlots warm_draft(kSlots, [] { return ToyLM(draft_options()); });
    specdec::server::Metrics warm_metrics;
    Engine warm(warm_target, warm_draft, warm_metrics, kSlots, 0);
    warm.warm_up(16, 4);
    CHECK(warm.policy().steps_observed() > defaults.warmup_steps);
    // The first request's steps (at most 4 for its 4 tokens), at most 16 more,
    // and the step that ends the cancelled requests.
    CHECK(warm.policy().steps_observed() <= 4 + 16 + 1);
    // Timed: the target at the full batch's width, and a drafting round.
    CHECK(warm.policy().target_pass_seconds(kSlots) >= 0.0);
    CHECK(warm.policy().draft_round_seconds(1) >= 0.0);

    // Greedy requests (more than the slots: the slots are reused) give the
    // same tokens through both engines: the warm-up's cancelled requests left
    // nothing in the slots' caches that a request would read.
    CHECK(serve_greedy(warm, prompts) == serve_greedy(cold, prompts));
}

}  // namespace engine_warm_up
