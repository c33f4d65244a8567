// Bad input to the batched decoder: each bad request is refused or ends with
// a clear status and message, and the other requests of the batch decode
// exactly what they decode without it (compared with a run that never saw
// the bad request, and with the single-sequence SpeculativeDecoder, which a
// fixed-length batch reproduces token for token):
//   - refused by submit(), nothing queued: a prompt longer than the slot's
//     context, an empty prompt, an id outside the vocabulary, invalid options;
//   - queued, never dropped: more requests than slots;
//   - cancelled while waiting or while running (status cancelled, the tokens
//     emitted so far); cancel() of an unknown or ended id returns false;
//   - ended by the batch: NaN logits in one sequence's rows (target or draft:
//     status failed, the message names the NaN and its position), a stream
//     callback returning false (StopReason::callback), a full context
//     (StopReason::context_full), a grammar constraint that leaves no token
//     allowed (status failed, the message names the constraint).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/sampling/token_constraint.hpp"
#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/slot_models.hpp"
#include "support/toy_models.hpp"

namespace batched_bad_input {

using specdec::DecodingOptions;
using specdec::RequestId;
using specdec::RequestResult;
using specdec::RequestStatus;
using specdec::StopReason;
using specdec::Token;
using specdec::test::MultiSlot;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

using ToySlots = MultiSlot<ToyLM>;
using Decoder = specdec::BatchedDecoder<ToySlots, ToySlots, specdec::TokenwiseRejection, specdec::FixedBatchLength>;

constexpr std::size_t kVocab = 10;
constexpr std::size_t kContext = 48;

ToyLMOptions target_options() { return {.vocab = kVocab, .seed = 17, .sharpness = 1.3, .context = kContext}; }
ToyLMOptions draft_options() {
    return {.vocab = kVocab, .seed = 17, .sharpness = 1.3, .noise_seed = 3, .noise = 0.6, .context = kContext};
}

// A target and a draft of `slots` slots each and a decoder over them.
struct Batch {
    ToySlots target, draft;
    Decoder decoder;
    Batch(std::size_t slots, ToyLMOptions target_model = target_options(), ToyLMOptions draft_model = draft_options())
        : target(slots, [target_model] { return ToyLM(target_model); }),
          draft(slots, [draft_model] { return ToyLM(draft_model); }),
          decoder(specdec::target(target), specdec::draft(draft)) {}
};

struct Request {
    std::vector<Token> prompt;
    DecodingOptions options;
};

// The well-behaved requests every test runs beside its bad one: prompts of at
// most 5 tokens and at most 10 new tokens, drafts of at most 3, so that no
// pass of theirs reaches position 20 (where the NaN tests put their NaN).
const std::vector<Request> kMates{
    {{1, 2, 3}, {.draft_tokens = 3, .sampling = {.temperature = 1.0}, .seed = 11, .max_new_tokens = 10}},
    {{4}, {.draft_tokens = 2, .sampling = {.temperature = 0.0}, .seed = 12, .max_new_tokens = 9}},
    {{5, 6, 7, 8, 9}, {.draft_tokens = 3, .sampling = {.temperature = 0.7, .top_k = 4}, .seed = 13, .max_new_tokens = 10}},
    {{2, 2}, {.draft_tokens = 1, .sampling = {.temperature = 1.2, .top_p = 0.9}, .seed = 14, .max_new_tokens = 8,
              .stop_tokens = {3}}},
    {{7, 1, 7}, {.draft_tokens = 3, .sampling = {.temperature = 0.0}, .seed = 15, .max_new_tokens = 10}},
};

// Runs the mates through `decoder`, two submitted before the first step and
// one after each later step, calling `inject(step)` before each step (it may
// submit, cancel, or do nothing). Returns every result by id.
std::map<RequestId, RequestResult> run_mates(Decoder& decoder, std::vector<RequestId>& mate_ids,
                                             const std::function<void(std::size_t)>& inject = {}) {
    mate_ids.clear();
    std::map<RequestId, RequestResult> results;
    std::size_t next = 0;
    for (; next < 2; ++next) mate_ids.push_back(decoder.submit(kMates[next].prompt, kMates[next].options));
    for (std::size_t step = 0; !decoder.idle() || next < kMates.size(); ++step) {
        if (inject) inject(step);
        decoder.step();
        if (next < kMates.size()) {
            mate_ids.push_back(decoder.submit(kMates[next].prompt, kMates[next].options));
            ++next;
        }
        for (RequestResult& r : decoder.take_finished()) results.emplace(r.id, std::move(r));
    }
    return results;
}

// The mates' results without any bad request (3 slots), checked against the
// single-sequence decoder.
const std::vector<specdec::GenerationResult>& clean_mates() {
    static const std::vector<specdec::GenerationResult> clean = [] {
        Batch batch(3);
        std::vector<RequestId> ids;
        std::map<RequestId, RequestResult> results = run_mates(batch.decoder, ids);
        std::vector<specdec::GenerationResult> out;
        for (std::size_t i = 0; i < kMates.size(); ++i) {
            ToyLM target(target_options()), draft(draft_options());
            specdec::SpeculativeDecoder alone(specdec::target(target), specdec::draft(draft), kMates[i].options,
                                              specdec::TokenwiseRejection{}, specdec::FixedLength{});
            const specdec::GenerationResult expected = alone.generate(kMates[i].prompt);
            const RequestResult& r = results.at(ids[i]);
            INFO("mate " << i);
            REQUIRE(r.status == RequestStatus::finished);
            REQUIRE(r.generation.tokens == expected.tokens);
            REQUIRE(r.generation.stop_reason == expected.stop_reason);
            out.push_back(r.generation);
        }
        return out;
    }();
    return clean;
}

// The mates' results are those of the clean run.
void check_mates_unchanged(const std::map<RequestId, RequestResult>& results, const std::vector<RequestId>& ids) {
    const auto& clean = clean_mates();
    REQUIRE(ids.size() == clean.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        INFO("mate " << i << " (request " << ids[i] << ")");
        const auto found = results.find(ids[i]);
        REQUIRE(found != results.end());
        CHECK(found->second.status == RequestStatus::finished);
        CHECK(found->second.error.empty());
        CHECK(found->second.generation.tokens == clean[i].tokens);
        CHECK(found->second.generation.stop_reason == clean[i].stop_reason);
    }
}

// What the single-sequence decoder gives for one request on the given models.
specdec::GenerationResult alone(const Request& request, ToyLMOptions target_model = target_options(),
                                ToyLMOptions draft_model = draft_options()) {
    ToyLM target(target_model), draft(draft_model);
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), request.options,
                                        specdec::TokenwiseRejection{}, specdec::FixedLength{});
    return decoder.generate(request.prompt);
}


