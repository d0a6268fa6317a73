/* dtype.c - the table of ggml types. */
#include "model/dtype.h"

static const mn_dtype_info g_types[] = {
    [MN_F32] = {"F32", 1, 4, 1},
    [MN_F16] = {"F16", 1, 2, 1},
    [MN_Q4_0] = {"Q4_0", 32, 18, 1},
    [MN_Q4_1] = {"Q4_1", 32, 20, 1},
    [MN_Q5_0] = {"Q5_0", 32, 22, 0},
    [MN_Q5_1] = {"Q5_1", 32, 24, 0},
    [MN_Q8_0] = {"Q8_0", 32, 34, 1},
    [MN_Q8_1] = {"Q8_1", 32, 36, 0},
    [MN_Q2_K] = {"Q2_K", 256, 84, 0},
    [MN_Q3_K] = {"Q3_K", 256, 110, 0},
    [MN_Q4_K] = {"Q4_K", 256, 144, 0},
    [MN_Q5_K] = {"Q5_K", 256, 176, 0},
    [MN_Q6_K] = {"Q6_K", 256, 210, 0},
    [MN_Q8_K] = {"Q8_K", 256, 292, 0},
    [MN_BF16] = {"BF16", 1, 2, 0},
};

const mn_dtype_info *mn_dtype_get(uint32_t t)
{
    if (t >= sizeof g_types / sizeof g_types[0] || g_types[t].name == NULL)
        return NULL;
    return &g_types[t];
}
