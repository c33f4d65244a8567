#pragma once
// Draft and target must speak the same token ids: speculative decoding feeds
// the draft's tokens to the target as they are. Two llama.cpp vocabularies
// are the same when they have the same tokenizer type, the same size, and
// every token has the same text and the same attributes (normal, control,
// byte, ...).
#include <string>
#include <string_view>

#include <llama.h>

#include "specdec/core/error.hpp"

namespace specdec::llama_cpp {

namespace detail {

[[nodiscard]] inline std::string printable_token_text(const char* text) {
    if (text == nullptr) return "(none)";
    std::string out = "'";
    for (const char* c = text; *c != '\0' && out.size() < 40; ++c) {
        const unsigned char u = static_cast<unsigned char>(*c);
        if (u < 0x20) {
            static constexpr char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[u >> 4];
            out += kHex[u & 15];
        } else {
            out += *c;
        }
    }
    return out + "'";
}

}  // namespace detail

// Throws specdec::Error naming both models and the first difference.
inline void check_same_vocabulary(const llama_vocab* target, const std::string& target_name, const llama_vocab* draft,
                                  const std::string& draft_name) {
    const std::string who = "target " + target_name + " and draft " + draft_name;
    if (llama_vocab_type(target) != llama_vocab_type(draft)) {
        throw Error(who + " use different tokenizer types (" + std::to_string(static_cast<int>(llama_vocab_type(target))) +
                    " and " + std::to_string(static_cast<int>(llama_vocab_type(draft))) +
                    "): speculative decoding needs one vocabulary");
    }
    const llama_token size = llama_vocab_n_tokens(target);
    if (size != llama_vocab_n_tokens(draft)) {
        throw Error(who + " have vocabularies of " + std::to_string(size) + " and " +
                    std::to_string(llama_vocab_n_tokens(draft)) + " tokens: speculative decoding needs one vocabulary");
    }
    for (llama_token t = 0; t < size; ++t) {
        const char* a = llama_vocab_get_text(target, t);
        const char* b = llama_vocab_get_text(draft, t);
        const bool same_text = (a == nullptr || b == nullptr) ? a == b : std::string_view(a) == std::string_view(b);
        if (!same_text) {
            throw Error(who + " have different vocabularies: token " + std::to_string(t) + " is " +
                        detail::printable_token_text(a) + " in the target and " + detail::printable_token_text(b) +
                        " in the draft");
        }
        if (llama_vocab_get_attr(target, t) != llama_vocab_get_attr(draft, t)) {
            throw Error(who + " have different vocabularies: token " + std::to_string(t) + " (" +
                        detail::printable_token_text(a) + ") has attributes " +
                        std::to_string(static_cast<int>(llama_vocab_get_attr(target, t))) + " in the target and " +
                        std::to_string(static_cast<int>(llama_vocab_get_attr(draft, t))) + " in the draft");
        }
    }
}

}  // namespace specdec::llama_cpp
