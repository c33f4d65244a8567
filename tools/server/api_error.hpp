#pragma once
// An error a request gets back: the HTTP status and OpenAI's error body
// ({"error": {"message", "type", "param", "code"}}), so that clients which
// read OpenAI's errors (the openai package raises BadRequestError etc.)
// show the message. `param` names the request field at fault, if one is.
#include <nlohmann/json.hpp>

#include <string>
#include <utility>

namespace specdec::server {

struct ApiError {
    int status = 400;
    std::string message;
    std::string param;  // empty: no field is at fault
    std::string type = "invalid_request_error";
    std::string code;   // empty: null

    [[nodiscard]] nlohmann::json body() const {
        nlohmann::json error{{"message", message}, {"type", type}};
        error["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
        error["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
        return nlohmann::json{{"error", std::move(error)}};
    }
};

[[nodiscard]] inline ApiError bad_request(std::string message, std::string param = {}) {
    return ApiError{400, std::move(message), std::move(param)};
}

}  // namespace specdec::server
