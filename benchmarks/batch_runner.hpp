#pragma once
// The runs of --batch (batch_bench.hpp): one decoder per (batch size,
// variant) behind one interface, stepped one step at a time, and what a run
// of it measured (its steady-state steps, latencies and the model's
// predictions for the lengths it ran).
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/batch_lengths.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/roles.hpp"

#include "batch_results.hpp"

namespace specdec::bench {

// A batch length policy that records the lengths of each plan and what the
// batch model predicted for them before the step: over AutoBatchLength, its
// own model; over another policy, a BatchModel that learns from that
// policy's steps (a model, not a policy: it never plans).
template <BatchLengthPolicy Inner>
class MeasuredBatchLength {
public:
    MeasuredBatchLength() = default;
    explicit MeasuredBatchLength(Inner inner) : inner_(std::move(inner)) {}

    void plan(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        inner_.plan(queries, lengths);
        last_.assign(lengths.size(), 0);
        for (std::size_t i = 0; i < lengths.size(); ++i)
            last_[i] = static_cast<std::uint8_t>(std::min<std::size_t>(std::min(lengths[i], queries[i].cap), 255));
        predict(queries);
    }
    void observe(const BatchOutcome& outcome) {
        inner_.observe(outcome);
        if constexpr (!kOwnModel) model_.observe(outcome);
    }
    void forget(std::uint64_t id) {
        inner_.forget(id);
        if constexpr (!kOwnModel) model_.forget(id);
    }
    // What the target says of its passes, for an inner policy that asks.
    void target_splits_ragged_passes(bool splits) {
        if constexpr (requires { inner_.target_splits_ragged_passes(splits); }) inner_.target_splits_ragged_passes(splits);
    }
    [[nodiscard]] const BatchModel& model() const {
        if constexpr (kOwnModel) return inner_.model();
        else return model_;
    }
    [[nodiscard]] const Inner& inner() const { return inner_; }
    [[nodiscard]] const PlannedLengths& last_plan() const { return last_; }
    // The last plan's predicted sum_i E_i(k_i) and seconds (0 and 0 before
    // the model has timed a target pass).
    [[nodiscard]] double last_predicted_tokens() const { return predicted_tokens_; }
    [[nodiscard]] double last_predicted_seconds() const { return predicted_seconds_; }

private:
    static constexpr bool kOwnModel = std::same_as<Inner, AutoBatchLength>;

    void predict(std::span<const SequenceDraftQuery> queries) {
        const BatchModel& m = model();
        predicted_tokens_ = predicted_seconds_ = 0.0;
        if (m.costs().target().widest() == 0) return;
        for (std::size_t i = 0; i < queries.size(); ++i) predicted_tokens_ += m.expected_tokens(queries[i].id, last_[i]);
        predicted_seconds_ = m.predicted_seconds(last_);
    }

    Inner inner_{};
    [[no_unique_address]] std::conditional_t<kOwnModel, std::monostate, BatchModel> model_ = [] {
        if constexpr (kOwnModel) return std::monostate{};
        else return BatchModel(AutoBatchOptions{});
    }();
    PlannedLengths last_;
    double predicted_tokens_ = 0.0, predicted_seconds_ = 0.0;
};

namespace detail {

using BatchClock = std::chrono::steady_clock;

// One request of a run: its prompt and seed (the same for every variant of a round).
struct BatchRequest {
    std::vector<Token> prompt;
    std::uint64_t seed = 0;
};

// What one run of one variant gave.
struct BatchRunOutcome {
    std::size_t steps = 0, tokens = 0, target_tokens = 0, sequence_steps = 0, drafts = 0, draft_rounds = 0;
    double seconds = 0.0, latency_seconds = 0.0;
    std::size_t requests = 0;
    std::vector<PlannedLengths> lengths;      // each steady-state step's
    std::vector<std::vector<Token>> outputs;  // each request's tokens, in submission order
    double predicted_tokens = 0.0, predicted_seconds = 0.0;
};

// A decoder of one variant at one batch size, behind one interface.
class BatchVariantRunner {
public:
    virtual ~BatchVariantRunner() = default;
    // Submits a run's requests; then step() until it returns false; then finish().
    virtual void start(std::span<const BatchRequest> requests, const BatchSettings& settings) = 0;
    virtual bool step() = 0;  // one batched step; false (and no step) once every request has ended
    virtual BatchRunOutcome finish() = 0;
    // The batch model of this decoder's policy (what it learned).
    [[nodiscard]] virtual const BatchModel& model() const = 0;
    // The policy where it is AutoBatchLength, else nullptr.
    [[nodiscard]] virtual const AutoBatchLength* auto_policy() const = 0;

