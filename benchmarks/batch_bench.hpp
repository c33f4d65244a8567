#pragma once
// --batch: batched decoding of many requests per target pass (BatchedDecoder),
// per batch size B, measured side by side in one process:
//   autoregressive  BatchedDecoder with NoDrafts (batched plain decoding)
//   k = 1, 2, ...   every request drafts k tokens a step (FixedBatchLength)
//   auto            AutoBatchLength chooses every request's length each step
// Each (B, variant) has its own decoder over its own models of B cache slots
// (sharing the weights), kept from round to round, as a serving process keeps
// its decoder. A round runs every variant once per batch size, all of them
// advancing one step in turn (who steps first rotates from round to round),
// so that a slow moment of the machine falls on every variant alike.
//
// What one run of a variant measures: waves x B requests, at least
// min_requests (their own seeded prompts and seeds, the same for every
// variant of a round) go to a decoder of B slots; each finished request is
// replaced by a waiting one. Counted are the steps in which all B slots
// decode (steady state): from the first step
// until the last request is admitted, i.e. without the tail in which fewer
// and fewer requests remain. A step's prefill of newly admitted prompts is
// left out of its time (the same target pass for every variant, measured by
// the single-sequence report instead).
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

#include "bench_results.hpp"

namespace specdec::bench {

enum class BatchVariantKind { autoregressive, fixed, automatic };

struct BatchSettings {
    std::vector<std::size_t> batch_sizes{1, 2, 4, 8, 16, 32};
    std::vector<std::size_t> fixed_lengths{1, 2, 3, 4};  // one fixed-k variant each
    std::size_t auto_max_draft_tokens = 8;                // the cap of the auto variant
    double temperature = 0.0;
    // Every request's acceptance rule at T > 0 (at T = 0 both are greedy).
    ChosenRule::Kind rule = ChosenRule::Kind::tokenwise;
    std::size_t new_tokens = 24;   // per request
    std::size_t waves = 2;         // requests per run = waves x B, at least min_requests
    // Small batches finish a run of waves x B requests in a few dozen steps,
    // where a handful of requests that happen to accept well or badly move
    // the ratio to plain decoding by tens of percent from round to round.
    std::size_t min_requests = 16;
    std::size_t rounds = 2;
    std::size_t prompt_tokens = 16;
    std::uint64_t seed = 42;
    // The auto decoder of each batch size first serves one run untimed (on
    // other prompts), so that the rounds measure what it learned rather than
    // its warm-up steps (cf. RunChoices::learn_auto_first); every other
    // decoder serves one request per slot of it, so that no variant's timed
    // steps fault in the pages of its KV caches while auto's were faulted in
    // untimed (KvCache touches a page when a position is first written).
    bool learn_auto_first = true;
};

// What a step's policy chose: one length per request in the pass.
using PlannedLengths = std::vector<std::uint8_t>;

// The verification every request runs: "greedy" at T = 0, else the rule's name.
[[nodiscard]] inline const char* verification_name(const BatchSettings& settings) {
    if (settings.temperature == 0.0) return "greedy";
    return settings.rule == ChosenRule::Kind::block ? "block" : "tokenwise";
}

// Requests in one run of a variant at batch size `batch`.
[[nodiscard]] inline std::size_t requests_per_run(const BatchSettings& settings, std::size_t batch) {
    return std::max(settings.waves * batch, settings.min_requests);
}

// One variant at one batch size, summed over the rounds.
struct BatchVariantResult {
    BatchVariantKind kind = BatchVariantKind::autoregressive;
    std::size_t draft_tokens = 0;  // fixed: k; auto: its cap; autoregressive: 0
    std::size_t rounds = 0;
    // The steps with every slot decoding (the steady state).
    std::size_t steps = 0;
    std::size_t tokens = 0;         // committed
    double seconds = 0.0;           // their time, the prefill of admitted prompts left out
    std::size_t target_tokens = 0;  // rows in the target passes
    std::size_t sequence_steps = 0; // sum over steps of the requests in it (= steps x B)
    std::size_t drafts = 0;         // proposed
    std::size_t draft_rounds = 0;   // draft passes
    std::vector<double> tokens_per_second_per_round;
    // Every request of every round: the seconds of its decoder's steps from
    // the one that admitted it (its prefill included) to its last token.
    std::size_t requests = 0;
    double latency_seconds = 0.0;
    // Chosen lengths: how many (request, step) pairs of the steady state got n drafts.
    std::vector<std::size_t> length_counts;
    // Each steady-state step's lengths in the last round (auto: what it chose).
    std::vector<PlannedLengths> last_round_lengths;
    // The cost model, from what this variant's own steps timed (see
    // predicted_seconds_per_step): sum over the steady-state steps of
    // sum_i E(k_i), and of V(sum_i (k_i + 1)) + sum_r D(#{i : k_i > r}).
    double predicted_tokens = 0.0;
    double predicted_seconds = 0.0;
    // T = 0: did every request emit exactly the autoregressive variant's tokens?
    std::optional<bool> greedy_match;

