#pragma once
// SpeculativeDecoder: a drafter proposes k tokens, the target scores all of
// them (plus the pending last token) in ONE forward pass, the acceptance rule
// keeps a prefix and supplies one more token, and both KV caches are rolled
// back to the committed sequence. The output has exactly the distribution of
// sampling from the processed target alone (and at temperature 0, exactly the
// target's greedy output).
//
//   specdec::SpeculativeDecoder decoder(specdec::target(big), specdec::draft(small), options);
//   auto result = decoder.generate(prompt, on_token);          // or, one step at a time:
//   decoder.prefill(prompt);
//   while (...) { specdec::StepResult step = decoder.step(); ... }
//
// The defaults are the fastest measured configuration: BlockVerification and
// AutoLength (options.draft_tokens is then the most drafts per step). AutoLength
// picks each step's length from measured timings, so at temperature > 0 two
// runs with one seed may differ (each is exact). For output that is bitwise
// reproducible from the seed, fix the length; a rule or a policy alone may be
// passed, the other stays the default:
//   specdec::SpeculativeDecoder fixed(specdec::target(big), specdec::draft(small), options, specdec::FixedLength{});
//   specdec::SpeculativeDecoder classic(specdec::target(big), specdec::draft(small), options,
//                                       specdec::TokenwiseRejection{}, specdec::FixedLength{});
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/decoding/draft_length.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/forced_drafts.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

// Target: the CausalLM whose distribution the output follows.
// Draft: a Drafter, or a CausalLM draft model (wrapped in a ModelDrafter).
// Rule: the acceptance rule used at temperature > 0 (sampling/acceptance.hpp;
// temperature 0 always uses greedy verification). BlockVerification keeps at least as
// many drafts as TokenwiseRejection in expectation (as many with point-mass drafts).
// If the target runs Rule itself (DeviceVerifyingLM; the CUDA LlamaModel runs
// TokenwiseRejection), verification happens there; otherwise on the host.
// Policy: how many drafts each step proposes (draft_length.hpp); with a
// policy other than FixedLength, options.draft_tokens is the maximum. Only
// FixedLength (or another policy that reads no clock) makes a seeded run
// reproducible bit for bit.
// Construction, prefill(), generate() and reset() are DecoderSession's.
template <CausalLM Target, class Draft, AcceptanceRule Rule = BlockVerification,
          DraftLengthPolicy Policy = AutoLength>
    requires(Drafter<Draft> || CausalLM<Draft>)
