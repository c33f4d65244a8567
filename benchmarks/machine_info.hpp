#pragma once
// Which machine produced a report: timings mean nothing without it.
#include <cstddef>
#include <fstream>
#include <string>
#include <thread>

namespace specdec::bench {

// The CPU model name from /proc/cpuinfo ("model name" on x86, "Model"/"CPU part" elsewhere), or "unknown".
[[nodiscard]] inline std::string cpu_model_name(const std::string& cpuinfo_path = "/proc/cpuinfo") {
    std::ifstream file(cpuinfo_path);
    std::string line;
    std::string fallback;
    while (std::getline(file, line)) {
        const std::size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = line.substr(0, colon);
        while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(value.begin());
        if (value.empty()) continue;
        if (key == "model name") return value;
        if (fallback.empty() && (key == "Model" || key == "Hardware" || key == "cpu model")) fallback = value;
    }
    return fallback.empty() ? "unknown" : fallback;
}

// The 1-minute load average from /proc/loadavg (negative when unknown). A
// load above the thread count means other processes shared the cores and
// every timing in the report is inflated and noisier.
[[nodiscard]] inline double load_average(const std::string& loadavg_path = "/proc/loadavg") {
    std::ifstream file(loadavg_path);
    double one_minute = -1.0;
    if (!(file >> one_minute)) return -1.0;
    return one_minute;
}

[[nodiscard]] inline std::size_t hardware_threads() {
    const unsigned count = std::thread::hardware_concurrency();
    return count == 0 ? 1 : count;
}

}  // namespace specdec::bench
