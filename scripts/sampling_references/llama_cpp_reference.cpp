// Writes the llama.cpp reference of the processed distribution: for each case
// of cases.py whose chain is "llama_cpp", the row's logits go through
// llama.cpp's own samplers (llama.h), in common_sampler's order: logit bias,
// penalties (fed the history with llama_sampler_accept), top-k, top-p, min-p,
// temperature. The probabilities are the softmax of the surviving candidates'
// logits, computed here in double: after the chain the candidates' `p` fields
// are stale (only top-p writes them, before the temperature), and llama.cpp's
// own final step, the dist sampler, computes exactly this softmax (float
// exponentials, double sum) before it draws; the program checks that the two
// agree.
//
//   llama_cpp_reference CASES.json OUT.json "<description of the llama.cpp build>"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <llama.h>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

float bias_value(const json& value) {
    if (value.is_string()) {
        if (value.get<std::string>() != "-inf") throw std::runtime_error("a bias string other than \"-inf\"");
        return -std::numeric_limits<float>::infinity();
    }
    return value.get<float>();
}

struct ChainDeleter {
    void operator()(llama_sampler* chain) const { llama_sampler_free(chain); }
};
using Chain = std::unique_ptr<llama_sampler, ChainDeleter>;

// common_sampler's chain (llama.cpp's common/sampling.cpp) for these options,
// without its final dist sampler.
Chain make_chain(const json& options, int32_t vocab, std::size_t history_length) {
    Chain chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
    std::vector<llama_logit_bias> biases;
    for (const json& entry : options.at("logit_bias"))
        biases.push_back({entry.at(0).get<int32_t>(), bias_value(entry.at(1))});
    if (!biases.empty())
        llama_sampler_chain_add(
            chain.get(), llama_sampler_init_logit_bias(vocab, static_cast<int32_t>(biases.size()), biases.data()));
    // The whole sequence (-1) is a window as long as the history; llama.cpp
    // itself reads a negative window as "disabled".
    const int64_t last_n = options.at("penalty_last_n").get<int64_t>();
    const int32_t window =
        last_n < 0 ? static_cast<int32_t>(std::max<std::size_t>(history_length, 1)) : static_cast<int32_t>(last_n);
    llama_sampler_chain_add(chain.get(),
                            llama_sampler_init_penalties(vocab, window, options.at("repeat_penalty").get<float>(),
                                                         options.at("frequency_penalty").get<float>(),
                                                         options.at("presence_penalty").get<float>()));
    // min_keep = 0, common_params_sampling's default.
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(options.at("top_k").get<int32_t>()));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(options.at("top_p").get<float>(), 0));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_min_p(options.at("min_p").get<float>(), 0));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(options.at("temperature").get<float>()));
    return chain;
}

struct Result {
    std::vector<double> probabilities;
    double dist_difference = 0.0;  // max |llama.cpp dist's p - ours|
};

Result run_case(const json& c) {
    const std::vector<float> logits = c.at("logits").get<std::vector<float>>();
    const std::vector<int32_t> history = c.at("history").get<std::vector<int32_t>>();
    const auto vocab = static_cast<int32_t>(logits.size());
    Chain chain = make_chain(c.at("options"), vocab, history.size());
    for (const int32_t token : history) llama_sampler_accept(chain.get(), token);

    std::vector<llama_token_data> candidates(logits.size());
    for (int32_t t = 0; t < vocab; ++t)
        candidates[static_cast<std::size_t>(t)] = {t, logits[static_cast<std::size_t>(t)], 0.0f};
    llama_token_data_array array{candidates.data(), candidates.size(), -1, false};
    llama_sampler_apply(chain.get(), &array);
    if (array.size == 0) throw std::runtime_error(c.at("name").get<std::string>() + ": no candidate left");

    float largest = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < array.size; ++i) largest = std::max(largest, array.data[i].logit);
    if (!std::isfinite(largest))
        throw std::runtime_error(c.at("name").get<std::string>() + ": no finite candidate left");
    Result result;
    result.probabilities.assign(logits.size(), 0.0);
    double total = 0.0;
    for (std::size_t i = 0; i < array.size; ++i) total += std::exp(double(array.data[i].logit) - double(largest));
    for (std::size_t i = 0; i < array.size; ++i)
        result.probabilities[static_cast<std::size_t>(array.data[i].id)] =
            std::exp(double(array.data[i].logit) - double(largest)) / total;

    // llama.cpp's own last step on the same candidates.
    std::unique_ptr<llama_sampler, ChainDeleter> dist(llama_sampler_init_dist(1234));
    llama_sampler_apply(dist.get(), &array);
    for (std::size_t i = 0; i < array.size; ++i)
        result.dist_difference = std::max(
            result.dist_difference,
            std::abs(double(array.data[i].p) - result.probabilities[static_cast<std::size_t>(array.data[i].id)]));
    return result;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: llama_cpp_reference CASES.json OUT.json \"<llama.cpp build>\"\n";
        return 2;
    }
    try {
        std::ifstream in(argv[1]);
        if (!in) throw std::runtime_error(std::string("cannot read ") + argv[1]);
        const json input = json::parse(in);
        json cases = json::array();
        double worst_dist = 0.0;
        for (const json& c : input.at("cases")) {
            if (c.at("chain") != "llama_cpp") continue;
            const Result result = run_case(c);
            worst_dist = std::max(worst_dist, result.dist_difference);
            json entry = c;
            entry["probabilities"] = result.probabilities;
            cases.push_back(std::move(entry));
        }
        if (worst_dist > 1e-6)
            throw std::runtime_error("llama.cpp's dist sampler disagrees with the softmax by " +
                                     std::to_string(worst_dist));
        json left_out = json::array();
        for (const json& entry : input.at("left_out"))
            if (entry.at(0).get<std::string>().rfind("llama_cpp/", 0) == 0) left_out.push_back(entry);
        const json output = {
            {"description",
             "The processed distribution of llama.cpp's sampler chain (common_sampler's order: logit bias, penalties, "
             "top-k, top-p, min-p, temperature; min_keep 0) for fixed logits rows, histories and settings, then the "
             "softmax of the surviving candidates. Written by scripts/sampling_references (see its README); do not "
             "edit by hand."},
            {"llama_cpp", argv[3]},
            {"seed", input.at("seed")},
            {"max_difference_from_llama_cpp_dist", worst_dist},
            {"left_out", left_out}};
        // One case a line: the file stays readable and its diffs small.
        std::ofstream out(argv[2]);
        std::string head = output.dump(1);
        head.erase(head.rfind('}'));
        while (!head.empty() && (head.back() == '\n' || head.back() == ' ')) head.pop_back();
        out << head << ",\n \"cases\": [\n";
        for (std::size_t i = 0; i < cases.size(); ++i)
            out << "  " << cases[i].dump() << (i + 1 < cases.size() ? ",\n" : "\n");
        out << " ]\n}\n";
        if (!out) throw std::runtime_error(std::string("cannot write ") + argv[2]);
        std::cerr << "llama_cpp_reference: " << cases.size() << " cases; llama.cpp's dist agrees within " << worst_dist
                  << '\n';
    } catch (const std::exception& e) {
        std::cerr << "llama_cpp_reference: " << e.what() << '\n';
        return 1;
    }
    return 0;
}
