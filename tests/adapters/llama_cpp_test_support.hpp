#pragma once
// Shared by the llama.cpp adapter's tests: where the models are, llama.cpp's
// own greedy loop as the reference, the synthetic pair written as GGUF files,
// a vocabulary window that makes a real model small enough for the sequence
// chi-square harness, and an RPC server process that cannot outlive its test.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <llama.h>
#include <nlohmann/json.hpp>

#include "../../benchmarks/gguf_export.hpp"
#include "specdec/adapters/llama_cpp.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/exactness_harness.hpp"
#include "support/fixtures.hpp"

namespace specdec::test::llama_cpp {

// Small contexts keep the KV caches (and the tests) small; the fixtures'
// prompts and generations fit. One thread: the test models are tiny, and
// llama.cpp's threads wait for each other by spinning, which on a loaded
// two-core machine made a pass ~30x slower with two threads than with one.
inline LlamaCppOptions small_options(std::size_t sequences = 1, std::size_t context = 256) {
    return {.max_context = context, .sequences = sequences, .threads = 1, .threads_batch = 1, .gpu_layers = 0, .rpc_servers = {}};
}

inline std::filesystem::path repo_fixture(const std::string& name) {
    return std::filesystem::path(SPECDEC_REPO_FIXTURES) / name;
}

// The greedy references recorded from llama.cpp's own tool (llama-simple):
// tests/fixtures/llama_cpp_greedy.reference.json, which says how.
inline nlohmann::json greedy_references() {
    std::ifstream in(repo_fixture("llama_cpp_greedy.reference.json"));
    if (!in) throw std::runtime_error("tests/fixtures/llama_cpp_greedy.reference.json is missing");
    return nlohmann::json::parse(in);
}

// llama.cpp's plain greedy loop, written directly on llama.h in a fresh
// context of its own (no adapter): the prompt in one batch, then one token
// per llama_decode, each the argmax of the last row (ties to the lowest id,
// like llama.cpp's greedy sampler), stopping after an end-of-generation token
// (included) or after `max_new` tokens. This is the loop llama-simple runs.
inline std::vector<Token> plain_greedy(const std::filesystem::path& gguf, const std::vector<Token>& prompt,
                                       std::size_t max_new) {
    specdec::llama_cpp::ensure_backend();
    llama_model_params model_params = llama_model_default_params();
    ggml_backend_dev_t no_devices[] = {nullptr};
    model_params.devices = no_devices;
    model_params.n_gpu_layers = 0;
    std::unique_ptr<llama_model, decltype(&llama_model_free)> model(llama_model_load_from_file(gguf.c_str(), model_params),
                                                                    &llama_model_free);
    if (!model) throw std::runtime_error("plain_greedy: cannot load " + gguf.string());
    llama_context_params params = llama_context_default_params();
    params.n_ctx = static_cast<std::uint32_t>(prompt.size() + max_new + 8);
    params.n_batch = static_cast<std::uint32_t>(std::max<std::size_t>(prompt.size(), 1));
    params.n_threads = params.n_threads_batch = 1;
    std::unique_ptr<llama_context, decltype(&llama_free)> context(llama_init_from_model(model.get(), params), &llama_free);
    if (!context) throw std::runtime_error("plain_greedy: cannot create a context");
    const llama_vocab* vocab = llama_model_get_vocab(model.get());
    const int vocab_size = llama_vocab_n_tokens(vocab);
    std::vector<Token> out;
    std::vector<Token> feed = prompt;
    while (out.size() < max_new) {
        llama_batch batch = llama_batch_get_one(feed.data(), static_cast<std::int32_t>(feed.size()));
        if (llama_decode(context.get(), batch) != 0) throw std::runtime_error("plain_greedy: llama_decode failed");
        const float* row = llama_get_logits_ith(context.get(), -1);
        const Token next = static_cast<Token>(std::max_element(row, row + vocab_size) - row);
        out.push_back(next);
        if (llama_vocab_is_eog(vocab, next)) break;
        feed = {next};
    }
    return out;
}

// The text llama.cpp's tools print for generated tokens (special tokens rendered).
inline std::string printed_text(const LlamaCppModel& model, std::span<const Token> tokens) {
    std::string text;
    char buffer[256];
    for (const Token t : tokens) {
        const int n = llama_token_to_piece(model.vocabulary(), t, buffer, sizeof buffer, 0, true);
        if (n < 0) throw std::runtime_error("llama_token_to_piece failed");
        text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
}

// A temporary folder removed with its files at the end of the test.
class TempFolder {
public:
    explicit TempFolder(const std::string& tag)
        : path_(std::filesystem::temp_directory_path() /
                ("specdec-llama-cpp-" + tag + "-" + std::to_string(::getpid()))) {
        std::filesystem::create_directories(path_);
    }
    ~TempFolder() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempFolder(const TempFolder&) = delete;
    TempFolder& operator=(const TempFolder&) = delete;
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

// The tiny synthetic pair (target and its early-exit Q8_0 draft) written as
// GGUF files by specdec-bench's exporter: target.gguf and draft.gguf.
struct ExportedPair {
    std::filesystem::path target, draft;
};
inline ExportedPair export_synthetic_pair(const std::filesystem::path& folder, std::uint64_t seed = 3,
                                          SyntheticDraftKind kind = SyntheticDraftKind::early_exit_q8) {
    SyntheticPair pair = make_synthetic_pair({.size = "tiny", .seed = seed, .threads = 2}, kind);
    ExportedPair files{folder / "target.gguf", folder / "draft.gguf"};
    bench::write_llama_gguf(pair.target.weights(), "synthetic-target", files.target);
    bench::write_llama_gguf(pair.draft.weights(), "synthetic-draft", files.draft);
    return files;
}

// A model seen through `count` consecutive token ids starting at `first`:
// token t of the window is the model's token first + t, and each logits row
// is the model's row restricted to the window (a strided view, no copy).
// Everything else (the cache, its rollback, the rows of a pass) is the
// model's own. It makes a real vocabulary small enough for the sequence
// chi-square harness, which enumerates every sequence.
template <class Model>
class VocabularyWindow {
public:
    VocabularyWindow(Model& model, Token first, std::size_t count) : model_(&model), first_(first), count_(count) {}
    std::size_t vocab_size() const { return count_; }
    std::size_t context_length() const { return model_->context_length(); }
    std::size_t cached_tokens() const { return model_->cached_tokens(); }
    void truncate(std::size_t n) { model_->truncate(n); }
    LogitsView forward(std::span<const Token> tokens) { return window(model_->forward(shifted(tokens))); }
    LogitsView forward_last(std::span<const Token> tokens) { return window(model_->forward_last(shifted(tokens))); }
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents)
        requires TreeLM<Model>
    {
        return window(model_->forward_tree(shifted(tokens), parents));
    }
    void commit_tree(std::span<const std::int32_t> path)
        requires TreeLM<Model>
    {
        model_->commit_tree(path);
    }

    // The window's logits after `prefix` from a fresh pass of the whole prefix.
    std::vector<float> logits_after(std::span<const Token> prefix) {
        model_->truncate(0);
        const LogitsView rows = forward_last(prefix);
        const auto row = rows.last_row();
        std::vector<float> out(row.begin(), row.end());
        model_->truncate(0);
        return out;
    }

private:
    std::span<const Token> shifted(std::span<const Token> tokens) {
        shifted_.assign(tokens.begin(), tokens.end());
        for (Token& t : shifted_) {
            if (t < 0 || static_cast<std::size_t>(t) >= count_) throw Error("vocabulary window: token outside the window");
            t += first_;
        }
        return shifted_;
    }
    LogitsView window(LogitsView view) const {
        return LogitsView{view.data + first_, view.rows, count_, view.row_stride};
    }

    Model* model_;
    Token first_;
    std::size_t count_;
    std::vector<Token> shifted_;
};

// The sequence chi-square setup for a model seen through a VocabularyWindow
// of `window` tokens: the prompt {0, 2, 1}, sequences of draft_tokens + 1
// tokens, and as the reference the window's row after each prefix from a
// fresh pass over the whole prefix (no rollback involved).
template <class Model>
ExactnessSetup window_exactness_setup(VocabularyWindow<Model>& target, std::size_t window, std::size_t draft_tokens,
                                      const SamplingOptions& sampling, const std::string& name, std::size_t samples) {
    return {.name = name,
            .prompt = {0, 2, 1},
            .vocab = window,
            .length = draft_tokens + 1,
            .draft_tokens = draft_tokens,
            .samples = samples,
            .target = [&target, sampling](std::span<const Token> prefix) {
                return reference_distribution(target.logits_after(prefix), sampling);
            }};
}

// A port of 127.0.0.1 that nothing listens on (at the time of the call).
inline int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        if (fd >= 0) ::close(fd);
        throw std::runtime_error("no free port on 127.0.0.1");
    }
    ::close(fd);
    return ntohs(address.sin_port);
}

