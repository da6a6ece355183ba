// Reads the CIFAR-10 binary release (data_batch_1..5.bin, test_batch.bin): records of one label byte
// and 3072 pixel bytes (red, green, blue planes of 32x32), validated file by file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/dataset.h"

namespace mpt {

constexpr int64_t kCifar10Features = 3072;
constexpr int64_t kCifar10RecordsPerFile = 10000;
constexpr int64_t kCifar10FileBytes = kCifar10RecordsPerFile * (kCifar10Features + 1);

std::shared_ptr<Dataset> load_cifar10(std::shared_ptr<Context> context, const std::string& directory, bool train,
                                      int64_t limit);

}  // namespace mpt
