#pragma once
// The JSON a completion answers with, whole or as server-sent events: OpenAI's
// text_completion and chat.completion shapes, plus each choice's token ids ("tokens") and the
// request's speculation counts and seed ("specdec"), which OpenAI's clients
// keep as extra fields.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <specdec/decoding/batched_decoder.hpp>

namespace specdec::server {

// A token's text for logprobs: its piece, or its id where there is no tokenizer.
using PieceOf = std::function<std::string(Token)>;

[[nodiscard]] inline std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The logprobs of shown tokens; `offset`: the text offset of the first,
// moved past the last (a stream's chunks continue where the last ended).
[[nodiscard]] inline nlohmann::json completion_logprobs(std::span<const TokenLogprob> shown, const PieceOf& piece,
                                                        std::size_t& offset) {
    nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array(), top = nlohmann::json::array(),
                   offsets = nlohmann::json::array();
    for (const TokenLogprob& t : shown) {
        const std::string text = piece(t.token);
        tokens.push_back(text);
        values.push_back(t.logprob);
        nlohmann::json alternatives = nlohmann::json::object();
        for (const TopLogprob& a : t.top) alternatives[piece(a.token)] = a.logprob;
        top.push_back(std::move(alternatives));
        offsets.push_back(offset);
        offset += text.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// Chat's shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
[[nodiscard]] inline nlohmann::json chat_logprobs(std::span<const TokenLogprob> shown, const PieceOf& piece) {
    const auto entry = [&](Token token, double logprob) {
        const std::string text = piece(token);
        nlohmann::json bytes = nlohmann::json::array();
        for (const char c : text) bytes.push_back(static_cast<unsigned char>(c));
        return nlohmann::json{{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
    };
    nlohmann::json content = nlohmann::json::array();
    for (const TokenLogprob& t : shown) {
        nlohmann::json e = entry(t.token, t.logprob);
        e["top_logprobs"] = nlohmann::json::array();
        for (const TopLogprob& a : t.top) e["top_logprobs"].push_back(entry(a.token, a.logprob));
        content.push_back(std::move(e));
    }
    return {{"content", content}};
}

[[nodiscard]] inline nlohmann::json usage(std::size_t prompt, std::size_t completion) {
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

[[nodiscard]] inline nlohmann::json speculation(const GenerationResult& g) {
    return {{"seed", g.seed},
            {"draft_tokens_proposed", g.stats.draft_tokens_proposed},
            {"draft_tokens_accepted", g.stats.draft_tokens_accepted},
            {"target_passes", g.stats.target_forward_passes}};
}

// A chunk of a streamed completion (finish: the last one); logprobs: its tokens' (or null).
[[nodiscard]] inline std::string completion_event(const std::string& id, const std::string& model, const std::string& text,
                                                  const std::vector<Token>& tokens, const char* finish,
                                                  nlohmann::json logprobs = nullptr) {
    nlohmann::json choice{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"tokens", tokens}};
    choice["finish_reason"] = finish ? nlohmann::json(finish) : nlohmann::json(nullptr);
    const nlohmann::json chunk{{"id", id},           {"object", "text_completion"}, {"created", unix_now()},
                               {"model", model},     {"choices", nlohmann::json::array({choice})}};
    return "data: " + chunk.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

// A chunk of a streamed chat answer: `delta` is {"role"} first, then {"content"}, {} with the finish.
[[nodiscard]] inline std::string chat_event(const std::string& id, const std::string& model, nlohmann::json delta,
                                            const std::vector<Token>& tokens, const char* finish,
                                            nlohmann::json logprobs = nullptr) {
    nlohmann::json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"tokens", tokens}};
    choice["finish_reason"] = finish ? nlohmann::json(finish) : nlohmann::json(nullptr);
    const nlohmann::json chunk{{"id", id},           {"object", "chat.completion.chunk"}, {"created", unix_now()},
                               {"model", model},     {"choices", nlohmann::json::array({choice})}};
    return "data: " + chunk.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

[[nodiscard]] inline std::string sse(const nlohmann::json& data) {
    return "data: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

inline constexpr const char* kDone = "data: [DONE]\n\n";

}  // namespace specdec::server
