#pragma once
// Chat templates of the model families the library loads, written out in
// C++ (no Jinja): a conversation of {role, content} messages becomes the
// prompt text the model was trained on, to be encoded with special tokens
// parsed (Tokenizer::encode(..., SpecialTokens::parse)); BOS is the
// tokenizer's to add, as llama.cpp's llama_chat_apply_template leaves it.
//
//   const auto chat = text::ChatTemplate::from_gguf(file);   // tokenizer.chat_template
//   const std::string prompt = chat.apply({{"system", "Be brief."}, {"user", "Hi"}});
//   const auto tokens = tokenizer.encode(prompt, tokenizer.add_bos_by_default(), false,
//                                        SpecialTokens::parse);
//
// Families, with their names (from_name) and how a GGUF template is
// recognised (detect, as llama.cpp recognises them):
//   chatml            ChatML, Qwen2 / Qwen2.5     contains <|im_start|>
//   llama3            Llama 3 / 3.1 / 3.2         contains <|start_header_id|> and <|end_header_id|>
//   mistral-v7        Mistral (2501 and later)    [INST] and [SYSTEM_PROMPT]
//   mistral-v1        Mistral 7B v0.1            [INST] and ' [INST] ' + system_message (or [AVAILABLE_TOOLS]) and " [INST]"
//   mistral-v3        Mistral v0.3, Mixtral       [INST] and [AVAILABLE_TOOLS]
//   mistral-v3-tekken Mistral Nemo               as v3, with "[INST]" quoted
//   mistral-v7-tekken (by name only)
// Anything else (Llama 2's [INST] <<SYS>>, Phi, Gemma, ...) is refused
// with an Error that says so; format such a prompt yourself and encode it
// with SpecialTokens::parse.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf.hpp"

namespace specdec::text {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

enum class ChatFamily { chatml, llama3, mistral_v1, mistral_v3, mistral_v3_tekken, mistral_v7, mistral_v7_tekken };

class ChatTemplate {
public:
    explicit ChatTemplate(ChatFamily family) : family_(family) {}

    // By name (the list above). Throws specdec::Error for an unknown name.
    static ChatTemplate from_name(std::string_view name) {
        for (const ChatFamily family : kFamilies) {
            if (name == family_name(family)) return ChatTemplate(family);
        }
        throw Error("unknown chat template name '" + std::string(name) + "'; known: " + known_names());
    }

    // The family of a Jinja template source (a GGUF's tokenizer.chat_template),
    // or of a family name. Throws specdec::Error for any other template.
    static ChatTemplate detect(std::string_view source) {
        for (const ChatFamily family : kFamilies) {
            if (source == family_name(family)) return ChatTemplate(family);
        }
        if (const std::optional<ChatFamily> family = recognise(source)) return ChatTemplate(*family);
        throw Error("unsupported chat template (" + describe(source) + "): supported families are " + known_names() +
                    "; pass a template name, or format the prompt yourself and encode it with "
                    "SpecialTokens::parse");
    }

    // From the file's tokenizer.chat_template. Throws specdec::Error when the
    // file has none or it is not a supported family.
    static ChatTemplate from_gguf(const gguf::File& file) {
        const std::optional<std::string> source = file.find_string("tokenizer.chat_template");
        if (!source) {
            throw Error("GGUF file '" + file.path().string() +
                        "' has no tokenizer.chat_template; pass a template name (" + known_names() +
                        ") or a pre-formatted prompt");
        }
        return detect(*source);
    }

    [[nodiscard]] ChatFamily family() const { return family_; }
    [[nodiscard]] std::string_view name() const { return family_name(family_); }

