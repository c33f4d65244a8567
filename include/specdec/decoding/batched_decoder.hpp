#pragma once
// BatchedDecoder: many requests, one target pass per step (continuous
// batching). Requests are submitted at any time and wait for a free cache
// slot; each step admits waiting requests (prefilling their prompts), drafts
// for every running request, runs ONE target pass over the pending tokens and
// drafts of all of them (MultiSequenceLM::forward_batch), accepts per request
// with that request's own options, seed and the rule, rolls each request's
// cache back on its own, and retires the requests that ended.
//
//   specdec::BatchedDecoder decoder(specdec::target(big), specdec::draft(small));
//   const auto id = decoder.submit(prompt, {.max_new_tokens = 64, .seed = 7}, on_token);
//   for (specdec::RequestResult& done : decoder.run()) ...   // or step() in your own loop
//
// Each request is a DecoderSession of its own (the skeleton every decoder
// shares: begin_step, feed_pass, emit, finish_step) over its slot of the
// models (SlotModel), so a request's tokens are exactly what the
// single-sequence decoders give for the same prompt, options and draft
// lengths: the same random streams (keyed by the request's seed and
// positions), the same rule, and, on the CPU model, bitwise the same logits
// whatever the batch mates. A step whose policy gives a request 0 drafts
// samples its token as AutoregressiveDecoder does.
//
// How many drafts each request proposes is the policy's (batch_lengths.hpp):
// AutoBatchLength chooses them for the batch's throughput, down to 0 for
// every request when the pass is compute-bound. A draft model that is a
// MultiSequenceLM drafts in lockstep: draft round r is one pass of the draft
// model over every request still drafting.
//
// Errors: a request's bad input (empty prompt, an id outside the vocabulary, a
// prompt longer than a slot's context, invalid options) is refused by
// submit() with specdec::Error. An error inside a step that belongs to one
// request (NaN logits in its rows, a drafter failing on it) ends that request
// with status failed and the message; the others go on unchanged.
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/batch_lengths.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/sequence_slot.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

using RequestId = std::uint64_t;

enum class RequestStatus {
    waiting,    // submitted, no slot free yet
    running,    // in a slot, decoding
    finished,   // ended normally (generation.stop_reason says why)
    cancelled,  // cancel() ended it (generation holds the tokens emitted before)
    failed,     // an error inside a step ended it (error says which)
};

[[nodiscard]] inline std::string_view to_string(RequestStatus status) {
    switch (status) {
        case RequestStatus::waiting: return "waiting";
        case RequestStatus::running: return "running";
        case RequestStatus::finished: return "finished";
        case RequestStatus::cancelled: return "cancelled";
        case RequestStatus::failed: return "failed";
    }
    return "unknown";
}

struct RequestResult {
    RequestId id = 0;
    RequestStatus status = RequestStatus::finished;
    GenerationResult generation;  // tokens and stats, also of a cancelled or failed request
    std::string error;            // failed: the error's message
};

// A request's stream: called with each token as it is committed; returning
// false ends the request (StopReason::callback).
using TokenStream = std::function<bool(Token)>;

struct BatchOptions {
    std::size_t max_sequences = 0;  // requests decoded at once; 0 = every slot the models have
};

// What one step() did.
struct BatchStepReport {
    std::size_t admitted = 0;       // requests prefilled into a slot at the start of the step
    std::size_t sequences = 0;      // requests in the target pass
    std::size_t target_tokens = 0;  // tokens in the target pass
    std::size_t drafts = 0;         // draft tokens proposed
    std::size_t draft_rounds = 0;   // draft passes (lockstep rounds)
    std::size_t emitted = 0;        // tokens committed
    std::size_t retired = 0;        // requests that ended in the step
    double seconds = 0.0;
};

