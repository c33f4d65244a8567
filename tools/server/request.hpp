#pragma once
// An OpenAI completion or chat request, checked field by field and mapped
// onto the library's DecodingOptions. Every field the server does not
// implement is refused with a 400 naming it: a client that asks for
// something (n > 1, response_format, a message field it does not know)
// must not get an answer that silently ignores it.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/decoding/decoding_options.hpp>
#include <specdec/sampling/acceptance.hpp>
#include <specdec/text/chat_template.hpp>

#include "api_error.hpp"

namespace specdec::server {

enum class Endpoint { completions, chat };

struct ParsedRequest {
    Endpoint endpoint = Endpoint::completions;
    std::optional<std::string> prompt_text;  // a text prompt (needs the tokenizer)
    std::vector<Token> prompt_tokens;        // a prompt of token ids
    std::vector<text::ChatMessage> messages; // chat: the conversation (roles checked)
    std::vector<std::string> stop_strings;   // 'stop' strings (need the tokenizer)
    DecodingOptions options;                 // draft_tokens, seed, sampling, stop tokens, logprobs
    std::optional<std::size_t> draft_max;    // speculative.n_max: 0 = no speculation
    bool stream = false;
    bool include_usage = false;              // stream_options.include_usage
    bool ignore_eos = false;
    bool seeded = false;
};

// What the parser needs to know about the server.
struct RequestLimits {
    std::size_t vocab = 0;
    std::size_t context = 0;
    std::size_t max_draft = 0;  // the server's --draft-max (the most a request may ask for)
};

namespace detail {

[[nodiscard]] inline std::string type_name(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

[[nodiscard]] inline double number(const nlohmann::json& v, const std::string& name, double lo, double hi,
                                   const char* range) {
    if (!v.is_number()) throw bad_request("'" + name + "' must be a number, got " + type_name(v), name);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        throw bad_request("'" + name + "' = " + v.dump() + " is out of range: expected " + range, name);
    return x;
}

[[nodiscard]] inline std::int64_t integer(const nlohmann::json& v, const std::string& name, std::int64_t lo,
                                          std::int64_t hi) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
        throw bad_request("'" + name + "' = " + v.dump() + " is out of range: expected at most " + std::to_string(hi),
                          name);
    if (!v.is_number_integer())
        throw bad_request("'" + name + "' must be an integer, got " + type_name(v), name);
    const std::int64_t x = v.get<std::int64_t>();
    if (x < lo || x > hi)
        throw bad_request("'" + name + "' = " + std::to_string(x) + " is out of range: expected " +
                              std::to_string(lo) + " to " + std::to_string(hi),
                          name);
    return x;
}

[[nodiscard]] inline bool boolean(const nlohmann::json& v, const std::string& name) {
    if (!v.is_boolean()) throw bad_request("'" + name + "' must be a boolean, got " + type_name(v), name);
    return v.get<bool>();
}

[[nodiscard]] inline Token token_id(const nlohmann::json& v, const std::string& name, std::size_t vocab) {
    return static_cast<Token>(integer(v, name, 0, static_cast<std::int64_t>(vocab) - 1));
}

// The prompt: a string, an array of token ids, or an array holding one of either.
inline void parse_prompt(const nlohmann::json& v, const RequestLimits& limits, ParsedRequest& out) {
    const nlohmann::json* p = &v;
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
    if (p->is_string()) {
        if (p->get_ref<const std::string&>().empty()) throw bad_request("'prompt' is empty", "prompt");
        out.prompt_text = p->get<std::string>();
        return;
    }
    if (!p->is_array()) throw bad_request("'prompt' must be a string or an array of token ids, got " + type_name(*p), "prompt");
    if (p->empty()) throw bad_request("'prompt' is empty", "prompt");
    for (std::size_t i = 0; i < p->size(); ++i) {
        const nlohmann::json& t = (*p)[i];
        if (t.is_string() || t.is_array())
            throw bad_request("'prompt' holds several prompts: one request decodes one prompt (n = 1)", "prompt");
        out.prompt_tokens.push_back(token_id(t, "prompt[" + std::to_string(i) + "]", limits.vocab));
    }
}

// 'stop': a string, or an array of strings and/or token ids.
inline void parse_stop(const nlohmann::json& v, const RequestLimits& limits, ParsedRequest& out) {
    if (v.is_null()) return;
    const auto add_string = [&](const nlohmann::json& s, const std::string& name) {
        if (s.get_ref<const std::string&>().empty()) throw bad_request("'" + name + "' is an empty stop string", "stop");
        out.stop_strings.push_back(s.get<std::string>());
    };
    if (v.is_string()) return add_string(v, "stop");
    if (!v.is_array()) throw bad_request("'stop' must be a string or an array of strings or token ids, got " + type_name(v), "stop");
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string name = "stop[" + std::to_string(i) + "]";
        if (v[i].is_string()) {
            add_string(v[i], name);
        } else {
            out.options.stop_tokens.push_back(token_id(v[i], name, limits.vocab));
        }
    }
}

// Chat messages: objects of a role (system, user, assistant) and a string content.
inline void parse_messages(const nlohmann::json& v, ParsedRequest& out) {
    if (!v.is_array() || v.empty()) throw bad_request("'messages' must be a non-empty array of messages", "messages");
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string name = "messages[" + std::to_string(i) + "]";
        const nlohmann::json& m = v[i];
        if (!m.is_object()) throw bad_request("'" + name + "' must be an object with 'role' and 'content', got " + type_name(m), name);
        text::ChatMessage message;
        bool has_role = false, has_content = false;
        for (const auto& [key, field] : m.items()) {
            const std::string fname = name + "." + key;
            if (key == "role") {
                if (!field.is_string()) throw bad_request("'" + fname + "' must be a string, got " + type_name(field), fname);
                message.role = field.get<std::string>();
                if (message.role != "system" && message.role != "user" && message.role != "assistant")
                    throw bad_request("'" + fname + "' = '" + message.role + "' is not a role this server formats "
                                      "(system, user, assistant)", fname);
                has_role = true;
            } else if (key == "content") {
                if (!field.is_string())
                    throw bad_request("'" + fname + "' must be a string (text content), got " + type_name(field), fname);
                message.content = field.get<std::string>();
                has_content = true;
            } else {
                throw bad_request("'" + fname + "' is not supported by this server (a message is a role and a content)", fname);
            }
        }
        if (!has_role) throw bad_request("'" + name + ".role' is required", name + ".role");
        if (!has_content) throw bad_request("'" + name + ".content' is required", name + ".content");
        out.messages.push_back(std::move(message));
    }
}

