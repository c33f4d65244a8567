// specdec-server: an OpenAI-compatible HTTP server over BatchedDecoder.
//
//   specdec-server --synthetic --port 8080          # the embedded synthetic pair, no files
//   specdec-server -m target.gguf -md draft.gguf -np 4 -c 4096
//   specdec-server --engine llama.cpp -m target.gguf -md draft.gguf -ngl 99
//
// POST /v1/completions (text or token-id prompt, streamed or not),
// POST /v1/chat/completions (the target's chat template, or --chat-template),
// GET /v1/models, GET /health, GET /metrics (Prometheus). One decoding thread
// owns the decoder (server/engine.hpp); each request is exact on its own,
// and a seeded one gets the same tokens whatever else the server decodes.
// Flags follow llama-server's spelling. See docs/serving.md.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_choice.hpp"
#include "flag_table.hpp"
#include "server/api_error.hpp"
#include "server/engine.hpp"
#include "server/metrics.hpp"
#include "server/request.hpp"
#include "server/responses.hpp"

#include <specdec/formats/tokenizer.hpp>
#include <specdec/models/llama_model.hpp>
#include <specdec/models/synthetic.hpp>
#include <specdec/specdec.hpp>
#include <specdec/text/chat_template.hpp>
#include <specdec/text/text_stream.hpp>

#ifdef SPECDEC_WITH_LLAMA_CPP
#include <specdec/adapters/llama_cpp.hpp>
#include <specdec/text/llama_cpp_chat.hpp>
#include <specdec/text/llama_cpp_vocabulary.hpp>
#endif