namespace detail {

// How a batched decoder holds its draft per slot: a draft model through its
// slot (SlotModel) in a ModelDrafter, a drafter object shared by every slot.
template <class Draft, bool is_drafter = Drafter<Draft>>
struct BatchDraftFor {
    using Model = SlotModel<Draft>;
    using Source = DrafterFor<Model, ModelDrafter, false>;
};
template <class Draft>
struct BatchDraftFor<Draft, true> {
    using Model = Draft;
    using Source = DrafterFor<Draft, ModelDrafter, true>;
};

// One slot of a batched decoder: the session of the request that holds it.
// The session outlives its requests, so that a request sharing a prefix with
// the slot's previous one reuses its cache (prefill keeps the common prefix).
template <class Target, class Draft>
class BatchSlot : public DecoderSession<BatchSlot<Target, Draft>, SlotModel<Target>,
                                        typename BatchDraftFor<Draft>::Source> {
    using Session = DecoderSession<BatchSlot, SlotModel<Target>, typename BatchDraftFor<Draft>::Source>;
    using DraftModel = typename BatchDraftFor<Draft>::Model;

public:
    BatchSlot(SlotModel<Target>& target, DraftModel& draft)
        : Session(TargetRole<SlotModel<Target>>{target}, DraftRole<DraftModel>{draft}, DecodingOptions{}) {}

    // The request now holding the slot, and what it has produced so far.
    RequestId id = 0;
    bool occupied = false, cancel_requested = false;
    TokenStream stream;
    GenerationResult result;
    Clock::time_point started{};

    // Prefills a new request's prompt (keeping what the slot's cache shares with it).
    void admit(RequestId request, std::span<const Token> prompt, DecodingOptions options, TokenStream on_token) {
        id = request;
        occupied = true;
        cancel_requested = false;
        stream = std::move(on_token);
        result = GenerationResult{};
        started = Clock::now();
        this->options_ = std::move(options);
        result.stats = this->prefill(prompt);
        result.seed = this->seed();
    }

    [[nodiscard]] std::size_t remaining() const { return this->options_.max_new_tokens - result.tokens.size(); }
    StepRecord open() { return this->begin_step(remaining()); }

    // The most drafts this step may hold: the target's cache holds committed
    // + k positions after the pass, and a step emits at most k + 1 tokens.
    [[nodiscard]] std::size_t cap(const StepRecord& step, bool drafts) const {
        if (!drafts) return 0;
        return std::min({this->options_.draft_tokens, step.room, remaining() - 1});
    }

    [[nodiscard]] CounterRng rng() const { return CounterRng{this->seed()}; }
    [[nodiscard]] const SamplingOptions& sampling() const { return this->options_.sampling; }
    auto& drafter() { return this->drafter_; }

    // A proposal from the slot's own drafter (drafting one slot at a time).
    DraftProposal propose_alone(StepRecord& step, std::size_t k) {
        const CounterRng random = rng();
        return this->propose(step, [&] {
            if (k == 0) return DraftProposal{};
            return this->drafter_.propose(DraftRequest{this->sequence_, k, this->options_.sampling, random});
        });
    }

    // Checks a proposal and makes the pass's feed: the uncached suffix (the
    // cache rolled back to the committed sequence) and the drafts.
    std::span<const Token> feed(StepRecord& step, const DraftProposal& draft, std::size_t k_max) {
        if (draft.size() > k_max) {
            throw Error("the drafter proposed " + std::to_string(draft.size()) + " tokens when at most " +
                        std::to_string(k_max) + " were requested");
        }
        check_draft_tokens(draft, this->target_.model().vocab_size());
        this->count_chain_proposal(step, draft.size());
        this->feed_pass(step, draft.tokens);
        return this->feed_;
    }

    [[nodiscard]] std::size_t target_slot() const { return this->target_.model().slot(); }

    // The slot's feed went through a batched pass; its cache grew by it.
    void fed() { this->target_.record_fed(this->feed_); }
    // The feed through the slot alone (a model of one sequence).
    LogitsView forward_alone() { return this->target_.forward(this->feed_); }

    // Verifies the drafts against `rows` (the feed's rows), rolls the cache
    // back to the accepted prefix, emits, and closes the step. Returns the
    // drafts accepted; `done` is set when the request has ended.
    template <class Rule>
    std::size_t verify_and_emit(StepRecord& step, const DraftProposal& draft, const LogitsView& rows, const Rule& rule,
                                LazyDistributions& lazy, std::vector<float>& scratch, bool& done) {
        GenerationStats& stats = step.stats();
        const CounterRng random = rng();
        const SamplingOptions& sampling = this->options_.sampling;
        const std::size_t k = draft.size();
        AcceptanceResult verdict;
        LogitsView processed;
        if (k == 0) {
            verdict.next_token = timed(stats.acceptance_seconds, [&] {
                processed = this->target_rows(rows, {});
                return sample_next_on_host(processed.last_row(), sampling, random, step.committed, scratch);
            });
        } else {
            verdict = timed(stats.acceptance_seconds, [&] {
                processed = this->target_rows(rows, draft.tokens);
                return verify_on_host(processed, draft, sampling, random, step.committed, lazy, rule);
            });
            if (verdict.accepted > k) throw Error("acceptance rule accepted more drafts than were proposed");
        }
        this->target_.truncate(step.committed + verdict.accepted);
        auto on_token = [this](Token token) { return stream ? stream(token) : true; };
        this->emit(step, std::span<const Token>(draft.tokens).first(verdict.accepted), verdict.next_token, on_token);
        this->record_logprobs(step, rows, processed, k);
        this->count_chain_tests(step, k, verdict.accepted);
        const StepResult closed = this->finish_step(step);
        done = add_step(result, closed, this->options_.max_new_tokens);
        return verdict.accepted;
    }

    // Closes a step that could not run (the context is full).
    void close_unrun(StepRecord& step) {
        const StepResult closed = this->finish_step(step);
        add_step(result, closed, this->options_.max_new_tokens);
    }
};

}  // namespace detail