// Runs the mates with `bad` submitted before step 1; the bad request must end
// with status failed and a message containing `message`, every mate as in the
// clean run. Returns the failed request's result.
RequestResult failing_beside_mates(Batch& batch, const Request& bad, const std::string& message) {
    std::vector<RequestId> ids;
    RequestId bad_id = 0;
    auto results = run_mates(batch.decoder, ids, [&](std::size_t step) {
        if (step == 1) bad_id = batch.decoder.submit(bad.prompt, bad.options);
    });
    REQUIRE(results.count(bad_id) == 1);
    RequestResult failed = results.at(bad_id);
    CHECK(failed.status == RequestStatus::failed);
    CHECK_THAT(failed.error, Catch::Contains(message));
    CHECK(results.size() == kMates.size() + 1);
    check_mates_unchanged(results, ids);
    return failed;
}

TEST_CASE("batched submit refuses a bad request with a clear error, queues nothing, and the others are unchanged",
          "[errors][batched]") {
    struct Bad {
        std::string what;
        Request request;
        std::string message;
    };
    const std::vector<Bad> bad{
        {"prompt longer than the slot's context", {std::vector<Token>(kContext + 1, 1), {}},
         "the prompt has 49 tokens but the target's context holds only 48"},
        {"empty prompt", {{}, {}}, "the prompt is empty"},
        {"id outside the vocabulary", {{1, 2, 10}, {}}, "prompt token 2 has id 10, outside the vocabulary [0, 10)"},
        {"negative id", {{-1}, {}}, "prompt token 0 has id -1, outside the vocabulary [0, 10)"},
        {"max_new_tokens = 0", {{1}, {.max_new_tokens = 0}}, "invalid decoding option max_new_tokens = 0"},
        {"draft_tokens = 0", {{1}, {.draft_tokens = 0}}, "invalid decoding option draft_tokens = 0"},
        {"negative temperature", {{1}, {.sampling = {.temperature = -1.0}}}, "invalid sampling option temperature = -1"},
        {"temperature NaN", {{1}, {.sampling = {.temperature = std::nan("")}}}, "invalid sampling option temperature = nan"},
        {"top_p = 0", {{1}, {.sampling = {.temperature = 1.0, .top_p = 0.0}}}, "invalid sampling option top_p = 0"},
        {"min_p = 2", {{1}, {.sampling = {.temperature = 1.0, .min_p = 2.0}}}, "invalid sampling option min_p = 2"},
    };
    for (const Bad& b : bad) {
        INFO(b.what);
        Batch batch(3);
        std::vector<RequestId> ids;
        std::size_t refused = 0;
        const auto results = run_mates(batch.decoder, ids, [&](std::size_t step) {
            if (step != 1) return;
            const std::size_t waiting = batch.decoder.waiting_requests(), running = batch.decoder.running_requests();
            CHECK_THROWS_WITH(batch.decoder.submit(b.request.prompt, b.request.options), Catch::Contains(b.message));
            ++refused;
            CHECK(batch.decoder.waiting_requests() == waiting);
            CHECK(batch.decoder.running_requests() == running);
        });
        CHECK(refused == 1);
        // Nothing was queued: the ids stay consecutive and only the mates came back.
        CHECK(results.size() == kMates.size());
        for (std::size_t i = 1; i < ids.size(); ++i) CHECK(ids[i] == ids[i - 1] + 1);
        check_mates_unchanged(results, ids);
    }
}

