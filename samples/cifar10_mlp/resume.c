/* See resume.h. */
#include "resume.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "data.h"

/* Whether `model` is the sample's: 3072 inputs, Dense 3000 and 1000 relu, Dense 10 softmax. */
static int is_the_mlp(const mpt_model_t* model)
{
    static const int64_t units[] = {3000, 1000, CLASSES};
    static const mpt_activation activations[] = {MPT_ACTIVATION_RELU, MPT_ACTIVATION_RELU, MPT_ACTIVATION_SOFTMAX};
    int64_t inputs = 0, layers = 0, layer;
    if (mpt_model_get_input_features(model, &inputs) != MPT_STATUS_OK || inputs != IMAGE_FEATURES ||
        mpt_model_get_layer_count(model, &layers) != MPT_STATUS_OK || layers != 3)
        return 0;
    for (layer = 0; layer < 3; ++layer) {
        int64_t layer_units = 0;
        mpt_activation activation = MPT_ACTIVATION_LINEAR;
        if (mpt_model_get_layer_units(model, layer, &layer_units) != MPT_STATUS_OK || layer_units != units[layer] ||
            mpt_model_get_layer_activation(model, layer, &activation) != MPT_STATUS_OK ||
            activation != activations[layer])
            return 0;
    }
    return 1;
}

int resume_open(const cli_options* options, mpt_context_t* context, mpt_model_t** model,
                mpt_trainer_options_t** trainer_options)
{
    const char* path = options->resume_path;
    mpt_model_t* loaded = NULL;
    mpt_trainer_options_t* recorded = NULL;
    int failed = 1;

    CHECK_MPT(mpt_model_load(context, path, &loaded), "loading the model of the checkpoint %s", path);
    if (!is_the_mlp(loaded)) {
        fprintf(stderr, "error: %s holds another model than this sample's 3072-3000-1000-10 MLP\n", path);
        goto done;
    }
    CHECK_MPT(mpt_trainer_options_create_from_checkpoint(path, &recorded), "reading the training options of %s", path);
    CHECK_MPT(mpt_trainer_options_set_micro_batch_size(recorded, options->micro_batch_size),
              "setting micro-batches of %" PRId64 " rows", options->micro_batch_size);
    *model = loaded;
    *trainer_options = recorded;
    loaded = NULL;
    recorded = NULL;
    failed = 0;
done:
    mpt_model_destroy(loaded);
    mpt_trainer_options_destroy(recorded);
    return failed;
}
