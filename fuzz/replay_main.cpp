// Replays inputs through a fuzz target without libFuzzer: every file named on
// the command line, and every file under a named directory (in sorted
// order), is passed once to LLVMFuzzerTestOneInput. The test build links each
// target with this driver and replays the committed corpora (fuzz/corpus/)
// under its own sanitizers, so the targets compile with every build and
// their seeds stay regression tests; scripts/fuzz.sh fuzzes with libFuzzer.
//
// Exit status: 0 when every input ran, 2 when there was nothing to read; a
// violated property aborts (see fuzz_support.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
    std::vector<std::filesystem::path> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::filesystem::path path = argv[i];
        if (std::filesystem::is_directory(path)) {
            for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
                if (entry.is_regular_file()) inputs.push_back(entry.path());
            }
        } else {
            inputs.push_back(path);
        }
    }
    std::sort(inputs.begin(), inputs.end());
    if (inputs.empty()) {
        std::fprintf(stderr, "usage: %s FILE_OR_DIRECTORY...  (no input files found)\n", argv[0]);
        return 2;
    }
    for (const auto& path : inputs) {
        std::ifstream file(path, std::ios::binary);
        if (!file) {
            std::fprintf(stderr, "cannot read %s\n", path.c_str());
            return 2;
        }
        const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
        std::printf("%s: %zu bytes\n", path.c_str(), bytes.size());
        std::fflush(stdout);  // the input that aborts is the last one printed
        (void)LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("replayed %zu inputs\n", inputs.size());
    return 0;
}
