// Batch invariance of greedy decoding: every request a BatchedDecoder serves
// at temperature 0 must emit exactly the tokens (and stop for the same
// reason) as its own single-sequence AutoregressiveDecoder, whatever its
// batch mates, the batch size (1 to 32 slots) and when it was admitted.
// Requests are submitted between steps in bursts of random size, in a seeded
// random order, more of them than slots (so that they queue and are admitted
// mid-flight into slots other requests left, reusing a common prefix where a
// request continues an earlier one), with their own prompt, length, draft
// length and stop token; some run into the end of the context.
// On the tiny synthetic pair and on stories260K (with its Q8_0 copy as the
// draft), both as multi-sequence LlamaModels (LlamaOptions::sequences: one
// forward_batch per step over every request's tokens, whose rows must be
// bitwise those of the sequence alone), with a draft model under
// AutoBatchLength and FixedBatchLength, and batched plain decoding (NoDrafts).
#include <functional>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "specdec/core/rng.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/sanitizers.hpp"

namespace batched_greedy {

using specdec::DecodingOptions;
using specdec::GenerationResult;
using specdec::LlamaModel;
using specdec::RandomPurpose;
using specdec::RequestId;
using specdec::RequestResult;
using specdec::RequestStatus;
using specdec::Token;

constexpr std::size_t kContext = 128;
// Under ThreadSanitizer the narrowest batches and the widest (the sizes
// between run the same thread-pool code), each with fewer requests: the
// admissions are single-threaded, the passes' threads are what it checks.
const std::vector<std::size_t> kBatchSizes =
    specdec::test::kUnderThreadSanitizer ? std::vector<std::size_t>{1, 2, 32} : std::vector<std::size_t>{1, 2, 4, 8, 16, 32};
std::size_t request_count(std::size_t slots) { return specdec::test::kUnderThreadSanitizer ? slots + 5 : 3 * slots + 5; }

struct GreedyRequest {
    std::vector<Token> prompt;
    DecodingOptions options;
};

// Draws from a seeded stream.
class Choices {
public:
    explicit Choices(std::uint64_t seed) : rng_{seed} {}
    std::size_t below(std::size_t n) {
        return std::min(n - 1, static_cast<std::size_t>(rng_.uniform(draws_++, RandomPurpose::draft_sample) * n));
    }

private:
    specdec::CounterRng rng_;
    std::uint64_t draws_ = 0;
};

// `count` greedy requests: prompts of 1 to 24 tokens, one in four extending
// an earlier request's prompt (a chat's next turn), 1 to 40 new tokens (the
// first and one in eight of the others ask for more than the context holds),
// draft lengths 1 to 6, one in five with a stop token.
std::vector<GreedyRequest> make_requests(std::size_t count, std::size_t vocab, std::uint64_t seed) {
    Choices choices(seed);
    std::vector<GreedyRequest> requests;
    for (std::size_t i = 0; i < count; ++i) {
        GreedyRequest r;
        if (i > 0 && choices.below(4) == 0) r.prompt = requests[choices.below(i)].prompt;
        const std::size_t fresh = 1 + choices.below(r.prompt.empty() ? 24 : 8);
        for (std::size_t t = 0; t < fresh; ++t) r.prompt.push_back(static_cast<Token>(choices.below(vocab)));
        r.options = {.draft_tokens = 1 + choices.below(6),
                     .sampling = {.temperature = 0.0},
                     .seed = i,
                     .max_new_tokens = choices.below(8) == 0 ? 2 * kContext : 1 + choices.below(40)};
        if (choices.below(5) == 0) r.options.stop_tokens = {static_cast<Token>(choices.below(vocab))};
        if (i == 0) {  // at least one runs into the end of the context
            r.options.max_new_tokens = 2 * kContext;
            r.options.stop_tokens.clear();
        }
        requests.push_back(std::move(r));
    }
    return requests;
}

// Each request decoded alone, autoregressively, on a single-sequence model.
std::vector<GenerationResult> autoregressive_references(LlamaModel& model, const std::vector<GreedyRequest>& requests) {
    std::vector<GenerationResult> references;
    for (const GreedyRequest& r : requests) {
        specdec::AutoregressiveDecoder<LlamaModel> decoder(model, r.options);
        references.push_back(decoder.generate(r.prompt));
    }
    return references;
}

// What a batched run did besides its tokens.
struct BatchedRun {
    std::size_t most_sequences = 0;  // the widest target pass, in sequences
    std::size_t admitted_mid_flight = 0;
    std::size_t drafts = 0;
    std::size_t context_full = 0;
};

// Submits the requests in a seeded random order, a burst of 0 to slots() of
// them before each step, and checks each result against its reference.
template <class Decoder>
BatchedRun check_batched_greedy(Decoder& decoder, const std::vector<GreedyRequest>& requests,
                                const std::vector<GenerationResult>& references, std::uint64_t order_seed) {
    Choices choices(order_seed);
    std::vector<std::size_t> order(requests.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[choices.below(i)]);
    std::map<RequestId, std::size_t> index_of;
    BatchedRun run;
    std::size_t submitted = 0, done = 0;
    while (submitted < requests.size() || !decoder.idle()) {
        std::size_t burst = choices.below(decoder.slots() + 1);
        if (decoder.idle() && burst == 0) burst = 1;
        for (; burst > 0 && submitted < requests.size(); --burst, ++submitted) {
            const GreedyRequest& r = requests[order[submitted]];
            index_of[decoder.submit(r.prompt, r.options)] = order[submitted];
        }
        const bool running = decoder.running_requests() > 0;
        const specdec::BatchStepReport report = decoder.step();
        run.most_sequences = std::max(run.most_sequences, report.sequences);
        run.drafts += report.drafts;
        if (running && report.admitted > 0) ++run.admitted_mid_flight;
        for (const RequestResult& result : decoder.take_finished()) {
            const std::size_t i = index_of.at(result.id);
            INFO("request " << i << " (submitted " << result.id << "), prompt of " << requests[i].prompt.size()
                            << " tokens, max_new_tokens " << requests[i].options.max_new_tokens << ", draft_tokens "
                            << requests[i].options.draft_tokens << "; " << result.error);
            REQUIRE(result.status == RequestStatus::finished);
            CHECK(result.generation.tokens == references[i].tokens);
            CHECK(result.generation.stop_reason == references[i].stop_reason);
            run.context_full += result.generation.stop_reason == specdec::StopReason::context_full;
            ++done;
        }
    }
    CHECK(done == requests.size());
    return run;
}

// A target and a draft of `slots` sequences each.
struct MultiSequencePair {
    LlamaModel target, draft;
};

// Every batch size, three ways: draft model with AutoBatchLength and with
// FixedBatchLength, and no drafts. `reference` is a single-sequence model of
// the target's weights for the autoregressive references.
void check_every_batch_size(const std::function<MultiSequencePair(std::size_t)>& make_pair, LlamaModel& reference,
                            std::uint64_t seed) {
    for (const std::size_t slots : kBatchSizes) {
        const std::vector<GreedyRequest> requests = make_requests(request_count(slots), reference.vocab_size(), seed + slots);
        const std::vector<GenerationResult> references = autoregressive_references(reference, requests);
        MultiSequencePair pair = make_pair(slots);
        LlamaModel& targets = pair.target;
        LlamaModel& drafts = pair.draft;
        REQUIRE(targets.sequence_slots() == slots);
        REQUIRE(drafts.sequence_slots() == slots);
        std::size_t context_full = 0;
        {
            INFO(slots << " slots, draft model, AutoBatchLength");
            specdec::BatchedDecoder<LlamaModel, LlamaModel> decoder(specdec::target(targets), specdec::draft(drafts));
            REQUIRE(decoder.slots() == slots);
            const BatchedRun run = check_batched_greedy(decoder, requests, references, seed * 31 + slots);
            CHECK(run.most_sequences == slots);
            if (slots > 1) CHECK(run.admitted_mid_flight > 0);
            CHECK(run.drafts > 0);
            context_full += run.context_full;
        }
        {
            INFO(slots << " slots, draft model, FixedBatchLength");
            specdec::BatchedDecoder<LlamaModel, LlamaModel, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
                specdec::target(targets), specdec::draft(drafts));
            const BatchedRun run = check_batched_greedy(decoder, requests, references, seed * 37 + slots);
            CHECK(run.most_sequences == slots);
            CHECK(run.drafts > 0);
        }
        {
            INFO(slots << " slots, no drafts");
            specdec::NoDrafts none;
            specdec::BatchedDecoder<LlamaModel, specdec::NoDrafts> decoder(specdec::target(targets), specdec::draft(none));
            const BatchedRun run = check_batched_greedy(decoder, requests, references, seed * 41 + slots);
            CHECK(run.most_sequences == slots);
            CHECK(run.drafts == 0);
        }
        INFO(slots << " slots");
        CHECK(context_full > 0);  // some requests ran into the end of the context
    }
}


