/* See settings.h. */
#include "settings.h"

#include <stddef.h>

#include "check.h"

int settings_read(const mpt_trainer_t* trainer, const mpt_model_t* model, trained_settings* out)
{
    mpt_trainer_options_t* used = NULL;
    trained_settings s;
    int nesterov = 0, failed = 1;

    CHECK_MPT(mpt_trainer_get_options(trainer, &used), "reading the trainer's options");
    CHECK_MPT(mpt_trainer_options_get_optimizer(used, &s.optimizer), "reading the trainer's optimizer");
    CHECK_MPT(mpt_trainer_options_get_momentum(used, &s.momentum, &nesterov), "reading the trainer's momentum");
    CHECK_MPT(mpt_trainer_options_get_weight_decay(used, &s.weight_decay), "reading the trainer's weight decay");
    CHECK_MPT(mpt_trainer_options_get_learning_rate(used, &s.learning_rate), "reading the trainer's learning rate");
    CHECK_MPT(mpt_trainer_options_get_lr_schedule(used, &s.lr_schedule, &s.warmup_steps, &s.decay_steps, NULL),
              "reading the trainer's learning-rate schedule");
    CHECK_MPT(mpt_trainer_options_get_label_smoothing(used, &s.label_smoothing), "reading the trainer's label smoothing");
    CHECK_MPT(mpt_trainer_options_get_global_clipnorm(used, &s.global_clipnorm), "reading the trainer's clipnorm");
    CHECK_MPT(mpt_trainer_options_get_ema(used, &s.ema_momentum), "reading the trainer's weight averaging");
    CHECK_MPT(mpt_model_get_layer_dropout(model, 0, &s.dropout), "reading the model's dropout");
    CHECK_MPT(mpt_model_get_input_dropout(model, &s.input_dropout), "reading the model's input dropout");
    CHECK_MPT(mpt_model_get_input_standardization(model, NULL, NULL, 0, &s.standardize),
              "reading the model's input standardization");
    *out = s;
    failed = 0;
done:
    mpt_trainer_options_destroy(used);
    return failed;
}