    [[nodiscard]] std::string label() const {
        switch (kind) {
            case BatchVariantKind::autoregressive: return "AR";
            case BatchVariantKind::fixed: return "k=" + std::to_string(draft_tokens);
            case BatchVariantKind::automatic: return "auto<=" + std::to_string(draft_tokens);
        }
        return "?";
    }
    [[nodiscard]] double tokens_per_second() const { return seconds > 0.0 ? double(tokens) / seconds : 0.0; }
    [[nodiscard]] double predicted_tokens_per_second() const {
        return predicted_seconds > 0.0 ? predicted_tokens / predicted_seconds : 0.0;
    }
    [[nodiscard]] double efficiency() const {
        const double predicted = predicted_tokens_per_second();
        return predicted > 0.0 ? tokens_per_second() / predicted : 0.0;
    }
    [[nodiscard]] double mean_latency_seconds() const { return requests ? latency_seconds / double(requests) : 0.0; }
    [[nodiscard]] double mean_draft_length() const {
        return sequence_steps ? double(drafts) / double(sequence_steps) : 0.0;
    }
    // Tokens committed per request per step (1 for plain decoding).
    [[nodiscard]] double tokens_per_sequence_step() const {
        return sequence_steps ? double(tokens) / double(sequence_steps) : 0.0;
    }
    // accepted / proposed drafts (each request of a step emits its accepted drafts + 1).
    [[nodiscard]] double acceptance_rate() const {
        return drafts ? double(tokens - sequence_steps) / double(drafts) : 0.0;
    }
    // Steady-state steps in which no request drafted (auto: plain batched decoding).
    [[nodiscard]] std::size_t steps_without_drafts() const {
        std::size_t n = 0;
        for (const PlannedLengths& step : last_round_lengths)
            n += std::all_of(step.begin(), step.end(), [](std::uint8_t k) { return k == 0; }) ? 1 : 0;
        return n;
    }
};

// What the auto decoder of a batch size believed at the end (its policy's
// cost model, for the report).
struct LearnedBatchCosts {
    std::vector<std::pair<std::size_t, double>> target_pass_seconds;  // (tokens in the pass, V)
    std::vector<std::pair<std::size_t, double>> draft_round_seconds;  // (sequences in the round, D)
    std::vector<double> pooled_acceptance;                            // a_m, m = 0 .. cap - 1
    double request_prior_strength = 0.0;  // pseudo-samples of the pooled a_m in a request's own
    std::size_t plain_refreshes = 0;       // plain steps run to time a plain rate of the plan's own time
    std::size_t plain_probes_skipped = 0;  // plain probes left out while drafting clearly won
};

struct BatchSizeResult {
    std::size_t batch = 0;
    std::vector<BatchVariantResult> variants;  // autoregressive first, then the fixed k, then auto
    LearnedBatchCosts auto_costs;

    [[nodiscard]] const BatchVariantResult& autoregressive() const { return variants.front(); }
    [[nodiscard]] const BatchVariantResult* automatic() const {
        for (const BatchVariantResult& v : variants)
            if (v.kind == BatchVariantKind::automatic) return &v;
        return nullptr;
    }
    // The fastest fixed-k variant, or nullptr.
    [[nodiscard]] const BatchVariantResult* best_fixed() const {
        const BatchVariantResult* best = nullptr;
        for (const BatchVariantResult& v : variants)
            if (v.kind == BatchVariantKind::fixed && (!best || v.tokens_per_second() > best->tokens_per_second())) best = &v;
        return best;
    }
    // The fastest of autoregressive and every fixed k (what a hand-picked
    // setting could have done at this batch size).
    [[nodiscard]] const BatchVariantResult& best_static() const {
        const BatchVariantResult* best = &autoregressive();
        if (const BatchVariantResult* fixed = best_fixed(); fixed && fixed->tokens_per_second() > best->tokens_per_second())
            best = fixed;
        return *best;
    }
    [[nodiscard]] double ratio_to_autoregressive(const BatchVariantResult& v) const {
        const double baseline = autoregressive().tokens_per_second();
        return baseline > 0.0 ? v.tokens_per_second() / baseline : 0.0;
    }
    [[nodiscard]] double predicted_ratio_to_autoregressive(const BatchVariantResult& v) const {
        const double baseline = autoregressive().predicted_tokens_per_second();
        return baseline > 0.0 ? v.predicted_tokens_per_second() / baseline : 0.0;
    }
};

struct BatchReport {
    MachineInfo machine;
    ModelInfo target;
    ModelInfo draft;
    BatchSettings settings;
    std::vector<BatchSizeResult> sizes;
    double wall_seconds = 0.0;

