/* Parses mptrain-cifar10's flags ("--flag value" or "--flag=value") into cli_options. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void args_print_usage(FILE* stream, const char* program)
{
    fprintf(stream,
            "Usage: %s [options]\n"
            "\n"
            "Trains and evaluates the CIFAR-10 MLP with mptrain: Flatten 32x32x3 -> Dense 3000 relu ->\n"
            "Dense 1000 relu -> Dense 10 softmax, sparse categorical cross-entropy, SGD (or\n"
            "--optimizer).\n"
            "\n"
            "Options:\n"
            "  --data DIR         CIFAR-10 binary directory (cifar-10-batches-bin). Default:\n"
            "                     $MPTRAIN_CIFAR10_DIR, else ./data/cifar-10-batches-bin\n"
            "  --epochs N         epochs to train (default 1)\n"
            "  --batch N          batch size (default 32; with --resume, the saved run's)\n"
            "  --micro-batch N    run each batch's forward and backward passes in micro-batches of N\n"
            "                     rows and add up their gradients (gradient accumulation): the same\n"
            "                     steps with the memory of N-row batches (default 0: whole batches)\n"
            "  --precision P      fp32 | mixed-fp16 | mixed-bf16 | auto (default auto: bf16 on CUDA\n"
            "                     cc >= 8.0, fp16 on 7.x; on the CPU bf16 with AMX, else fp32)\n"
            "  --optimizer O      sgd | adam | adamw | rmsprop | lion, as Keras's (default sgd)\n"
            "  --momentum M       SGD's or RMSprop's momentum, 0 <= M < 1 (default 0: none)\n"
            "  --weight-decay X   decay every weight by lr * X a step, 0 <= X < 1, as Keras's\n"
            "                     weight_decay (default: 0, AdamW's 0.004)\n"
            "  --lr X             learning rate (default 0.01)\n",
            program);
    /* Three strings: C99 promises string literals of 4095 characters only. */
    fprintf(stream,
            "  --lr-decay F       multiply the learning rate by F (0 < F <= 1) after every epoch, from\n"
            "                     the epoch-end callback: a step decay (default 1: constant)\n"
            "  --lr-schedule S    constant | linear | cosine (default constant): the library lowers the\n"
            "                     rate at every step, from --lr until it reaches 0 as the run ends\n"
            "  --warmup N         raise the rate linearly over the first N steps (default 0)\n"
            "  --label-smoothing S\n"
            "                     train towards (1 - S) on each label plus S / 10 on every class,\n"
            "                     0 <= S < 1 (default 0: none); the losses shown are the smoothed ones\n"
            "  --clipnorm X       clip every step's gradients to a global L2 norm of at most X > 0, as\n"
            "                     Keras's global_clipnorm (default: no clipping); each epoch's line\n"
            "                     shows its last step's norm before clipping (grad_norm)\n"
            "  --ema M            keep an exponential moving average of the weights, momentum M in\n"
            "                     (0, 1) (0.999 is usual), as Keras's use_ema, and evaluate the test\n"
            "                     set with the averaged weights too after training (default: none)\n"
            "  --dropout R        drop each hidden unit's output with probability R in [0, 1) while\n"
            "                     training, as a Keras Dropout(R) after both hidden layers; evaluation\n"
            "                     uses every unit (default 0: none)\n"
            "  --input-dropout R  drop each input value (pixel channel) with probability R in [0, 1)\n"
            "                     while training, as a Keras Dropout(R) before the first Dense\n"
            "                     (default 0: none)\n"
            "  --limit N          train on the first N training images only; 0 = all (default 0)\n"
            "  --validation-split F\n"
            "                     hold out the last fraction F (0 < F < 1) of the training images,\n"
            "                     as Keras's validation_split: train on the others and evaluate the\n"
            "                     held-out ones after every epoch (val_loss, val_accuracy), where\n"
            "                     --validate would evaluate the test set (give one of the two);\n"
            "                     default 0: none\n"
            "  --seed N           seed of weight initialisation and shuffling (default 42)\n"
            "  --backend B        auto | cpu | cuda (default auto)\n"
            "  --threads N        CPU compute threads; 0 = all cores (default 0)\n"
            "  --json FILE        write the final metrics to FILE as a JSON object (with --compare:\n"
            "                     {\"fp32\": {...}, \"mixed\": {...}}) once the run has succeeded: a\n"
            "                     failed or interrupted run leaves FILE as it was; /dev/stdout gets\n"
            "                     the report after the progress lines\n"
            "  --compare          train fp32 and the mixed policy (the resolved --precision if it is\n"
            "                     mixed, else mixed-bf16) from the same seed and compare them\n"
            "  --validate         evaluate the test set after every epoch, from fit's epoch-end\n"
            "                     callback (val_loss, val_accuracy on the epoch's line)\n"
            "  --per-class        after training, print the test set's confusion matrix and each\n"
            "                     class's accuracy (from the trainer's predictions over the data set)\n"
            "  --standardize      the model standardizes each of its 3072 inputs to mean 0 and\n"
            "                     standard deviation 1 by the training images' statistics (after any\n"
            "                     --validation-split), as a Keras Normalization layer before it\n");
    fprintf(stream,
            "  --save-checkpoint FILE\n"
            "                     after training (not when it fails), save the trainer's checkpoint\n"
            "                     (weights, optimizer state, options, progress) to FILE, whose\n"
            "                     directory is checked before training; also when Ctrl-C stops\n"
            "                     training (below), which --resume then goes on from\n"
            "  --resume FILE      continue the run saved in FILE for --epochs more epochs: the model\n"
            "                     and its training options (precision, optimizer, rate, schedule,\n"
            "                     smoothing, clipping, averaging, dropout, standardization) are the\n"
            "                     file's, so the flags that set those are refused with it, and it\n"
            "                     trains in the saved run's batch size unless --batch is given; give\n"
            "                     the saved run's --limit, --validation-split, --micro-batch and\n"
            "                     --lr-decay again to continue it as it was (a --lr-schedule decay\n"
            "                     ends with the saved run's --epochs)\n"
            "  -h, --help         print this help and exit\n"
            "\n"
            "Ctrl-C (SIGINT) or SIGTERM while training stops it after the step under way (on a GPU\n"
            "without a progress bar, after the epoch), saves --save-checkpoint if given, and ends the\n"
            "program by that signal (exit status 130 or 143); a second one ends it at once.\n"
            "Without the data set the program warns and trains on a generated CIFAR-shaped set.\n"
            "Get the real data with: scripts/get-cifar10.sh [DEST]  (unpacks to DEST/cifar-10-batches-bin)\n");
}

