// Exactness through specdec-server's request path, in-process: a JSON body is
// parsed by the server's parser (server/request.hpp: parse_request,
// job_options), queued to the server's Engine (server/engine.hpp: its
// decoding loop on a thread of its own, the BatchedDecoder with each
// request's rule and AutoBatchLength) beside batch mates, and read back from its
// channel as the HTTP threads read it. The measured request is seeded at
// T > 0, so it verifies with coupled sampling, at the policy's lengths up to
// speculative.n_max = 4 (and gives the tokens of its seed without drafts);
// its generated sequences of 5 tokens must follow the
// distribution the request's fields mean (temperature, top_k, repeat
// penalty), computed by the harness's independent reference. The negative controls run the same path with the
// parsed top_k dropped or the temperature left at its default (a parser
// that ignored the field) and must be caught by the same statistic.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/engine.hpp"
#include "server/metrics.hpp"
#include "server/request.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/slot_models.hpp"
#include "support/toy_models.hpp"

namespace server_request_exactness {

using specdec::RequestResult;
using specdec::RequestStatus;
using specdec::Token;
using specdec::server::Channel;
using specdec::server::Job;
using specdec::test::MultiSlot;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

constexpr std::size_t kSlots = 4;
constexpr std::size_t kVocab = 3;
constexpr std::size_t kDrafts = 4;
constexpr std::size_t kLength = kDrafts + 1;

ToyLMOptions target_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions draft_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.5}; }

using ToySlots = MultiSlot<ToyLM>;
using Engine = specdec::server::Engine<ToySlots, ToySlots>;

const specdec::server::RequestLimits kLimits{.vocab = kVocab, .context = 64, .max_draft = 8};

// The measured request as a client sends it.
nlohmann::json measured_body(std::uint64_t seed) {
    return {{"prompt", {1, 2}},       {"max_tokens", kLength}, {"temperature", 1.3},     {"top_k", 2},
            {"repeat_penalty", 1.5}, {"repeat_last_n", 4},    {"seed", seed},        {"speculative.n_max", kDrafts},
            {"ignore_eos", true}};
}

// What those fields mean (docs/serving.md, OpenAI's and llama-server's
// spellings), written here rather than read from the parser.
specdec::SamplingOptions measured_sampling() {
    return {.temperature = 1.3, .top_k = 2, .repeat_penalty = 1.5, .penalty_last_n = 4};
}

// Batch mates: greedy, unseeded T = 1 (length policy) and seeded requests of
// their own lengths, drawn from a stream apart from the measured seed.
nlohmann::json mate_body(std::mt19937_64& rng) {
    nlohmann::json body{{"prompt", {static_cast<int>(rng() % kVocab), static_cast<int>(rng() % kVocab)}},
                        {"max_tokens", 1 + rng() % 12}};
    switch (rng() % 3) {
        case 0: body["temperature"] = 0.0; break;
        case 1: body["temperature"] = 1.0; break;
        default: body["temperature"] = 0.7; body["seed"] = rng() % 100000; break;
    }
    return body;
}

std::shared_ptr<Channel> enqueue(Engine& engine, specdec::server::ParsedRequest parsed) {
    Job job;
    job.prompt = parsed.prompt_tokens;
    job.options = specdec::server::job_options(parsed);
    job.rule = specdec::server::job_rule(parsed);
    job.channel = std::make_shared<Channel>();
    std::shared_ptr<Channel> channel = job.channel;
    REQUIRE_FALSE(engine.enqueue(std::move(job), 64).has_value());
    return channel;
}

RequestResult wait_for(Channel& channel) {
    std::optional<specdec::server::ApiError> refused;
    while (!channel.wait_submitted(refused, std::chrono::milliseconds(1000))) {
    }
    REQUIRE_FALSE(refused.has_value());
    std::optional<RequestResult> done;
    for (std::size_t seen = 0; !done;) seen += channel.next(seen, std::chrono::milliseconds(1000), done).tokens.size();
    return *done;
}

