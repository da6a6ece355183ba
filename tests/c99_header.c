/* Compiled as C99 with -Wall -Wextra -Werror -pedantic: the public header must stay plain C, and a
 * C caller must be able to use every kind of declaration in it. */
#include <mptrain/mptrain.h>

static int progress(int64_t epoch, int64_t step, int64_t steps, float loss, float accuracy, void* user_data) {
    (void)epoch; (void)step; (void)steps; (void)loss; (void)accuracy; (void)user_data;
    return 0;
}

int mptrain_c99_header_uses(void);
int mptrain_c99_header_uses(void) {
    mpt_progress_fn callback = progress;
    mpt_status status = MPT_STATUS_OK;
    mpt_precision precision = MPT_PRECISION_MIXED_BF16;
    mpt_context_t* context = 0;
    (void)callback; (void)context;
    return (int)status + (int)precision + MPT_VERSION_MAJOR;
}