// Target: the CausalLM whose distribution every request's output follows; a
// MultiSequenceLM runs every request in one pass, any other CausalLM serves
// one request at a time (the others wait their turn).
// Draft: a CausalLM draft model (one slot per request: a MultiSequenceLM with
// as many slots as the target to batch requests), a Drafter shared by every
// request (it must keep no per-request state, like PromptLookupDrafter), or
// NoDrafts for batched plain decoding.
// Rule: the acceptance rule at temperature > 0 (greedy verification at 0);
// submit() may give a request its own (with ChosenRule, token-wise and block
// verification per request in one batch).
// Policy: each request's draft length per step (batch_lengths.hpp); a
// request's DecodingOptions::draft_tokens is its maximum.
template <CausalLM Target, class Draft, AcceptanceRule Rule = TokenwiseRejection,
          BatchLengthPolicy Policy = AutoBatchLength>
    requires(Drafter<Draft> || CausalLM<Draft>)
class BatchedDecoder {
    static constexpr bool kDraftModel = !Drafter<Draft>;
    static constexpr bool kDrafts = !std::same_as<Draft, NoDrafts>;
    static constexpr bool kLockstep = kDraftModel && MultiSequenceLM<Draft>;
    using Slot = detail::BatchSlot<Target, Draft>;

public:
    // Throws specdec::Error when the draft's vocabulary differs from the
    // target's. Both models must outlive the decoder. The slots are the
    // fewest of the target's, a draft model's and options.max_sequences.
    BatchedDecoder(TargetRole<Target> target, DraftRole<Draft> draft, BatchOptions options = {}, Rule rule = {},
                   Policy policy = {})
        : target_(&target.model), rule_(std::move(rule)), policy_(std::move(policy)) {
        std::size_t slots = detail::sequence_slots_of(target.model);
        if constexpr (kDraftModel) slots = std::min(slots, detail::sequence_slots_of(draft.source));
        if (options.max_sequences > 0) slots = std::min(slots, options.max_sequences);
        for (std::size_t s = 0; s < slots; ++s) {
            target_slots_.emplace_back(target.model, s);
            if constexpr (kDraftModel) {
                draft_slots_.emplace_back(draft.source, s);
                slots_.push_back(std::make_unique<Slot>(target_slots_.back(), draft_slots_.back()));
            } else {
                slots_.push_back(std::make_unique<Slot>(target_slots_.back(), draft.source));
            }
        }
        if constexpr (kLockstep) draft_model_ = &draft.source;
        rules_.assign(slots, rule_);
        // A target whose pass over feeds of unequal lengths runs as several
        // (llama.cpp's cache streams) tells a policy that can plan around it.
        if constexpr (requires(const Target& t, Policy& p) {
                          { t.ragged_passes_split() } -> std::convertible_to<bool>;
                          p.target_splits_ragged_passes(true);
                      })
            policy_.target_splits_ragged_passes(target.model.ragged_passes_split());
    }

