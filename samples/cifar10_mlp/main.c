/* mptrain-cifar10: trains and evaluates the CIFAR-10 MLP (3072-3000-1000-10, SGD by default) through mptrain's
 * C API, optionally fp32 against mixed precision back to back (--compare). Run with --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mptrain/mptrain.h>

#include "args.h"
#include "data.h"
#include "destination.h"
#include "interrupt.h"
#include "report.h"
#include "run.h"

/* --compare trains fp32 against the user's mixed policy, or bf16 when the request resolves to fp32
 * (e.g. auto on the CPU): a comparison of fp32 with itself would tell nothing. */
static int choose_mixed_precision(const cli_options* options, mpt_precision* out)
{
    mpt_precision resolved = MPT_PRECISION_FP32;
    mpt_backend backend = MPT_BACKEND_CPU;
    if (run_resolve_precision(options, options->precision, &resolved, &backend) != 0)
        return 1;
    *out = resolved == MPT_PRECISION_FP32 ? MPT_PRECISION_MIXED_BF16 : resolved;
    return 0;
}

int main(int argc, char** argv)
{
    cli_options options;
    data_source data;
    run_result first, second;
    json_destination json = {0};
    int failed = 1;

    switch (args_parse(argc, argv, &options)) {
    case ARGS_RUN: break;
    case ARGS_HELP: return EXIT_SUCCESS;
    case ARGS_ERROR: return 2;
    }

    memset(&data, 0, sizeof data);
    if (options.json_path != NULL && json_destination_open(&json, options.json_path) != 0)
        return EXIT_FAILURE;
    if (options.checkpoint_path != NULL && destination_check("--save-checkpoint", options.checkpoint_path) != 0)
        goto done;
    if (data_locate(options.data_directory, options.limit, &data) != 0)
        goto done;

    if (!options.compare) {
        if (run_training(&options, options.precision, &data, &first) != 0)
            goto done;
        if (options.json_path != NULL && report_write_json(&json, &options, &data, &first, NULL) != 0)
            goto done;
    } else {
        mpt_precision mixed = MPT_PRECISION_MIXED_BF16;
        if (choose_mixed_precision(&options, &mixed) != 0)
            goto done;
        printf("== fp32 ==\n");
        if (run_training(&options, MPT_PRECISION_FP32, &data, &first) != 0)
            goto done;
        printf("\n== %s ==\n", args_precision_name(mixed));
        if (run_training(&options, mixed, &data, &second) != 0)
            goto done;
        report_compare(&first, &second);
        if (options.json_path != NULL && report_write_json(&json, &options, &data, &first, &second) != 0)
            goto done;
    }
    if (data.generated)
        fprintf(stderr, "warning: these results come from the GENERATED data set, not CIFAR-10 "
                        "(see the warning above)\n");
    failed = 0;

done:
    json_destination_abandon(&json); /* after a failure: an earlier report stays as it was */
    data_release(&data);
    interrupt_end_program(); /* a caught Ctrl-C ends the program by it, as a shell expects */
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