TEST_CASE("batched: more requests than slots are queued and every one comes back, each as decoded alone",
          "[errors][batched]") {
    ToySlots target(3, [] { return ToyLM(target_options()); }), draft(3, [] { return ToyLM(draft_options()); });
    // Two of the three slots, for nine requests.
    Decoder decoder(specdec::target(target), specdec::draft(draft), {.max_sequences = 2});
    CHECK(decoder.slots() == 2);
    std::vector<Request> requests;
    for (std::size_t i = 0; i < 9; ++i) {
        Request r = kMates[i % kMates.size()];
        r.options.seed = 100 + i;
        r.prompt.push_back(static_cast<Token>(i));
        requests.push_back(r);
    }
    std::vector<RequestId> ids;
    for (const Request& r : requests) ids.push_back(decoder.submit(r.prompt, r.options));
    CHECK(decoder.waiting_requests() == 9);
    for (const RequestId id : ids) CHECK(decoder.status(id) == RequestStatus::waiting);
    const specdec::BatchStepReport first = decoder.step();
    CHECK(first.admitted == 2);
    CHECK(first.sequences == 2);
    CHECK(decoder.running_requests() == 2);
    CHECK(decoder.waiting_requests() == 7);
    std::size_t most_running = 0;
    std::vector<RequestResult> results = decoder.take_finished();
    while (!decoder.idle()) {
        decoder.step();
        most_running = std::max(most_running, decoder.running_requests());
        for (RequestResult& r : decoder.take_finished()) results.push_back(std::move(r));
    }
    CHECK(most_running <= 2);
    REQUIRE(results.size() == requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO("request " << i);
        const auto it = std::find_if(results.begin(), results.end(), [&](const RequestResult& r) { return r.id == ids[i]; });
        REQUIRE(it != results.end());
        CHECK(it->status == RequestStatus::finished);
        const specdec::GenerationResult expected = alone(requests[i]);
        CHECK(it->generation.tokens == expected.tokens);
        CHECK(it->generation.stop_reason == expected.stop_reason);
    }
    // Taken results are forgotten.
    CHECK_THROWS_WITH(decoder.status(ids[0]), Catch::Contains("request " + std::to_string(ids[0]) + " is not known"));
}