// llama.cpp's RPC server as a child process on 127.0.0.1 and a free port,
// stopped (SIGTERM, then SIGKILL) when the object goes, also when the test
// fails; on Linux it also dies with the test process.
class RpcServer {
public:
    explicit RpcServer(const std::string& binary) {
        port_ = free_loopback_port();
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
#ifdef __linux__
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
            // The server's own log would interleave with the test's output.
            const int null = ::open("/dev/null", O_WRONLY);
            if (null >= 0) {
                ::dup2(null, STDOUT_FILENO);
                ::dup2(null, STDERR_FILENO);
            }
            const std::string port = std::to_string(port_);
            ::execl(binary.c_str(), binary.c_str(), "-H", "127.0.0.1", "-p", port.c_str(), "-t", "1",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
        wait_until_listening();
    }
    ~RpcServer() { stop(); }
    RpcServer(const RpcServer&) = delete;
    RpcServer& operator=(const RpcServer&) = delete;

    [[nodiscard]] std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 50; ++i) {
            if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }

private:
    void wait_until_listening() {
        for (int i = 0; i < 250; ++i) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                throw std::runtime_error("the RPC server exited at start (status " + std::to_string(status) + ")");
            }
            const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in address{};
            address.sin_family = AF_INET;
            address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            address.sin_port = htons(static_cast<std::uint16_t>(port_));
            const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
            ::close(fd);
            if (up) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        stop();
        throw std::runtime_error("the RPC server did not listen within 5 s");
    }

    pid_t pid_ = -1;
    int port_ = 0;
};

}  // namespace specdec::test::llama_cpp