    // Queues a request; it starts at the next step with a free slot. Throws
    // specdec::Error (and queues nothing) for invalid options, an empty
    // prompt, an id outside the vocabulary or a prompt longer than the
    // target's context. `on_token` (optional) streams its tokens.
    RequestId submit(std::span<const Token> prompt, DecodingOptions options = {}, TokenStream on_token = {}) {
        return submit(prompt, std::move(options), std::move(on_token), rule_);
    }
    // The same with this request's own acceptance rule (e.g. a ChosenRule
    // per request, so that token-wise and block requests share a batch).
    RequestId submit(std::span<const Token> prompt, DecodingOptions options, TokenStream on_token, Rule rule) {
        validate(options, /*speculative=*/kDrafts);
        validate(options.sampling, target_->vocab_size());
        detail::check_prompt(prompt, target_->vocab_size(), target_->context_length());
        const RequestId id = next_id_++;
        waiting_.push_back(Waiting{id, std::vector<Token>(prompt.begin(), prompt.end()), std::move(options),
                                   std::move(on_token), std::move(rule)});
        return id;
    }

    // Ends a waiting or running request: it is reported with status cancelled
    // (and the tokens it emitted) by the next step(), or at once if it was
    // waiting. Returns false for an id that is not waiting or running.
    bool cancel(RequestId id) {
        for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
            if (it->id == id) {
                finished_.push_back(RequestResult{id, RequestStatus::cancelled, {}, {}});
                waiting_.erase(it);
                return true;
            }
        }
        for (auto& slot : slots_) {
            if (slot->occupied && slot->id == id) {
                slot->cancel_requested = true;
                return true;
            }
        }
        return false;
    }

    [[nodiscard]] RequestStatus status(RequestId id) const {
        for (const Waiting& w : waiting_)
            if (w.id == id) return RequestStatus::waiting;
        for (const auto& slot : slots_)
            if (slot->occupied && slot->id == id) return RequestStatus::running;
        for (const RequestResult& r : finished_)
            if (r.id == id) return r.status;
        throw Error("request " + std::to_string(id) + " is not known (or its result was already taken)");
    }

    [[nodiscard]] std::size_t slots() const { return slots_.size(); }
    [[nodiscard]] std::size_t waiting_requests() const { return waiting_.size(); }
    [[nodiscard]] std::size_t running_requests() const {
        return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s->occupied; }));
    }
    [[nodiscard]] bool idle() const { return waiting_.empty() && running_requests() == 0; }
    [[nodiscard]] const Policy& policy() const { return policy_; }

    // The results of the requests that ended since the last call, in the order they ended.
    std::vector<RequestResult> take_finished() { return std::exchange(finished_, {}); }

    // step() until every request has ended; returns their results.
    std::vector<RequestResult> run() {
        while (!idle()) step();
        return take_finished();
    }

    // One batched step: retire cancelled requests, admit waiting ones into
    // free slots, draft, one target pass, verify and emit per request.
    BatchStepReport step() {
        const auto start = detail::Clock::now();
        BatchStepReport report;
        for (auto& slot : slots_) {
            if (slot->occupied && slot->cancel_requested) retire(*slot, RequestStatus::cancelled, {}, report);
        }
        // Prefilling admitted prompts is not part of what a step costs the
        // policy: it is paid once per request, whatever the lengths.
        const auto admission_start = detail::Clock::now();
        admit(report);
        const double admission_seconds = detail::seconds_since(admission_start);

        // Open a step for every running request; a full context ends it.
        active_.clear();
        for (auto& slot : slots_) {
            if (!slot->occupied) continue;
            detail::StepRecord record = slot->open();
            if (record.stopped()) {
                slot->close_unrun(record);
                retire(*slot, RequestStatus::finished, {}, report);
                continue;
            }
            active_.push_back(Active{slot.get(), std::move(record)});
        }
        if (active_.empty()) {
            report.seconds = detail::seconds_since(start);
            return report;
        }

        queries_.clear();
        for (const Active& a : active_) queries_.push_back({a.slot->id, a.slot->cap(a.record, kDrafts)});
        lengths_.assign(active_.size(), 0);
        policy_.plan(queries_, lengths_);
        for (std::size_t i = 0; i < active_.size(); ++i) {
            active_[i].k_max = std::min(lengths_[i], queries_[i].cap);  // a policy may not exceed a cap
        }

        draft(report);
        verify(report);

        outcomes_.clear();
        for (const Active& a : active_) {
            if (a.verified) outcomes_.push_back({a.slot->id, a.proposal.size(), a.accepted});
        }
        report.seconds = detail::seconds_since(start);
        StepTimings timings{.target_width = report.target_tokens, .target_seconds = target_seconds_,
                            .draft_passes = round_widths_.size(), .draft_seconds = 0.0,
                            .draft_round_widths = round_widths_, .draft_round_seconds = round_seconds_,
                            .first_round_caught_up = first_round_caught_up_, .acceptance_seconds = acceptance_seconds_,
                            .total_seconds = report.seconds - admission_seconds};
        for (const double seconds : round_seconds_) timings.draft_seconds += seconds;
        policy_.observe(BatchOutcome{timings, outcomes_});
        for (Active& a : active_) {
            if (a.failed) {
                retire(*a.slot, RequestStatus::failed, std::move(a.error), report);
            } else if (a.done) {
                retire(*a.slot, RequestStatus::finished, {}, report);
            }
        }
        return report;
    }