TEST_CASE("batched cancel: a waiting request ends at once, a running one at the next step with its tokens so far; "
          "the others are unchanged",
          "[errors][batched]") {
    Batch batch(3);
    const Request waiting_request{{3, 1, 4, 1, 5}, {.draft_tokens = 3, .sampling = {.temperature = 1.0}, .seed = 21, .max_new_tokens = 12}};
    const Request running_request{{9, 2, 6}, {.draft_tokens = 3, .sampling = {.temperature = 0.9}, .seed = 22, .max_new_tokens = 30}};
    const specdec::GenerationResult running_alone = alone(running_request);
    REQUIRE(running_alone.tokens.size() == 30);
    std::vector<RequestId> ids;
    RequestId waiting_id = 0, running_id = 0;
    std::vector<Token> streamed;
    const auto results = run_mates(batch.decoder, ids, [&](std::size_t step) {
        Decoder& d = batch.decoder;
        if (step == 0) {
            running_id = d.submit(running_request.prompt, running_request.options, [&](Token t) {
                streamed.push_back(t);
                return true;
            });
        } else if (step == 1) {
            // Three slots, all taken: this one waits.
            waiting_id = d.submit(waiting_request.prompt, waiting_request.options);
            REQUIRE(d.status(waiting_id) == RequestStatus::waiting);
            CHECK(d.cancel(waiting_id));
            CHECK(d.status(waiting_id) == RequestStatus::cancelled);
            CHECK_FALSE(d.cancel(waiting_id));  // already ended
        } else if (step == 3) {
            REQUIRE(d.status(running_id) == RequestStatus::running);
            CHECK(d.cancel(running_id));
            CHECK(d.status(running_id) == RequestStatus::running);  // until the next step retires it
        }
        CHECK_FALSE(d.cancel(987654));
    });
    CHECK_FALSE(batch.decoder.cancel(running_id));  // already ended and taken
    REQUIRE(results.count(waiting_id) == 1);
    CHECK(results.at(waiting_id).status == RequestStatus::cancelled);
    CHECK(results.at(waiting_id).generation.tokens.empty());
    REQUIRE(results.count(running_id) == 1);
    const RequestResult& cancelled = results.at(running_id);
    CHECK(cancelled.status == RequestStatus::cancelled);
    // The tokens of its three steps: what it streamed, the start of what it decodes alone.
    CHECK(cancelled.generation.tokens == streamed);
    CHECK(cancelled.generation.tokens.size() >= 3);
    CHECK(cancelled.generation.tokens.size() < running_alone.tokens.size());
    CHECK(std::equal(cancelled.generation.tokens.begin(), cancelled.generation.tokens.end(), running_alone.tokens.begin()));
    CHECK(results.size() == kMates.size() + 2);
    check_mates_unchanged(results, ids);
}

TEST_CASE("batched: NaN logits in one sequence fail that request with a message naming the NaN; the others are "
          "unchanged",
          "[errors][batched]") {
    // The NaN sits in the row after position 20 (the row predicting position
    // 21), in every slot of one model; only the long request gets there.
    const Request long_request{std::vector<Token>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8},
                               {.draft_tokens = 4, .max_new_tokens = 20}};
    struct Case {
        std::string what;
        ToyLMOptions target, draft;
        std::string message;
    };
    ToyLMOptions nan_target = target_options(), nan_draft = draft_options();
    nan_target.nan_at_position = 20;
    nan_draft.nan_at_position = 20;
    for (const Case& c : {Case{"target", nan_target, draft_options(), "target model logits at position 21 contain NaN at token 0"},
                          Case{"draft", target_options(), nan_draft, "draft model logits at position 21 contain NaN"}}) {
        for (const double temperature : {0.0, 1.0}) {
            INFO(c.what << " NaN, temperature " << temperature);
            Request bad = long_request;
            bad.options.sampling.temperature = temperature;
            Batch batch(3, c.target, c.draft);
            const RequestResult failed = failing_beside_mates(batch, bad, c.message);
            // The tokens before the NaN row: positions 18, 19 and 20 at most.
            CHECK(failed.generation.tokens.size() <= 3);
        }
    }
}

// A grammar that ends in a dead end: every token is allowed for the first
// `length` tokens, none after them (a grammar adapter whose matcher failed).
class DeadEndConstraint final : public specdec::TokenConstraint {
public:
    explicit DeadEndConstraint(std::size_t length) : length_(length) {}
    [[nodiscard]] std::string name() const override { return "dead end after " + std::to_string(length_); }
    void reset() override { depth_ = 0; }
    void allowed(std::span<std::uint8_t> allowed) override {
        std::fill(allowed.begin(), allowed.end(), depth_ < length_ ? 1 : 0);
    }
    bool advance(Token) override {
        if (depth_ >= length_) return false;
        ++depth_;
        return true;
    }
    void rollback(std::size_t tokens) override { depth_ -= tokens; }

private:
    std::size_t length_, depth_ = 0;
};

