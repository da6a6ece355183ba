// Deterministic, serialisable random numbers (xoshiro256** seeded by splitmix64). Used for weight
// initialisation and epoch shuffles, so the same seed trains to bit-identical weights.
#pragma once

#include <array>
#include <cstdint>

namespace mpt {

class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }

    void reseed(uint64_t seed) {
        for (auto& word : state_) word = splitmix64(seed);
    }

    uint64_t next_u64() {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, 1) with 24 random bits, so every value is an exact float.
    float next_unit_float() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }

    // Uniform integer in [0, bound) without modulo bias (Lemire's method).
    uint64_t next_below(uint64_t bound) {
        unsigned __int128 product = static_cast<unsigned __int128>(next_u64()) * bound;
        uint64_t low = static_cast<uint64_t>(product);
        if (low < bound) {
            const uint64_t threshold = (0 - bound) % bound;
            while (low < threshold) {
                product = static_cast<unsigned __int128>(next_u64()) * bound;
                low = static_cast<uint64_t>(product);
            }
        }
        return static_cast<uint64_t>(product >> 64);
    }

    using State = std::array<uint64_t, 4>;
    const State& state() const { return state_; }
    void set_state(const State& state) { state_ = state; }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }

    State state_{};
};

}  // namespace mpt
