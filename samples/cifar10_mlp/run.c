/* Builds the CIFAR-10 MLP on a fresh context, trains it, evaluates it and times both. */
#include "run.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "interrupt.h"
#include "per_class.h"
#include "progress.h"
#include "resume.h"
#include "settings.h"
#include "timer.h"

static void log_to_stderr(mpt_log_level level, const char* message, void* user_data)
{
    static const char* const names[] = {"debug", "info", "warning", "error"};
    (void)user_data;
    fflush(stdout);
    fprintf(stderr, "mptrain %s: %s\n", (unsigned)level < 4 ? names[level] : "log", message);
}

/* The context's description (a JSON object) into `text`, or "" when it takes more than `capacity`
 * bytes or the call fails: the metrics file is worth writing without it. */
static void describe_context(const mpt_context_t* context, char* text, size_t capacity)
{
    size_t length = 0;
    text[0] = '\0';
    if (mpt_context_describe(context, NULL, 0, &length) != MPT_STATUS_OK || length >= capacity ||
        mpt_context_describe(context, text, capacity, &length) != MPT_STATUS_OK)
        text[0] = '\0';
}

static int open_context(const cli_options* options, mpt_context_t** out)
{
    mpt_context_options_t* context_options = NULL;
    mpt_context_t* context = NULL;
    int failed = 1;

    CHECK_MPT(mpt_context_options_create(&context_options), "creating context options");
    CHECK_MPT(mpt_context_options_set_backend(context_options, options->backend), "selecting backend %s",
              args_backend_name(options->backend));
    if (options->threads_given)
        CHECK_MPT(mpt_context_options_set_threads(context_options, options->threads),
                  "setting %d threads", options->threads);
    CHECK_MPT(mpt_context_options_set_seed(context_options, options->seed), "setting seed %" PRIu64,
              options->seed);
    CHECK_MPT(mpt_context_options_set_log_callback(context_options, log_to_stderr, NULL),
              "setting the log callback");
    CHECK_MPT(mpt_context_options_set_log_level(context_options, MPT_LOG_LEVEL_WARNING),
              "setting the log level");
    CHECK_MPT(mpt_context_create(context_options, &context), "creating the context (backend %s)",
              args_backend_name(options->backend));
    *out = context;
    failed = 0;

done:
    mpt_context_options_destroy(context_options);
    return failed;
}

int run_resolve_precision(const cli_options* options, mpt_precision requested, mpt_precision* resolved,
                          mpt_backend* backend)
{
    mpt_context_t* context = NULL;
    mpt_precision precision = MPT_PRECISION_FP32;
    mpt_backend context_backend = MPT_BACKEND_CPU;
    int failed = 1;

    if (open_context(options, &context) != 0)
        return 1;
    CHECK_MPT(mpt_context_resolve_precision(context, requested, &precision), "resolving precision %s",
              args_precision_name(requested));
    CHECK_MPT(mpt_context_get_backend(context, &context_backend), "reading the context's backend");
    *resolved = precision;
    *backend = context_backend;
    failed = 0;

done:
    mpt_context_destroy(context);
    return failed;
}

/* fit's callbacks: the progress display, then --lr-decay's step decay at each epoch's end, and
 * the rate the next epoch starts with, after the first. The library writes an epoch's automatic
 * checkpoint after this callback, so one would hold the next epoch's rate. */
typedef struct fit_callbacks {
    progress progress; /* first: progress_on_step reads the shared user_data as a progress* */
    float learning_rate_decay;
    float rate_after_first_epoch;
    mpt_dataset_t* validation_set; /* --validation-split's rows, or --validate's test set: evaluated at
                                    * each epoch's end; NULL: none */
} fit_callbacks;

static int epoch_end_failed(fit_callbacks* callbacks, mpt_status status, const char* what)
{
    snprintf(callbacks->progress.failure, sizeof callbacks->progress.failure, "error: %s: %s", what,
             mpt_last_error());
    callbacks->progress.failure_status = status;
    callbacks->progress.failed = 1;
    return 1;
}