TEST_CASE("batched: a constraint that leaves no token allowed fails its request with a message naming it; the others "
          "are unchanged",
          "[errors][batched][constraints]") {
    for (const double temperature : {0.0, 1.0}) {
        INFO("temperature " << temperature);
        DeadEndConstraint dead_end(5);
        Request bad{{3, 1, 4}, {.draft_tokens = 4, .sampling = {.temperature = temperature}, .seed = 21, .max_new_tokens = 12}};
        bad.options.sampling.constraint = &dead_end;
        Batch batch(3);
        const RequestResult failed = failing_beside_mates(batch, bad, "dead end after 5 allows no token at position");
        // The five tokens the constraint allowed, at most, came out before it failed.
        CHECK(failed.generation.tokens.size() <= 5);
    }
}

TEST_CASE("batched: a stream callback returning false ends its request (StopReason::callback); the others are unchanged",
          "[errors][batched]") {
    Batch batch(3);
    const Request request{{8, 8, 1}, {.draft_tokens = 4, .sampling = {.temperature = 1.0}, .seed = 31, .max_new_tokens = 25}};
    auto stop_after_five = [](std::size_t& count) {
        return [&count](Token) { return ++count < 5; };
    };
    std::size_t alone_count = 0, batched_count = 0;
    ToyLM target(target_options()), draft(draft_options());
    specdec::SpeculativeDecoder single(specdec::target(target), specdec::draft(draft), request.options,
                                       specdec::TokenwiseRejection{}, specdec::FixedLength{});
    const specdec::GenerationResult expected = single.generate(request.prompt, stop_after_five(alone_count));
    REQUIRE(expected.stop_reason == StopReason::callback);
    std::vector<RequestId> ids;
    RequestId id = 0;
    const auto results = run_mates(batch.decoder, ids, [&](std::size_t step) {
        if (step == 2) id = batch.decoder.submit(request.prompt, request.options, stop_after_five(batched_count));
    });
    REQUIRE(results.count(id) == 1);
    const RequestResult& stopped = results.at(id);
    CHECK(stopped.status == RequestStatus::finished);
    CHECK(stopped.generation.stop_reason == StopReason::callback);
    CHECK(stopped.generation.tokens.size() == 5);
    CHECK(batched_count == 5);
    CHECK(stopped.generation.tokens == expected.tokens);
    check_mates_unchanged(results, ids);
}

TEST_CASE("batched: a request that fills its slot's context stops with StopReason::context_full; the others are "
          "unchanged",
          "[errors][batched]") {
    Batch batch(3);
    // 40 prompt tokens in a context of 48: at most 9 new tokens fit.
    Request request{std::vector<Token>(40, 0), {.draft_tokens = 4, .sampling = {.temperature = 1.0}, .seed = 41, .max_new_tokens = 60}};
    for (std::size_t i = 0; i < request.prompt.size(); ++i) request.prompt[i] = static_cast<Token>((i * 7) % kVocab);
    const specdec::GenerationResult expected = alone(request);
    REQUIRE(expected.stop_reason == StopReason::context_full);
    std::vector<RequestId> ids;
    RequestId id = 0;
    const auto results = run_mates(batch.decoder, ids, [&](std::size_t step) {
        if (step == 0) id = batch.decoder.submit(request.prompt, request.options);
    });
    REQUIRE(results.count(id) == 1);
    const RequestResult& full = results.at(id);
    CHECK(full.status == RequestStatus::finished);
    CHECK(full.generation.stop_reason == StopReason::context_full);
    CHECK(full.generation.tokens == expected.tokens);
    CHECK(request.prompt.size() + full.generation.tokens.size() == kContext + 1);
    check_mates_unchanged(results, ids);
}

