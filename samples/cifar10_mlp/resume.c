/* See resume.h. */
#include "resume.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "data.h"

int resume_open(const cli_options* options, mpt_context_t* context, mpt_model_t** model,
                mpt_trainer_options_t** trainer_options)
{
    const char* path = options->resume_path;
    mpt_model_t* loaded = NULL;
    mpt_trainer_options_t* recorded = NULL;
    int64_t inputs = 0, outputs = 0;
    int failed = 1;

    CHECK_MPT(mpt_model_load(context, path, &loaded), "loading the model of the checkpoint %s", path);
    CHECK_MPT(mpt_model_get_input_features(loaded, &inputs), "reading the model's inputs");
    CHECK_MPT(mpt_model_get_output_features(loaded, &outputs), "reading the model's outputs");
    if (inputs != IMAGE_FEATURES || outputs != CLASSES) {
        fprintf(stderr, "error: %s holds a model of %" PRId64 " inputs and %" PRId64 " outputs, not CIFAR-10's %d and %d\n",
                path, inputs, outputs, IMAGE_FEATURES, CLASSES);
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