static int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data)
{
    fit_callbacks* callbacks = (fit_callbacks*)user_data;
    mpt_trainer_t* trainer = callbacks->progress.trainer;
    float rate = 0.0f;
    mpt_status status;

    if (callbacks->validation_set != NULL) {
        /* Allowed here (not from the progress callback): fit waits between epochs with nothing
         * queued. The epoch's clock does not count it. */
        const double start = timer_seconds();
        status = mpt_trainer_evaluate(trainer, callbacks->validation_set, 0, &callbacks->progress.validation_loss,
                                      &callbacks->progress.validation_accuracy);
        if (status != MPT_STATUS_OK)
            return epoch_end_failed(callbacks, status, "evaluating the validation set at the end of an epoch");
        callbacks->progress.validated = 1;
        callbacks->progress.epoch_start += timer_seconds() - start;
    }
    if (progress_on_epoch_end(epoch, loss, accuracy, &callbacks->progress) != 0)
        return 1;
    if (callbacks->learning_rate_decay != 1.0f) {
        status = mpt_trainer_get_learning_rate(trainer, &rate);
        /* A rate decayed to below the smallest float stays at its last positive value. */
        if (status == MPT_STATUS_OK && rate * callbacks->learning_rate_decay > 0.0f)
            status = mpt_trainer_set_learning_rate(trainer, rate * callbacks->learning_rate_decay);
        if (status != MPT_STATUS_OK)
            return epoch_end_failed(callbacks, status, "decaying the learning rate at the end of an epoch");
    }
    if (callbacks->progress.epochs_done == 1) { /* this run's first epoch (a resumed run's epochs go on counting) */
        status = mpt_trainer_get_scheduled_learning_rate(trainer, &callbacks->rate_after_first_epoch);
        if (status != MPT_STATUS_OK)
            return epoch_end_failed(callbacks, status, "reading the scheduled learning rate");
    }
    return interrupt_requested(); /* Ctrl-C: stop after this epoch, its line printed and its decay applied */
}

/* After Ctrl-C (or SIGTERM) stopped fit: says where the run stopped and saves --save-checkpoint,
 * from which --resume goes on (inside an epoch, from its next step). Returns 1: the run did not
 * finish, and the program ends by the signal (main). */
static int stop_interrupted(const cli_options* options, mpt_trainer_t* trainer)
{
    int64_t epochs = 0, steps = 0, rows = 0, batch = 0;
    int failed = 1;

    CHECK_MPT(mpt_trainer_get_progress(trainer, NULL, &epochs), "reading the interrupted run's progress");
    CHECK_MPT(mpt_trainer_get_unfinished_epoch(trainer, &steps, &rows, &batch),
              "reading the interrupted run's epoch");
    if (steps > 0)
        fprintf(stderr, "interrupted in epoch %" PRId64 " after step %" PRId64 " of %" PRId64 "\n", epochs + 1, steps,
                rows / batch);
    else
        fprintf(stderr, "interrupted after epoch %" PRId64 "\n", epochs);
    if (options->checkpoint_path == NULL) {
        fprintf(stderr, "nothing saved: give --save-checkpoint FILE to keep an interrupted run\n");
        goto done;
    }
    CHECK_MPT(mpt_trainer_save_checkpoint(trainer, options->checkpoint_path), "saving the checkpoint %s",
              options->checkpoint_path);
    fprintf(stderr, "checkpoint: %s (--resume it to go on from there)\n", options->checkpoint_path);

done:
    return failed;
}

/* --validation-split: Keras's split, the first floor(rows * (1 - split)) rows for training and the
 * rest held out, as two slices of the training set (sharing its storage). Replaces *train_set by
 * its first slice. Returns 0, or 1 after printing the error. */
static int split_off_validation(double split, mpt_dataset_t** train_set, mpt_dataset_t** held_out, int64_t* train_rows,
                                int64_t* validation_rows)
{
    const int64_t rows = *train_rows;
    const int64_t kept = (int64_t)((double)rows * (1.0 - split)); /* positive: truncation floors */
    mpt_dataset_t* training = NULL;
    int failed = 1;

    if (kept < 1 || kept >= rows) {
        fprintf(stderr, "error: --validation-split %g of %" PRId64 " training images leaves %s\n", split, rows,
                kept < 1 ? "none to train on" : "none to validate on");
        return 1;
    }
    CHECK_MPT(mpt_dataset_create_slice(*train_set, 0, kept, &training), "slicing the first %" PRId64 " training images",
              kept);
    CHECK_MPT(mpt_dataset_create_slice(*train_set, kept, rows - kept, held_out),
              "slicing the last %" PRId64 " training images", rows - kept);
    mpt_dataset_destroy(*train_set); /* the slices keep its storage */
    *train_set = training;
    training = NULL;
    *train_rows = kept;
    *validation_rows = rows - kept;
    failed = 0;

done:
    mpt_dataset_destroy(training);
    return failed;
}