namespace {

using specdec::cli::UsageError;
using namespace specdec::server;
using json = nlohmann::json;

struct Options {
    std::string target, draft;
    std::string chat_template;  // empty: the target's tokenizer.chat_template
    bool synthetic = false;
    std::string synthetic_size = "tiny";
    std::size_t slots = 4, context = 0, threads = 0, max_queue = 64, max_body = 1 << 20, draft_max = 8;
    std::size_t timeout = 600;
    std::size_t prefill_chunk = 512;
    bool warm_up = true;
    bool log_steps = false;
    std::string host = "127.0.0.1", api_key;
    int port = 8080;
    specdec::cli::Engine engine = specdec::cli::Engine::specdec;
    int gpu_layers = 0;                    // --engine llama.cpp: -ngl
    std::vector<std::string> rpc_servers;  // --engine llama.cpp: --rpc
    bool help = false;
};

using Flag = specdec::cli::FlagSpec<Options>;

const std::vector<Flag>& server_flags() {
    using V = std::string_view;
    using specdec::cli::parse_count;
    static const std::vector<Flag> flags{
        {{"-m", "--model"}, "FILE", "target model (GGUF: llama, qwen2, mistral)", [](Options& o, V, V v) { o.target = v; }, "Models:"},
        {{"-md", "--model-draft"}, "FILE", "draft model sharing the target's vocabulary", [](Options& o, V, V v) { o.draft = v; }},
        {{"--synthetic"}, "", "serve the embedded synthetic pair (no files, no tokenizer: prompts are token ids)",
         [](Options& o, V, V) { o.synthetic = true; }},
        {{"--chat-template"}, "NAME",
         "chat template for /v1/chat/completions instead of the target's tokenizer.chat_template:\n"
         "chatml, llama3, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken",
         [](Options& o, V f, V v) {
             try {
                 (void)specdec::text::ChatTemplate::from_name(v);
             } catch (const specdec::Error& e) {
                 throw UsageError(std::string(f) + ": " + e.what());
             }
             o.chat_template = v;
         }},
        {{"--synthetic-size"}, "SIZE", "tiny (default) or 100m", [](Options& o, V, V v) { o.synthetic_size = v; }},
        {{"--engine"}, "NAME", "what runs the models: specdec (default) or llama.cpp (every model llama.cpp loads)",
         [](Options& o, V f, V v) { o.engine = specdec::cli::parse_engine(f, v); }},
        {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, "N|all",
         "--engine llama.cpp: layers offloaded to llama.cpp's devices (default 0: none; with --rpc, all)",
         [](Options& o, V f, V v) { o.gpu_layers = specdec::cli::parse_gpu_layers(f, v); }},
        {{"--rpc"}, "HOST:PORT,...", "--engine llama.cpp: ggml-rpc-server processes that take the layers",
         [](Options& o, V f, V v) { o.rpc_servers = specdec::cli::parse_rpc_servers(f, v); }},
        {{"-np", "--parallel"}, "N", "requests decoded at once: KV cache slots (default 4)",
         [](Options& o, V f, V v) { o.slots = parse_count(f, v, 1); }, "Serving:"},
        {{"-c", "--ctx-size"}, "N", "context per slot in tokens; 0 = the model's (default 0)",
         [](Options& o, V f, V v) { o.context = parse_count(f, v); }},
        {{"-t", "--threads"}, "N", "CPU threads; 0 = every core (default 0)", [](Options& o, V f, V v) { o.threads = parse_count(f, v); }},
        {{"--draft-max"}, "N", "most draft tokens per request per step (default 8)",
         [](Options& o, V f, V v) { o.draft_max = parse_count(f, v, 1); }},
        {{"--prefill-chunk"}, "N",
         "most prompt tokens prefilled per step, so that a long prompt does not stall the running streams; "
         "0 = each prompt whole (default 512)",
         [](Options& o, V f, V v) { o.prefill_chunk = parse_count(f, v); }},
        {{"--host"}, "ADDR", "address to listen on (default 127.0.0.1)", [](Options& o, V, V v) { o.host = v; }},
        {{"--port"}, "N", "port (default 8080; 0 = any free port, printed at start)",
         [](Options& o, V f, V v) {
             const std::uint64_t port = parse_count(f, v);
             if (port > 65535) throw UsageError(std::string(f) + ": " + std::to_string(port) + " is not a port (0 to 65535)");
             o.port = static_cast<int>(port);
         }},
        {{"--api-key"}, "KEY", "require 'Authorization: Bearer KEY' (all but /health)", [](Options& o, V, V v) { o.api_key = v; }},
        {{"--max-queue"}, "N", "requests that may wait for a slot; beyond: 503 (default 64)",
         [](Options& o, V f, V v) { o.max_queue = parse_count(f, v); }},
        {{"--timeout"}, "S", "HTTP read/write timeout in seconds (default 600)",
         [](Options& o, V f, V v) { o.timeout = parse_count(f, v, 1); }},
        {{"--max-body"}, "BYTES", "largest request body; beyond: 413 (default 1048576)",
         [](Options& o, V f, V v) { o.max_body = parse_count(f, v, 1); }},
        {{"--no-warmup"}, "", "skip the warm-up request through both models before serving",
         [](Options& o, V, V) { o.warm_up = false; }},
        {{"--log-steps"}, "", "print a line per decoder step to stderr: requests, target pass tokens, drafts, "
                              "draft rounds, tokens emitted, time (what the length policy chose and what it cost)",
         [](Options& o, V, V) { o.log_steps = true; }},
        {{"-h", "--help"}, "", "this help", [](Options& o, V, V) { o.help = true; }},
    };
    return flags;
}

Options parse(int argc, char** argv) {
    std::vector<std::string_view> arguments(argv + 1, argv + argc);
    Options o;
    specdec::cli::parse_flags<Options>(server_flags(), arguments, o);
    if (o.help) return o;
    if (o.engine == specdec::cli::Engine::llama_cpp && !specdec::cli::kBuiltWithLlamaCpp)
        throw specdec::cli::llama_cpp_missing("specdec-server");
    if (o.engine == specdec::cli::Engine::llama_cpp && o.synthetic)
        throw UsageError("--synthetic is specdec's embedded pair: --engine llama.cpp needs -m and -md GGUF files");
    if ((o.gpu_layers != 0 || !o.rpc_servers.empty()) && o.engine != specdec::cli::Engine::llama_cpp)
        throw UsageError("-ngl and --rpc place llama.cpp's layers: give them with --engine llama.cpp");
    if (o.synthetic && !o.chat_template.empty())
        throw UsageError("--chat-template: the synthetic pair has no tokenizer, so no chat (prompts are token ids)");
    if (o.synthetic && (!o.target.empty() || !o.draft.empty()))
        throw UsageError("--synthetic serves the embedded pair: leave out -m and -md");
    if (!o.synthetic && o.target.empty()) throw UsageError("give -m FILE.gguf and -md FILE.gguf, or --synthetic");
    if (!o.synthetic && o.draft.empty()) throw UsageError("-md: the server needs a draft model beside -m");
    if (o.synthetic && o.synthetic_size != "tiny" && o.synthetic_size != "100m")
        throw UsageError("--synthetic-size: '" + o.synthetic_size + "' is not tiny or 100m");
    return o;
}

// Constant-time in the key's content: every byte is compared.
bool same_secret(std::string_view given, std::string_view expected) {
    unsigned char difference = given.size() == expected.size() ? 0 : 1;
    const std::size_t n = std::max(given.size(), expected.size());
    for (std::size_t i = 0; i < n; ++i) {
        const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
        const unsigned char b = i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0;
        difference |= static_cast<unsigned char>(a ^ b);
    }
    return difference == 0;
}

// Set by SIGINT and SIGTERM (all a signal handler may do); the server's watcher thread stops it.
std::atomic<bool> stop_requested{false};

void send_error(httplib::Response& res, const ApiError& error) {
    res.status = error.status;
    res.set_content(error.body().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// What the server needs of a tokenizer: a completion prompt's tokens, a
// conversation's (through a chat template; none: no chat, and why), the
// end-of-generation tokens, and each token's text for the incremental
// detokenizer. specdec's Tokenizer, or llama.cpp's own tokenizer and template.
template <class Vocabulary>
struct TextCodec {
    const Vocabulary* vocabulary = nullptr;
    std::function<std::vector<specdec::Token>(std::string_view)> encode;
    std::function<std::vector<specdec::Token>(std::span<const specdec::text::ChatMessage>)> encode_chat;
    std::string no_chat;
    std::vector<specdec::Token> end_of_generation;
};

// The answer a request's committed tokens make: its text through the
// incremental detokenizer and the stop strings (text::TextStream: each token
// costs its own text and the longest stop string, never the answer so far),
// and the tokens shown with it. Without a tokenizer: the tokens only.
template <class Vocabulary>
struct Answer {
    std::optional<specdec::text::TextStream<Vocabulary>> text;
    std::vector<specdec::Token> tokens;  // shown so far (with a stop token or end-of-generation token that ended it)
    bool stopped = false;                // a stop string or a stop token ended the text

    // Adds committed tokens; returns the text and tokens that can be shown now.
    std::pair<std::string, std::vector<specdec::Token>> add(std::span<const specdec::Token> fresh) {
        std::string shown;
        std::vector<specdec::Token> ids;
        for (const specdec::Token t : fresh) {
            if (stopped) break;
            if (!text) {
                ids.push_back(t);
                continue;
            }
            const bool more = text->push(t, [&](const specdec::text::TextPiece& piece) {
                shown.append(piece.text);
                ids.insert(ids.end(), piece.tokens.begin(), piece.tokens.end());
            });
            if (!more) {
                stopped = true;
                if (text->end() == specdec::text::TextEnd::end_of_generation) ids.push_back(t);
            }
        }
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        return {std::move(shown), std::move(ids)};
    }
    // The generation ended on its own: what was held back.
    std::pair<std::string, std::vector<specdec::Token>> finish() {
        std::string shown;
        std::vector<specdec::Token> ids;
        if (text && !stopped) text->finish([&](const specdec::text::TextPiece& piece) {
            shown.append(piece.text);
            ids.insert(ids.end(), piece.tokens.begin(), piece.tokens.end());
        });
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        return {std::move(shown), std::move(ids)};
    }
    [[nodiscard]] const char* finish_reason(const specdec::GenerationResult& g) const {
        return stopped || g.stop_reason == specdec::StopReason::stop_token ? "stop" : "length";
    }
};

// What a request stream needs while it is sent, kept alive by the content provider.
template <class Vocabulary>
struct StreamState {
    std::shared_ptr<Channel> channel;
    std::string id, model;
    std::size_t seen = 0, prompt = 0;
    bool include_usage = false, finished = false, chat = false, role_sent = false;
    Answer<Vocabulary> answer;
    bool logprobs = false;                         // each chunk carries its tokens' logprobs
    std::vector<specdec::TokenLogprob> received;   // by token position, as they arrived
    std::size_t text_offset = 0;                   // completions: where the next chunk's text starts
    PieceOf piece;
};

// Without a codec (the synthetic pair) prompts are token ids and answers tokens.
template <class Model, class Vocabulary>
class Server {
public:
    Server(const Options& o, Model& target, Model& draft, std::optional<TextCodec<Vocabulary>> codec,
           std::string model_name)
        : options_(o), codec_(std::move(codec)), model_name_(std::move(model_name)),
          limits_{target.vocab_size(), target.context_length(), o.draft_max},
          engine_(target, draft, metrics_, o.slots, o.prefill_chunk) {}

    int serve() {
        http_.new_task_queue = [n = options_.slots + options_.max_queue + 8] { return new httplib::ThreadPool(n); };
        http_.set_payload_max_length(options_.max_body);
        http_.set_read_timeout(static_cast<time_t>(options_.timeout), 0);
        http_.set_write_timeout(static_cast<time_t>(options_.timeout), 0);
        http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
            const std::string header = req.get_header_value("Authorization");
            const std::string_view bearer = "Bearer ";
            const std::string_view given = std::string_view(header).starts_with(bearer)
                                               ? std::string_view(header).substr(bearer.size())
                                               : std::string_view();
            if (same_secret(given, options_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, ApiError{401, "invalid or missing API key: send 'Authorization: Bearer KEY'", {},
                                     "authentication_error", "invalid_api_key"});
            return httplib::Server::HandlerResponse::Handled;
        });
        http_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, Endpoint::completions); });
        http_.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, Endpoint::chat); });
        http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
            const json model{{"id", model_name_}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "specdec"}};
            r.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
        });
        http_.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
            r.set_content(json{{"status", "ok"}, {"slots", engine_.slots()}}.dump(), "application/json");
        });
        http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
            r.set_content(metrics_.text(), "text/plain; version=0.0.4");
        });
        http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            if (res.status == 413) {
                send_error(res, ApiError{413, "the request body is larger than --max-body (" + std::to_string(options_.max_body) +
                                                  " bytes)", {}, "invalid_request_error", "body_too_large"});
            } else if (res.status == 404) {
                send_error(res, ApiError{404, "no endpoint " + req.method + " " + req.path +
                                                  " (try POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics)",
                                         {}, "invalid_request_error", "not_found"});
            } else {
                send_error(res, ApiError{res.status, "the request could not be served (HTTP " + std::to_string(res.status) + ")",
                                         {}, res.status >= 500 ? "server_error" : "invalid_request_error"});
            }
            return httplib::Server::HandlerResponse::Handled;
        }));
        http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
            std::string message = "internal error";
            try {
                if (error) std::rethrow_exception(error);
            } catch (const std::exception& e) {
                message += std::string(": ") + e.what();
            } catch (...) {
            }
            send_error(res, ApiError{500, message, {}, "server_error"});
        });
        http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            static const std::vector<std::string> known{"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                                        "/metrics"};
            const bool listed = std::find(known.begin(), known.end(), req.path) != known.end();
            metrics_.request(listed ? req.path : "other", res.status);
        });
        // cpp-httplib listens with a backlog of 5 connections: a burst of
        // clients beyond it is reset while the accepting thread catches up.
        // The listening socket is remembered here and given a deep backlog
        // once bound (listen() again only changes the backlog).
        http_.set_socket_options([this](socket_t socket) {
            httplib::default_socket_options(socket);
            listener_ = socket;
        });
        int port = options_.port;
        if (port == 0) {
            port = http_.bind_to_any_port(options_.host);
            if (port < 0) throw specdec::Error("cannot listen on " + options_.host);
        } else if (!http_.bind_to_port(options_.host, port)) {
            throw specdec::Error("cannot listen on " + options_.host + ":" + std::to_string(port));
        }
        if (listener_ != INVALID_SOCKET) ::listen(listener_, SOMAXCONN);
        if (options_.warm_up) engine_.warm_up();
        metrics_.reset();  // the warm-up is no request of a client's
        if (options_.log_steps) engine_.log_steps(stderr);
        std::printf("specdec-server: %s, %zu slots of %zu tokens; listening on http://%s:%d\n", model_name_.c_str(),
                    engine_.slots(), limits_.context, options_.host.c_str(), port);
        std::fflush(stdout);
