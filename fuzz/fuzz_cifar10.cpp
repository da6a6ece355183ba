// libFuzzer target for the CIFAR-10 loader: the input becomes a test_batch.bin (its first byte picks
// an exact-size file built from the rest, or the raw bytes at whatever size), loaded with a limit the
// input also picks. Any input must load or fail with IO_ERROR / CORRUPT_DATA, and a loaded set must
// hold only labels 0..9.
// fuzz-options: -max_len=8192
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/cifar10.h"

namespace {

const std::string& directory() {
    static const std::string path = [] {
        char pattern[] = "/tmp/mptrain-fuzz-cifar-XXXXXX";
        return std::string(mkdtemp(pattern));
    }();
    return path;
}

std::shared_ptr<mpt::Context> context() {
    static const std::shared_ptr<mpt::Context> shared = [] {
        mpt::ContextConfig config;
        config.backend = MPT_BACKEND_CPU;
        config.threads = 1;
        return std::make_shared<mpt::Context>(config);
    }();
    return shared;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 3) return 0;
    const bool exact_size = data[0] & 1;
    const int64_t limit = data[1] % 4 == 0 ? 0 : data[2] * 7;
    std::vector<uint8_t> file;
    if (exact_size) {
        // A well-sized file whose records repeat the input: labels and pixels come from the fuzzer.
        file.resize(static_cast<size_t>(mpt::kCifar10FileBytes));
        // Filled by doubling memcpy: a byte loop over 30 MB under coverage instrumentation cost
        // seconds per input.
        const size_t body = std::min(size - 3, file.size());
        if (body > 0) {
            std::memcpy(file.data(), data + 3, body);
            for (size_t filled = body; filled < file.size(); filled *= 2)
                std::memcpy(file.data() + filled, file.data(), std::min(filled, file.size() - filled));
        }
    } else {
        file.assign(data + 3, data + size);
    }
    const std::string path = directory() + "/test_batch.bin";
    std::FILE* out = std::fopen(path.c_str(), "wb");
    if (!out) std::abort();
    if (!file.empty() && std::fwrite(file.data(), 1, file.size(), out) != file.size()) std::abort();
    std::fclose(out);
    try {
        auto dataset = mpt::load_cifar10(context(), directory(), false, limit);
        for (int64_t row = 0; row < dataset->rows(); ++row)
            if (dataset->labels()[row] < 0 || dataset->labels()[row] > 9) std::abort();
        if (dataset->features() != mpt::kCifar10Features) std::abort();
    } catch (const mpt::Error& error) {
        if (error.status() != MPT_STATUS_CORRUPT_DATA && error.status() != MPT_STATUS_IO_ERROR) std::abort();
    }
    return 0;
}
