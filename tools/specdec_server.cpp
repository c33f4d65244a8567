// specdec-server: an OpenAI-compatible HTTP server over BatchedDecoder.
//
//   specdec-server --synthetic --port 8080          # the embedded synthetic pair, no files
//   specdec-server -m target.gguf -md draft.gguf -np 4 -c 4096
//
// POST /v1/completions (text or token-id prompt, streamed or not),
// POST /v1/chat/completions (refused: no chat template layer yet),
// GET /v1/models, GET /health, GET /metrics (Prometheus). One decoding thread
// owns the decoder (server/engine.hpp); each request is exact on its own,
// and a seeded one gets the same tokens whatever else the server decodes.
// Flags follow llama-server's spelling. See docs/serving.md.
#include <httplib.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
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

namespace {

using specdec::cli::UsageError;
using namespace specdec::server;
using json = nlohmann::json;

struct Options {
    std::string target, draft;
    bool synthetic = false;
    std::string synthetic_size = "tiny";
    std::size_t slots = 4, context = 0, threads = 0, max_queue = 64, max_body = 1 << 20, draft_max = 8;
    std::size_t timeout = 600;
    std::string host = "127.0.0.1", api_key;
    int port = 8080;
    specdec::cli::Engine engine = specdec::cli::Engine::specdec;
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
        {{"--synthetic-size"}, "SIZE", "tiny (default) or 100m", [](Options& o, V, V v) { o.synthetic_size = v; }},
        {{"--engine"}, "NAME", "specdec (default); llama.cpp is not available in the server yet",
         [](Options& o, V f, V v) { o.engine = specdec::cli::parse_engine(f, v); }},
        {{"-np", "--parallel"}, "N", "requests decoded at once: KV cache slots (default 4)",
         [](Options& o, V f, V v) { o.slots = parse_count(f, v, 1); }, "Serving:"},
        {{"-c", "--ctx-size"}, "N", "context per slot in tokens; 0 = the model's (default 0)",
         [](Options& o, V f, V v) { o.context = parse_count(f, v); }},
        {{"-t", "--threads"}, "N", "CPU threads; 0 = every core (default 0)", [](Options& o, V f, V v) { o.threads = parse_count(f, v); }},
        {{"--draft-max"}, "N", "most draft tokens per request per step (default 8)",
         [](Options& o, V f, V v) { o.draft_max = parse_count(f, v, 1); }},
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
        {{"-h", "--help"}, "", "this help", [](Options& o, V, V) { o.help = true; }},
    };
    return flags;
}

