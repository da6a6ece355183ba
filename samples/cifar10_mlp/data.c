/* Locates CIFAR-10, falls back loudly to the generated set, and turns either into mptrain datasets. */
#define _POSIX_C_SOURCE 200809L

#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

static const char* const cifar10_files[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                            "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
enum { CIFAR10_FILE_COUNT = sizeof cifar10_files / sizeof cifar10_files[0] };

static int is_directory(const char* path)
{
    struct stat info;
    return stat(path, &info) == 0 && S_ISDIR(info.st_mode);
}

/* Present means "exists"; whether it is readable and well-formed is the loader's call, and a
 * failure there is an error, not a reason to fall back. */
static int file_exists(const char* directory, const char* name)
{
    char path[4200];
    struct stat info;
    snprintf(path, sizeof path, "%s/%s", directory, name);
    return stat(path, &info) == 0 && !S_ISDIR(info.st_mode);
}

static int count_present(const char* directory)
{
    int i, present = 0;
    for (i = 0; i < CIFAR10_FILE_COUNT; ++i)
        present += file_exists(directory, cifar10_files[i]);
    return present;
}

/* Whether the files a run on the first `limit` training images reads are there (0 = all): the
 * training batches that hold them and the test batch. The loader opens no others. */
static int needed_present(const char* directory, int64_t limit)
{
    const int64_t per_batch = 10000;
    int batches = CIFAR10_FILE_COUNT - 1, i;
    if (limit > 0 && limit < per_batch * batches)
        batches = (int)((limit + per_batch - 1) / per_batch);
    for (i = 0; i < batches; ++i)
        if (!file_exists(directory, cifar10_files[i]))
            return 0;
    return file_exists(directory, cifar10_files[CIFAR10_FILE_COUNT - 1]);
}

static void print_missing_warning(const data_source* source)
{
    const char* bar = "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!";
    int i, listed = 0;

    fflush(stdout);
    fprintf(stderr, "\n%s\n", bar);
    fprintf(stderr, "!! WARNING: CIFAR-10 NOT FOUND. TRAINING ON A GENERATED DATA SET INSTEAD.\n");
    fprintf(stderr, "!!\n");
    fprintf(stderr, "!! Looked in: %s\n", source->directory);
    fprintf(stderr, "!!            (from %s; the order is --data DIR, then $MPTRAIN_CIFAR10_DIR,\n",
            source->origin);
    fprintf(stderr, "!!            then %s)\n", CIFAR10_DEFAULT_DIRECTORY);
    if (!is_directory(source->directory)) {
        fprintf(stderr, "!! Problem:   that directory does not exist.\n");
    } else {
        fprintf(stderr, "!! Missing:  ");
        for (i = 0; i < CIFAR10_FILE_COUNT; ++i) {
            if (!file_exists(source->directory, cifar10_files[i])) {
                fprintf(stderr, "%s %s", listed > 0 ? "," : "", cifar10_files[i]);
                ++listed;
            }
        }
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "!!\n");
    fprintf(stderr, "!! To get the real data (a 163 MB download, checked by SHA-256):\n");
    fprintf(stderr, "!!     scripts/get-cifar10.sh          # unpacks to ./data/cifar-10-batches-bin\n");
    fprintf(stderr, "!!     scripts/get-cifar10.sh DEST     # unpacks to DEST/cifar-10-batches-bin\n");
    fprintf(stderr, "!! then run from the folder that holds ./data, or pass --data DIR, or set\n");
    fprintf(stderr, "!! MPTRAIN_CIFAR10_DIR=DIR.\n");
    fprintf(stderr, "!!\n");
    fprintf(stderr, "!! Generated set: %lld training / %lld test images of 32x32x3 uint8, 10 classes\n",
            (long long)source->train.rows, (long long)source->test.rows);
    fprintf(stderr, "!! (a random prototype per class plus noise, fixed seed). Its losses and\n");
    fprintf(stderr, "!! accuracies say NOTHING about CIFAR-10; timings per step are still meaningful.\n");
    fprintf(stderr, "%s\n\n", bar);
}

int data_locate(const char* flag_directory, int64_t limit, data_source* out)
{
    const char* environment = getenv("MPTRAIN_CIFAR10_DIR");
    const char* directory;
    int64_t train_rows = SYNTHETIC_TRAIN_ROWS;

    memset(out, 0, sizeof *out);
    if (flag_directory != NULL) {
        directory = flag_directory;
        out->origin = "--data";
    } else if (environment != NULL && environment[0] != '\0') {
        directory = environment;
        out->origin = "$MPTRAIN_CIFAR10_DIR";
    } else {
        directory = CIFAR10_DEFAULT_DIRECTORY;
        out->origin = "the default";
    }
    if (strlen(directory) >= sizeof out->directory - 32) {
        check_report_plain("data directory name too long: %s", directory);
        return 1;
    }
    snprintf(out->directory, sizeof out->directory, "%s", directory);

    if (needed_present(out->directory, limit))
        return 0;

    /* Pointing at the folder that get-cifar10.sh was given (it unpacks into a subfolder) is the
     * likeliest slip; accept it rather than train on generated data. */
    {
        char nested[sizeof out->directory];
        snprintf(nested, sizeof nested, "%s/cifar-10-batches-bin", directory);
        if (count_present(out->directory) == 0 && needed_present(nested, limit)) {
            snprintf(out->directory, sizeof out->directory, "%s", nested);
            return 0;
        }
    }

    out->generated = 1;
    if (limit > 0 && limit < train_rows)
        train_rows = limit;
    if (synthetic_generate(train_rows, 1, &out->train) != 0
        || synthetic_generate(SYNTHETIC_TEST_ROWS, 2, &out->test) != 0) {
        synthetic_free(&out->train);
        check_report_plain("out of memory while generating the replacement data set");
        return 1;
    }
    print_missing_warning(out);
    return 0;
}

void data_release(data_source* source)
{
    if (source == NULL)
        return;
    synthetic_free(&source->train);
    synthetic_free(&source->test);
}

const char* data_description(const data_source* source)
{
    return source->generated ? "generated (NOT CIFAR-10)" : "CIFAR-10";
}

int data_open(mpt_context_t* context, const data_source* source, int64_t limit, mpt_dataset_t** train,
              mpt_dataset_t** test)
{
    mpt_dataset_t* train_set = NULL;
    mpt_dataset_t* test_set = NULL;

    *train = NULL;
    *test = NULL;
    if (source->generated) {
        CHECK_MPT(mpt_dataset_create_u8(context, source->train.samples, source->train.rows, 32 * 32 * 3,
                                        source->train.labels, 10, 1.0f / 255.0f, 0.0f, &train_set),
                  "creating the generated training set");
        CHECK_MPT(mpt_dataset_create_u8(context, source->test.samples, source->test.rows, 32 * 32 * 3,
                                        source->test.labels, 10, 1.0f / 255.0f, 0.0f, &test_set),
                  "creating the generated test set");
    } else {
        CHECK_MPT(mpt_dataset_load_cifar10(context, source->directory, 1, limit, &train_set),
                  "loading the CIFAR-10 training set from %s", source->directory);
        CHECK_MPT(mpt_dataset_load_cifar10(context, source->directory, 0, 0, &test_set),
                  "loading the CIFAR-10 test set from %s", source->directory);
    }
    *train = train_set;
    *test = test_set;
    return 0;

done:
    mpt_dataset_destroy(train_set);
    mpt_dataset_destroy(test_set);
    return 1;
}