TEST_CASE("batched greedy decoding on the synthetic pair equals each request's own autoregressive tokens, 1 to 32 "
          "slots, random admission",
          "[model][batched][greedy]") {
    const specdec::SyntheticOptions shape{.size = "tiny", .seed = 11, .threads = 2, .max_context = kContext};
    LlamaModel reference = specdec::make_synthetic_target(shape);
    check_every_batch_size(
        [&](std::size_t slots) {
            specdec::SyntheticOptions batched = shape;
            batched.sequences = slots;
            specdec::SyntheticPair pair = specdec::make_synthetic_pair(batched);
            return MultiSequencePair{std::move(pair.target), std::move(pair.draft)};
        },
        reference, 500);
}

TEST_CASE("batched greedy decoding on stories260K equals each request's own autoregressive tokens, 1 to 32 slots, "
          "random admission",
          "[model][fixture][batched][greedy]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    SPECDEC_REQUIRE_FIXTURE(q8_path, "stories260K-q8_0.gguf");
    LlamaModel reference = LlamaModel::from_gguf(path, {.threads = 2});
    REQUIRE(reference.context_length() == kContext);
    const auto pool = std::make_shared<specdec::cpu::ThreadPool>(2);
    check_every_batch_size(
        [&](std::size_t slots) {
            return MultiSequencePair{LlamaModel::from_gguf(path, {.thread_pool = pool, .sequences = slots}),
                                     LlamaModel::from_gguf(q8_path, {.thread_pool = pool, .sequences = slots})};
        },
        reference, 900);
}

