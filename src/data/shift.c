/* shift.c - tg_shift_right (include/tgrad_data.h): teacher forcing's decoder inputs. */
#include "tgrad_data.h"

void tg_shift_right(int64_t B, int64_t T, const int32_t *labels, int32_t bos, int32_t *dec)
{
    for (int64_t b = 0; b < B; b++) {
        dec[b * T] = bos;
        for (int64_t t = 1; t < T; t++)
            dec[b * T + t] = labels[b * T + t - 1];
    }
}
