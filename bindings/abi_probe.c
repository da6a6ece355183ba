/* Prints the C sizes of the types used in mptrain.h's signatures, one "name size" per line, for the
 * bindings' ABI tests to compare with their own declarations. The C API has no public structs, so
 * sizes (and, read from the header itself, the enum values) are the whole layout to check. */
#include <stdio.h>

#include "mptrain/mptrain.h"

#define SIZE(type) printf("%s %u\n", #type, (unsigned)sizeof(type))

int main(void) {
    SIZE(int);
    SIZE(int32_t);
    SIZE(int64_t);
    SIZE(uint64_t);
    SIZE(uint8_t);
    SIZE(size_t);
    SIZE(float);
    SIZE(void*);
    SIZE(mpt_status);
    SIZE(mpt_backend);
    SIZE(mpt_dtype);
    SIZE(mpt_precision);
    SIZE(mpt_activation);
    SIZE(mpt_initializer);
    SIZE(mpt_loss);
    SIZE(mpt_optimizer);
    SIZE(mpt_lr_schedule);
    SIZE(mpt_loss_scaling);
    SIZE(mpt_log_level);
    SIZE(mpt_log_fn);
    SIZE(mpt_progress_fn);
    SIZE(mpt_epoch_end_fn);
    return 0;
}