    // The smallest batch size at which no fixed k is faster than
    // autoregressive decoding (the best fixed k's ratio <= 1), if any.
    [[nodiscard]] std::optional<std::size_t> crossover() const {
        for (const BatchSizeResult& s : sizes) {
            const BatchVariantResult* best = s.best_fixed();
            if (best && s.ratio_to_autoregressive(*best) <= 1.0) return s.batch;
        }
        return std::nullopt;
    }
    [[nodiscard]] bool all_greedy_runs_match() const {
        for (const BatchSizeResult& s : sizes)
            for (const BatchVariantResult& v : s.variants)
                if (v.greedy_match && !*v.greedy_match) return false;
        return true;
    }
};

// A batch length policy that also keeps the cost model of AutoBatchLength
// over its own steps (for the predicted curve) and the lengths of its last
// plan (what the report logs). Over AutoBatchLength it reads the policy's own
// model; over another policy it feeds a model of its own, which never plans.
template <BatchLengthPolicy Inner>
class MeasuredBatchLength {
public:
    void plan(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        inner_.plan(queries, lengths);
        last_.assign(lengths.size(), 0);
        for (std::size_t i = 0; i < lengths.size(); ++i)
            last_[i] = static_cast<std::uint8_t>(std::min<std::size_t>(std::min(lengths[i], queries[i].cap), 255));
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
    [[nodiscard]] const AutoBatchLength& costs() const {
        if constexpr (kOwnModel) return inner_;
        else return model_;
    }
    [[nodiscard]] const PlannedLengths& last_plan() const { return last_; }

private:
    static constexpr bool kOwnModel = std::same_as<Inner, AutoBatchLength>;
    Inner inner_{};
    [[no_unique_address]] std::conditional_t<kOwnModel, std::monostate, AutoBatchLength> model_{};
    PlannedLengths last_;
};

// E(k) = 1 + sum_{j<k} prod_{m<=j} a_m with the pooled a_m of `model`.
[[nodiscard]] inline double expected_tokens(const AutoBatchLength& model, std::size_t k) {
    double expected = 1.0, survive = 1.0;
    for (std::size_t j = 0; j < k; ++j) {
        survive *= model.pooled_acceptance(j);
        expected += survive;
    }
    return expected;
}

// The predicted seconds of a step with these lengths: V(sum (k_i + 1)) +
// sum_r D(#{i : k_i > r}) (the acceptance work and the rest of a step are
// left out: the prediction is what the passes cost). 0 when V is not timed.
[[nodiscard]] inline double predicted_step_seconds(const AutoBatchLength& model, const PlannedLengths& lengths) {
    std::size_t width = 0, most = 0;
    for (const std::uint8_t k : lengths) width += k + 1u, most = std::max<std::size_t>(most, k);
    const double target = model.target_pass_seconds(width);
    if (target < 0.0) return 0.0;
    double seconds = target;
    for (std::size_t r = 0; r < most; ++r) {
        const auto drafting = static_cast<std::size_t>(std::count_if(lengths.begin(), lengths.end(), [&](std::uint8_t k) { return k > r; }));
        const double round = model.draft_round_seconds(drafting);
        if (round > 0.0) seconds += round;
    }
    return seconds;
}

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
    [[nodiscard]] virtual const AutoBatchLength& costs() const = 0;

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
                         std::size_t draft_tokens)
        : target_(std::move(target)),
          draft_(std::move(draft)),
          batch_(batch),
          draft_tokens_(draft_tokens),
          decoder_(TargetRole<Target>{*target_}, DraftRole<Draft>{*draft_}, BatchOptions{.max_sequences = batch}) {
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
        PlannedLengths lengths = report.sequences > 0 ? decoder_.policy().last_plan() : PlannedLengths{};
        steps_.push_back(Step{report, std::move(lengths)});
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
        const AutoBatchLength& model = decoder_.policy().costs();
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
            const double predicted = predicted_step_seconds(model, step.lengths);
            if (predicted > 0.0) {
                for (const std::uint8_t k : step.lengths) outcome.predicted_tokens += expected_tokens(model, k);
                outcome.predicted_seconds += predicted;
            }
            outcome.lengths.push_back(step.lengths);
        }
        return outcome;
    }

    [[nodiscard]] const AutoBatchLength& costs() const override { return decoder_.policy().costs(); }

