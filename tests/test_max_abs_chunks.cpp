// How the max_abs kernel shares a pass's tensors among its blocks (src/backend/cuda/
// max_abs_chunk_layout.h), checked on the CPU, where every build runs it: the launch's chunk prefix
// built as run_max_abs builds it, walked as max_abs_kernel walks it (block b's chunks b, b + blocks,
// ...; a thread's 4 units a chunk; the tail in the tensor's last chunk), and every element of every
// tensor required to be read exactly once, by a block counting it towards its own tensor, for
// vectorised and element-wise tensors, empty ones, tails alone, and grids from one block to more
// than the chunks. The kernel's arithmetic runs only on a GPU (test_cuda_ops compares it with the
// CPU backend there).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/max_abs_chunk_layout.h"

using namespace mpt::max_abs_chunks;

namespace {

struct Tensor {
    int64_t count;
    int unit_elements;  // 1, 4 (fp32 vectors) or 8 (16-bit vectors)
};

struct Reads {
    std::vector<std::vector<int>> elements;  // [tensor][element]: times read
    int64_t wrong_tensor = 0;                // read by a block counting it towards another tensor
    int64_t backwards = 0;                   // a block's tensor going back (its running max would be lost)
    int64_t outside = 0;                     // past a tensor's end
};

void read_element(Reads& reads, int owner, int counted_as, int64_t element) {
    std::vector<int>& elements = reads.elements[static_cast<size_t>(owner)];
    if (element < 0 || element >= static_cast<int64_t>(elements.size())) {
        ++reads.outside;
        return;
    }
    ++elements[static_cast<size_t>(element)];
    if (owner != counted_as) ++reads.wrong_tensor;
}

Reads walk(const std::vector<Tensor>& tensors, int64_t blocks) {
    const int count = static_cast<int>(tensors.size());
    std::vector<int64_t> first_chunk(tensors.size() + 1, 0);  // as run_max_abs builds it
    for (int k = 0; k < count; ++k)
        first_chunk[static_cast<size_t>(k) + 1] =
            first_chunk[static_cast<size_t>(k)] +
            chunks(tensors[static_cast<size_t>(k)].count, tensors[static_cast<size_t>(k)].unit_elements);
    Reads reads;
    for (const Tensor& tensor : tensors) reads.elements.emplace_back(static_cast<size_t>(tensor.count), 0);
    const int64_t total = first_chunk[static_cast<size_t>(count)];
    for (int64_t block = 0; block < blocks; ++block) {
        int tensor = 0;  // as the kernel's walk: the block's running tensor
        for (int64_t chunk = block; chunk < total; chunk += blocks) {
            const int next = tensor_of_chunk(first_chunk.data(), count, chunk, tensor);
            if (next < tensor) ++reads.backwards;
            tensor = next;
            // Which tensor the chunk really belongs to, found without the header's search.
            int owner = 0;
            while (chunk >= first_chunk[static_cast<size_t>(owner) + 1]) ++owner;
            const Tensor& shape = tensors[static_cast<size_t>(owner)];
            const int64_t local = chunk - first_chunk[static_cast<size_t>(tensor)];
            const int64_t tensor_units = units(shape.count, shape.unit_elements);
            for (int thread = 0; thread < kThreads; ++thread) {
                for (int j = 0; j < kUnitsPerThread; ++j) {
                    const int64_t unit = local * kChunkUnits + thread + int64_t{j} * kThreads;
                    if (unit >= tensor_units) continue;
                    for (int e = 0; e < shape.unit_elements; ++e)
                        read_element(reads, owner, tensor, unit * shape.unit_elements + e);
                }
                const int64_t tail = tail_first(shape.count, shape.unit_elements) + thread;
                if (tail < shape.count && local + 1 == chunks(shape.count, shape.unit_elements))
                    read_element(reads, owner, tensor, tail);
            }
        }
    }
    return reads;
}

void check_pass(const std::vector<Tensor>& tensors) {
    int64_t total = 0;
    for (const Tensor& tensor : tensors) total += chunks(tensor.count, tensor.unit_elements);
    for (const int64_t blocks :
         {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, total > 0 ? total : 1, total + 5, int64_t{1056}}) {
        CAPTURE(blocks);
        const Reads reads = walk(tensors, blocks);
        CHECK(reads.wrong_tensor == 0);
        CHECK(reads.backwards == 0);
        CHECK(reads.outside == 0);
        for (size_t k = 0; k < tensors.size(); ++k) {
            CAPTURE(k);
            CAPTURE(tensors[k].count);
            CAPTURE(tensors[k].unit_elements);
            int64_t unread = 0, reread = 0;
            for (const int times : reads.elements[k]) {
                unread += times == 0;
                reread += times > 1;
            }
            CHECK(unread == 0);
            CHECK(reread == 0);
        }
    }
}

}  // namespace

TEST_CASE("a tensor's chunks: none when empty, one for a tail alone, whole chunks of 4 units a thread") {
    CHECK(kChunkUnits == int64_t{kThreads} * kUnitsPerThread);
    CHECK(per_unit(true, 4) == 4);
    CHECK(per_unit(true, 2) == 8);
    CHECK(per_unit(false, 2) == 1);
    CHECK(chunks(0, 8) == 0);
    CHECK(chunks(-3, 1) == 0);
    CHECK(chunks(3, 8) == 1);  // the tail alone
    CHECK(chunks(8 * kChunkUnits, 8) == 1);
    CHECK(chunks(8 * kChunkUnits + 7, 8) == 1);  // a tail after whole chunks goes with the last
    CHECK(chunks(8 * kChunkUnits + 8, 8) == 2);
    CHECK(tail_first(8 * kChunkUnits + 7, 8) == 8 * kChunkUnits);
    // A tail has fewer elements than a unit, so the last chunk's first threads read it one each.
    CHECK(kThreads > 8);
}

TEST_CASE("the max_abs kernel's walk reads every element of a pass's tensors once, towards its own tensor") {
    SUBCASE("the seed MLP's pass at batch 32, bf16 (A_in empty: its values decide as none)") {
        check_pass({{32 * 3000, 8}, {0, 8}, {32 * 1000, 8}, {32 * 3000, 8}, {32 * 16, 8}, {32 * 1000, 8}});
    }
    SUBCASE("fp32 vectors, tails of every length, a tensor of a tail alone, empty ones between") {
        check_pass({{4999, 4}, {5000, 4}, {5001, 4}, {5002, 4}, {3, 4}, {0, 4}, {1, 4}, {0, 4}, {4096 + 3, 4}});
    }
    SUBCASE("16-bit vectors, tails of every length") {
        std::vector<Tensor> tensors;
        for (int64_t tail = 0; tail < 8; ++tail) tensors.push_back({8 * kChunkUnits * 2 + tail, 8});
        check_pass(tensors);
    }
    SUBCASE("element-wise tensors (not 16-byte aligned) beside vectorised ones") {
        check_pass({{5000, 1}, {1, 1}, {kChunkUnits, 1}, {kChunkUnits + 1, 1}, {4 * 5000 + 2, 4}, {7, 8}});
    }
    SUBCASE("sixteen tensors, many chunks each") {
        std::vector<Tensor> tensors;
        for (int k = 0; k < 16; ++k) tensors.push_back({(k + 1) * 37 * kChunkUnits / 5 + k, k % 3 == 0 ? 4 : 8});
        check_pass(tensors);
    }
    SUBCASE("every tensor empty") { check_pass({{0, 8}, {0, 4}}); }
}
