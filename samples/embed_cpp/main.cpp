// embed_cpp: embeds mptrain through the header-only C++ wrapper (mptrain/mptrain.hpp). Trains an
// MLP on generated points labelled inside or outside a circle, reports
// accuracy, and shows errors arriving as mptrain::Error exceptions.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <mptrain/mptrain.hpp>

int main() {
    constexpr int64_t rows = 1024, features = 2;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> coordinate(-1.0f, 1.0f);
    std::vector<float> samples;
    std::vector<int32_t> labels;
    for (int64_t row = 0; row < rows; ++row) {
        const float x = coordinate(rng), y = coordinate(rng);
        samples.insert(samples.end(), {x, y});
        labels.push_back(x * x + y * y < 0.5f ? 1 : 0);  // inside the circle of radius ~0.71
    }

    try {
        std::printf("mptrain %s\n", mptrain::version().c_str());
        mptrain::Context context(mptrain::ContextOptions().backend(MPT_BACKEND_CPU).threads(1).seed(3));
        mptrain::Model model(context, features);
        model.add_dense(32, MPT_ACTIVATION_RELU).add_dense(32, MPT_ACTIVATION_RELU).add_dense(2, MPT_ACTIVATION_SOFTMAX);
        const auto dataset = mptrain::Dataset::from_f32(context, samples, features, labels, 2);

        mptrain::Trainer trainer(model, mptrain::TrainerOptions().optimizer(MPT_OPTIMIZER_ADAM).learning_rate(0.01f));
        int64_t steps_seen = 0;
        // Callbacks return true to stop training.
        trainer.set_callbacks([&](const mptrain::Progress&) { ++steps_seen; return false; },
                              [](int64_t epoch, float loss, float accuracy) {
                                  if (epoch % 5 == 4) std::printf("epoch %lld: loss %.4f accuracy %.3f\n",
                                                                  static_cast<long long>(epoch), loss, accuracy);
                                  return false;
                              });
        trainer.fit(dataset, 30, 32);
        const mptrain::Evaluation result = trainer.evaluate(dataset);
        std::printf("accuracy %.3f after %lld steps (%lld parameters)\n", result.accuracy,
                    static_cast<long long>(steps_seen), static_cast<long long>(model.parameter_count()));

        const std::vector<float> probabilities = trainer.predict({0.0f, 0.0f, 0.95f, 0.95f});
        std::printf("p(inside | centre) = %.3f, p(inside | corner) = %.3f\n", probabilities[1], probabilities[3]);

        try {
            model.add_dense(4, MPT_ACTIVATION_RELU);  // the model is built: no more layers
            std::printf("expected an error\n");
            return 1;
        } catch (const mptrain::Error& error) {
            std::printf("adding a layer now fails: %s\n", error.what());
            if (error.status() != MPT_STATUS_INVALID_STATE) return 1;
        }
        return result.accuracy >= 0.9f && probabilities[1] > 0.5f && probabilities[3] < 0.5f ? 0 : 1;
    } catch (const mptrain::Error& error) {
        std::fprintf(stderr, "mptrain error: %s\n", error.what());
        return 1;
    }
}
