#pragma once
// Which machine produced a report: timings mean nothing without it.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "specdec/platform/x86.hpp"

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

// Bytes per second that `threads` threads can stream from memory (a summing
// read of a 512 MiB buffer, far larger than any cache; best of three). It is
// the roofline of decoding: a one-token forward must stream every weight, so
// no implementation beats bandwidth / (bytes read per token) tokens/s.
[[nodiscard]] inline double measure_read_bandwidth(std::size_t threads) {
    constexpr std::size_t kFloats = std::size_t{128} << 20;  // 512 MiB
    [[maybe_unused]] constexpr std::size_t kPrefetchBytes = 16384;
    std::vector<float> buffer(kFloats, 1.0f);
    threads = std::max<std::size_t>(1, threads);
    std::vector<double> partial(threads);
    double best_seconds = 0.0;
    for (int attempt = 0; attempt < 3; ++attempt) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::thread> workers;
        for (std::size_t t = 0; t < threads; ++t) {
            workers.emplace_back([&, t] {
                const std::size_t begin = kFloats / threads * t, end = t + 1 == threads ? kFloats : kFloats / threads * (t + 1);
                float sums[16] = {};  // independent accumulators: the loop vectorises and stays memory-bound
                for (std::size_t i = begin; i + 16 <= end; i += 16) {
#if SPECDEC_X86
                    // Into L2 ahead of the reads, as the weight tiles do
                    // (weight_prefetch.hpp): the hardware prefetcher alone
                    // keeps fewer lines in flight than the memory can serve,
                    // and a roofline below what the kernels reach says nothing.
                    _mm_prefetch(reinterpret_cast<const char*>(buffer.data() + i) + kPrefetchBytes, _MM_HINT_T1);
#endif
                    for (int lane = 0; lane < 16; ++lane) sums[lane] += buffer[i + lane];
                }
                double total = 0.0;
                for (const float v : sums) total += v;
                partial[t] = total;
            });
        }
        for (auto& worker : workers) worker.join();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (attempt == 0 || seconds < best_seconds) best_seconds = seconds;
    }
    double checksum = 0.0;
    for (const double v : partial) checksum += v;
    // The checksum keeps the reads alive; it is kFloats when all went well.
    return checksum > 0.0 ? static_cast<double>(kFloats * sizeof(float)) / best_seconds : 0.0;
}

}  // namespace specdec::bench
