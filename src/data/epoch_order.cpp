// See epoch_order.h.
#include "data/epoch_order.h"

#include <algorithm>
#include <numeric>

namespace mpt {

void make_epoch_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed, std::vector<uint64_t>& keys) {
    std::iota(order, order + rows, 0);
    if (!shuffle) return;
    keys.resize(static_cast<size_t>(rows));
    for (int64_t row = 0; row < rows; ++row)
        keys[static_cast<size_t>(row)] = epoch_order_key(seed, static_cast<uint64_t>(row));
    std::sort(order, order + rows, [&](int32_t a, int32_t b) {
        return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
    });
}

}  // namespace mpt