#ifdef SPECDEC_PROGRAM_OPTIMIZATION_NOTE
        // After the line clients wait for, which stays the first.
        std::printf("specdec-server: note: compiled with %s for the test command (SPECDEC_PROGRAM_OPTIMIZATION): "
                    "configure with -DSPECDEC_PROGRAM_OPTIMIZATION= before measuring its speed\n",
                    SPECDEC_PROGRAM_OPTIMIZATION_NOTE);
        std::fflush(stdout);
#endif
        // The decoding loop runs on this thread, the one that loaded the
        // models (server/engine.hpp says why); another thread listens.
        // SIGINT and SIGTERM only set a flag (all a signal handler may do);
        // the watcher ends the engine's loop, which ends what still runs,
        // then stops the listener (again until it has stopped: a stop before
        // the listener ran is lost).
        std::thread listener([this] {
            http_.listen_after_bind();
            listen_ended_.store(true);
        });
        std::thread watcher([this] {
            while (!stop_requested.load() && !listen_ended_.load() && !engine_ended_.load())
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            engine_.stop();
            engine_.wait_ended();
            while (!listen_ended_.load()) {
                http_.stop();
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        });
        std::exception_ptr failure;
        try {
            engine_.run();
        } catch (...) {
            failure = std::current_exception();
        }
        engine_ended_.store(true);
        watcher.join();
        listener.join();
        if (failure) std::rethrow_exception(failure);
        std::printf("specdec-server: stopped\n");
        return 0;
    }

