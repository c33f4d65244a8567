// 01: bring your own model. Any type with vocab_size(), context_length(),
// cached_tokens(), forward(tokens) and truncate(n) is a specdec::CausalLM and
// can be a target or a draft. Needs only specdec::specdec (no reference models, no CUDA).
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

// A toy language model: the logits after token t depend only on t (a hashed
// bigram table). A real adapter calls its inference engine in forward() and
// rolls its KV cache back in truncate(); the contract is the same.
class BigramModel {
public:
    BigramModel(std::size_t vocab, float noise) : vocab_(vocab), noise_(noise) {}

    std::size_t vocab_size() const { return vocab_; }
    std::size_t context_length() const { return 1024; }
    std::size_t cached_tokens() const { return cached_; }

    // One logits row per token, row i predicting the token after tokens[i].
    specdec::LogitsView forward(std::span<const specdec::Token> tokens) {
        if (cached_ + tokens.size() > context_length()) throw specdec::Error("BigramModel: context is full");
        logits_.resize(tokens.size() * vocab_);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_)
                throw specdec::Error("BigramModel: token id " + std::to_string(tokens[i]) + " is out of range");
            for (std::size_t next = 0; next < vocab_; ++next)
                logits_[i * vocab_ + next] = 6.0f * hash01(tokens[i], next, 1) + noise_ * hash01(tokens[i], next, 2);
        }
        cached_ += tokens.size();
        return specdec::dense_logits(logits_, tokens.size(), vocab_);
    }

    void truncate(std::size_t n) { cached_ = n; }  // a bigram model keeps no state to roll back

private:
    static float hash01(specdec::Token previous, std::size_t next, std::uint64_t salt) {
        std::uint64_t z = (static_cast<std::uint64_t>(previous) << 32 | next) * 0x9E3779B97F4A7C15ull + salt;
        z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
        return static_cast<float>((z ^ (z >> 32)) & 0xFFFFFF) / 16777216.0f;
    }

    std::size_t vocab_;
    float noise_;  // the draft is the target plus a perturbation: close, not equal
    std::size_t cached_ = 0;
    std::vector<float> logits_;
};
static_assert(specdec::CausalLM<BigramModel>);

int main() {
    BigramModel target(64, /*noise=*/0.0f);
    BigramModel draft(64, /*noise=*/1.5f);
    // FixedLength: 4 drafts every step, so the output below is a pure function
    // of the seed. Leave it out for the default AutoLength, which is faster but
    // picks lengths from measured timings (exact either way).
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                        {.draft_tokens = 4, .sampling = {.temperature = 1.0}, .seed = 7, .max_new_tokens = 24},
                                        specdec::FixedLength{});
    const std::vector<specdec::Token> prompt{1, 2, 3};
    const specdec::GenerationResult result = decoder.generate(prompt, [](specdec::Token t) { std::printf("%d ", t); });
    const specdec::GenerationStats& stats = result.stats;
    std::printf("\n%zu tokens in %zu target passes (%.2f per pass), %.0f%% of drafts accepted\n",
                stats.generated_tokens, stats.target_forward_passes, stats.mean_tokens_per_target_pass(),
                100.0 * stats.acceptance_rate());
}

// Expected output (the tokens are a pure function of the seed):
//
// 41 45 36 27 59 20 56 53 59 30 41 10 28 36 10 34 45 33 17 51 36 30 23 13
// 24 tokens in 7 target passes (3.43 per pass), 68% of drafts accepted
