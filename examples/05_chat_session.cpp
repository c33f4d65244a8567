// 05: a decoder is a session. A chat resends the whole conversation every
// turn; the decoder keeps both KV caches for the longest common prefix, so
// each turn computes only its new tokens. The turn is driven one
// draft-and-verify step at a time, as a serving loop would.
#include <cstdio>
#include <vector>

#include <specdec/specdec.hpp>
#include <specdec/models/synthetic.hpp>

int main() {
    specdec::SyntheticOptions synthetic;
    synthetic.size = "tiny";
    specdec::LlamaModel target = specdec::make_synthetic_target(synthetic);
    specdec::LlamaModel draft = specdec::make_synthetic_draft(synthetic);
    // FixedLength: the replies below are a pure function of the seed (the
    // default AutoLength picks lengths from measured timings).
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                        {.draft_tokens = 4, .sampling = {.temperature = 0.7}, .seed = 3}, specdec::FixedLength{});

    std::vector<specdec::Token> conversation{1, 17, 42, 7, 99, 5};  // the system prompt and the first user turn
    const std::vector<std::vector<specdec::Token>> user_turns{{301, 302, 303}, {404, 405}};
    for (std::size_t turn = 0; turn <= user_turns.size(); ++turn) {
        const specdec::GenerationStats prefill = decoder.prefill(conversation);
        std::printf("turn %zu: prompt of %zu tokens, %zu computed in prefill\n  reply:", turn, conversation.size(),
                    prefill.prefill_tokens);
        std::size_t reply_tokens = 0, steps = 0;
        while (reply_tokens < 12) {
            const specdec::StepResult step = decoder.step(12 - reply_tokens);
            for (const specdec::Token t : step.tokens) std::printf(" %d", t);
            reply_tokens += step.tokens.size();
            ++steps;
            if (step.stop) break;  // a stop token or a full context
        }
        std::printf("\n  %zu tokens in %zu steps\n", reply_tokens, steps);
        conversation.assign(decoder.sequence().begin(), decoder.sequence().end());
        if (turn < user_turns.size())
            conversation.insert(conversation.end(), user_turns[turn].begin(), user_turns[turn].end());
    }
}

// Expected output (a pure function of the seed):
//
// turn 0: prompt of 6 tokens, 5 computed in prefill
//   reply: 429 225 347 53 283 334 252 151 215 479 297 122
//   12 tokens in 4 steps
// turn 1: prompt of 21 tokens, 3 computed in prefill
//   reply: 60 23 372 358 505 103 387 215 261 31 176 132
//   12 tokens in 6 steps
// turn 2: prompt of 35 tokens, 2 computed in prefill
//   reply: 100 166 464 284 215 137 319 455 286 51 103 368
//   12 tokens in 4 steps