TEST_CASE("chunked prefill (BatchOptions::prefill_chunk) gives the tokens of a whole prefill, bitwise, while the "
          "running requests keep stepping",
          "[model][batched][prefill]") {
    // Four requests decode; a fifth with a long prompt arrives after three
    // steps. Greedy and seeded T = 1 requests (these at a fixed draft
    // length), a draft model under AutoBatchLength: every request's tokens equal those of the same run
    // with whole prefills, and equal the request decoded alone.
    const specdec::SyntheticOptions shape{.size = "tiny", .seed = 5, .threads = 2, .max_context = 512, .sequences = 5};
    std::vector<GreedyRequest> requests;
    for (std::size_t r = 0; r < 5; ++r) {
        GreedyRequest q;
        const std::size_t length = r == 4 ? 300 : 6 + r;
        for (std::size_t i = 0; i < length; ++i) q.prompt.push_back(static_cast<Token>((r * 131 + i * 17) % 500 + 1));
        q.options.max_new_tokens = 40;
        q.options.sampling.temperature = r % 2 == 0 ? 0.0 : 1.0;
        q.options.seed = 100 + r;
        // A sampled request's tokens depend on its draft lengths, which the
        // policy chooses from timings: it fixes its length, as a server's
        // seeded requests do.
        if (r % 2 == 1) q.options.drafting = specdec::Drafting::fixed;
        requests.push_back(std::move(q));
    }
    struct Run {
        std::map<RequestId, std::vector<Token>> tokens;
        std::size_t steps_while_prefilling = 0, most_prefilled = 0, prefill_tokens = 0;
    };
    auto run = [&](std::size_t chunk) {
        specdec::SyntheticPair pair = specdec::make_synthetic_pair(shape);
        specdec::BatchedDecoder<LlamaModel, LlamaModel, specdec::TokenwiseRejection, specdec::AutoBatchLength> decoder(
            specdec::target(pair.target), specdec::draft(pair.draft), {.prefill_chunk = chunk});
        std::vector<RequestId> ids;
        for (std::size_t r = 0; r < 4; ++r) ids.push_back(decoder.submit(requests[r].prompt, requests[r].options));
        Run out;
        for (std::size_t step = 0; !decoder.idle() || ids.size() < 5; ++step) {
            if (step == 3) ids.push_back(decoder.submit(requests[4].prompt, requests[4].options));
            const specdec::BatchStepReport report = decoder.step();
            out.prefill_tokens += report.prefill_tokens;
            out.most_prefilled = std::max(out.most_prefilled, report.prefill_tokens);
            if (step >= 3 && ids.size() == 5 && decoder.status(ids[4]) == RequestStatus::running &&
                decoder.progress(ids[4])->tokens.empty() && report.sequences > 0)
                ++out.steps_while_prefilling;
        }
        for (RequestResult& r : decoder.take_finished()) {
            REQUIRE(r.status == RequestStatus::finished);
            out.tokens[r.id] = r.generation.tokens;
        }
        REQUIRE(out.tokens.size() == 5);
        return out;
    };
    const Run whole = run(0);
    const Run chunked = run(32);
    for (const auto& [id, tokens] : whole.tokens) {
        INFO("request " << id);
        CHECK(chunked.tokens.at(id) == tokens);
    }
    CHECK(whole.most_prefilled >= 299);   // the long prompt in one step
    CHECK(chunked.most_prefilled <= 32);  // never more than a chunk a step
    CHECK(chunked.prefill_tokens == whole.prefill_tokens);
    // The others stepped while the long prompt went in, chunk by chunk (299 / 32 -> 10 steps).
    CHECK(chunked.steps_while_prefilling >= 9);
    // And each request's tokens are its own, alone.
    specdec::SyntheticPair alone_pair = specdec::make_synthetic_pair({.size = "tiny", .seed = 5, .threads = 2, .max_context = 512});
    for (std::size_t r = 0; r < 5; ++r) {
        INFO("request " << r);
        specdec::SpeculativeDecoder<LlamaModel, LlamaModel, specdec::TokenwiseRejection, specdec::FixedLength> single(
            specdec::target(alone_pair.target), specdec::draft(alone_pair.draft), requests[r].options);
        if (requests[r].options.sampling.temperature == 0.0)
            CHECK(single.generate(requests[r].prompt).tokens == chunked.tokens.at(static_cast<RequestId>(r + 1)));
    }
}

}  // namespace batched_greedy
