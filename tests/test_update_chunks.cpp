// The update kernel's share of a layer among its threads (src/backend/cuda/update_chunk_layout.h),
// checked on the CPU, where every build runs it: the launch's chunk counts and each chunk's place
// from the header, walked as the kernel's two loops walk them (plain SGD two chunks a stride apart
// per pass, then one; the other optimizers one at a time), and every weight and bias element
// required to be updated exactly once, whole chunks four at once and the rest one by one, for
// aligned and unaligned groups and grids from one block to many more than the chunks. The kernel's
// arithmetic runs only on a GPU (test_cuda_ops compares it with the CPU backend there).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/update_chunk_layout.h"

using namespace mpt::update_chunks;

namespace {

struct Group {  // the fields place_chunk reads, as the kernel's DeviceGroup has them
    int64_t count;
    int64_t first_chunk;
    bool vectorised;
};

struct Updates {
    std::vector<int> weights, bias;
    int64_t four_at_once = 0;  // whole chunks
    int64_t misplaced = 0;     // elements outside their group
};

void update_element(std::vector<int>& elements, int64_t i, Updates& updates) {
    if (i < 0 || i >= static_cast<int64_t>(elements.size())) {
        ++updates.misplaced;
        return;
    }
    ++elements[static_cast<size_t>(i)];
}

void update_chunk(const Group (&groups)[2], const ChunkPlace& place, Updates& updates) {
    std::vector<int>& elements = place.group == 0 ? updates.weights : updates.bias;
    const int64_t count = groups[place.group].count;
    if (place.whole) {
        ++updates.four_at_once;
        for (int64_t i = place.first; i < place.first + kChunkElements; ++i) update_element(elements, i, updates);
        return;
    }
    const int64_t last = place.first + 4 < count ? place.first + 4 : count;  // as the kernel's update_chunk
    for (int64_t i = place.first; i < last; ++i) update_element(elements, i, updates);
}

void check_update(int64_t weight_count, int64_t bias_count, bool weights_vectorised, bool bias_vectorised,
                  int64_t threads, bool plain_sgd) {
    CAPTURE(weight_count);
    CAPTURE(bias_count);
    CAPTURE(threads);
    CAPTURE(plain_sgd);
    // As run_dense_update builds the launch.
    const int64_t weight_chunks = chunks(weight_count);
    const Group groups[2] = {{weight_count, 0, weights_vectorised}, {bias_count, weight_chunks, bias_vectorised}};
    const int64_t total_chunks = weight_chunks + chunks(bias_count);
    Updates updates;
    updates.weights.assign(static_cast<size_t>(weight_count), 0);
    updates.bias.assign(static_cast<size_t>(bias_count), 0);
    const int64_t stride = threads;
    for (int64_t thread = 0; thread < threads; ++thread) {
        int64_t chunk = thread;
        if (plain_sgd) {
            for (; chunk + stride < total_chunks; chunk += 2 * stride) {
                update_chunk(groups, place_chunk(groups, chunk), updates);
                update_chunk(groups, place_chunk(groups, chunk + stride), updates);
            }
        }
        for (; chunk < total_chunks; chunk += stride) update_chunk(groups, place_chunk(groups, chunk), updates);
    }
    CHECK(updates.misplaced == 0);
    int64_t wrong = 0;
    for (int count : updates.weights) wrong += count != 1;
    for (int count : updates.bias) wrong += count != 1;
    CHECK(wrong == 0);
    // Every chunk but a group's last is whole where the group allows 16-byte accesses.
    const int64_t expected_whole =
        (weights_vectorised ? weight_count / kChunkElements : 0) + (bias_vectorised ? bias_count / kChunkElements : 0);
    CHECK(updates.four_at_once == expected_whole);
}

}  // namespace

TEST_CASE("the update kernel updates every element of the seed MLP's layers once") {
    const int64_t layers[][2] = {{3000 * 3072, 3000}, {1000 * 3000, 1000}, {16 * 1000, 16}};
    for (const auto& layer : layers)
        for (int64_t threads : {256, 256 * 132 * 8})  // one block; an H200's max_blocks of 256 threads
            for (bool plain_sgd : {true, false}) check_update(layer[0], layer[1], true, true, threads, plain_sgd);
}

TEST_CASE("the update kernel updates every element once for odd counts, unaligned groups and any grid") {
    const int64_t counts[][2] = {{1, 1}, {3, 1}, {4, 4}, {5, 3}, {13 * 45, 13}, {3001 * 2000, 3001}, {7, 31}, {33, 33}};
    for (const auto& count : counts)
        for (int64_t threads : {1, 2, 3, 7, 256, 1000, 1 << 20})
            for (int vectorised = 0; vectorised < 4; ++vectorised)
                for (bool plain_sgd : {true, false})
                    check_update(count[0], count[1], vectorised & 1, vectorised & 2, threads, plain_sgd);
}