private:
    void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
        try {
            json body;
            try {
                body = json::parse(req.body);
            } catch (const json::parse_error& e) {
                throw bad_request(std::string("the body is not valid JSON: ") + e.what());
            }
            ParsedRequest parsed = parse_request(body, endpoint, limits_);
            if (!parsed.stop_strings.empty() && !codec_)
                throw bad_request("stop strings need a tokenizer, and this server has none (--synthetic): give stop "
                                  "token ids (an array of integers)",
                                  "stop");
            std::vector<specdec::Token> prompt = std::move(parsed.prompt_tokens);
            if (endpoint == Endpoint::chat) {
                if (!codec_ || !codec_->encode_chat)
                    throw bad_request("chat is not available on this server: " +
                                          (codec_ ? codec_->no_chat
                                                  : std::string("the synthetic pair has no tokenizer (prompts are token "
                                                                "ids): send them to /v1/completions")),
                                      "messages");
                prompt = codec_->encode_chat(parsed.messages);
                if (prompt.empty()) throw bad_request("'messages' encode to no tokens", "messages");
            }
            if (parsed.prompt_text) {
                if (!codec_)
                    throw bad_request("this server has no tokenizer (--synthetic): send the prompt as an array of token ids",
                                      "prompt");
                prompt = codec_->encode(*parsed.prompt_text);
                if (prompt.empty()) throw bad_request("'prompt' encodes to no tokens", "prompt");
            }
            if (prompt.size() >= limits_.context)
                throw ApiError{400, "the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                        std::to_string(limits_.context) + " (the prompt must leave room for a token)",
                               "prompt", "invalid_request_error", "context_length_exceeded"};
            // The decoder stops at the end-of-generation tokens (EOS, <|eot_id|>, <|im_end|>, ...) and the text
            // stream hides them; a stop token the client gave is hidden from the text alike.
            specdec::text::TextOptions text_options{.stop_strings = parsed.stop_strings};
            if (codec_ && !parsed.ignore_eos) {
                const std::vector<specdec::Token>& eog = codec_->end_of_generation;
                parsed.options.stop_tokens.insert(parsed.options.stop_tokens.end(), eog.begin(), eog.end());
            }
            text_options.end_of_generation = parsed.options.stop_tokens;
            Answer<Vocabulary> answer;
            if (codec_) answer.text.emplace(*codec_->vocabulary, text_options, prompt);
            Job job;
            job.prompt = std::move(prompt);
            job.options = job_options(parsed);
            job.rule = job_rule(parsed);
            job.channel = std::make_shared<Channel>();
            const std::size_t prompt_size = job.prompt.size();
            const std::shared_ptr<Channel> channel = job.channel;
            if (std::optional<ApiError> busy = engine_.enqueue(std::move(job), engine_.slots() + options_.max_queue)) {
                res.set_header("Retry-After", "1");
                throw *busy;
            }
            std::optional<ApiError> refused;
            while (!channel->wait_submitted(refused, std::chrono::milliseconds(1000))) {}
            if (refused) throw *refused;
            const bool chat = endpoint == Endpoint::chat;
            const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_);
            if (parsed.stream) {
                auto state = std::make_shared<StreamState<Vocabulary>>();
                state->channel = channel;
                state->id = id;
                state->model = model_name_;
                state->prompt = prompt_size;
                state->include_usage = parsed.include_usage;
                state->chat = chat;
                state->answer = std::move(answer);
                state->logprobs = parsed.options.logprobs.enabled;
                state->piece = piece_of();
                res.set_header("Cache-Control", "no-cache");
                res.set_chunked_content_provider(
                    "text/event-stream",
                    [state](std::size_t, httplib::DataSink& sink) { return send_events(*state, sink); },
                    [state](bool) { if (!state->finished) state->channel->cancel(); });
                return;
            }
            std::optional<specdec::RequestResult> done;
            std::size_t seen = 0;
            std::string text;
            while (!done) {
                const std::vector<specdec::Token> fresh = channel->next(seen, std::chrono::milliseconds(200), done).tokens;
                seen += fresh.size();
                const bool was_stopped = answer.stopped;
                try {
                    text += answer.add(fresh).first;
                } catch (const specdec::Error& e) {  // a token the tokenizer does not know
                    channel->cancel();
                    throw ApiError{500, std::string("the answer's text: ") + e.what(), {}, "server_error"};
                }
                if (answer.stopped && !was_stopped) channel->end_early();  // the rest would not be shown
            }
            respond(res, *done, answer, text, id, chat, prompt_size, parsed.options.logprobs.enabled);
        } catch (const ApiError& error) {
            send_error(res, error);
        }
    }

    // Sends what the request produced since the last call; false ends the stream.
    static bool send_events(StreamState<Vocabulary>& s, httplib::DataSink& sink) {
        auto write = [&](const std::string& event) {
            if (sink.write(event.data(), event.size())) return true;
            s.channel->cancel();  // the client went away: the decoder drops the request within a step
            return false;
        };
        // The logprobs of the tokens an event shows: the answer's tokens from `first` on.
        auto logprobs_from = [&](std::size_t first) -> json {
            if (!s.logprobs) return nullptr;
            const std::size_t last = std::min(s.answer.tokens.size(), s.received.size());
            const std::span<const specdec::TokenLogprob> shown =
                std::span<const specdec::TokenLogprob>(s.received).subspan(std::min(first, last), last - std::min(first, last));
            return s.chat ? chat_logprobs(shown, s.piece) : completion_logprobs(shown, s.piece, s.text_offset);
        };
        auto event = [&](const std::string& text, const std::vector<specdec::Token>& tokens, const char* finish,
                         std::size_t first_shown) {
            json logprobs = tokens.empty() ? json(nullptr) : logprobs_from(first_shown);
            if (!s.chat) return write(completion_event(s.id, s.model, text, tokens, finish, std::move(logprobs)));
            return write(chat_event(s.id, s.model, finish ? json::object() : json{{"content", text}}, tokens, finish,
                                    std::move(logprobs)));
        };
        if (s.chat && s.seen == 0 && !s.finished && !s.role_sent) {
            s.role_sent = true;
            if (!write(chat_event(s.id, s.model, json{{"role", "assistant"}, {"content", ""}}, {}, nullptr))) return false;
        }
        std::optional<specdec::RequestResult> done;
        Channel::Fresh fresh_tokens = s.channel->next(s.seen, std::chrono::milliseconds(100), done, s.logprobs);
        const std::vector<specdec::Token>& fresh = fresh_tokens.tokens;
        s.seen += fresh.size();
        s.received.insert(s.received.end(), fresh_tokens.logprobs.begin(), fresh_tokens.logprobs.end());
        if (!fresh.empty()) {
            if (s.answer.stopped) return true;  // decoded past a stop string: never shown
            std::pair<std::string, std::vector<specdec::Token>> piece;
            const std::size_t first_shown = s.answer.tokens.size();
            try {
                piece = s.answer.add(fresh);
            } catch (const specdec::Error& e) {  // a token the tokenizer does not know: an error event, not a throw
                s.finished = true;
                s.channel->cancel();
                write(sse(ApiError{500, std::string("the answer's text: ") + e.what(), {}, "server_error"}.body()));
                sink.done();
                return true;
            }
            auto& [text, tokens] = piece;
            if (s.answer.stopped) s.channel->end_early();
            if (text.empty() && tokens.empty()) return true;
            return event(text, tokens, nullptr, first_shown);
        }
        if (!done) return true;
        s.finished = true;
        const bool failed = done->status == specdec::RequestStatus::failed;
        if (failed || (done->status == specdec::RequestStatus::cancelled && !s.answer.stopped)) {
            const ApiError error{failed ? 500 : 503, failed ? "decoding failed: " + done->error : "the request was cancelled",
                                 {}, "server_error"};
            write(sse(error.body()));
            sink.done();
            return true;
        }
        const std::size_t first_tail = s.answer.tokens.size();
        auto [tail, tail_tokens] = s.answer.finish();
        if (!tail.empty() && !event(tail, tail_tokens, nullptr, first_tail)) return false;
        if (!event(std::string(), tail.empty() ? tail_tokens : std::vector<specdec::Token>{},
                   s.answer.finish_reason(done->generation), first_tail))
            return false;
        if (s.include_usage) {
            const json chunk{{"id", s.id},          {"object", s.chat ? "chat.completion.chunk" : "text_completion"},
                             {"created", unix_now()}, {"model", s.model}, {"choices", json::array()},
                             {"usage", usage(s.prompt, s.answer.tokens.size())},
                             {"specdec", speculation(done->generation)}};
            if (!write(sse(chunk))) return false;
        }
        if (!write(kDone)) return false;
        sink.done();
        return true;
    }

    void respond(httplib::Response& res, const specdec::RequestResult& done, Answer<Vocabulary>& answer, std::string text,
                 const std::string& id, bool chat, std::size_t prompt, bool logprobs) {
        if (done.status == specdec::RequestStatus::failed)
            throw ApiError{500, "decoding failed: " + done.error, {}, "server_error"};
        if (done.status == specdec::RequestStatus::cancelled && !answer.stopped)
            throw ApiError{503, "the request was cancelled (the server is stopping)", {}, "server_error"};
        const specdec::GenerationResult& g = done.generation;
        text += answer.finish().first;
        const PieceOf piece = piece_of();
        const std::size_t shown = answer.tokens.size();
        const std::span<const specdec::TokenLogprob> shown_logprobs =
            std::span(g.logprobs).first(std::min(shown, g.logprobs.size()));
        std::size_t offset = 0;
        json choice{{"index", 0}, {"tokens", answer.tokens}, {"finish_reason", answer.finish_reason(g)}};
        if (chat) {
            choice["message"] = json{{"role", "assistant"}, {"content", text}};
            choice["logprobs"] = logprobs ? chat_logprobs(shown_logprobs, piece) : json(nullptr);
        } else {
            choice["text"] = text;
            choice["logprobs"] = logprobs ? completion_logprobs(shown_logprobs, piece, offset) : json(nullptr);
        }
        const json body{{"id", id},       {"object", chat ? "chat.completion" : "text_completion"},
                        {"created", unix_now()}, {"model", model_name_},
                        {"choices", json::array({choice})}, {"usage", usage(prompt, shown)},
                        {"specdec", speculation(g)}};
        res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }

    // A token's text for logprobs (the vocabulary outlives the server).
    [[nodiscard]] PieceOf piece_of() const {
        const Vocabulary* vocabulary = codec_ ? codec_->vocabulary : nullptr;
        return [vocabulary](specdec::Token t) { return vocabulary ? std::string(vocabulary->token_text(t)) : std::to_string(t); };
    }

    Options options_;
    std::optional<TextCodec<Vocabulary>> codec_;
    std::string model_name_;
    RequestLimits limits_;
    Metrics metrics_;
    Engine<Model, Model> engine_;
    httplib::Server http_;
    std::atomic<std::uint64_t> next_id_{0};
    std::atomic<bool> listen_ended_{false};
    std::atomic<bool> engine_ended_{false};
    socket_t listener_ = INVALID_SOCKET;
};

