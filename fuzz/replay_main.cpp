// Runs a libFuzzer target over saved inputs without libFuzzer, so every build (gcc included) compiles
// the fuzz targets and ctest replays their corpora: the seeds and every crash kept as regress-*.
// A target reports a bad outcome by aborting, which fails the test; so does an empty corpus, which
// would otherwise pass without running anything.
//
//   fuzz_replay_<name> DIR|FILE ...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::filesystem::path> inputs_under(const std::filesystem::path& path) {
    std::vector<std::filesystem::path> inputs;
    if (std::filesystem::is_directory(path)) {
        for (const auto& entry : std::filesystem::directory_iterator(path))
            if (entry.is_regular_file()) inputs.push_back(entry.path());
        std::sort(inputs.begin(), inputs.end());  // a fixed order, so a failure repeats
    } else if (std::filesystem::is_regular_file(path)) {
        inputs.push_back(path);
    }
    return inputs;
}

}  // namespace

int main(int argc, char** argv) {
    size_t replayed = 0;
    for (int i = 1; i < argc; ++i) {
        const std::vector<std::filesystem::path> inputs = inputs_under(argv[i]);
        if (inputs.empty()) {
            std::fprintf(stderr, "%s: no inputs under %s\n", argv[0], argv[i]);
            return 1;
        }
        for (const std::filesystem::path& input : inputs) {
            std::ifstream file(input, std::ios::binary);
            const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
            if (!file.good() && !file.eof()) {
                std::fprintf(stderr, "%s: cannot read %s\n", argv[0], input.c_str());
                return 1;
            }
            std::printf("replaying %s (%zu bytes)\n", input.c_str(), bytes.size());
            std::fflush(stdout);  // the name is on record if the input aborts
            LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
            ++replayed;
        }
    }
    if (replayed == 0) {
        std::fprintf(stderr, "usage: %s DIR|FILE ...\n", argv[0]);
        return 1;
    }
    std::printf("%zu inputs replayed\n", replayed);
    return 0;
}