    // The prompt text of `messages`, followed by the opening of the
    // assistant's turn when add_assistant (Mistral formats have none: the
    // assistant answers right after [/INST]).
    [[nodiscard]] std::string apply(std::span<const ChatMessage> messages, bool add_assistant = true) const {
        std::string out;
        switch (family_) {
            case ChatFamily::chatml:
                for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
                if (add_assistant) out += "<|im_start|>assistant\n";
                break;
            case ChatFamily::llama3:
                for (const ChatMessage& m : messages) {
                    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
                }
                if (add_assistant) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
                break;
            case ChatFamily::mistral_v7:
            case ChatFamily::mistral_v7_tekken: {
                const std::string space = family_ == ChatFamily::mistral_v7 ? " " : "";
                for (const ChatMessage& m : messages) {
                    if (m.role == "system") {
                        out += "[SYSTEM_PROMPT]" + space + m.content + "[/SYSTEM_PROMPT]";
                    } else if (m.role == "user") {
                        out += "[INST]" + space + m.content + "[/INST]";
                    } else {
                        out += space + m.content + "</s>";
                    }
                }
                break;
            }
            case ChatFamily::mistral_v1:
            case ChatFamily::mistral_v3:
            case ChatFamily::mistral_v3_tekken: {
                // v1 puts a space before [INST] and [/INST]; v3 one after [INST]
                // and before the answer (which it trims); v3-tekken none.
                const std::string leading = family_ == ChatFamily::mistral_v1 ? " " : "";
                const std::string trailing = family_ == ChatFamily::mistral_v3_tekken ? "" : " ";
                bool inside_turn = false;
                for (const ChatMessage& m : messages) {
                    if (!inside_turn) {
                        out += leading + "[INST]" + trailing;
                        inside_turn = true;
                    }
                    if (m.role == "system") {
                        out += m.content + "\n\n";
                    } else if (m.role == "user") {
                        out += m.content + leading + "[/INST]";
                    } else {
                        out += trailing + (family_ == ChatFamily::mistral_v3 ? trim(m.content) : m.content) + "</s>";
                        inside_turn = false;
                    }
                }
                break;
            }
        }
        return out;
    }

    [[nodiscard]] std::string apply(std::initializer_list<ChatMessage> messages, bool add_assistant = true) const {
        return apply(std::span<const ChatMessage>(messages.begin(), messages.size()), add_assistant);
    }

    [[nodiscard]] static std::string_view family_name(ChatFamily family) {
        switch (family) {
            case ChatFamily::chatml: return "chatml";
            case ChatFamily::llama3: return "llama3";
            case ChatFamily::mistral_v1: return "mistral-v1";
            case ChatFamily::mistral_v3: return "mistral-v3";
            case ChatFamily::mistral_v3_tekken: return "mistral-v3-tekken";
            case ChatFamily::mistral_v7: return "mistral-v7";
            case ChatFamily::mistral_v7_tekken: return "mistral-v7-tekken";
        }
        return "unknown";
    }

private:
    static constexpr ChatFamily kFamilies[] = {ChatFamily::chatml,     ChatFamily::llama3,
                                               ChatFamily::mistral_v1, ChatFamily::mistral_v3,
                                               ChatFamily::mistral_v3_tekken, ChatFamily::mistral_v7,
                                               ChatFamily::mistral_v7_tekken};

    static std::optional<ChatFamily> recognise(std::string_view source) {
        const auto has = [&](std::string_view part) { return source.find(part) != std::string_view::npos; };
        if (has("<|im_start|>")) {
            if (has("<|im_sep|>") || has("<end_of_utterance>")) return std::nullopt;  // Phi-4, SmolVLM
            return ChatFamily::chatml;
        }
        if (has("[INST]")) {
            if (has("[SYSTEM_PROMPT]")) return ChatFamily::mistral_v7;
            if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
                if (has(" [INST]")) return ChatFamily::mistral_v1;
                if (has("\"[INST]\"")) return ChatFamily::mistral_v3_tekken;
                return ChatFamily::mistral_v3;
            }
            return std::nullopt;  // Llama 2 and its variants
        }
        if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFamily::llama3;
        return std::nullopt;
    }

    static std::string known_names() {
        std::string names;
        for (const ChatFamily family : kFamilies) {
            if (!names.empty()) names += ", ";
            names += family_name(family);
        }
        return names;
    }

    // A short, printable description of a template for error messages.
    static std::string describe(std::string_view source) {
        if (source.find("<<SYS>>") != std::string_view::npos) return "a Llama 2 [INST] <<SYS>> template";
        for (const std::string_view marker : {"<start_of_turn>", "<|im_sep|>", "<|user|>", "<|assistant|>", "[INST]"}) {
            if (source.find(marker) != std::string_view::npos) return "a template using " + std::string(marker);
        }
        std::string start(source.substr(0, 40));
        std::replace(start.begin(), start.end(), '\n', ' ');
        return "starting '" + start + (source.size() > 40 ? "...'" : "'");
    }

    static std::string trim(std::string_view text) {
        const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
        while (!text.empty() && space(text.front())) text.remove_prefix(1);
        while (!text.empty() && space(text.back())) text.remove_suffix(1);
        return std::string(text);
    }

    ChatFamily family_;
};

}  // namespace specdec::text
