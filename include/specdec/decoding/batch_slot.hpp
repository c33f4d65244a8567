#pragma once
// One slot of a BatchedDecoder (batched_decoder.hpp): the DecoderSession of
// the request that holds it, over its slot of the models (SlotModel), and
// what a batched step keeps of a request while it runs (ActiveRequest).
//
// The slot runs the chain pieces of the session (draft_cap, check_proposal,
// verify_chain, commit) exactly as SpeculativeDecoder does; only its pass is
// shared with the other slots.
#include <chrono>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/batch_requests.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/sequence_slot.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec::detail {

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
    // A decoder over NoDrafts is plain batched decoding: its requests may ask
    // for no drafts.
    static constexpr bool kSpeculative = !std::same_as<Draft, NoDrafts>;

    BatchSlot(SlotModel<Target>& target, DraftModel& draft)
        : Session(TargetRole<SlotModel<Target>>{target}, DraftRole<DraftModel>{draft}, DecodingOptions{}) {}

    // Throws specdec::Error for options a request of this slot may not have
    // (the session's validation), for a target of `vocab` tokens.
    static void check_request_options(const DecodingOptions& options, std::size_t vocab) {
        Session::check_options(options, vocab, kSpeculative);
    }

    // The request now holding the slot, and what it has produced so far.
    RequestId id = 0;
    bool occupied = false, cancel_requested = false;
    DraftDraws draws = DraftDraws::own;  // what the request's rule needs its drafts drawn with
    TokenStream stream;
    GenerationResult result;
    Clock::time_point started{};

    // Takes a new request and prefills its prompt (keeping what the slot's
    // cache shares with it), at most `budget` tokens now: the rest by
    // prefill_some() in later steps, while prefilling() holds. Returns the
    // tokens computed. Throws specdec::Error for invalid options or prompt.
    std::size_t admit(RequestId request, std::span<const Token> prompt, DecodingOptions options, TokenStream on_token,
                      std::size_t budget = std::numeric_limits<std::size_t>::max()) {
        id = request;
        occupied = true;
        cancel_requested = false;
        stream = std::move(on_token);
        result = GenerationResult{};
        started = Clock::now();
        this->set_options(std::move(options), kSpeculative);
        result.stats = this->begin_prefill(prompt);
        result.seed = this->seed();
        return prefill_some(budget);
    }
    std::size_t prefill_some(std::size_t budget) { return this->continue_prefill(budget, result.stats); }
    [[nodiscard]] bool prefilling() const { return occupied && this->prefill_pending(); }

    [[nodiscard]] std::size_t remaining() const { return this->options_.max_new_tokens - result.tokens.size(); }
    StepRecord open() { return this->begin_step(remaining()); }

    // The most drafts this step may hold (the session's draft_cap); 0 for a
    // decoder that drafts nothing.
    [[nodiscard]] std::size_t cap(const StepRecord& step, bool drafts) const {
        if (!drafts) return 0;
        return this->draft_cap(step, remaining());
    }

    [[nodiscard]] CounterRng rng() const { return CounterRng{this->seed()}; }
    [[nodiscard]] const SamplingOptions& sampling() const { return this->options_.sampling; }
    [[nodiscard]] Drafting drafting() const { return this->options_.drafting; }
    auto& drafter() { return this->drafter_; }

    // A proposal from the slot's own drafter (drafting one slot at a time).
    DraftProposal propose_alone(StepRecord& step, std::size_t k) {
        const CounterRng random = rng();
        return this->propose(step, [&] {
            if (k == 0) return DraftProposal{};
            return this->drafter_.propose(
                DraftRequest{this->sequence_, k, this->options_.sampling, random, {}, 0, {}, draws});
        });
    }

    // Checks a proposal and makes the pass's feed: the uncached suffix (the
    // cache rolled back to the committed sequence) and the drafts.
    std::span<const Token> feed(StepRecord& step, const DraftProposal& draft, std::size_t k_max) {
        this->check_proposal(draft, k_max);
        this->count_chain_proposal(step, draft.size());
        this->feed_pass(step, draft.tokens);
        return this->feed_;
    }

    [[nodiscard]] std::size_t target_slot() const { return this->target_.model().slot(); }

    // The slot's feed went through a batched pass; its cache grew by it.
    void fed() { this->target_.record_fed(this->feed_); }
    // The feed through the slot alone (a model of one sequence).
    LogitsView forward_alone() { return this->target_.forward(this->feed_); }

    // Verifies the drafts against `rows` (the feed's rows) by the request's
    // rule, commits the verdict, and closes the step. With no drafts the rule
    // samples the next token itself, as in SpeculativeDecoder::step, so a
    // coupled rule makes its own draw every step. Returns the drafts
    // accepted; `done` is set when the request has ended.
    template <class Rule>
    std::size_t verify_and_emit(StepRecord& step, const DraftProposal& draft, const LogitsView& rows, const Rule& rule,
                                LazyDistributions& lazy, bool& done) {
        LogitsView processed;
        const AcceptanceResult verdict = this->verify_chain(step, rows, draft, rule, lazy, processed);
        auto on_token = [this](Token token) { return stream ? stream(token) : true; };
        this->commit(step, draft.tokens, verdict, on_token, rows, processed);
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

// A request in a batched step: its slot, its step, its proposal and where
// its rows lie in the shared pass.
template <class Slot>
struct ActiveRequest {
    Slot* slot;
    StepRecord record;
    std::size_t k_max = 0;
    DraftProposal proposal{};
    std::span<const Token> feed{};
    std::size_t first_row = 0, rows = 0;
    std::size_t accepted = 0;
    bool verified = false, done = false, failed = false;
    std::string error{};

    // An error that belongs to this request alone ends it (status failed).
    void fail(const Error& cause) {
        failed = true;
        error = cause.what();
    }
};

}  // namespace specdec::detail