TEST_CASE("batched status of an unknown request is an error naming it", "[errors][batched]") {
    Batch batch(2);
    CHECK_THROWS_WITH(batch.decoder.status(42), Catch::Contains("request 42 is not known"));
    CHECK_FALSE(batch.decoder.cancel(42));
    CHECK(batch.decoder.idle());
    CHECK(batch.decoder.step().sequences == 0);  // an idle step does nothing
}

TEST_CASE("a batched decoder over a single-sequence target serves its requests one after another, each as decoded alone",
          "[batched]") {
    ToyLM target(target_options()), draft(draft_options());
    specdec::BatchedDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
        specdec::target(target), specdec::draft(draft));
    CHECK(decoder.slots() == 1);
    std::vector<RequestId> ids;
    for (const Request& r : kMates) ids.push_back(decoder.submit(r.prompt, r.options));
    std::size_t most_sequences = 0;
    std::vector<RequestResult> results;
    while (!decoder.idle()) {
        most_sequences = std::max(most_sequences, decoder.step().sequences);
        for (RequestResult& r : decoder.take_finished()) results.push_back(std::move(r));
    }
    CHECK(most_sequences == 1);
    REQUIRE(results.size() == kMates.size());
    for (std::size_t i = 0; i < kMates.size(); ++i) {
        INFO("request " << i);
        CHECK(results[i].id == ids[i]);  // in submission order: one at a time
        CHECK(results[i].generation.tokens == alone(kMates[i]).tokens);
    }
}

// A multi-sequence adapter with a batching bug: a pass over several
// sequences returns one row too few (a single sequence's pass is right).
struct DropTheLastRowOfBatches {
    specdec::LogitsView operator()(std::span<const specdec::SequenceFeed> feeds, const specdec::LogitsView& all,
                                   std::vector<float>& buffer) const {
        const std::size_t rows = feeds.size() > 1 ? all.rows - 1 : all.rows;
        buffer.assign(all.data, all.data + rows * all.row_stride);  // only these rows exist
        return specdec::dense_logits(buffer, rows, all.vocab);
    }
};
using DropsARowOfBatches = specdec::test::EditedBatchPass<ToyLM, DropTheLastRowOfBatches>;
static_assert(specdec::MultiSequenceLM<DropsARowOfBatches>);

TEST_CASE("batched: a multi-sequence adapter whose batched pass returns a row too few fails the requests of that pass "
          "with a message, as target or as draft",
          "[errors][batched][misuse]") {
    // Prompts of one token (nothing to prefill) and one of three; every
    // request drafts its cap (FixedBatchLength, whatever a policy's warm-up
    // would do): the passes hold all three sequences from the first step.
    const std::vector<Request> requests{
        {{1}, {.draft_tokens = 3, .sampling = {.temperature = 1.0}, .seed = 1, .max_new_tokens = 8}},
        {{2}, {.draft_tokens = 2, .sampling = {.temperature = 0.0}, .seed = 2, .max_new_tokens = 8}},
        {{3, 4, 5}, {.draft_tokens = 3, .sampling = {.temperature = 0.7}, .seed = 3, .max_new_tokens = 8}},
    };
    auto check_all_failed = [&](auto& decoder, const std::string& message) {
        for (const Request& r : requests) decoder.submit(r.prompt, r.options);
        const std::vector<RequestResult> results = decoder.run();
        REQUIRE(results.size() == requests.size());
        for (const RequestResult& r : results) {
            INFO("request " << r.id);
            CHECK(r.status == RequestStatus::failed);
            CHECK_THAT(r.error, Catch::Contains(message));
        }
    };
    SECTION("as target") {
        DropsARowOfBatches target(ToySlots(3, [] { return ToyLM(target_options()); }));
        ToySlots draft(3, [] { return ToyLM(draft_options()); });
        specdec::BatchedDecoder<DropsARowOfBatches, ToySlots, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
            specdec::target(target), specdec::draft(draft));
        check_all_failed(decoder, "model forward_batch returned");
    }
    SECTION("as draft, drafting in lockstep") {
        ToySlots target(3, [] { return ToyLM(target_options()); });
        DropsARowOfBatches draft(ToySlots(3, [] { return ToyLM(draft_options()); }));
        specdec::BatchedDecoder<ToySlots, DropsARowOfBatches, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
            specdec::target(target), specdec::draft(draft));
        check_all_failed(decoder, "draft model forward_batch returned");
    }
}

}  // namespace batched_bad_input