inline void parse_logit_bias(const nlohmann::json& v, const RequestLimits& limits, ParsedRequest& out) {
    if (v.is_null()) return;
    if (!v.is_object()) throw bad_request("'logit_bias' must be an object of token id -> bias, got " + type_name(v), "logit_bias");
    for (const auto& [key, bias] : v.items()) {
        const std::string name = "logit_bias." + key;
        std::int64_t id = -1;
        std::size_t used = 0;
        try {
            id = std::stoll(key, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != key.size() || id < 0 || id >= static_cast<std::int64_t>(limits.vocab))
            throw bad_request("'logit_bias' key '" + key + "' is not a token id in [0, " + std::to_string(limits.vocab) + ")",
                              "logit_bias");
        const double b = number(bias, name, -100.0, 100.0, "-100 to 100");
        out.options.sampling.logit_bias.push_back({static_cast<Token>(id), static_cast<float>(b)});
    }
}

}  // namespace detail

// Parses and checks a request body (already valid JSON). Throws ApiError.
[[nodiscard]] inline ParsedRequest parse_request(const nlohmann::json& body, Endpoint endpoint, const RequestLimits& limits) {
    using namespace detail;
    if (!body.is_object()) throw bad_request("the request body must be a JSON object, got " + type_name(body));
    ParsedRequest out;
    out.endpoint = endpoint;
    const bool chat = endpoint == Endpoint::chat;
    // OpenAI's defaults: temperature 1, top_p 1, 16 tokens for a completion.
    out.options.sampling.temperature = 1.0;
    out.options.max_new_tokens = chat ? 256 : 16;
    out.options.draft_tokens = limits.max_draft;
    bool has_prompt = false;
    std::optional<std::int64_t> logprobs_n;
    bool chat_logprobs = false;
    for (const auto& [key, v] : body.items()) {
        const std::string& k = key;
        if (k == "model" || k == "user") {
            if (!v.is_string() && !v.is_null()) throw bad_request("'" + k + "' must be a string, got " + type_name(v), k);
        } else if (!chat && k == "prompt") {
            parse_prompt(v, limits, out);
            has_prompt = true;
        } else if (chat && k == "messages") {
            parse_messages(v, out);
            has_prompt = true;
        } else if (k == "max_tokens" || (chat && k == "max_completion_tokens")) {
            if (!v.is_null()) out.options.max_new_tokens = static_cast<std::size_t>(integer(v, k, 1, static_cast<std::int64_t>(limits.context)));
        } else if (k == "temperature") {
            if (!v.is_null()) out.options.sampling.temperature = number(v, k, 0.0, 1e6, "a finite value >= 0 (0 = greedy)");
        } else if (k == "top_p") {
            if (!v.is_null()) {
                out.options.sampling.top_p = number(v, k, 0.0, 1.0, "(0, 1]");
                if (out.options.sampling.top_p == 0.0) throw bad_request("'top_p' = 0 is out of range: expected (0, 1]", k);
            }
        } else if (k == "top_k") {
            if (!v.is_null()) out.options.sampling.top_k = static_cast<std::size_t>(integer(v, k, 0, INT32_MAX));
        } else if (k == "min_p") {
            if (!v.is_null()) out.options.sampling.min_p = number(v, k, 0.0, 1.0, "[0, 1]");
        } else if (k == "seed") {
            if (!v.is_null()) {
                // Any 64-bit integer: OpenAI's signed seeds, and the unsigned ones the server reports.
                out.options.seed = v.is_number_unsigned() ? v.get<std::uint64_t>()
                                                          : static_cast<std::uint64_t>(integer(v, k, INT64_MIN, INT64_MAX));
                out.seeded = true;
            }
        } else if (k == "stop") {
            parse_stop(v, limits, out);
        } else if (k == "presence_penalty") {
            if (!v.is_null()) out.options.sampling.presence_penalty = number(v, k, -2.0, 2.0, "-2 to 2");
        } else if (k == "frequency_penalty") {
            if (!v.is_null()) out.options.sampling.frequency_penalty = number(v, k, -2.0, 2.0, "-2 to 2");
        } else if (k == "repetition_penalty" || k == "repeat_penalty") {
            if (!v.is_null()) out.options.sampling.repeat_penalty = number(v, k, 1e-6, 1e6, "a finite value > 0 (1 = off)");
        } else if (k == "repeat_last_n") {
            if (!v.is_null()) out.options.sampling.penalty_last_n = static_cast<std::size_t>(integer(v, k, 0, INT32_MAX));
        } else if (k == "logit_bias") {
            parse_logit_bias(v, limits, out);
        } else if (!chat && k == "logprobs") {
            if (!v.is_null()) logprobs_n = integer(v, k, 0, 20);
        } else if (chat && k == "logprobs") {
            if (!v.is_null()) chat_logprobs = boolean(v, k);
        } else if (chat && k == "top_logprobs") {
            if (!v.is_null()) logprobs_n = integer(v, k, 0, 20);
        } else if (k == "ignore_eos") {
            out.ignore_eos = boolean(v, k);
        } else if (k == "stream") {
            if (!v.is_null()) out.stream = boolean(v, k);
        } else if (k == "stream_options") {
            if (v.is_null()) continue;
            if (!v.is_object()) throw bad_request("'stream_options' must be an object, got " + type_name(v), k);
            for (const auto& [sk, sv] : v.items()) {
                if (sk != "include_usage") throw bad_request("'stream_options." + sk + "' is not supported", "stream_options." + sk);
                out.include_usage = boolean(sv, "stream_options.include_usage");
            }
        } else if (k == "n") {
            if (!v.is_null() && integer(v, k, 1, INT32_MAX) != 1)
                throw bad_request("'n' > 1 is not supported: send one request per completion", k);
        } else if (k == "speculative.n_max") {
            // The speculation control: 0 = none, else the most drafts per step.
            if (!v.is_null()) out.draft_max = static_cast<std::size_t>(integer(v, k, 0, static_cast<std::int64_t>(limits.max_draft)));
        } else {
            throw bad_request("'" + k + "' is not supported by this server", k);
        }
    }
    if (!has_prompt) throw bad_request(chat ? "'messages' is required" : "'prompt' is required", chat ? "messages" : "prompt");
    if (chat && logprobs_n && !chat_logprobs) throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (chat_logprobs || logprobs_n) {
        out.options.logprobs.enabled = true;
        out.options.logprobs.top_n = static_cast<std::size_t>(logprobs_n.value_or(0));
        // OpenAI reports the model's own probabilities, before any sampler.
        out.options.logprobs.source = LogprobSource::raw;
    }
    if (out.include_usage && !out.stream) throw bad_request("'stream_options' needs 'stream': true", "stream_options");
    if (out.draft_max && *out.draft_max > 0) out.options.draft_tokens = *out.draft_max;
    return out;
}

// The decoding options the engine runs a parsed request with:
// speculative.n_max = 0 drafts nothing, every other request drafts what the
// length policy chooses, up to its speculative.n_max or the server's --draft-max.
[[nodiscard]] inline DecodingOptions job_options(const ParsedRequest& parsed) {
    DecodingOptions options = parsed.options;
    options.drafting = parsed.draft_max == std::optional<std::size_t>(0) ? Drafting::off : Drafting::policy;
    return options;
}

// The rule a parsed request verifies with. A seeded request's tokens must not
// depend on what else the server runs, and the policy's lengths do: coupled
// sampling makes them plain sampling's tokens for the seed whatever the
// lengths. The others get token-wise rejection, which keeps more drafts.
[[nodiscard]] inline ChosenRule job_rule(const ParsedRequest& parsed) {
    return ChosenRule{parsed.seeded ? ChosenRule::Kind::coupled : ChosenRule::Kind::tokenwise};
}

}  // namespace specdec::server
