// 04: read a specdec-bench JSON report and print the best configuration.
//
//   specdec-bench --json report.json && 04_read_report report.json
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s REPORT.json (written by specdec-bench --json)\n", argv[0]);
        return 2;
    }
    std::ifstream file(argv[1]);
    if (!file) {
        std::fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    try {
        const nlohmann::json report = nlohmann::json::parse(file);
        const nlohmann::json& machine = report.at("machine");
        std::printf("machine: %s, %d threads, %s\n", machine.at("cpu").get<std::string>().c_str(),
                    machine.at("threads").get<int>(), machine.at("backend").get<std::string>().c_str());
        std::printf("target %s, draft %s\n", report.at("models").at("target").at("name").get<std::string>().c_str(),
                    report.at("models").at("draft").at("name").get<std::string>().c_str());

        const nlohmann::json* best = nullptr;
        for (const nlohmann::json& run : report.at("runs")) {
            if (run.at("method") != "speculative") continue;
            if (best == nullptr || run.at("speedup").get<double>() > best->at("speedup").get<double>()) best = &run;
        }
        if (best == nullptr) {
            std::printf("the report has no speculative run\n");
            return 0;
        }
        const nlohmann::json& b = *best;
        // draft_length is the number k, or "auto" where the decoder chose each
        // step's length (then draft_tokens is the most it could choose).
        const bool chosen = b.at("draft_length").is_string();
        const std::string drafts = (chosen ? "auto, at most " : "") + std::to_string(b.at("draft_tokens").get<int>()) +
                                   " draft tokens, " + b.at("rule").get<std::string>();
        std::printf("best: temperature %g, %s: %.2fx measured (%.2fx predicted, efficiency %.2f)\n",
                    b.at("temperature").get<double>(), drafts.c_str(), b.at("speedup").get<double>(),
                    b.at("predicted_speedup").get<double>(), b.at("efficiency").get<double>());
        std::printf("      %.1f tokens/s, acceptance %.2f, %.2f tokens per target pass, greedy match: %s\n",
                    b.at("tokens_per_second").get<double>(), b.at("acceptance_rate").get<double>(),
                    b.at("mean_tokens_per_target_pass").get<double>(),
                    b.at("greedy_match").is_null() ? "n/a (sampled)" : (b.at("greedy_match").get<bool>() ? "yes" : "NO"));
    } catch (const nlohmann::json::exception& error) {
        std::fprintf(stderr, "%s is not a specdec-bench report: %s\n", argv[1], error.what());
        return 1;
    }
}

// Expected output for the report of the default run (benchmarks/results/synthetic-100m-cpu.json):
//
// machine: AMD EPYC, 2 threads, cpu
// target synthetic-100m-F16-seed1, draft synthetic-100m-draft-early-exit-q8_0-seed1
// best: temperature 1, 4 draft tokens, block: 2.12x measured (2.22x predicted, efficiency 0.95)
//       318.5 tokens/s, acceptance 0.70, 3.65 tokens per target pass, greedy match: n/a (sampled)
//
// (The CTest smoke test reads a report of the "tiny" pair with 8 new tokens:
// runs of a millisecond, so its timings, and the "best" it finds, are noise.)