/* --standardize: the model standardizes its inputs by the training set's per-feature statistics
 * (the held-out rows are left out of them, as they would be of a Normalization layer's adapt), so
 * every set stays as loaded and the model would predict from raw images as trained. Returns 0, or
 * 1 after printing the error. */
static int standardize_inputs(mpt_model_t* model, const mpt_dataset_t* train_set)
{
    float mean[IMAGE_FEATURES], stddev[IMAGE_FEATURES];
    int failed = 1;

    CHECK_MPT(mpt_dataset_get_feature_statistics(train_set, mean, stddev, IMAGE_FEATURES),
              "computing the training images' feature statistics");
    CHECK_MPT(mpt_model_set_input_standardization(model, mean, stddev, IMAGE_FEATURES),
              "standardizing the model's inputs");
    failed = 0;

done:
    return failed;
}

static void print_size(const char* label, size_t bytes)
{
    printf("%s%.1f MiB", label, (double)bytes / (1024.0 * 1024.0));
}

/* The model and trainer options the flags describe, for a run from scratch. Returns 0, or 1 after
 * printing the error. */
static int build_from_flags(const cli_options* options, mpt_precision precision, mpt_context_t* context,
                            const mpt_dataset_t* train_set, int64_t train_rows, mpt_model_t** out_model,
                            mpt_trainer_options_t** out_options)
{
    mpt_model_t* model = NULL;
    mpt_trainer_options_t* trainer_options = NULL;
    int64_t steps_per_epoch, decay_steps;
    int failed = 1;

    /* Flatten 32x32x3 is the input width: the datasets already hold each image as 3072 values. */
    CHECK_MPT(mpt_model_create(context, IMAGE_FEATURES, &model), "creating the model");
    CHECK_MPT(mpt_model_add_dense(model, 3000, MPT_ACTIVATION_RELU), "adding Dense(3000, relu)");
    CHECK_MPT(mpt_model_add_dense(model, 1000, MPT_ACTIVATION_RELU), "adding Dense(1000, relu)");
    CHECK_MPT(mpt_model_add_dense(model, CLASSES, MPT_ACTIVATION_SOFTMAX), "adding Dense(10, softmax)");
    if (options->standardize && standardize_inputs(model, train_set) != 0)
        goto done;
    CHECK_MPT(mpt_model_set_layer_dropout(model, 0, options->dropout), "setting Dense(3000)'s dropout to %g",
              (double)options->dropout);
    CHECK_MPT(mpt_model_set_layer_dropout(model, 1, options->dropout), "setting Dense(1000)'s dropout to %g",
              (double)options->dropout);
    CHECK_MPT(mpt_model_set_input_dropout(model, options->input_dropout), "setting the inputs' dropout to %g",
              (double)options->input_dropout);

    CHECK_MPT(mpt_trainer_options_create(&trainer_options), "creating trainer options");
    CHECK_MPT(mpt_trainer_options_set_precision(trainer_options, precision), "setting precision %s",
              args_precision_name(precision));
    CHECK_MPT(mpt_trainer_options_set_loss(trainer_options, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY),
              "setting the sparse categorical cross-entropy loss");
    CHECK_MPT(mpt_trainer_options_set_label_smoothing(trainer_options, options->label_smoothing),
              "setting label smoothing %g", (double)options->label_smoothing);
    CHECK_MPT(mpt_trainer_options_set_global_clipnorm(trainer_options, options->global_clipnorm),
              "setting gradient clipping to a global norm of %g", (double)options->global_clipnorm);
    CHECK_MPT(mpt_trainer_options_set_ema(trainer_options, options->ema_momentum),
              "setting the weights' moving average to momentum %g", (double)options->ema_momentum);
    CHECK_MPT(mpt_trainer_options_set_optimizer(trainer_options, options->optimizer), "selecting the %s optimizer",
              args_optimizer_name(options->optimizer));
    CHECK_MPT(mpt_trainer_options_set_momentum(trainer_options, options->momentum, 0), "setting momentum %g",
              (double)options->momentum);
    if (options->weight_decay_given)
        CHECK_MPT(mpt_trainer_options_set_weight_decay(trainer_options, options->weight_decay),
                  "setting weight decay %g", (double)options->weight_decay);
    CHECK_MPT(mpt_trainer_options_set_learning_rate(trainer_options, options->learning_rate),
              "setting learning rate %g", (double)options->learning_rate);
    CHECK_MPT(mpt_trainer_options_set_micro_batch_size(trainer_options, options->micro_batch_size),
              "setting micro-batches of %" PRId64 " rows", options->micro_batch_size);
    /* The decay ends at the run's last step: fit's steps per epoch are the whole batches (one,
     * when the data set is smaller than a batch). */
    steps_per_epoch = train_rows / options->batch_size > 0 ? train_rows / options->batch_size : 1;
    decay_steps = steps_per_epoch * options->epochs - options->warmup_steps;
    if (options->lr_schedule == MPT_LR_SCHEDULE_CONSTANT)
        decay_steps = 0;
    else if (decay_steps < 1)
        decay_steps = 1;
    CHECK_MPT(mpt_trainer_options_set_lr_schedule(trainer_options, options->lr_schedule, options->warmup_steps,
                                                  decay_steps, options->lr_schedule == MPT_LR_SCHEDULE_CONSTANT ? 1.0f : 0.0f),
              "setting the %s learning-rate schedule", args_schedule_name(options->lr_schedule));
    if (options->warmup_steps >= steps_per_epoch * options->epochs)
        fprintf(stderr,
                "warning: --warmup %" PRId64 " lasts the whole run of %" PRId64 " steps: the rate never reaches "
                "--lr%s\n", options->warmup_steps, steps_per_epoch * options->epochs,
                options->lr_schedule == MPT_LR_SCHEDULE_CONSTANT ? "" : " and never decays");
    *out_model = model;
    *out_options = trainer_options;
    model = NULL;
    trainer_options = NULL;
    failed = 0;
done:
    mpt_model_destroy(model);
    mpt_trainer_options_destroy(trainer_options);
    return failed;
}

