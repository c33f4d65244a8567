#pragma once
// Process-wide llama.cpp state the adapter needs: the backend initialised
// once, llama.cpp's logging kept off the terminal (its errors reach the user
// through the adapter's exceptions instead), and the RPC devices of remote
// ggml-rpc-server processes.
//
// Logging: llama.cpp prints hundreds of lines per model load. They are
// dropped, except that the most recent error lines are kept so that an
// exception can quote what llama.cpp itself said (a model that failed to load
// says why only in its log). SPECDEC_LLAMA_LOG=1 in the environment passes
// everything through to stderr instead, for debugging.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#define SPECDEC_LLAMA_CPP_CAN_PROBE_ENDPOINTS 1
#endif

#include <llama.h>

#include "specdec/core/error.hpp"

namespace specdec::llama_cpp {

namespace detail {

struct LogState {
    std::mutex mutex;
    std::string recent_errors;      // the error lines since the last take_recent_errors()
    bool in_error = false;          // a CONT line continues the previous line's level
    bool pass_through = false;
};

inline LogState& log_state() {
    static LogState state;
    return state;
}

inline void log_callback(ggml_log_level level, const char* text, void* /*user_data*/) {
    LogState& state = log_state();
    if (state.pass_through) {
        std::fputs(text, stderr);
        return;
    }
    std::lock_guard lock(state.mutex);
    if (level != GGML_LOG_LEVEL_CONT) state.in_error = level == GGML_LOG_LEVEL_ERROR;
    if (!state.in_error || text == nullptr) return;
    state.recent_errors += text;
    // Only the tail matters (the last failure); keep the buffer bounded.
    constexpr std::size_t kKeep = 2000;
    if (state.recent_errors.size() > 2 * kKeep) state.recent_errors.erase(0, state.recent_errors.size() - kKeep);
}

}  // namespace detail

// Initialises the llama.cpp backend and installs the logger, once per process.
inline void ensure_backend() {
    static std::once_flag once;
    std::call_once(once, [] {
        const char* verbose = std::getenv("SPECDEC_LLAMA_LOG");
        detail::log_state().pass_through = verbose != nullptr && *verbose != '\0' && std::string_view(verbose) != "0";
        llama_log_set(detail::log_callback, nullptr);
        llama_backend_init();
    });
}

// What llama.cpp logged at error level since the last call (trimmed), and
// forgets it: appended to the adapter's messages as "llama.cpp: ...".
inline std::string take_recent_errors() {
    detail::LogState& state = detail::log_state();
    std::lock_guard lock(state.mutex);
    std::string errors;
    errors.swap(state.recent_errors);
    while (!errors.empty() && (errors.back() == '\n' || errors.back() == ' ')) errors.pop_back();
    for (char& c : errors)
        if (c == '\n') c = ';';
    return errors;
}

// " (llama.cpp: <its last errors>)" or "" when it logged none.
inline std::string recent_errors_suffix() {
    const std::string errors = take_recent_errors();
    return errors.empty() ? std::string() : " (llama.cpp: " + errors + ")";
}

// Whether a TCP connection to "host:port" can be opened. llama.cpp's RPC
// client aborts the whole process when it cannot connect, so the adapter
// asks first and throws instead. (Where this is not implemented it says yes.)
inline bool endpoint_reachable(const std::string& endpoint) {
#ifdef SPECDEC_LLAMA_CPP_CAN_PROBE_ENDPOINTS
    const std::size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos) return false;
    std::string host = endpoint.substr(0, colon);
    const std::string port = endpoint.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
    bool reachable = false;
    for (addrinfo* a = found; a != nullptr && !reachable; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        reachable = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        ::close(fd);
    }
    ::freeaddrinfo(found);
    return reachable;
#else
    (void)endpoint;
    return true;
#endif
}

// The devices of the RPC servers at `endpoints` ("host:port" each), in order,
// for llama_model_params::devices. The devices are not added to ggml's global
// registry, so that models loaded later without RPC servers stay local.
inline std::vector<ggml_backend_dev_t> rpc_devices(const std::vector<std::string>& endpoints) {
    ensure_backend();
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    if (rpc == nullptr) {
        ggml_backend_load_all();  // a build with dynamically loaded backends
        rpc = ggml_backend_reg_by_name("RPC");
    }
    if (rpc == nullptr) {
        throw Error("llama.cpp was built without its RPC backend (GGML_RPC=ON): cannot use RPC servers");
    }
    using AddServer = ggml_backend_reg_t (*)(const char* endpoint);
    auto add_server = reinterpret_cast<AddServer>(ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server"));
    if (add_server == nullptr) {
        throw Error("llama.cpp's RPC backend has no ggml_backend_rpc_add_server: this llama.cpp version is not supported");
    }
    std::vector<ggml_backend_dev_t> devices;
    for (const std::string& endpoint : endpoints) {
        if (endpoint.find(':') == std::string::npos) {
            throw Error("RPC server '" + endpoint + "': expected host:port");
        }
        if (!endpoint_reachable(endpoint)) {
            throw Error("RPC server " + endpoint + ": cannot connect (is ggml-rpc-server running there and reachable?)");
        }
        ggml_backend_reg_t server = add_server(endpoint.c_str());
        const std::size_t count = server == nullptr ? 0 : ggml_backend_reg_dev_count(server);
        if (count == 0) {
            throw Error("RPC server " + endpoint + " offers no device (is ggml-rpc-server running there?)" +
                        recent_errors_suffix());
        }
        for (std::size_t i = 0; i < count; ++i) devices.push_back(ggml_backend_reg_dev_get(server, i));
    }
    return devices;
}

}  // namespace specdec::llama_cpp
