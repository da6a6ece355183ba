// See cifar10.h. Every file's size and every label are checked before a byte is used, so a
// truncated download or a wrong file is an error with its path, never a silent mis-training.
#include "data/cifar10.h"

#include <cstdio>
#include <vector>

#include "core/error.h"

namespace mpt {

namespace {

struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
};

// Appends up to `records` records of `path` to samples/labels.
void read_batch_file(const std::string& path, int64_t records, std::vector<uint8_t>& samples,
                     std::vector<int32_t>& labels) {
    std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
    if (!file) fail(MPT_STATUS_IO_ERROR, "cannot open CIFAR-10 file " + path);
    if (std::fseek(file.get(), 0, SEEK_END) != 0) fail(MPT_STATUS_IO_ERROR, "cannot seek in " + path);
    const long size = std::ftell(file.get());
    if (size != kCifar10FileBytes)
        fail(MPT_STATUS_CORRUPT_DATA, path + " has " + std::to_string(size) + " bytes; a CIFAR-10 batch file has " +
                                          std::to_string(kCifar10FileBytes));
    std::rewind(file.get());
    std::vector<uint8_t> record(static_cast<size_t>(kCifar10Features + 1));
    for (int64_t r = 0; r < records; ++r) {
        if (std::fread(record.data(), 1, record.size(), file.get()) != record.size())
            fail(MPT_STATUS_IO_ERROR, "short read in " + path);
        if (record[0] > 9)
            fail(MPT_STATUS_CORRUPT_DATA, path + ": record " + std::to_string(r) + " has label " +
                                              std::to_string(record[0]) + ", outside 0..9");
        labels.push_back(record[0]);
        samples.insert(samples.end(), record.begin() + 1, record.end());
    }
}

}  // namespace

std::shared_ptr<Dataset> load_cifar10(std::shared_ptr<Context> context, const std::string& directory, bool train,
                                      int64_t limit) {
    require(limit >= 0, MPT_STATUS_INVALID_ARGUMENT, "limit must be >= 0");
    std::vector<std::string> files;
    if (train)
        for (int i = 1; i <= 5; ++i) files.push_back(directory + "/data_batch_" + std::to_string(i) + ".bin");
    else
        files.push_back(directory + "/test_batch.bin");
    int64_t wanted = static_cast<int64_t>(files.size()) * kCifar10RecordsPerFile;
    if (limit > 0 && limit < wanted) wanted = limit;

    std::vector<uint8_t> samples;
    std::vector<int32_t> labels;
    samples.reserve(static_cast<size_t>(wanted * kCifar10Features));
    labels.reserve(static_cast<size_t>(wanted));
    for (const std::string& path : files) {
        const int64_t remaining = wanted - static_cast<int64_t>(labels.size());
        if (remaining <= 0) break;
        read_batch_file(path, remaining < kCifar10RecordsPerFile ? remaining : kCifar10RecordsPerFile, samples, labels);
    }
    return Dataset::adopt_u8(std::move(context), std::move(samples), std::move(labels), kCifar10Features, 10,
                             1.0f / 255.0f, 0.0f);
}

}  // namespace mpt