int run_training(const cli_options* options, mpt_precision precision, const data_source* data,
                 run_result* result)
{
    mpt_context_t* context = NULL;
    mpt_dataset_t* train_set = NULL;
    mpt_dataset_t* test_set = NULL;
    mpt_dataset_t* held_out = NULL; /* --validation-split */
    mpt_model_t* model = NULL;
    mpt_trainer_options_t* trainer_options = NULL;
    mpt_trainer_t* trainer = NULL;
    fit_callbacks callbacks;
    progress* const progress_state = &callbacks.progress;
    run_result r;
    mpt_status fit_status;
    const trained_settings* const trained = &r.settings;
    size_t planned_bytes = 0;
    int64_t epoch_steps_done = 0, epoch_rows = 0, epoch_batch = 0; /* --resume: an epoch saved part-way */
    int64_t fit_batch;
    double start;
    int failed = 1;

    memset(&r, 0, sizeof r);
    r.epochs = options->epochs;
    r.batch_size = options->batch_size;

    if (open_context(options, &context) != 0)
        goto done;
    if (data_open(context, data, options->limit, &train_set, &test_set) != 0)
        goto done;
    CHECK_MPT(mpt_dataset_get_rows(train_set, &r.train_rows), "reading the training set's size");
    if (options->validation_split > 0.0 && split_off_validation(options->validation_split, &train_set, &held_out,
                                                                  &r.train_rows, &r.validation_rows) != 0)
        goto done;
    CHECK_MPT(mpt_dataset_get_rows(test_set, &r.test_rows), "reading the test set's size");

    if (options->resume_path != NULL
            ? resume_open(options, context, &model, &trainer_options) != 0
            : build_from_flags(options, precision, context, train_set, r.train_rows, &model, &trainer_options) != 0)
        goto done;
    CHECK_MPT(mpt_trainer_create(model, trainer_options, &trainer), "creating the trainer (%s)",
              options->resume_path != NULL ? "the checkpoint's options" : args_precision_name(precision));
    if (options->resume_path != NULL) {
        int64_t saved_batch = 0;
        CHECK_MPT(mpt_trainer_load_checkpoint(trainer, options->resume_path), "resuming the run saved in %s",
                  options->resume_path);
        /* The saved run's batch size, as its other options, unless --batch names another. (Either
         * trains in batches of the training set's size when it has fewer rows: so does fit.) */
        CHECK_MPT(mpt_trainer_get_batch_size(trainer, &saved_batch), "reading the saved run's batch size");
        if (saved_batch > 0 && !options->batch_given)
            r.batch_size = saved_batch;
        fit_batch = r.batch_size < r.train_rows ? r.batch_size : r.train_rows; /* as fit clamps it */
        if (saved_batch > 0 && options->batch_given && saved_batch != fit_batch)
            fprintf(stderr, "warning: the run saved in %s trained in batches of %" PRId64 "; this one trains in "
                            "batches of %" PRId64 " (--batch)\n", options->resume_path, saved_batch, r.batch_size);
        /* An epoch saved part-way (an interrupted run's) goes on where it stopped, when this run has the
         * saved run's training rows and batch size (as fit requires); else fit starts a new epoch. */
        CHECK_MPT(mpt_trainer_get_unfinished_epoch(trainer, &epoch_steps_done, &epoch_rows, &epoch_batch),
                  "reading the saved run's unfinished epoch");
        if (epoch_steps_done > 0 &&
            (epoch_rows != r.train_rows || epoch_batch != fit_batch)) {
            fprintf(stderr, "warning: the run saved in %s stopped inside an epoch of %" PRId64 " training images in "
                            "batches of %" PRId64 "; this one has %" PRId64 " in batches of %" PRId64 " (another "
                            "--limit, --validation-split or --batch?), so that epoch is abandoned for a new one\n",
                    options->resume_path, epoch_rows, epoch_batch, r.train_rows, r.batch_size);
            epoch_steps_done = 0;
        }
    }
    CHECK_MPT(mpt_trainer_get_progress(trainer, &r.steps_before, &r.epochs_before), "reading the trainer's progress");
    CHECK_MPT(mpt_trainer_get_precision(trainer, &r.precision), "reading the trainer's precision");
    CHECK_MPT(mpt_context_get_backend(context, &r.backend), "reading the context's backend");
    CHECK_MPT(mpt_model_get_parameter_count(model, &r.parameters), "counting the model's parameters");
    if (settings_read(trainer, model, &r.settings) != 0)
        goto done;

    printf("mptrain %s | backend %s | precision %s | model 3072-3000-1000-10, %" PRId64 " parameters\n",
           mpt_version(), args_backend_name(r.backend), args_precision_name(r.precision), r.parameters);
    printf("data %s: %" PRId64 " training / ", data_description(data), r.train_rows);
    if (held_out != NULL)
        printf("%" PRId64 " validation (the last %g) / ", r.validation_rows, options->validation_split);
    printf("%" PRId64 " test images | batch %" PRId64 " | ", r.test_rows, r.batch_size);
    if (options->micro_batch_size > 0 && options->micro_batch_size < r.batch_size)
        printf("micro-batches of %" PRId64 " | ", options->micro_batch_size);
    /* SGD without momentum or decay, the seed recipe, is what the line has always shown. The decay
     * is shown when it is given, or when the optimizer's default is not 0 (AdamW's). What the run
     * trains with is read from the trainer and model: a resumed run's comes from its file. */
    if (trained->optimizer != MPT_OPTIMIZER_SGD || trained->momentum > 0.0f || options->weight_decay_given ||
        trained->weight_decay > 0.0f) {
        printf("%s", args_optimizer_name(trained->optimizer));
        if (trained->momentum > 0.0f)
            printf(" momentum %g", (double)trained->momentum);
        if (options->weight_decay_given || trained->weight_decay > 0.0f)
            printf(" weight decay %g", (double)trained->weight_decay);
        printf(" | ");
    }
    printf("lr %g", (double)trained->learning_rate);
    if (options->learning_rate_decay != 1.0f)
        printf(" (x%g after each epoch)", (double)options->learning_rate_decay);
    if (trained->lr_schedule != MPT_LR_SCHEDULE_CONSTANT)
        printf(" %s to 0 over %" PRId64 " step%s", args_schedule_name(trained->lr_schedule), trained->decay_steps,
               trained->decay_steps == 1 ? "" : "s");
    if (trained->warmup_steps > 0)
        printf(" after %" PRId64 " warm-up step%s", trained->warmup_steps, trained->warmup_steps == 1 ? "" : "s");
    if (trained->label_smoothing > 0.0f)
        printf(" | label smoothing %g", (double)trained->label_smoothing);
    if (trained->global_clipnorm > 0.0f)
        printf(" | clipnorm %g", (double)trained->global_clipnorm);
    if (trained->ema_momentum > 0.0f)
        printf(" | ema %g", (double)trained->ema_momentum);
    if (trained->dropout > 0.0f)
        printf(" | dropout %g", (double)trained->dropout);
    if (trained->input_dropout > 0.0f)
        printf(" | input dropout %g", (double)trained->input_dropout);
    printf(" | seed %" PRIu64 " | epochs %" PRId64 "\n", options->seed, r.epochs);
    if (options->resume_path != NULL) {
        printf("resumed from %s after %" PRId64 " epoch%s (%" PRId64 " steps)", options->resume_path,
               r.epochs_before, r.epochs_before == 1 ? "" : "s", r.steps_before);
        if (epoch_steps_done > 0) /* the first of --epochs finishes it */
            printf(", inside epoch %" PRId64 " after step %" PRId64 " of %" PRId64, r.epochs_before + 1,
                   epoch_steps_done, epoch_rows / epoch_batch);
        printf("\n");
    }
    fflush(stdout);
    /* The sample's decays end with the run that set them: resumed past that, the rate is 0. */
    if (trained->lr_schedule != MPT_LR_SCHEDULE_CONSTANT &&
        r.steps_before >= trained->warmup_steps + trained->decay_steps)
        fprintf(stderr,
                "warning: the %s learning-rate schedule of %s ended at step %" PRId64 ", which the run has "
                "passed: it trains at rate 0\n", args_schedule_name(trained->lr_schedule), options->resume_path,
                trained->warmup_steps + trained->decay_steps);

    progress_init(progress_state, trainer, options->epochs, progress_stdout_is_terminal());
    progress_state->clipping = trained->global_clipnorm > 0.0f;
    callbacks.learning_rate_decay = options->learning_rate_decay;
    callbacks.rate_after_first_epoch = 0.0f;
    callbacks.validation_set = held_out != NULL ? held_out : options->validate ? test_set : NULL;
    /* Each step's callback draws the bar, and sees a Ctrl-C. On the CPU it costs nothing; on a GPU
     * without a bar to draw it would copy each step's numbers back, so there Ctrl-C waits for the
     * epoch's end. */
    CHECK_MPT(mpt_trainer_set_callbacks(trainer,
                                        progress_state->interactive || r.backend == MPT_BACKEND_CPU ? progress_on_step
                                                                                                   : NULL,
                                        on_epoch_end, &callbacks),
              "setting the progress callbacks");

    progress_begin(progress_state);
    start = timer_seconds();
    interrupt_catch();
    fit_status = mpt_trainer_fit(trainer, train_set, options->epochs, r.batch_size, 1);
    interrupt_release();
    r.train_seconds = timer_seconds() - start;
    progress_end(progress_state);
    /* Ctrl-C stopped fit (or came as it finished): save and say where. A failure besides is the
     * failure to report; the program still ends by the signal (main). */
    if (interrupt_requested() && !progress_state->failed &&
        (fit_status == MPT_STATUS_OK || fit_status == MPT_STATUS_CANCELLED)) {
        stop_interrupted(options, trainer);
        goto done;
    }
    if (fit_status != MPT_STATUS_OK) {
        if (progress_state->failed) {
            fprintf(stderr, "%s\n", progress_state->failure);
            goto done;
        }
        CHECK_MPT(fit_status, "training (%s, batch %" PRId64 ")", args_precision_name(r.precision),
                  r.batch_size);
    }
    CHECK_MPT(mpt_trainer_get_progress(trainer, &r.steps, NULL), "reading the trainer's step count");
    r.steps -= r.steps_before; /* this run's */
    if (options->checkpoint_path != NULL) {
        CHECK_MPT(mpt_trainer_save_checkpoint(trainer, options->checkpoint_path), "saving the checkpoint %s",
                  options->checkpoint_path);
        printf("checkpoint: %s\n", options->checkpoint_path);
    }
    CHECK_MPT(mpt_trainer_get_scheduled_learning_rate(trainer, &r.rate_at_end), "reading the scheduled learning rate");
    r.rate_after_first_epoch = callbacks.rate_after_first_epoch;
    r.us_per_step = r.steps > 0 ? r.train_seconds * 1e6 / (double)r.steps : 0.0;
    r.train_device_seconds = progress_state->device_seconds;
    r.device_steps = progress_state->device_steps;
    r.device_us_per_step = r.device_steps > 0 ? r.train_device_seconds * 1e6 / (double)r.device_steps : 0.0;
    r.train_loss = progress_state->loss;
    r.last_gradient_norm = progress_state->clipping ? progress_state->gradient_norm : 0.0f;
    r.train_accuracy = progress_state->accuracy;
    r.validated = progress_state->validated;
    r.validation_loss = progress_state->validation_loss;
    r.validation_accuracy = progress_state->validation_accuracy;
    CHECK_MPT(mpt_trainer_get_loss_scale(trainer, &r.loss_scale, NULL, &r.skipped_steps),
              "reading the loss scaler");
    CHECK_MPT(mpt_trainer_get_memory(trainer, &planned_bytes, &r.arena_bytes), "reading the arena size");

    start = timer_seconds();
    CHECK_MPT(mpt_trainer_evaluate(trainer, test_set, 0, &r.test_loss, &r.test_accuracy),
              "evaluating on the test set");
    r.test_seconds = timer_seconds() - start;

    printf("test: loss %.4f - accuracy %.4f (%" PRId64 " images)\n", (double)r.test_loss,
           (double)r.test_accuracy, r.test_rows);
    if (trained->ema_momentum > 0.0f) {
        /* The averaged weights in the model's place for one evaluation, then the trained ones back. */
        CHECK_MPT(mpt_trainer_swap_ema_weights(trainer, NULL), "exchanging the weights for their moving average");
        CHECK_MPT(mpt_trainer_evaluate(trainer, test_set, 0, &r.ema_test_loss, &r.ema_test_accuracy),
                  "evaluating the averaged weights on the test set");
        CHECK_MPT(mpt_trainer_swap_ema_weights(trainer, NULL), "bringing the trained weights back");
        r.ema_evaluated = 1;
        printf("test (ema %g): loss %.4f - accuracy %.4f\n", (double)trained->ema_momentum,
               (double)r.ema_test_loss, (double)r.ema_test_accuracy);
    }
    if (options->per_class) {
        double overall = 0.0;
        if (per_class_report(trainer, test_set, r.test_rows, r.class_accuracy, &overall) != 0)
            goto done;
        r.per_class = 1;
        /* The confusion matrix counts what evaluate counted. */
        if (overall - (double)r.test_accuracy > 1e-6 || (double)r.test_accuracy - overall > 1e-6)
            fprintf(stderr, "warning: the confusion matrix's accuracy %.6f is not evaluate's %.6f\n", overall,
                    (double)r.test_accuracy);
    }
    if (r.us_per_step >= 1000.0)
        printf("time: train %.2f s (%" PRId64 " step%s, %.2f ms/step), test %.2f s", r.train_seconds, r.steps,
               r.steps == 1 ? "" : "s", r.us_per_step * 1e-3, r.test_seconds);
    else
        printf("time: train %.2f s (%" PRId64 " step%s, %.1f us/step), test %.2f s", r.train_seconds, r.steps,
               r.steps == 1 ? "" : "s", r.us_per_step, r.test_seconds);
    print_size(" | arena ", r.arena_bytes);
    if (r.precision == MPT_PRECISION_MIXED_FP16)
        printf(" | loss scale %g, %" PRId64 " skipped steps", (double)r.loss_scale, r.skipped_steps);
    printf("\n");
    /* On a GPU the wall time above also holds launch gaps and host waits; this is the GPU's own. */
    printf("training time on the device%s: %.3f s (", r.backend == MPT_BACKEND_CPU ? " (CPU: host clock)" : "",
           r.train_device_seconds);
    if (r.device_us_per_step >= 1000.0)
        printf("%.2f ms/step)\n", r.device_us_per_step * 1e-3);
    else
        printf("%.1f us/step)\n", r.device_us_per_step);
    fflush(stdout);

    describe_context(context, r.context_description, sizeof r.context_description);
    *result = r;
    failed = 0;

done:
    mpt_trainer_destroy(trainer);
    mpt_trainer_options_destroy(trainer_options);
    mpt_model_destroy(model);
    mpt_dataset_destroy(train_set);
    mpt_dataset_destroy(held_out);
    mpt_dataset_destroy(test_set);
    mpt_context_destroy(context);
    return failed;
}
