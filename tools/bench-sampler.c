/* bench-sampler.c - what choosing a token costs on the host over a SmolLM2-sized vocabulary
 * (49,152 logits): the argmax against the plain loop it replaced, and nucleus sampling at
 * temperature 0.8 with top_p 1, 0.95 and 0.9. Not part of the build; against a build's library:
 *
 *   gcc -O2 -Isrc -Ibuild tools/bench-sampler.c build/libminions.a -o /tmp/bench-sampler \
 *       -lm -lpthread -ljemalloc -L/usr/local/cuda/lib64 -lcudart -lstdc++ && /tmp/bench-sampler
 *
 * (the CUDA libraries where the build has CUDA, as configure's default does when nvcc is found)
 *
 * Two logit shapes: Gaussian (standard deviation 3, a peaked distribution as a trained model's)
 * and flat (5 u^3 - 2 for u uniform in [0, 1], as a random-weight model's), 64 rows each for the
 * argmax, 50 draws for the sampler; microseconds per row (token), three rounds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/sampler.h"
#include "util/clock.h"

enum { V = 49152, ROWS = 64, DRAWS = 50 };

/* The argmax as it was: each step compares against x[best], a load that waits on the last step. */
static int32_t plain_argmax(const float *x, uint32_t n)
{
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

static float uniform(void) { return ((float)rand() + 1.0f) / ((float)RAND_MAX + 2.0f); }

int main(void)
{
    float *l = malloc(sizeof(float) * V * ROWS);
    if (!l)
        return 1;
    srand(1);
    for (int shape = 0; shape < 2; shape++) {
        for (size_t i = 0; i < (size_t)V * ROWS; i++) {
            float u = uniform(), w = uniform();
            l[i] = shape == 0 ? 3.0f * sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * w) : 5.0f * u * u * u - 2.0f;
        }
        printf("%s logits\n", shape == 0 ? "gaussian" : "flat");
        for (int round = 0; round < 3; round++) {
            volatile int32_t sink = 0;
            double t0 = mn_now();
            for (int r = 0; r < ROWS; r++)
                sink += plain_argmax(l + (size_t)r * V, V);
            double t1 = mn_now();
            for (int r = 0; r < ROWS; r++)
                sink += mn_argmax(l + (size_t)r * V, V);
            double t2 = mn_now();
            printf("  argmax: plain loop %6.1f us, mn_argmax %6.1f us", (t1 - t0) / ROWS * 1e6, (t2 - t1) / ROWS * 1e6);
            const float tops[] = {1.0f, 0.95f, 0.9f};
            for (int k = 0; k < 3; k++) {
                mn_sampler_params p = {.temperature = 0.8f, .top_p = tops[k], .seed = 1};
                mn_sampler *s;
                if (mn_sampler_new(V, &p, &s) != MN_OK)
                    return 1;
                double t = mn_now();
                for (int d = 0; d < DRAWS; d++)
                    sink += mn_sampler_next(s, l + (size_t)(d % ROWS) * V);
                printf("   top_p %.2f %7.1f us", tops[k], (mn_now() - t) / DRAWS * 1e6);
                mn_sampler_free(s);
            }
            printf("\n");
        }
    }
    free(l);
    return 0;
}
