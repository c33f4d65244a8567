#pragma once
// Chat templates through llama.cpp: the template a llama.cpp model carries and
// llama_chat_apply_template over text::ChatMessage, for applications that run
// their models in llama.cpp (its template list is longer than ChatTemplate's
// families, and it is what llama.cpp's own tools format with). Needs llama.h
// (the specdec::llama_cpp target).
//
//   const std::string prompt = text::llama_cpp_apply_chat(
//       text::llama_cpp_chat_template(model.model()).value_or("chatml"), messages);
//   const auto tokens = model.tokenize(prompt, model.add_bos(), /*parse_special=*/true);
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <llama.h>

#include "specdec/core/error.hpp"
#include "specdec/text/chat_template.hpp"

namespace specdec::text {

// The model's tokenizer.chat_template, or nullopt when the file has none.
[[nodiscard]] inline std::optional<std::string> llama_cpp_chat_template(const llama_model* model) {
    if (model == nullptr) throw Error("llama_cpp_chat_template: null llama_model");
    const char* source = llama_model_chat_template(model, nullptr);
    if (source == nullptr) return std::nullopt;
    return std::string(source);
}

// `messages` formatted by llama_chat_apply_template with `chat_template` (a
// template source or one of llama.cpp's built-in names, e.g. "chatml",
// "llama3"), ending with the assistant's opening when add_assistant. Throws
// specdec::Error for a template llama.cpp does not support.
[[nodiscard]] inline std::string llama_cpp_apply_chat(const std::string& chat_template, std::span<const ChatMessage> messages,
                                                      bool add_assistant = true) {
    std::vector<llama_chat_message> chat;
    chat.reserve(messages.size());
    std::size_t characters = 0;
    for (const ChatMessage& message : messages) {
        chat.push_back({message.role.c_str(), message.content.c_str()});
        characters += message.role.size() + message.content.size();
    }
    // llama.cpp returns the length it needs; a second call fills a buffer of that size.
    std::string out(2 * characters + 256, '\0');
    for (int attempt = 0; attempt < 2; ++attempt) {
        const std::int32_t length = llama_chat_apply_template(chat_template.c_str(), chat.data(), chat.size(), add_assistant,
                                                              out.data(), static_cast<std::int32_t>(out.size()));
        if (length < 0) {
            const std::string shown = chat_template.size() > 60 ? chat_template.substr(0, 60) + "..." : chat_template;
            throw Error("llama.cpp does not support the chat template '" + shown +
                        "' (llama_chat_apply_template); format the prompt yourself and tokenize it with parse_special");
        }
        if (static_cast<std::size_t>(length) <= out.size()) {
            out.resize(static_cast<std::size_t>(length));
            return out;
        }
        out.assign(static_cast<std::size_t>(length), '\0');
    }
    throw Error("llama_chat_apply_template: the formatted prompt kept growing");
}

[[nodiscard]] inline std::string llama_cpp_apply_chat(const std::string& chat_template,
                                                      std::initializer_list<ChatMessage> messages, bool add_assistant = true) {
    return llama_cpp_apply_chat(chat_template, std::span<const ChatMessage>(messages.begin(), messages.size()), add_assistant);
}

}  // namespace specdec::text
