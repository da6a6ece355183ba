// A sequential model of Dense layers and its fp32 master weights. The model owns the masters (one
// arena); trainers own everything derived from them (low-precision copies, gradients, optimizer
// state). Every width is padded to a multiple of 8 internally so GEMMs meet tensor-core shape rules;
// padded weights stay exactly zero and padded outputs are masked.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/context.h"
#include "data/feature_standardization.h"
#include "memory/arena.h"
#include "nn/activation.h"
#include "nn/initializer.h"

namespace mpt {

constexpr int64_t kFeatureAlignment = 8;
constexpr int64_t kMaxFeatures = int64_t{1} << 24;  // per layer, inputs and units alike
inline int64_t pad_features(int64_t features) { return (features + kFeatureAlignment - 1) / kFeatureAlignment * kFeatureAlignment; }

struct DenseLayer {
    int64_t inputs;
    int64_t units;
    int64_t padded_inputs;
    int64_t padded_units;
    Activation activation;
    std::optional<DType> dtype_override;
    // The rate at which training drops this layer's outputs (nn/dropout.h), as a Keras Dropout layer
    // after it would; 0: none. Only hidden layers drop: the last layer's outputs are the model's.
    float dropout = 0.0f;
    // How build() draws the weights; not saved (a model file holds the weights it drew).
    Initializer initializer = Initializer::glorot_uniform;
    // False: frozen, as a Keras layer with trainable = False: training steps leave its weights and
    // bias (and their optimizer state) as they are, and take no gradient of them.
    bool trainable = true;
    // Offsets in elements into the parameter block (the same layout for masters, gradients,
    // optimizer state and low copies), each a multiple of kParameterAlignment.
    int64_t weight_offset = 0;
    int64_t bias_offset = 0;

    int64_t weight_count() const { return padded_units * padded_inputs; }
};

constexpr int64_t kParameterAlignment = 128;  // elements: 256 bytes even for 2-byte dtypes

class Model {
public:
    Model(std::shared_ptr<Context> context, int64_t input_features);

    void add_dense(int64_t units, Activation activation);
    void set_layer_dtype(int64_t layer, std::optional<DType> dtype);
    void set_layer_dropout(int64_t layer, float rate);
    // Dropout on the inputs, as a Keras Dropout(rate) before the first Dense layer; 0: none.
    void set_input_dropout(float rate);
    float input_dropout() const { return input_dropout_; }
    // Standardizes every input feature as Keras's Normalization layer in front of the first Dense
    // layer would (see FeatureStandardization): in training, evaluation and prediction alike, saved
    // with the model. `count` = input_features(); mean and stddev null with count 0 remove it. Not
    // while a trainer fits the model (INVALID_STATE): its batches are gathered with it.
    void set_input_standardization(const float* mean, const float* stddev, int64_t count);
    // The same from one already checked for this model's inputs (null: none).
    void set_input_standardization(std::shared_ptr<const FeatureStandardization> standardization);
    // Null: the inputs are taken as given.
    const std::shared_ptr<const FeatureStandardization>& input_standardization() const {
        return input_standardization_;
    }
    void set_layer_initializer(int64_t layer, Initializer initializer);
    // Freezes a layer (false) or lets it train again (true): at any time, the next training step
    // of every trainer of the model reads it.
    void set_layer_trainable(int64_t layer, bool trainable);
    // Fails with INVALID_STATE when every layer is frozen: training would change nothing.
    void require_trainable_layer() const;
    bool has_dropout() const;  // on the inputs or any layer
    // Lays out and initialises the parameters (weights from each layer's initializer, zero biases).
    // Idempotent.
    void build();
    bool built() const { return built_; }

    const std::shared_ptr<Context>& context() const { return context_; }
    const std::vector<DenseLayer>& layers() const { return layers_; }
    int64_t input_features() const { return input_features_; }
    int64_t output_features() const;
    int64_t parameter_count() const;          // unpadded weights + biases
    int64_t parameter_block_elements() const { return block_elements_; }  // padded layout size

    float* masters() const { return arena_.at<float>(0); }  // backend memory
    void get_weights(int64_t layer, float* weights, float* bias) const;       // host memory, unpadded
    void set_weights(int64_t layer, const float* weights, const float* bias);  // host memory, unpadded
    // Replaces the whole padded master block (host memory, parameter_block_elements() floats).
    void read_master_block(float* destination) const;
    void write_master_block(const float* source);

    // Bumped whenever the masters change, so trainers know when to refresh their low copies.
    uint64_t weights_version() const { return weights_version_; }
    void mark_weights_changed() { ++weights_version_; }

    // The trainer whose averaged weights (mpt_trainer_swap_ema_weights) the masters hold now, its
    // trained weights being in its averages' place; null while the masters are the model's own.
    // Training the model and checkpointing it wait until they are exchanged back.
    const void* averages_holder() const { return averages_holder_; }
    void set_averages_holder(const void* trainer) { averages_holder_ = trainer; }
    // The trainers inside fit now (a callback of one may call another): no other trainer may exchange
    // the weights under their steps, which check the holder only as each epoch starts.
    void begin_fit(const void* trainer) { fitting_.push_back(trainer); }
    void end_fit(const void* trainer);
    bool fitted_by_another_than(const void* trainer) const;
    bool being_fitted() const { return !fitting_.empty(); }

    // A prediction's row count: positive, and its input and output arrays within kMaxHostElements.
    void require_prediction_rows(int64_t rows) const;
    // A prediction's `rows` inputs (host memory) are finite, and so are they once standardized
    // (a value far from a feature's mean over a tiny deviation is not); else MPT_STATUS_NON_FINITE.
    void require_finite_inputs(const float* inputs, int64_t rows) const;

private:
    void require_layer(int64_t layer) const;

    std::shared_ptr<Context> context_;
    float input_dropout_ = 0.0f;
    std::shared_ptr<const FeatureStandardization> input_standardization_;
    int64_t input_features_;
    std::vector<DenseLayer> layers_;
    bool built_ = false;
    int64_t block_elements_ = 0;
    Arena arena_;
    uint64_t weights_version_ = 0;
    const void* averages_holder_ = nullptr;
    std::vector<const void*> fitting_;
};

}  // namespace mpt