void on_signal(int) { stop_requested.store(true); }

template <class Model, class Vocabulary>
int serve(const Options& o, Model& target, Model& draft, std::optional<TextCodec<Vocabulary>> codec) {
    const std::string name = o.synthetic ? "synthetic-" + o.synthetic_size : std::filesystem::path(o.target).stem().string();
    Server<Model, Vocabulary> server(o, target, draft, std::move(codec), name);
    return server.serve();
}

int run_specdec(const Options& o) {
    auto pool = std::make_shared<specdec::cpu::ThreadPool>(o.threads);
    if (o.synthetic) {
        specdec::SyntheticOptions synthetic{.size = o.synthetic_size, .max_context = o.context, .thread_pool = pool,
                                            .sequences = o.slots};
        specdec::SyntheticPair pair = specdec::make_synthetic_pair(synthetic);
        return serve<specdec::LlamaModel, specdec::Tokenizer>(o, pair.target, pair.draft, std::nullopt);
    }
    const auto file = specdec::gguf::File::open(o.target);
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(file);
    TextCodec<specdec::Tokenizer> codec;
    codec.vocabulary = &tokenizer;
    codec.encode = [&tokenizer](std::string_view text) { return tokenizer.encode(text); };
    codec.end_of_generation = tokenizer.end_of_generation();
    try {
        const specdec::text::ChatTemplate chat = o.chat_template.empty() ? specdec::text::ChatTemplate::from_gguf(file)
                                                                         : specdec::text::ChatTemplate::from_name(o.chat_template);
        codec.encode_chat = [&tokenizer, chat](std::span<const specdec::text::ChatMessage> messages) {
            return tokenizer.encode(chat.apply(messages), tokenizer.add_bos_by_default(), false, specdec::SpecialTokens::parse);
        };
    } catch (const specdec::Error& e) {
        codec.no_chat = std::string(e.what()) + " (specdec-server --chat-template NAME picks one)";
    }
    const specdec::LlamaOptions model_options{.max_context = o.context, .thread_pool = pool, .sequences = o.slots};
    specdec::LlamaModel target = specdec::LlamaModel::from_gguf(o.target, model_options);
    specdec::LlamaModel draft = specdec::LlamaModel::from_gguf(o.draft, model_options);
    return serve(o, target, draft, std::optional(std::move(codec)));
}

