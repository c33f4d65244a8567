// 10: an engine that drafts token trees by itself and uses specdec only to
// verify them. Each step the engine runs its draft model on the sequence,
// takes the draft's two best next tokens as two branches and extends each
// branch greedily by two more tokens: a tree of 2 x 1 x 1 point masses
// (deterministic given the sequence, so exact at every temperature). It hands
// the tree to specdec::verify_tree, which runs the target's tree pass (one
// forward_tree over the pending token and every node), applies exact tree
// verification and commits the accepted path to the target's cache. At
// temperature 0 the output must be the target's greedy output; the program
// checks that against plain autoregressive decoding.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include <specdec/specdec.hpp>
#include <specdec/models/synthetic.hpp>

using specdec::Token;

class TreeDraftingEngine {
public:
    TreeDraftingEngine(specdec::LlamaModel& target, specdec::LlamaModel& draft, specdec::SamplingOptions sampling,
                       std::uint64_t seed)
        : target_(target), draft_(draft), sampling_(sampling), verifier_rng_{seed} {}

    std::vector<Token> generate(const std::vector<Token>& prompt, std::size_t new_tokens) {
        target_.truncate(0);
        std::vector<Token> sequence = prompt;
        std::vector<Token> pending = prompt;  // committed tokens the target's cache lacks
        std::vector<Token> out;
        while (out.size() < new_tokens) {
            const std::size_t depth = std::min<std::size_t>(3, new_tokens - out.size() - 1);
            const specdec::TreeProposal tree = depth == 0 ? specdec::TreeProposal{} : draft_tree(sequence, depth);
            // The only specdec call: one tree pass, exact tree verification, the commit of the path.
            const specdec::TreeVerifyResult verdict = specdec::verify_tree(target_, pending, tree, sampling_, verifier_rng_);
            drafted_ += tree.size();
            accepted_ += verdict.path.size();
            ++steps_;
            sequence.insert(sequence.end(), verdict.tokens.begin(), verdict.tokens.end());
            out.insert(out.end(), verdict.tokens.begin(), verdict.tokens.end());
            pending.assign(1, verdict.next_token);
        }
        out.resize(new_tokens);
        return out;
    }

    void report(const char* label, std::size_t tokens) const {
        std::printf("%s: %zu tokens in %zu target passes; %zu tree nodes drafted, %zu accepted\n", label, tokens, steps_,
                    drafted_, accepted_);
    }

private:
    // Two branches under the sequence (the draft's best and second best
    // token), each continued by the draft's argmax to `depth` tokens.
    specdec::TreeProposal draft_tree(const std::vector<Token>& sequence, std::size_t depth) {
        draft_.truncate(0);
        const specdec::LogitsView row = draft_.forward_last(sequence);
        const std::span<const float> logits = row.last_row();
        std::vector<Token> order(logits.size());
        for (std::size_t t = 0; t < order.size(); ++t) order[t] = static_cast<Token>(t);
        std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                          [&](Token a, Token b) { return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)]; });
        specdec::TreeProposal tree;  // no distribution rows: every node a point mass
        for (std::size_t branch = 0; branch < 2; ++branch) {
            Token token = order[branch];
            std::int32_t parent = -1;
            for (std::size_t d = 0; d < depth; ++d) {
                tree.tokens.push_back(token);
                tree.parents.push_back(parent);
                parent = static_cast<std::int32_t>(tree.tokens.size() - 1);
                if (d + 1 < depth) {
                    const specdec::LogitsView next = draft_.forward(std::span<const Token>(&token, 1));
                    const std::span<const float> r = next.last_row();
                    token = static_cast<Token>(std::max_element(r.begin(), r.end()) - r.begin());
                }
            }
            draft_.truncate(sequence.size());  // back to the sequence for the other branch
        }
        return tree;
    }

    specdec::LlamaModel& target_;
    specdec::LlamaModel& draft_;
    specdec::SamplingOptions sampling_;
    specdec::CounterRng verifier_rng_;
    std::size_t steps_ = 0, drafted_ = 0, accepted_ = 0;
};

int main() {
    specdec::SyntheticPair pair = specdec::make_synthetic_pair({.size = "tiny"});
    const std::vector<Token> prompt{1, 17, 42, 7, 99, 5};
    constexpr std::size_t kTokens = 48;

    // Greedy: the engine's tokens must be the target's own greedy tokens.
    const specdec::SamplingOptions greedy{.temperature = 0.0};
    TreeDraftingEngine greedy_engine(pair.target, pair.draft, greedy, 1);
    const std::vector<Token> engine_tokens = greedy_engine.generate(prompt, kTokens);
    greedy_engine.report("greedy", engine_tokens.size());
    const auto plain =
        specdec::AutoregressiveDecoder(pair.target, {.sampling = greedy, .max_new_tokens = kTokens}).generate(prompt);
    const bool identical = plain.tokens == engine_tokens;
    std::printf("greedy: %s to autoregressive decoding of the target\n", identical ? "identical" : "DIFFERENT");

    // Sampled: exact samples of the target's distribution at T = 0.8.
    TreeDraftingEngine sampled_engine(pair.target, pair.draft, {.temperature = 0.8}, 7);
    const std::vector<Token> sampled = sampled_engine.generate(prompt, kTokens);
    sampled_engine.report("T = 0.8", sampled.size());
    return identical ? 0 : 1;
}