    BatchRunOutcome run(std::span<const BatchRequest> requests, const BatchSettings& settings) {
        start(requests, settings);
        while (step()) {}
        return finish();
    }
};

template <class Target, class Draft, class Policy>
class BatchVariantRunnerOf final : public BatchVariantRunner {
public:
    BatchVariantRunnerOf(std::unique_ptr<Target> target, std::unique_ptr<Draft> draft, std::size_t batch,
                         std::size_t draft_tokens, Policy policy = {})
        : target_(std::move(target)),
          draft_(std::move(draft)),
          batch_(batch),
          draft_tokens_(draft_tokens),
          decoder_(TargetRole<Target>{*target_}, DraftRole<Draft>{*draft_}, BatchOptions{.max_sequences = batch}, ChosenRule{},
                   std::move(policy)) {
        if (decoder_.slots() != batch)
            throw Error("batch " + std::to_string(batch) + ": the models have " + std::to_string(decoder_.slots()) + " slots");
    }

    void start(std::span<const BatchRequest> requests, const BatchSettings& settings) override {
        ids_.clear();
        steps_.clear();
        last_step_.assign(requests.size(), 0);
        for (const BatchRequest& request : requests) {
            DecodingOptions options{.draft_tokens = std::max<std::size_t>(draft_tokens_, 1),
                                    .sampling = SamplingOptions{.temperature = settings.temperature},
                                    .seed = request.seed,
                                    .max_new_tokens = settings.new_tokens};
            // The step that emits a request's last token ends its latency.
            const std::size_t j = ids_.size();
            ids_.push_back(decoder_.submit(
                request.prompt, std::move(options),
                [this, j](Token) {
                    last_step_[j] = steps_.size();
                    return true;
                },
                ChosenRule{settings.rule}));
        }
    }

    bool step() override {
        if (decoder_.idle()) return false;
        BatchStepReport report = decoder_.step();
        Step step{report, {}, 0.0, 0.0};
        if (report.sequences > 0) {
            step.lengths = decoder_.policy().last_plan();
            step.predicted_tokens = decoder_.policy().last_predicted_tokens();
            step.predicted_seconds = decoder_.policy().last_predicted_seconds();
        }
        steps_.push_back(std::move(step));
        return true;
    }