// Runs the harness through the engine; `edit` may change the parsed request
// before it is queued (the control's parser bug).
specdec::test::ExactnessReport run_through_engine(const std::string& name,
                                                  void (*edit)(specdec::server::ParsedRequest&)) {
    ToySlots target(kSlots, [] { return ToyLM(target_options()); });
    ToySlots draft(kSlots, [] { return ToyLM(draft_options()); });
    specdec::server::Metrics metrics;
    // A policy that never leaves its warm-up: plain steps alternate with steps
    // drafting up to the caps (within its draft rows), so that the measured
    // request changes length from step to step and reaches its deepest position.
    Engine engine(target, draft, metrics, kSlots, 0, specdec::AutoBatchLength({.warmup_steps = 1u << 30}));
    std::thread loop([&] { engine.run(); });
    const ToyLM reference(target_options());
    const specdec::test::ExactnessSetup setup{.name = name,
                                              .prompt = {1, 2},
                                              .vocab = kVocab,
                                              .length = kLength,
                                              .draft_tokens = kDrafts,
                                              .samples = 20000,
                                              .first_seed = 52000,
                                              .target = specdec::test::reference_conditional(reference, measured_sampling())};
    std::size_t mates_finished = 0, same_as_plain = 0;
    ToyLM alone_target(target_options()), alone_draft(draft_options());
    const specdec::test::ExactnessReport report = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull);
        std::vector<std::shared_ptr<Channel>> mates;
        for (int i = 0; i < 2; ++i)
            mates.push_back(enqueue(engine, specdec::server::parse_request(mate_body(rng), specdec::server::Endpoint::completions, kLimits)));
        specdec::server::ParsedRequest parsed =
            specdec::server::parse_request(measured_body(seed), specdec::server::Endpoint::completions, kLimits);
        if (edit != nullptr) edit(parsed);
        specdec::DecodingOptions no_drafts = parsed.options;
        no_drafts.drafting = specdec::Drafting::off;
        specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::CoupledSampling, specdec::FixedLength> plain(
            specdec::target(alone_target), specdec::draft(alone_draft), no_drafts);
        const std::vector<Token> plain_tokens = plain.generate(parsed.prompt_tokens).tokens;
        const std::shared_ptr<Channel> measured = enqueue(engine, std::move(parsed));
        mates.push_back(enqueue(engine, specdec::server::parse_request(mate_body(rng), specdec::server::Endpoint::completions, kLimits)));
        const RequestResult result = wait_for(*measured);
        INFO(result.error);
        REQUIRE(result.status == RequestStatus::finished);
        REQUIRE(result.generation.tokens.size() == kLength);
        // A seeded request's tokens are those of its seed without drafts.
        if (result.generation.tokens == plain_tokens) ++same_as_plain;
        for (const std::shared_ptr<Channel>& mate : mates)
            if (wait_for(*mate).status == RequestStatus::finished) ++mates_finished;
        return specdec::test::sampled_run(result.generation);
    });
    engine.stop();
    loop.join();
    CHECK(mates_finished == 3 * setup.samples);
    CHECK(same_as_plain == setup.samples);
    return report;
}

void drop_top_k(specdec::server::ParsedRequest& parsed) { parsed.options.sampling.top_k = 0; }
void default_temperature(specdec::server::ParsedRequest& parsed) { parsed.options.sampling.temperature = 1.0; }

TEST_CASE("a request through the server's parser and engine is exact among batch mates (seeded T > 0, top_k, repeat "
          "penalty, speculative.n_max = 4), and a parser that drops top_k or the temperature is caught",
          "[exactness][server][batched]") {
    const specdec::test::ExactnessReport exact = run_through_engine("server request path", nullptr);
    specdec::test::check_exact(exact, kDrafts);
    CHECK(exact.accepted[kDrafts - 1] > 0);
    // Dropping top_k lets a third token through (sequences of reference
    // probability 0); the default temperature only moves mass between them.
    specdec::test::check_caught(run_through_engine("server request path, top_k dropped", drop_top_k), kDrafts);
    specdec::test::check_caught(run_through_engine("server request path, temperature 1 for 1.3", default_temperature),
                                kDrafts);
}

}  // namespace server_request_exactness
