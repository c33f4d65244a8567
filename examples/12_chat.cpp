// 12: a chat with a GGUF chat model. Each turn formats the conversation with
// the model's chat template, and speculative decoding streams the reply as
// text until the end-of-turn token (or a stop string); the decoder keeps both
// KV caches across turns, so a turn computes only its new tokens. Every reply
// is checked against the target decoding alone (greedy: the same tokens).
//
//   12_chat TARGET.gguf DRAFT.gguf [TEMPLATE]
//
// TEMPLATE names the template family (chatml, llama3, mistral-v3, ...) for a
// file without tokenizer.chat_template. With no arguments: the qwen2 pair of
// the project's tests/fixtures (random weights: the replies are not English)
// with chatml.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <specdec/formats/tokenizer.hpp>
#include <specdec/models/llama_model.hpp>
#include <specdec/specdec.hpp>
#include <specdec/text/chat_template.hpp>
#include <specdec/text/generate_text.hpp>

namespace fs = std::filesystem;
namespace text = specdec::text;

int main(int argc, char** argv) {
    fs::path target_path, draft_path;
    std::string template_name;
    if (argc >= 3) {
        target_path = argv[1];
        draft_path = argv[2];
        if (argc > 3) template_name = argv[3];
    } else {
#ifdef SPECDEC_PROJECT_FIXTURES
        target_path = fs::path(SPECDEC_PROJECT_FIXTURES) / "qwen2-f32.gguf";
        draft_path = fs::path(SPECDEC_PROJECT_FIXTURES) / "qwen2-q8_0.gguf";
        template_name = "chatml";
#endif
    }
    if (target_path.empty() || !fs::exists(target_path)) {
        std::printf("usage: %s TARGET.gguf DRAFT.gguf [TEMPLATE]\n", argv[0]);
        return 2;
    }
    try {
        const auto target_file = specdec::gguf::File::open(target_path);
        const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(target_file);
        const text::ChatTemplate chat =
            template_name.empty() ? text::ChatTemplate::from_gguf(target_file) : text::ChatTemplate::from_name(template_name);
        specdec::LlamaModel target = specdec::LlamaModel::from_gguf(target_path);
        specdec::LlamaModel draft = specdec::LlamaModel::from_gguf(draft_path);

        // The recommended configuration (block verification, AutoLength) with greedy sampling.
        const specdec::DecodingOptions options{.sampling = {.temperature = 0.0}, .max_new_tokens = 80};
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options);
        // Stop at the end of the turn (<|im_end|>, <|eot_id|>, </s>, ...) or where the
        // model starts writing the user's next turn itself.
        const text::TextOptions text_options{.stop_strings = {"\nUser:", "<|im_start|>"},
                                             .end_of_generation = tokenizer.end_of_generation()};

        std::vector<text::ChatMessage> conversation{{"system", "Be brief."}};
        struct Turn {
            std::vector<specdec::Token> prompt;
            text::TextResult reply;
        };
        std::vector<Turn> turns;
        for (const char* question : {"Hello", "Thanks!"}) {
            conversation.push_back({"user", question});
            const std::string prompt_text = chat.apply(conversation);
            const std::vector<specdec::Token> prompt =
                tokenizer.encode(prompt_text, tokenizer.add_bos_by_default(), false, specdec::SpecialTokens::parse);

            std::printf("user: %s\nassistant: ", question);
            const text::TextResult reply = text::generate_text(decoder, tokenizer, prompt, text_options,
                                                               [](const text::TextPiece& piece) {
                                                                   std::fwrite(piece.text.data(), 1, piece.text.size(), stdout);
                                                                   std::fflush(stdout);
                                                               });
            const specdec::GenerationStats& stats = reply.generation.stats;
            std::printf("\n  [%zu prompt tokens, %zu computed in prefill; %zu tokens, %.2f per target pass; stopped by %s]\n",
                        prompt.size(), stats.prefill_tokens, reply.tokens.size(), stats.mean_tokens_per_target_pass(),
                        std::string(text::to_string(reply.stop_reason)).c_str());

            turns.push_back({prompt, reply});
            conversation.push_back({"assistant", reply.text});
        }

        // The check, after the chat: the target alone writes the same replies.
        target.truncate(0);
        specdec::AutoregressiveDecoder alone(target, options);
        int different = 0;
        for (const auto& [prompt, reply] : turns) {
            const text::TextResult expected = text::generate_text(alone, tokenizer, prompt, text_options);
            if (expected.tokens != reply.tokens || expected.text != reply.text) ++different;
        }
        std::printf("%s: %zu replies against the target decoding alone\n", different == 0 ? "identical" : "DIFFERENT",
                    turns.size());
        return different == 0 ? 0 : 1;
    } catch (const specdec::Error& error) {
        std::fprintf(stderr, "12_chat: %s\n", error.what());
        return 1;
    }
}