private:
    struct Waiting {
        RequestId id;
        std::vector<Token> prompt;
        DecodingOptions options;
        TokenStream stream;
        Rule rule;
    };
    // A request in this step.
    struct Active {
        Slot* slot;
        detail::StepRecord record;
        std::size_t k_max = 0;
        DraftProposal proposal{};
        std::span<const Token> feed{};
        std::size_t first_row = 0, rows = 0;
        std::size_t accepted = 0;
        bool verified = false, done = false, failed = false;
        std::string error{};
    };

    void admit(BatchStepReport& report) {
        while (!waiting_.empty()) {
            Slot* slot = free_slot_for(waiting_.front().prompt);
            if (slot == nullptr) return;
            Waiting request = std::move(waiting_.front());
            waiting_.pop_front();
            try {
                slot->admit(request.id, request.prompt, std::move(request.options), std::move(request.stream));
                rules_[slot_index(*slot)] = std::move(request.rule);
                ++report.admitted;
            } catch (const Error& error) {
                slot->occupied = true;
                slot->id = request.id;
                retire(*slot, RequestStatus::failed, error.what(), report);
            }
        }
    }

    // The free slot whose sequence shares the longest prefix with `prompt`
    // (its cache is reused), or nullptr.
    Slot* free_slot_for(std::span<const Token> prompt) {
        Slot* best = nullptr;
        std::size_t best_common = 0;
        for (auto& slot : slots_) {
            if (slot->occupied) continue;
            const std::span<const Token> held = slot->sequence();
            std::size_t common = 0;
            while (common < held.size() && common < prompt.size() && held[common] == prompt[common]) ++common;
            if (best == nullptr || common > best_common) {
                best = slot.get();
                best_common = common;
            }
        }
        return best;
    }

    void retire(Slot& slot, RequestStatus status, std::string error, BatchStepReport& report) {
        slot.result.stats.total_seconds = detail::seconds_since(slot.started);
        finished_.push_back(RequestResult{slot.id, status, std::move(slot.result), std::move(error)});
        policy_.forget(slot.id);
        slot.occupied = false;
        slot.stream = nullptr;
        ++report.retired;
    }

    // Every active request's proposal: in lockstep rounds over a draft model
    // of several slots, else each request through its own drafter.
    void draft(BatchStepReport& report) {
        round_widths_.clear();
        round_seconds_.clear();
        first_round_caught_up_ = false;
        if constexpr (kLockstep) {
            draft_in_lockstep(report);
        } else {
            // A drafter that runs no model (prompt lookup) is timed too, as one
            // round over the requests it was asked to draft for: a policy prices
            // an untimed draft round as dear, and would never draft with it.
            std::size_t model_free = 0;
            double model_free_seconds = 0.0;
            for (Active& a : active_) {
                try {
                    a.proposal = a.slot->propose_alone(a.record, a.k_max);
                    if (a.proposal.forward_passes > 0) {
                        round_widths_.push_back(1);
                        round_seconds_.push_back(a.record.stats().draft_seconds);
                    } else if (a.k_max > 0) {
                        ++model_free;
                        model_free_seconds += a.record.stats().draft_seconds;
                    }
                } catch (const Error& error) {
                    fail(a, error);
                }
                report.drafts += a.proposal.size();
                report.draft_rounds += a.proposal.forward_passes;
            }
            if (model_free > 0) {
                round_widths_.push_back(model_free);
                round_seconds_.push_back(model_free_seconds);
            }
        }
    }

    // Round r runs the draft model once over every request drafting an
    // (r + 1)-th token: round 0 feeds each its uncached suffix (catching up
    // on what the last verification committed), later rounds its last draft.
    // Each row is turned into a draft exactly as ModelDrafter does.
    void draft_in_lockstep(BatchStepReport& report)
        requires kLockstep
    {
        const auto start = detail::Clock::now();
        const std::size_t vocab = draft_model_->vocab_size(), context = draft_model_->context_length();
        requests_.clear();
        drafting_.clear();
        for (std::size_t i = 0; i < active_.size(); ++i) {
            Active& a = active_[i];
            const std::span<const Token> history = a.slot->sequence();
            const std::size_t room = context + 1 > history.size() ? context + 1 - history.size() : 0;
            a.k_max = std::min(a.k_max, room);
            a.proposal.vocab = vocab;
            a.proposal.tokens.reserve(a.k_max);
            requests_.push_back(DraftRequest{history, a.k_max, a.slot->sampling(), rngs_for(i)});
            if (a.k_max > 0) drafting_.push_back(i);
        }
        for (std::size_t round = 0; !drafting_.empty(); ++round) {
            const auto round_start = detail::Clock::now();
            feeds_.clear();
            for (const std::size_t i : drafting_) {
                auto& sync = active_[i].slot->drafter().kv_sync();
                const std::span<const Token> tokens =
                    round == 0 ? sync.uncached_suffix(requests_[i].history)
                               : std::span<const Token>(&active_[i].proposal.tokens.back(), 1);
                // A step commits at most two tokens the draft has not seen
                // (its last accepted draft and the next token).
                if (round == 0 && tokens.size() > 2) first_round_caught_up_ = true;
                feeds_.push_back(SequenceFeed{sync.model().slot(), tokens, /*last_row_only=*/true});
            }
            LogitsView rows{};
            try {
                rows = draft_model_->forward_batch(feeds_);
            } catch (const Error& error) {
                // The model validates before it runs: no draft cache changed.
                for (const std::size_t i : drafting_) fail(active_[i], error);
                break;
            }
            round_widths_.push_back(drafting_.size());
            still_.clear();
            for (std::size_t f = 0; f < drafting_.size(); ++f) {
                Active& a = active_[drafting_[f]];
                a.slot->drafter().kv_sync().record_fed(feeds_[f].tokens);
                ++a.proposal.forward_passes;
                try {
                    // Checked before any row is read: a pass that returned fewer rows than
                    // feeds would hand the last requests memory the model never wrote.
                    if (rows.rows != drafting_.size() || rows.vocab != vocab || rows.data == nullptr ||
                        (rows.rows > 1 && rows.row_stride < rows.vocab)) {
                        throw Error("draft model forward_batch returned " + std::to_string(rows.rows) +
                                    " logits rows of " + std::to_string(rows.vocab) + " values for " +
                                    std::to_string(drafting_.size()) + " sequences: expected one row of vocab_size() = " +
                                    std::to_string(vocab) + " values per sequence");
                    }
                    const bool kept = detail::draft_from_row(rows.row(f), requests_[drafting_[f]], round, a.proposal);
                    if (kept && round + 1 < a.k_max && !detail::stop_before_pass(requests_[drafting_[f]], round + 1)) {
                        still_.push_back(drafting_[f]);
                    }
                } catch (const Error& error) {
                    fail(a, error);
                }
            }
            round_seconds_.push_back(detail::seconds_since(round_start));
            drafting_.swap(still_);
        }
        const double seconds = detail::seconds_since(start);
        for (Active& a : active_) {
            GenerationStats& stats = a.record.stats();
            stats.draft_seconds = a.proposal.forward_passes > 0 ? seconds : 0.0;
            stats.draft_forward_passes = a.proposal.forward_passes;
            stats.draft_tokens_proposed = a.proposal.size();
            report.drafts += a.proposal.size();
        }
        report.draft_rounds += round_widths_.size();
    }

    // The random stream of active request i (kept alive for its DraftRequest).
    const CounterRng& rngs_for(std::size_t i) {
        if (rngs_.size() < active_.size()) rngs_.resize(active_.size());
        rngs_[i] = active_[i].slot->rng();
        return rngs_[i];
    }

    // One target pass over every request's feed, then each request's rule.
    void verify(BatchStepReport& report) {
        feeds_.clear();
        std::size_t rows = 0;
        for (Active& a : active_) {
            if (a.failed) continue;
            try {
                a.feed = a.slot->feed(a.record, a.proposal, a.k_max);
            } catch (const Error& error) {
                fail(a, error);
                continue;
            }
            a.first_row = rows;
            a.rows = a.feed.size();
            rows += a.rows;
            feeds_.push_back(SequenceFeed{a.slot->target_slot(), a.feed, false});
        }
        report.target_tokens = rows;
        target_seconds_ = 0.0;
        acceptance_seconds_ = 0.0;
        if (feeds_.empty()) return;
        LogitsView all{};
        try {
            all = detail::timed(target_seconds_, [&] { return pass(); });
        } catch (const Error& error) {
            for (Active& a : active_)
                if (!a.failed) fail(a, error);
            return;
        }
        report.sequences = feeds_.size();
        const auto start = detail::Clock::now();
        for (Active& a : active_) {
            if (a.failed) continue;
            a.record.stats().target_seconds = target_seconds_;
            try {
                const LogitsView rows_of_a{all.data + a.first_row * all.row_stride, a.rows, all.vocab, all.row_stride};
                const std::size_t before = a.slot->result.tokens.size();
                a.accepted = a.slot->verify_and_emit(a.record, a.proposal, rows_of_a, rules_[slot_index(*a.slot)], lazy_,
                                                     scratch_, a.done);
                a.verified = true;
                report.emitted += a.slot->result.tokens.size() - before;
            } catch (const Error& error) {
                fail(a, error);
            }
        }
        acceptance_seconds_ = detail::seconds_since(start);
    }

    // The target pass over feeds_: one forward_batch, or the one request's
    // forward for a model of one sequence.
    LogitsView pass() {
        if constexpr (MultiSequenceLM<Target>) {
            const LogitsView all = target_->forward_batch(feeds_);
            for (Active& a : active_)
                if (!a.failed) a.slot->fed();
            check_rows(all, feeds_);
            return all;
        } else {
            for (Active& a : active_)
                if (!a.failed) return a.slot->forward_alone();
            return LogitsView{};
        }
    }

    void check_rows(const LogitsView& all, std::span<const SequenceFeed> feeds) const {
        std::size_t expected = 0;
        for (const SequenceFeed& f : feeds) expected += f.last_row_only ? 1 : f.tokens.size();
        if (all.rows != expected || all.vocab != target_->vocab_size() || all.data == nullptr ||
            (all.rows > 1 && all.row_stride < all.vocab)) {
            throw Error("model forward_batch returned " + std::to_string(all.rows) + " logits rows of " +
                        std::to_string(all.vocab) + " values for " + std::to_string(expected) +
                        " rows expected of vocab_size() = " + std::to_string(target_->vocab_size()) + " values");
        }
    }

    [[nodiscard]] std::size_t slot_index(const Slot& slot) const { return slot.target_slot(); }

    static void fail(Active& a, const Error& error) {
        a.failed = true;
        a.error = error.what();
    }

    Target* target_;
    std::conditional_t<kLockstep, Draft*, std::nullptr_t> draft_model_{};
    Rule rule_;
    std::vector<Rule> rules_;  // the rule of the request in each slot
    Policy policy_;
    std::deque<detail::SlotModel<Target>> target_slots_;
    std::deque<typename detail::BatchDraftFor<Draft>::Model> draft_slots_;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::deque<Waiting> waiting_;
    std::vector<RequestResult> finished_;
    RequestId next_id_ = 1;
    // Per-step scratch, kept between steps.
    std::vector<Active> active_;
    std::vector<SequenceDraftQuery> queries_;
    std::vector<std::size_t> lengths_, drafting_, still_, round_widths_;
    std::vector<double> round_seconds_;
    std::vector<SequenceOutcome> outcomes_;
    std::vector<DraftRequest> requests_;
    std::vector<CounterRng> rngs_;
    std::vector<SequenceFeed> feeds_;
    detail::LazyDistributions lazy_;
    std::vector<float> scratch_;
    double target_seconds_ = 0.0, acceptance_seconds_ = 0.0;
    bool first_round_caught_up_ = false;
};

}  // namespace specdec