const char* args_precision_name(mpt_precision precision)
{
    switch (precision) {
    case MPT_PRECISION_FP32: return "fp32";
    case MPT_PRECISION_MIXED_FP16: return "mixed-fp16";
    case MPT_PRECISION_MIXED_BF16: return "mixed-bf16";
    case MPT_PRECISION_AUTO: return "auto";
    }
    return "unknown";
}

const char* args_backend_name(mpt_backend backend)
{
    switch (backend) {
    case MPT_BACKEND_AUTO: return "auto";
    case MPT_BACKEND_CPU: return "cpu";
    case MPT_BACKEND_CUDA: return "cuda";
    }
    return "unknown";
}

static int parse_int64(const char* text, int64_t min, int64_t max, int64_t* out)
{
    char* end = NULL;
    long long value;
    errno = 0;
    value = strtoll(text, &end, 10);
    if (text[0] == '\0' || *end != '\0' || errno == ERANGE || value < min || value > max)
        return 0;
    *out = (int64_t)value;
    return 1;
}

static int parse_uint64(const char* text, uint64_t* out)
{
    char* end = NULL;
    unsigned long long value;
    if (text[0] < '0' || text[0] > '9') /* strtoull accepts "-1" and wraps it around */
        return 0;
    errno = 0;
    value = strtoull(text, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return 0;
    *out = (uint64_t)value;
    return 1;
}

/* A number in (above, at_most]. */
static int parse_float_in(const char* text, double above, double at_most, float* out)
{
    char* end = NULL;
    double value;
    errno = 0;
    value = strtod(text, &end);
    if (text[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(value) || !(value > above && value <= at_most))
        return 0;
    *out = (float)value;
    return 1;
}

/* A fraction in (0, 1), kept as a double: 0.2 of 2,000 rows must be 400, as in Keras (the float
 * nearest 0.2 is a little above it and would hold out 401). */
static int parse_open_fraction(const char* text, double* out)
{
    char* end = NULL;
    double value;
    errno = 0;
    value = strtod(text, &end);
    if (text[0] == '\0' || *end != '\0' || errno == ERANGE || !(value > 0.0 && value < 1.0))
        return 0;
    *out = value;
    return 1;
}

/* A float in [0, 1) once rounded to float (0.99999999 would round to 1, which the library refuses). */
static int parse_unit_fraction(const char* text, float* out)
{
    char* end = NULL;
    double value;
    float rounded;
    errno = 0;
    value = strtod(text, &end);
    if (text[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(value) || !(value >= 0.0))
        return 0;
    rounded = (float)value;
    if (!(rounded < 1.0f))
        return 0;
    *out = rounded == 0.0f ? 0.0f : rounded; /* "-0" is 0 */
    return 1;
}

static int parse_precision(const char* text, mpt_precision* out)
{
    static const mpt_precision all[] = {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16,
                                        MPT_PRECISION_MIXED_BF16, MPT_PRECISION_AUTO};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (strcmp(text, args_precision_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    }
    return 0;
}

const char* args_schedule_name(mpt_lr_schedule schedule)
{
    switch (schedule) {
    case MPT_LR_SCHEDULE_CONSTANT: return "constant";
    case MPT_LR_SCHEDULE_LINEAR: return "linear";
    case MPT_LR_SCHEDULE_COSINE: return "cosine";
    case MPT_LR_SCHEDULE_STEP: return "step";
    }
    return "unknown";
}

static int parse_schedule(const char* text, mpt_lr_schedule* out)
{
    static const mpt_lr_schedule offered[] = {MPT_LR_SCHEDULE_CONSTANT, MPT_LR_SCHEDULE_LINEAR,
                                              MPT_LR_SCHEDULE_COSINE};
    size_t i;
    for (i = 0; i < sizeof offered / sizeof offered[0]; ++i) {
        if (strcmp(text, args_schedule_name(offered[i])) == 0) {
            *out = offered[i];
            return 1;
        }
    }
    return 0;
}

const char* args_optimizer_name(mpt_optimizer optimizer)
{
    switch (optimizer) {
    case MPT_OPTIMIZER_SGD: return "sgd";
    case MPT_OPTIMIZER_ADAM: return "adam";
    case MPT_OPTIMIZER_ADAMW: return "adamw";
    case MPT_OPTIMIZER_RMSPROP: return "rmsprop";
    case MPT_OPTIMIZER_LION: return "lion";
    }
    return "unknown";
}

static int parse_optimizer(const char* text, mpt_optimizer* out)
{
    static const mpt_optimizer all[] = {MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_ADAM, MPT_OPTIMIZER_ADAMW,
                                        MPT_OPTIMIZER_RMSPROP, MPT_OPTIMIZER_LION};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (strcmp(text, args_optimizer_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    }
    return 0;
}

static int parse_backend(const char* text, mpt_backend* out)
{
    static const mpt_backend all[] = {MPT_BACKEND_AUTO, MPT_BACKEND_CPU, MPT_BACKEND_CUDA};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (strcmp(text, args_backend_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    }
    return 0;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static args_result usage_error(const char* program, const char* format, ...)
{
    va_list args;
    fprintf(stderr, "error: ");
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, "\n\n");
    args_print_usage(stderr, program);
    return ARGS_ERROR;
}

/* Flags of what a checkpoint records (the model and its training options): --resume takes them from
 * its file. */
static int recorded_by_checkpoints(const char* name)
{
    static const char* const names[] = {"precision", "optimizer", "momentum", "weight-decay", "lr",
                                        "lr-schedule", "warmup", "label-smoothing", "clipnorm", "ema",
                                        "dropout", "input-dropout", "standardize"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return 0;
}

/* Flags that take a value. */
static int takes_value(const char* name)
{
    static const char* const names[] = {"data", "epochs", "batch", "micro-batch", "precision", "optimizer", "momentum",
                                        "weight-decay", "lr", "lr-decay",
                                        "lr-schedule", "warmup", "label-smoothing", "clipnorm", "ema", "dropout", "input-dropout",
                                        "validation-split", "limit", "seed", "backend", "threads", "json",
                                        "resume", "save-checkpoint"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return 0;
}

args_result args_parse(int argc, char** argv, cli_options* out)
{
    const char* program = argc > 0 && argv[0] != NULL ? argv[0] : "mptrain-cifar10";
    cli_options options;
    const char* recorded_flag = NULL; /* the first flag given of what --resume takes from its file */
    int i;

    memset(&options, 0, sizeof options);
    options.epochs = 1;
    options.batch_size = 32;
    options.precision = MPT_PRECISION_AUTO;
    options.optimizer = MPT_OPTIMIZER_SGD;
    options.learning_rate = 0.01f;
    options.learning_rate_decay = 1.0f;
    options.label_smoothing = 0.0f;
    options.limit = 0;
    options.seed = 42;
    options.backend = MPT_BACKEND_AUTO;

    for (i = 1; i < argc; ++i) {
        const char* arg = argv[i];
        char name[32];
        const char* value = NULL;
        const char* equals;
        size_t name_length;

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            args_print_usage(stdout, program);
            return ARGS_HELP;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return usage_error(program, "unexpected argument '%s'", arg);

        equals = strchr(arg + 2, '=');
        name_length = equals != NULL ? (size_t)(equals - (arg + 2)) : strlen(arg + 2);
        if (name_length >= sizeof name)
            return usage_error(program, "unknown option '%s'", arg);
        memcpy(name, arg + 2, name_length);
        name[name_length] = '\0';
        if (recorded_flag == NULL && recorded_by_checkpoints(name))
            recorded_flag = arg;

        if (strcmp(name, "compare") == 0 || strcmp(name, "validate") == 0 || strcmp(name, "per-class") == 0
            || strcmp(name, "standardize") == 0) {
            if (equals != NULL)
                return usage_error(program, "option '--%s' takes no value", name);
            if (strcmp(name, "compare") == 0)
                options.compare = 1;
            else if (strcmp(name, "validate") == 0)
                options.validate = 1;
            else if (strcmp(name, "standardize") == 0)
                options.standardize = 1;
            else
                options.per_class = 1;
            continue;
        }
        if (!takes_value(name))
            return usage_error(program, "unknown option '%s'", arg);
        if (equals != NULL) {
            value = equals + 1;
        } else {
            if (i + 1 >= argc)
                return usage_error(program, "option '--%s' needs a value", name);
            value = argv[++i];
        }

        if (strcmp(name, "data") == 0) {
            if (value[0] == '\0')
                return usage_error(program, "--data needs a directory");
            options.data_directory = value;
        } else if (strcmp(name, "epochs") == 0) {
            if (!parse_int64(value, 1, 1000000, &options.epochs))
                return usage_error(program, "--epochs must be an integer >= 1, not '%s'", value);
        } else if (strcmp(name, "batch") == 0) {
            if (!parse_int64(value, 1, 1 << 24, &options.batch_size))
                return usage_error(program, "--batch must be an integer >= 1, not '%s'", value);
            options.batch_given = 1;
        } else if (strcmp(name, "micro-batch") == 0) {
            if (!parse_int64(value, 0, 1 << 24, &options.micro_batch_size))
                return usage_error(program, "--micro-batch must be an integer >= 0, not '%s'", value);
        } else if (strcmp(name, "precision") == 0) {
            if (!parse_precision(value, &options.precision))
                return usage_error(program,
                                   "--precision must be fp32, mixed-fp16, mixed-bf16 or auto, not '%s'",
                                   value);
        } else if (strcmp(name, "optimizer") == 0) {
            if (!parse_optimizer(value, &options.optimizer))
                return usage_error(program, "--optimizer must be sgd, adam, adamw, rmsprop or lion, not '%s'", value);
        } else if (strcmp(name, "momentum") == 0) {
            if (!parse_unit_fraction(value, &options.momentum))
                return usage_error(program, "--momentum must be a number in [0, 1), not '%s'", value);
        } else if (strcmp(name, "weight-decay") == 0) {
            if (!parse_unit_fraction(value, &options.weight_decay))
                return usage_error(program, "--weight-decay must be a number in [0, 1), not '%s'", value);
            options.weight_decay_given = 1;
        } else if (strcmp(name, "lr") == 0) {
            if (!parse_float_in(value, 0.0, 1e6, &options.learning_rate))
                return usage_error(program, "--lr must be a positive number, not '%s'", value);
        } else if (strcmp(name, "lr-decay") == 0) {
            if (!parse_float_in(value, 0.0, 1.0, &options.learning_rate_decay))
                return usage_error(program, "--lr-decay must be a number in (0, 1], not '%s'", value);
        } else if (strcmp(name, "lr-schedule") == 0) {
            if (!parse_schedule(value, &options.lr_schedule))
                return usage_error(program, "--lr-schedule must be constant, linear or cosine, not '%s'", value);
        } else if (strcmp(name, "warmup") == 0) {
            if (!parse_int64(value, 0, INT64_MAX / 2, &options.warmup_steps))
                return usage_error(program, "--warmup must be an integer >= 0, not '%s'", value);
        } else if (strcmp(name, "label-smoothing") == 0) {
            if (!parse_unit_fraction(value, &options.label_smoothing))
                return usage_error(program, "--label-smoothing must be a number in [0, 1), not '%s'", value);
        } else if (strcmp(name, "clipnorm") == 0) {
            if (!parse_float_in(value, 0.0, 1e30, &options.global_clipnorm))
                return usage_error(program, "--clipnorm must be a positive number, not '%s'", value);
        } else if (strcmp(name, "ema") == 0) {
            if (!parse_unit_fraction(value, &options.ema_momentum) || options.ema_momentum == 0.0f)
                return usage_error(program, "--ema must be a number in (0, 1), not '%s'", value);
        } else if (strcmp(name, "dropout") == 0) {
            if (!parse_unit_fraction(value, &options.dropout))
                return usage_error(program, "--dropout must be a number in [0, 1), not '%s'", value);
        } else if (strcmp(name, "input-dropout") == 0) {
            if (!parse_unit_fraction(value, &options.input_dropout))
                return usage_error(program, "--input-dropout must be a number in [0, 1), not '%s'", value);
        } else if (strcmp(name, "validation-split") == 0) {
            if (!parse_open_fraction(value, &options.validation_split))
                return usage_error(program, "--validation-split must be a number in (0, 1), not '%s'", value);
        } else if (strcmp(name, "limit") == 0) {
            if (!parse_int64(value, 0, INT64_MAX, &options.limit))
                return usage_error(program, "--limit must be an integer >= 0, not '%s'", value);
        } else if (strcmp(name, "seed") == 0) {
            if (!parse_uint64(value, &options.seed))
                return usage_error(program, "--seed must be an integer >= 0, not '%s'", value);
        } else if (strcmp(name, "backend") == 0) {
            if (!parse_backend(value, &options.backend))
                return usage_error(program, "--backend must be auto, cpu or cuda, not '%s'", value);
        } else if (strcmp(name, "threads") == 0) {
            int64_t threads = 0;
            if (!parse_int64(value, 0, 65536, &threads))
                return usage_error(program, "--threads must be an integer >= 0, not '%s'", value);
            options.threads = (int)threads;
            options.threads_given = 1;
        } else if (strcmp(name, "json") == 0) {
            if (value[0] == '\0')
                return usage_error(program, "--json needs a file name");
            options.json_path = value;
        } else if (strcmp(name, "resume") == 0 || strcmp(name, "save-checkpoint") == 0) {
            if (value[0] == '\0')
                return usage_error(program, "--%s needs a file name", name);
            *(strcmp(name, "resume") == 0 ? &options.resume_path : &options.checkpoint_path) = value;
        }
    }
    if (options.resume_path != NULL && recorded_flag != NULL)
        return usage_error(program, "--resume takes the model and its training options from %s: %s cannot be "
                                    "given with it", options.resume_path, recorded_flag);
    /* --compare trains two runs: which one a checkpoint would be, or resume, is not said. */
    if (options.compare && (options.resume_path != NULL || options.checkpoint_path != NULL))
        return usage_error(program, "--compare trains two runs: it takes neither --resume nor --save-checkpoint");
    /* Adam and Lion keep moments of their own: a momentum given to them would be ignored, so it is refused. */
    if (options.momentum > 0.0f && (options.optimizer == MPT_OPTIMIZER_ADAM || options.optimizer == MPT_OPTIMIZER_ADAMW ||
                                    options.optimizer == MPT_OPTIMIZER_LION))
        return usage_error(program, "--momentum is SGD's and RMSprop's; --optimizer %s takes none",
                           args_optimizer_name(options.optimizer));
    /* Each epoch validates one set: the held-out rows or the test set, not both. */
    if (options.validate && options.validation_split > 0.0)
        return usage_error(program, "--validate (the test set) and --validation-split (held-out training images) "
                                    "each choose the set validated after every epoch: give one of them");

    *out = options;
    return ARGS_RUN;
}