class SpeculativeDecoder
    : public detail::DecoderSession<SpeculativeDecoder<Target, Draft, Rule, Policy>, Target,
                                    detail::DrafterFor<Draft, ModelDrafter, Drafter<Draft>>> {
    using Session = detail::DecoderSession<SpeculativeDecoder, Target, detail::DrafterFor<Draft, ModelDrafter, Drafter<Draft>>>;
    using Session::drafter_, Session::feed_, Session::options_, Session::sequence_, Session::target_;

public:
    SpeculativeDecoder(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options = {}, Rule rule = {},
                       Policy policy = {})
        : Session(target, draft, std::move(options)), rule_(std::move(rule)), policy_(std::move(policy)) {}

    // The policy alone, the rule by default: (options, specdec::FixedLength{}).
    SpeculativeDecoder(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options, Policy policy)
        requires(!std::same_as<Rule, Policy>)
        : SpeculativeDecoder(target, draft, std::move(options), Rule{}, std::move(policy)) {}

    // One draft -> verify step: proposes up to min(draft_tokens, max_tokens - 1)
    // drafts (under a constraint, plus forced drafts: forced_drafts.hpp),
    // verifies them in one target pass and commits the accepted prefix
    // plus one token from the target (corrected or bonus). Tokens are streamed
    // to on_token as they are committed; emission ends early after a stop
    // token or when on_token returns false, and only emitted tokens are
    // committed and counted. At most max_tokens tokens are emitted.
    // Returns stop = context_full (and no token) when the target's cache has no
    // room for the pending token.
    // After the call: the target's cache holds sequence()[0 .. size - 1), and
    // after a stop inside an accepted block also the accepted drafts that were
    // not emitted; those are rolled back lazily by the next pass.
    template <class OnToken = detail::IgnoreTokens>
    StepResult step(std::size_t max_tokens = Session::kUnlimited, OnToken&& on_token = {}) {
        detail::StepRecord step = this->begin_step(max_tokens);
        if (step.stopped()) return std::move(step.result);
        const CounterRng rng{this->seed()};
        const std::size_t cap = this->draft_cap(step, max_tokens);
        std::size_t k_max = 0, limit = 0;
        const DraftProposal draft = this->propose(step, [&] {
            DraftPlan plan = policy_.plan(cap, step.committed);
            if (options_.drafting != Drafting::policy) plan = DraftPlan{options_.drafting == Drafting::fixed ? cap : 0};
            k_max = std::min(plan.max_tokens, cap);
            if (k_max == 0) return DraftProposal{};
            limit = detail::forced_draft_limit(options_, step.room, max_tokens, k_max);
            return drafter_.propose(DraftRequest{sequence_, k_max, options_.sampling, rng, plan.stop, limit,
                                                 options_.stop_tokens, draft_draws_for(rule_)});
        });
        this->check_proposal(draft, std::max(k_max, limit));
        const std::size_t k = draft.size();
        this->count_chain_proposal(step, k);

        // One target pass over [uncached history..., drafts...], then the rule,
        // then the target rolled back to the accepted prefix.
        this->feed_pass(step, draft.tokens);
        const AcceptanceResult verdict = verify(step, draft, rng);
        this->commit(step, draft.tokens, verdict, on_token, pass_rows_, host_rows_);
        return this->finish_step(step, policy_, StepOutcome{{}, /*proposed=*/k, /*accepted=*/verdict.accepted});
    }

    // The draft-length policy (e.g. to read what AutoLength has learned).
    [[nodiscard]] const Policy& policy() const { return policy_; }

private:
    // The pass over feed_ and the rule: on the target's device when it
    // verifies there (no logits copied back), else on the host. Steps that
    // need the rows on the host (logit stages, logprobs) verify there.
    AcceptanceResult verify(detail::StepRecord& step, const DraftProposal& draft, const CounterRng& rng) {
        GenerationStats& stats = step.stats();
        const SamplingOptions& sampling = options_.sampling;
        host_rows_ = LogitsView{};
        if constexpr (DeviceVerifyingLM<Target, Rule>) {
            if (!sampling.adjusts_logits() && !options_.logprobs.enabled) {
                stats.device_verified_steps = 1;
                return detail::timed(stats.target_seconds, [&] {
                    return target_.forward_and_verify(feed_, draft, sampling, rng, step.committed, rule_);
                });
            }
        }
        pass_rows_ = detail::timed(stats.target_seconds, [&] { return target_.forward(feed_); });
        return this->verify_chain(step, pass_rows_, draft, rule_, rows_, host_rows_);
    }

    Rule rule_;
    Policy policy_;
    detail::LazyDistributions rows_;
    LogitsView pass_rows_{};  // the step's target pass (host verification)
    LogitsView host_rows_{};  // its rows through the logit stages; empty after device verification
};

// (options, rule): that rule, the default policy. (options, policy): that
// policy, the default rule.
template <class Target, class Draft, AcceptanceRule Rule>
SpeculativeDecoder(TargetRole<Target>, DraftRole<Draft>, DecodingOptions, Rule)
    -> SpeculativeDecoder<Target, Draft, Rule>;
template <class Target, class Draft, DraftLengthPolicy Policy>
    requires(!AcceptanceRule<Policy>)
SpeculativeDecoder(TargetRole<Target>, DraftRole<Draft>, DecodingOptions, Policy)
    -> SpeculativeDecoder<Target, Draft, BlockVerification, Policy>;

}  // namespace specdec