private:
    struct Step {
        BatchStepReport report;
        PlannedLengths lengths;
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

// The sweep the flags ask for (parse_options has applied --batch's defaults).
[[nodiscard]] inline BatchSettings batch_settings_of(const BenchOptions& options) {
    BatchSettings settings;
    settings.batch_sizes = options.batch_sizes;
    settings.fixed_lengths = options.draft_tokens;
    settings.auto_max_draft_tokens = options.auto_max_draft_tokens;
    settings.temperature = options.temperatures.empty() ? 0.0 : options.temperatures.front();
    settings.rule = !options.rules.empty() && options.rules.front() == RuleChoice::block ? ChosenRule::Kind::block
                                                                                        : ChosenRule::Kind::tokenwise;
    settings.new_tokens = options.new_tokens;
    settings.rounds = options.repetitions;
    settings.seed = options.seed;
    settings.learn_auto_first = options.learn_auto_first;
    return settings;
}

// Progress: batch size, variant label, round (1-based) of rounds.
using BatchProgress = std::function<void(std::size_t batch, const std::string& label, std::size_t round, std::size_t rounds)>;

// Makes the models of one decoder: a target and a draft of `slots` cache slots each.
template <class Target, class Draft>
struct BatchModelFactory {
    std::function<std::unique_ptr<Target>(std::size_t slots)> target;
    std::function<std::unique_ptr<Draft>(std::size_t slots)> draft;
};

// Runs every variant at every batch size, in rounds. `make_prompt(seed,
// vocab, tokens)` gives a request's prompt (the bench's seeded prompts).
template <class Target, class Draft>
[[nodiscard]] BatchReport run_batch_benchmark(const BatchModelFactory<Target, Draft>& models, std::size_t vocab,
                                              const BatchSettings& settings,
                                              const std::function<std::vector<Token>(std::uint64_t, std::size_t, std::size_t)>& make_prompt,
                                              const BatchProgress& progress = {}) {
    if (settings.batch_sizes.empty()) throw Error("run_batch_benchmark: no batch sizes");
    if (settings.rounds == 0 || settings.waves == 0 || settings.new_tokens == 0)
        throw Error("run_batch_benchmark: rounds, waves and new tokens must be at least 1");
    const auto start = detail::BatchClock::now();
    BatchReport report;
    report.settings = settings;

    struct Variant {
        BatchVariantKind kind;
        std::size_t draft_tokens;
    };
    std::vector<Variant> variants{{BatchVariantKind::autoregressive, 0}};
    for (const std::size_t k : settings.fixed_lengths) variants.push_back({BatchVariantKind::fixed, k});
    variants.push_back({BatchVariantKind::automatic, settings.auto_max_draft_tokens});

    // runners[s][v]: the decoder of variant v at batch size s, kept across rounds.
    std::vector<std::vector<std::unique_ptr<detail::BatchVariantRunner>>> runners;
    for (const std::size_t batch : settings.batch_sizes) {
        BatchSizeResult size;
        size.batch = batch;
        std::vector<std::unique_ptr<detail::BatchVariantRunner>> row;
        for (const Variant& v : variants) {
            BatchVariantResult result;
            result.kind = v.kind;
            result.draft_tokens = v.draft_tokens;
            size.variants.push_back(result);
            switch (v.kind) {
                case BatchVariantKind::autoregressive: {
                    using Runner = detail::BatchVariantRunnerOf<Target, NoDrafts, MeasuredBatchLength<FixedBatchLength>>;
                    row.push_back(std::make_unique<Runner>(models.target(batch), std::make_unique<NoDrafts>(), batch, 0));
                    break;
                }
                case BatchVariantKind::fixed: {
                    using Runner = detail::BatchVariantRunnerOf<Target, Draft, MeasuredBatchLength<FixedBatchLength>>;
                    row.push_back(std::make_unique<Runner>(models.target(batch), models.draft(batch), batch, v.draft_tokens));
                    break;
                }
                case BatchVariantKind::automatic: {
                    using Runner = detail::BatchVariantRunnerOf<Target, Draft, MeasuredBatchLength<AutoBatchLength>>;
                    row.push_back(std::make_unique<Runner>(models.target(batch), models.draft(batch), batch, v.draft_tokens));
                    break;
                }
            }
        }
        report.sizes.push_back(std::move(size));
        runners.push_back(std::move(row));
    }

    // Requests of round r at batch size s: seeds from a range of their own;
    // the untimed learning run takes the range after the last round's.
    const std::uint64_t stride = 1'000'003;
    auto requests_of = [&](std::size_t s, std::size_t round) {
        const std::size_t count = requests_per_run(settings, settings.batch_sizes[s]);
        return detail::batch_requests(settings.seed + (round * settings.batch_sizes.size() + s) * stride, count, vocab,
                                      settings.prompt_tokens, make_prompt);
    };
    if (settings.learn_auto_first) {
        for (std::size_t s = 0; s < settings.batch_sizes.size(); ++s) {
            if (progress) progress(settings.batch_sizes[s], "auto learning, the others warming up (untimed)", 0, settings.rounds);
            const auto requests = requests_of(s, settings.rounds);
            (void)runners[s].back()->run(requests, settings);
            // One request per slot writes every slot's positions up to where
            // a timed request reaches, which is what a warm-up is for here.
            const auto one_wave = std::span(requests).first(std::min(settings.batch_sizes[s], requests.size()));
            for (std::size_t v = 0; v + 1 < runners[s].size(); ++v) (void)runners[s][v]->run(one_wave, settings);
        }
    }
    for (std::size_t round = 0; round < settings.rounds; ++round) {
        for (std::size_t s = 0; s < settings.batch_sizes.size(); ++s) {
            const auto requests = requests_of(s, round);
            std::vector<std::vector<Token>> autoregressive_outputs;
            std::vector<std::pair<std::size_t, detail::BatchRunOutcome>> outcomes;
            // Every variant's run advances one step in turn, so that all of
            // them run through the same seconds of a machine whose speed
            // drifts (and, shared, changes with what else runs).
            if (progress)
                progress(settings.batch_sizes[s], std::to_string(variants.size()) + " variants step by step in turn",
                         round + 1, settings.rounds);
            for (std::size_t v = 0; v < variants.size(); ++v) runners[s][v]->start(requests, settings);
            for (bool any = true; any;) {
                any = false;
                for (std::size_t i = 0; i < variants.size(); ++i) {
                    const std::size_t v = (i + round) % variants.size();  // who steps first rotates
                    any = runners[s][v]->step() || any;
                }
            }
            for (std::size_t v = 0; v < variants.size(); ++v) outcomes.emplace_back(v, runners[s][v]->finish());
            for (const auto& [v, outcome] : outcomes)
                if (variants[v].kind == BatchVariantKind::autoregressive) autoregressive_outputs = outcome.outputs;
            for (auto& [v, outcome] : outcomes) {
                BatchVariantResult& result = report.sizes[s].variants[v];
                detail::add_run(result, outcome);
                if (settings.temperature == 0.0 && v != 0) {
                    const bool same = outcome.outputs == autoregressive_outputs;
                    result.greedy_match = result.greedy_match.value_or(true) && same;
                }
            }
        }
    }
    for (std::size_t s = 0; s < settings.batch_sizes.size(); ++s) {
        const AutoBatchLength& model = runners[s].back()->costs();
        LearnedBatchCosts& costs = report.sizes[s].auto_costs;
        const std::size_t batch = settings.batch_sizes[s];
        for (std::size_t n = batch; n <= batch * (settings.auto_max_draft_tokens + 1); n += batch)
            if (const double v = model.target_pass_seconds(n); v >= 0.0) costs.target_pass_seconds.emplace_back(n, v);
        for (std::size_t b = 1; b <= batch; b *= 2)
            if (const double d = model.draft_round_seconds(b); d >= 0.0) costs.draft_round_seconds.emplace_back(b, d);
        for (std::size_t m = 0; m < settings.auto_max_draft_tokens; ++m) costs.pooled_acceptance.push_back(model.pooled_acceptance(m));
        costs.request_prior_strength = model.request_prior_strength();
        costs.plain_refreshes = model.plain_refreshes();
        costs.plain_probes_skipped = model.plain_probes_skipped();
    }
    report.wall_seconds = std::chrono::duration<double>(detail::BatchClock::now() - start).count();
    return report;
}

}  // namespace specdec::bench