Options parse(int argc, char** argv) {
    std::vector<std::string_view> arguments(argv + 1, argv + argc);
    Options o;
    specdec::cli::parse_flags<Options>(server_flags(), arguments, o);
    if (o.help) return o;
    if (o.engine == specdec::cli::Engine::llama_cpp)
        throw UsageError("--engine llama.cpp: the server runs the specdec engine only so far; use specdec-generate "
                         "--engine llama.cpp for llama.cpp");
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

void send_error(httplib::Response& res, const ApiError& error) {
    res.status = error.status;
    res.set_content(error.body().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// What a request stream needs while it is sent, kept alive by the content provider.
struct StreamState {
    std::shared_ptr<Channel> channel;
    std::string id, model;
    std::size_t seen = 0, prompt = 0;
    bool include_usage = false, finished = false;
    std::optional<specdec::Tokenizer::StreamDecoder> text;
};

class Server {
public:
    Server(const Options& o, specdec::LlamaModel& target, specdec::LlamaModel& draft,
           std::optional<specdec::Tokenizer> tokenizer, std::string model_name)
        : options_(o), tokenizer_(std::move(tokenizer)), model_name_(std::move(model_name)),
          limits_{target.vocab_size(), target.context_length(), o.draft_max},
          engine_(target, draft, metrics_, o.slots) {}

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
                                                  " (try POST /v1/completions, GET /v1/models, GET /health, GET /metrics)",
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
        std::printf("specdec-server: %s, %zu slots of %zu tokens; listening on http://%s:%d\n", model_name_.c_str(),
                    engine_.slots(), limits_.context, options_.host.c_str(), port);
        std::fflush(stdout);
        // SIGINT and SIGTERM only set a flag (all a signal handler may do);
        // this thread stops the listener, and the engine ends what still runs.
        std::thread watcher([this] {
            while (!stop_requested.load() && !listen_ended_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
            engine_.stop();
            http_.stop();
        });
        http_.listen_after_bind();
        listen_ended_.store(true);
        watcher.join();
        std::printf("specdec-server: stopped\n");
        return 0;
    }

    static inline std::atomic<bool> stop_requested{false};

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
            if (endpoint == Endpoint::chat)
                throw bad_request("chat needs the model's chat template, and this server has no chat template layer yet: "
                                  "format the conversation yourself and send it to /v1/completions",
                                  "messages");
            if (parsed.stream && parsed.options.logprobs.enabled)
                throw bad_request("'logprobs' with 'stream': true is not supported: ask without streaming", "logprobs");
            std::vector<specdec::Token> prompt = std::move(parsed.prompt_tokens);
            if (parsed.prompt_text) {
                if (!tokenizer_)
                    throw bad_request("this server has no tokenizer (--synthetic): send the prompt as an array of token ids",
                                      "prompt");
                prompt = tokenizer_->encode(*parsed.prompt_text);
                if (prompt.empty()) throw bad_request("'prompt' encodes to no tokens", "prompt");
            }
            if (prompt.size() >= limits_.context)
                throw ApiError{400, "the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                        std::to_string(limits_.context) + " (the prompt must leave room for a token)",
                               "prompt", "invalid_request_error", "context_length_exceeded"};
            if (tokenizer_ && tokenizer_->has_eos() && !parsed.ignore_eos) parsed.options.stop_tokens.push_back(tokenizer_->eos());
            Job job;
            job.prompt = std::move(prompt);
            job.options = parsed.options;
            job.mode = parsed.draft_max == std::optional<std::size_t>(0) ? DraftMode::off
                       : (parsed.seeded && !parsed.options.sampling.greedy()) ? DraftMode::fixed
                                                                             : DraftMode::adaptive;
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
            const std::string id = "cmpl-" + std::to_string(++next_id_);
            if (parsed.stream) {
                auto state = std::make_shared<StreamState>();
                state->channel = channel;
                state->id = id;
                state->model = model_name_;
                state->prompt = prompt_size;
                state->include_usage = parsed.include_usage;
                if (tokenizer_) state->text.emplace(*tokenizer_);
                res.set_header("Cache-Control", "no-cache");
                res.set_chunked_content_provider(
                    "text/event-stream",
                    [state](std::size_t, httplib::DataSink& sink) { return send_events(*state, sink); },
                    [state](bool) { if (!state->finished) state->channel->cancel(); });
                return;
            }
            std::optional<specdec::RequestResult> done;
            std::size_t seen = 0;
            while (!done) seen += channel->next(seen, std::chrono::milliseconds(200), done).size();
            respond(res, *done, id, prompt_size, parsed.options.logprobs.enabled);
        } catch (const ApiError& error) {
            send_error(res, error);
        }
    }

    // Sends what the request produced since the last call; false ends the stream.
    static bool send_events(StreamState& s, httplib::DataSink& sink) {
        std::optional<specdec::RequestResult> done;
        const std::vector<specdec::Token> fresh = s.channel->next(s.seen, std::chrono::milliseconds(100), done);
        s.seen += fresh.size();
        auto write = [&](const std::string& event) {
            if (sink.write(event.data(), event.size())) return true;
            s.channel->cancel();  // the client went away: the decoder drops the request within a step
            return false;
        };
        if (!fresh.empty()) {
            std::string text;
            if (s.text)
                for (const specdec::Token t : fresh) text += s.text->push(t);
            return write(completion_event(s.id, s.model, text, fresh, nullptr));
        }
        if (!done) return true;
        s.finished = true;
        if (done->status == specdec::RequestStatus::failed || done->status == specdec::RequestStatus::cancelled) {
            const ApiError error{done->status == specdec::RequestStatus::failed ? 500 : 503,
                                 done->status == specdec::RequestStatus::failed ? "decoding failed: " + done->error
                                                                                 : "the request was cancelled",
                                 {}, "server_error"};
            write(sse(error.body()));
            sink.done();
            return true;
        }
        const std::string tail = s.text ? s.text->flush() : std::string();
        if (!write(completion_event(s.id, s.model, tail, {}, finish_reason(done->generation)))) return false;
        if (s.include_usage) {
            const json chunk{{"id", s.id},          {"object", "text_completion"}, {"created", unix_now()},
                             {"model", s.model},    {"choices", json::array()},
                             {"usage", usage(s.prompt, done->generation.tokens.size())},
                             {"specdec", speculation(done->generation)}};
            if (!write(sse(chunk))) return false;
        }
        if (!write(kDone)) return false;
        sink.done();
        return true;
    }

    void respond(httplib::Response& res, const specdec::RequestResult& done, const std::string& id, std::size_t prompt,
                 bool logprobs) {
        if (done.status == specdec::RequestStatus::failed)
            throw ApiError{500, "decoding failed: " + done.error, {}, "server_error"};
        if (done.status == specdec::RequestStatus::cancelled)
            throw ApiError{503, "the request was cancelled (the server is stopping)", {}, "server_error"};
        const specdec::GenerationResult& g = done.generation;
        std::vector<specdec::Token> shown = g.tokens;
        if (g.stop_reason == specdec::StopReason::stop_token && !shown.empty()) shown.pop_back();
        const PieceOf piece = [this](specdec::Token t) {
            return tokenizer_ ? tokenizer_->decode(std::vector<specdec::Token>{t}) : std::to_string(t);
        };
        json choice{{"index", 0},
                    {"text", tokenizer_ ? tokenizer_->decode(shown) : std::string()},
                    {"tokens", g.tokens},
                    {"finish_reason", finish_reason(g)}};
        choice["logprobs"] = logprobs ? completion_logprobs(g, piece) : json(nullptr);
        const json body{{"id", id},       {"object", "text_completion"},
                        {"created", unix_now()}, {"model", model_name_},
                        {"choices", json::array({choice})}, {"usage", usage(prompt, g.tokens.size())},
                        {"specdec", speculation(g)}};
        res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }

    Options options_;
    std::optional<specdec::Tokenizer> tokenizer_;
    std::string model_name_;
    RequestLimits limits_;
    Metrics metrics_;
    Engine<specdec::LlamaModel, specdec::LlamaModel> engine_;
    httplib::Server http_;
    std::atomic<std::uint64_t> next_id_{0};
    std::atomic<bool> listen_ended_{false};
    socket_t listener_ = INVALID_SOCKET;
};

void on_signal(int) { Server::stop_requested.store(true); }

int run(const Options& o) {
    auto pool = std::make_shared<specdec::cpu::ThreadPool>(o.threads);
    if (o.synthetic) {
        specdec::SyntheticOptions synthetic{.size = o.synthetic_size, .max_context = o.context, .thread_pool = pool,
                                            .sequences = o.slots};
        specdec::SyntheticPair pair = specdec::make_synthetic_pair(synthetic);
        Server server(o, pair.target, pair.draft, std::nullopt, "synthetic-" + o.synthetic_size);
        return server.serve();
    }
    const auto file = specdec::gguf::File::open(o.target);
    std::optional<specdec::Tokenizer> tokenizer = specdec::Tokenizer::from_gguf(file);
    const specdec::LlamaOptions model_options{.max_context = o.context, .thread_pool = pool, .sequences = o.slots};
    specdec::LlamaModel target = specdec::LlamaModel::from_gguf(o.target, model_options);
    specdec::LlamaModel draft = specdec::LlamaModel::from_gguf(o.draft, model_options);
    Server server(o, target, draft, std::move(tokenizer), std::filesystem::path(o.target).stem().string());
    return server.serve();
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