    BatchRunOutcome finish() override {
        BatchRunOutcome outcome;
        const std::vector<RequestId>& ids = ids_;
        const std::vector<Step>& steps = steps_;
        std::unordered_map<RequestId, RequestResult> results;
        for (RequestResult& result : decoder_.take_finished()) results.emplace(result.id, std::move(result));
        for (const RequestId id : ids) {
            const auto found = results.find(id);
            if (found == results.end()) throw Error("batch run: request " + std::to_string(id) + " has no result");
            if (found->second.status != RequestStatus::finished)
                throw Error("batch run: request " + std::to_string(id) + " ended " +
                            std::string(to_string(found->second.status)) + ": " + found->second.error);
            outcome.outputs.push_back(found->second.generation.tokens);
        }
        outcome.requests = ids.size();
        // Admission is first come, first served: the requests a step admitted
        // are the next ones in submission order, and their prefill is left out.
        // A request's latency is the seconds of this decoder's steps from the
        // one that admitted it to the one that emitted its last token (not
        // the wall clock, which holds the other variants' turns too).
        std::size_t next_admitted = 0;
        for (std::size_t s = 0; s < steps.size(); ++s) {
            const Step& step = steps[s];
            double prefill = 0.0;
            for (std::size_t a = 0; a < step.report.admitted && next_admitted < ids.size(); ++a, ++next_admitted) {
                prefill += results.at(ids[next_admitted]).generation.stats.prefill_seconds;
                for (std::size_t t = s; t <= last_step_[next_admitted] && t < steps.size(); ++t)
                    outcome.latency_seconds += steps[t].report.seconds;
            }
            if (step.report.sequences != batch_) continue;  // the tail (or a failed admission)
            ++outcome.steps;
            outcome.tokens += step.report.emitted;
            outcome.seconds += std::max(0.0, step.report.seconds - prefill);
            outcome.target_tokens += step.report.target_tokens;
            outcome.sequence_steps += step.report.sequences;
            outcome.drafts += step.report.drafts;
            outcome.draft_rounds += step.report.draft_rounds;
            if (step.predicted_seconds > 0.0) {
                outcome.predicted_tokens += step.predicted_tokens;
                outcome.predicted_seconds += step.predicted_seconds;
            }
            outcome.lengths.push_back(step.lengths);
        }
        return outcome;
    }

    [[nodiscard]] const BatchModel& model() const override { return decoder_.policy().model(); }
    [[nodiscard]] const AutoBatchLength* auto_policy() const override {
        if constexpr (std::same_as<std::remove_cvref_t<decltype(decoder_.policy().inner())>, AutoBatchLength>)
            return &decoder_.policy().inner();
        else
            return nullptr;
    }

private:
    struct Step {
        BatchStepReport report;
        PlannedLengths lengths;
        double predicted_tokens = 0.0, predicted_seconds = 0.0;
    };
    std::vector<RequestId> ids_;
    std::vector<Step> steps_;
    std::vector<std::size_t> last_step_;  // per request: the index of the step that emitted its last token
    std::unique_ptr<Target> target_;
    std::unique_ptr<Draft> draft_;
    std::size_t batch_, draft_tokens_;
    BatchedDecoder<Target, Draft, ChosenRule, Policy> decoder_;
};

[[nodiscard]] inline std::vector<BatchRequest> batch_requests(std::uint64_t first_seed, std::size_t count, std::size_t vocab,
                                                              std::size_t prompt_tokens,
                                                              const std::function<std::vector<Token>(std::uint64_t, std::size_t, std::size_t)>& make_prompt) {
    std::vector<BatchRequest> requests;
    for (std::size_t j = 0; j < count; ++j)
        requests.push_back(BatchRequest{make_prompt(first_seed + j, vocab, prompt_tokens), first_seed + j});
    return requests;
}

inline void add_run(BatchVariantResult& result, const BatchRunOutcome& run) {
    ++result.rounds;
    result.steps += run.steps;
    result.tokens += run.tokens;
    result.seconds += run.seconds;
    result.target_tokens += run.target_tokens;
    result.sequence_steps += run.sequence_steps;
    result.drafts += run.drafts;
    result.draft_rounds += run.draft_rounds;
    result.requests += run.requests;
    result.latency_seconds += run.latency_seconds;
    result.predicted_tokens += run.predicted_tokens;
    result.predicted_seconds += run.predicted_seconds;
    result.tokens_per_second_per_round.push_back(run.seconds > 0.0 ? double(run.tokens) / run.seconds : 0.0);
    for (const PlannedLengths& step : run.lengths)
        for (const std::uint8_t k : step) {
            if (result.length_counts.size() <= k) result.length_counts.resize(k + 1u, 0);
            ++result.length_counts[k];
        }
    result.last_round_lengths = run.lengths;
}

}  // namespace detail

}  // namespace specdec::bench
