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
//   const auto id = decoder.submit(prompt, {.seed = 7, .max_new_tokens = 64}, on_token);
//   for (specdec::RequestResult& done : decoder.run()) ...   // or step() in your own loop
//
// Each request is a DecoderSession of its own (the skeleton every decoder
// shares: begin_step, feed_pass, commit, finish_step) over its slot of the
// models (SlotModel), so a request's tokens are exactly what the
// single-sequence decoders give for the same prompt, options and draft
// lengths: the same random streams (keyed by the request's seed and
// positions), the same rule, and, on the CPU model, bitwise the same logits
// whatever the batch mates. A step whose policy gives a request 0 drafts
// samples its token as AutoregressiveDecoder does.
//
// A long prompt's prefill can be spread over steps (BatchOptions::
// prefill_chunk): each step prefills at most that many prompt tokens before
// its pass, so the running requests wait a chunk's pass per step instead of
// the whole prefill; the request decodes from the step after its prompt is
// in. The caches end the same as an unchunked prefill's (on the CPU model,
// bitwise), and a prefill draws no random numbers: the tokens are the same.
//
// How many drafts each request proposes is the policy's (batch_lengths.hpp):
// AutoBatchLength chooses them for the batch's throughput, down to 0 for
// every request when the pass is compute-bound. A draft model that is a
// MultiSequenceLM drafts in lockstep: draft round r is one pass of the draft
// model over every request still drafting.
//
// Threads: one BatchedDecoder is used from one thread at a time (submit,
// step, run, cancel); a server hands requests to the thread that owns it
// through a queue, as specdec-server does (docs/serving.md).
//
// Errors: a request's bad input (empty prompt, an id outside the vocabulary, a
// prompt longer than a slot's context, invalid options) is refused by
// submit() with specdec::Error. An error inside a step that belongs to one
// request (NaN logits in its rows, a drafter failing on it) ends that request
// with status failed and the message; the others go on unchanged.
//
// The pieces, one idea each: batch_requests.hpp (ids, statuses, results,
// options, step reports), batch_slot.hpp (a request's session in its slot),
// lockstep_drafting.hpp (draft rounds over a multi-sequence draft model);
// this header is the decoder and includes them all.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <deque>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/batch_lengths.hpp"
#include "specdec/decoding/batch_requests.hpp"
#include "specdec/decoding/batch_slot.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/lockstep_drafting.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/sequence_slot.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

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
        : target_(&target.model), rule_(std::move(rule)), policy_(std::move(policy)), prefill_chunk_(options.prefill_chunk) {
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
        Slot::check_request_options(options, target_->vocab_size());
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

    // A running request's generation so far (tokens, logprobs, counts) as of
    // the last step; nullptr when it is not running. A server streams the
    // logprobs of the tokens on_token gave from here. Valid until the next
    // step() or submit().
    [[nodiscard]] const GenerationResult* progress(RequestId id) const {
        for (const auto& slot : slots_)
            if (slot->occupied && slot->id == id) return &slot->result;
        return nullptr;
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

        // Open a step for every running request whose prompt is in; a full
        // context ends it.
        active_.clear();
        for (auto& slot : slots_) {
            if (!slot->occupied || slot->prefilling()) continue;
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

        // The policy plans the requests that leave their length to it
        // (DecodingOptions::drafting); the others draft their cap or nothing.
        queries_.clear();
        for (Active& a : active_) {
            const std::size_t cap = a.slot->cap(a.record, kDrafts);
            a.k_max = a.slot->drafting() == Drafting::fixed ? cap : 0;
            if (a.slot->drafting() == Drafting::policy) queries_.push_back({a.slot->id, cap});
        }
        lengths_.assign(queries_.size(), 0);
        if (!queries_.empty()) policy_.plan(queries_, lengths_);
        for (std::size_t i = 0, planned = 0; i < active_.size(); ++i) {
            if (active_[i].slot->drafting() != Drafting::policy) continue;
            active_[i].k_max = std::min(lengths_[planned], queries_[planned].cap);  // a policy may not exceed a cap
            ++planned;
        }

        draft(report);
        verify(report);

        outcomes_.clear();
        for (const Active& a : active_) {
            if (a.verified) outcomes_.push_back({a.slot->id, a.proposal.size(), a.accepted});
        }
        report.seconds = detail::seconds_since(start);
        StepTimings timings{.target_width = report.target_tokens, .target_seconds = target_seconds_,
                            .draft_passes = rounds_.widths.size(), .draft_seconds = 0.0,
                            .draft_round_widths = rounds_.widths, .draft_round_seconds = rounds_.seconds,
                            .first_round_caught_up = rounds_.first_round_caught_up,
                            .acceptance_seconds = acceptance_seconds_,
                            .total_seconds = report.seconds - admission_seconds};
        for (const double seconds : rounds_.seconds) timings.draft_seconds += seconds;
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
    using Active = detail::ActiveRequest<Slot>;

    // Gives waiting requests free slots and prefills their prompts, within
    // the step's prefill budget (BatchOptions::prefill_chunk): the prompts
    // admitted in earlier steps go on first, in the order they came.
    void admit(BatchStepReport& report) {
        const auto start = detail::Clock::now();
        std::size_t budget = prefill_chunk_ > 0 ? prefill_chunk_ : std::numeric_limits<std::size_t>::max();
        auto prefill = [&](Slot& slot, auto&& compute) {
            try {
                const std::size_t computed = compute();
                budget -= computed;
                report.prefill_tokens += computed;
                if (slot.prefilling()) prefilling_.push_back(&slot);
            } catch (const Error& error) {
                retire(slot, RequestStatus::failed, error.what(), report);
            }
        };
        std::vector<Slot*> earlier = std::exchange(prefilling_, {});
        for (Slot* slot : earlier) {
            if (!slot->prefilling()) continue;  // retired (cancelled) since
            if (budget == 0) {
                prefilling_.push_back(slot);
                continue;
            }
            prefill(*slot, [&] { return slot->prefill_some(budget); });
        }
        while (!waiting_.empty() && budget > 0) {
            Slot* slot = free_slot_for(waiting_.front().prompt);
            if (slot == nullptr) break;
            Waiting request = std::move(waiting_.front());
            waiting_.pop_front();
            slot->occupied = true;
            slot->id = request.id;
            slot->draws = draft_draws_for(request.rule);
            rules_[slot_index(*slot)] = std::move(request.rule);
            prefill(*slot, [&] {
                const std::size_t computed =
                    slot->admit(request.id, request.prompt, std::move(request.options), std::move(request.stream), budget);
                ++report.admitted;
                return computed;
            });
        }
        report.prefill_seconds = detail::seconds_since(start);
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
        rounds_.clear();
        if constexpr (kLockstep) {
            report.drafts += lockstep_.draft(*draft_model_, std::span<Active>(active_), rounds_);
            report.draft_rounds += rounds_.widths.size();
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
                        rounds_.widths.push_back(1);
                        rounds_.seconds.push_back(a.record.stats().draft_seconds);
                    } else if (a.k_max > 0) {
                        ++model_free;
                        model_free_seconds += a.record.stats().draft_seconds;
                    }
                } catch (const Error& error) {
                    a.fail(error);
                }
                report.drafts += a.proposal.size();
                report.draft_rounds += a.proposal.forward_passes;
            }
            if (model_free > 0) {
                rounds_.widths.push_back(model_free);
                rounds_.seconds.push_back(model_free_seconds);
            }
        }
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
                a.fail(error);
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
                if (!a.failed) a.fail(error);
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
                                                     a.done);
                a.verified = true;
                report.emitted += a.slot->result.tokens.size() - before;
            } catch (const Error& error) {
                a.fail(error);
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
        detail::check_logits_shape(all, expected, target_->vocab_size(), "model forward_batch",
                                   std::to_string(feeds.size()) + " sequences",
                                   std::to_string(expected) + " rows (one per token fed, one per last-row-only feed)");
    }

    [[nodiscard]] std::size_t slot_index(const Slot& slot) const { return slot.target_slot(); }

    Target* target_;
    std::conditional_t<kLockstep, Draft*, std::nullptr_t> draft_model_{};
    std::conditional_t<kLockstep, detail::LockstepDrafting<Draft>, std::nullptr_t> lockstep_{};
    Rule rule_;
    std::vector<Rule> rules_;  // the rule of the request in each slot
    Policy policy_;
    std::size_t prefill_chunk_ = 0;  // BatchOptions::prefill_chunk
    std::vector<Slot*> prefilling_;  // slots whose prompts are partly in, in the order they came
    std::deque<detail::SlotModel<Target>> target_slots_;
    std::deque<typename detail::BatchDraftFor<Draft>::Model> draft_slots_;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::deque<Waiting> waiting_;
    std::vector<RequestResult> finished_;
    RequestId next_id_ = 1;
    // Per-step scratch, kept between steps.
    std::vector<Active> active_;
    std::vector<SequenceDraftQuery> queries_;
    std::vector<std::size_t> lengths_;
    detail::DraftRounds rounds_;
    std::vector<SequenceOutcome> outcomes_;
    std::vector<SequenceFeed> feeds_;
    detail::LazyDistributions lazy_;
    double target_seconds_ = 0.0, acceptance_seconds_ = 0.0;
};

}  // namespace specdec