#ifdef SPECDEC_WITH_LLAMA_CPP
// llama.cpp runs the models, tokenises and applies the chat template
// (llama_chat_apply_template); the decoding is specdec's.
int run_llama_cpp(const Options& o) {
    const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
    specdec::LlamaCppOptions model_options;
    model_options.max_context = o.context;  // 0: the model's trained context
    model_options.sequences = o.slots;
    model_options.threads = static_cast<int>(o.threads != 0 ? o.threads : hardware);
    model_options.threads_batch = model_options.threads;
    model_options.gpu_layers = o.gpu_layers;
    model_options.rpc_servers = o.rpc_servers;
    specdec::LlamaCppModel target = specdec::LlamaCppModel::from_gguf(o.target, model_options);
    specdec::LlamaCppModel draft = specdec::LlamaCppModel::from_gguf(o.draft, model_options);
    specdec::check_same_vocabulary(target, draft);
    const specdec::text::LlamaCppVocabulary vocabulary(target.vocabulary());
    TextCodec<specdec::text::LlamaCppVocabulary> codec;
    codec.vocabulary = &vocabulary;
    // BOS where the model's tokenizer asks for it (as specdec-generate and
    // llama.cpp's tools tokenise); user text never spells control tokens.
    codec.encode = [&target](std::string_view text) { return target.tokenize(text, /*add_bos=*/true); };
    codec.end_of_generation = target.stop_tokens();
    std::optional<std::string> chat_template =
        o.chat_template.empty() ? specdec::text::llama_cpp_chat_template(target.model()) : std::optional(o.chat_template);
    if (chat_template) {
        codec.encode_chat = [&target, chat = *chat_template](std::span<const specdec::text::ChatMessage> messages) {
            return target.tokenize(specdec::text::llama_cpp_apply_chat(chat, messages), target.add_bos(),
                                   /*parse_special=*/true);
        };
    } else {
        codec.no_chat = o.target + " has no tokenizer.chat_template (specdec-server --chat-template NAME picks one)";
    }
    return serve(o, target, draft, std::optional(std::move(codec)));
}
#endif

int run(const Options& o) {
#ifdef SPECDEC_WITH_LLAMA_CPP
    if (o.engine == specdec::cli::Engine::llama_cpp) return run_llama_cpp(o);
#endif
    return run_specdec(o);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Options options = parse(argc, argv);
        if (options.help) {
            std::printf("usage: specdec-server (--synthetic | -m TARGET.gguf -md DRAFT.gguf) [options]\n\n%s",
                        specdec::cli::flag_help<Options>(server_flags()).c_str());
            return 0;
        }
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        return run(options);
    } catch (const UsageError& error) {
        std::fprintf(stderr, "specdec-server: %s\n", specdec::cli::one_line(error.what()).c_str());
        return 2;
    } catch (const specdec::Error& error) {
        std::fprintf(stderr, "specdec-server: %s\n", error.what());
        return 1;
    }
}
