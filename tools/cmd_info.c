/* cmd_info.c - `tgrad info PATH`: describe a safetensors file or checkpoint (tensors, shapes,
 * dtypes, metadata) or an .npy file. */
#include "cli.h"
#include "tgrad_io.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: tgrad info PATH   (a .safetensors file, checkpoint or .npy file)\n");
        return argc < 2 ? 2 : 0;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    int rc = 1;
    const char *path = argv[1];
    size_t len = strlen(path);
    char b[128];
    if (len > 4 && !strcmp(path + len - 4, ".npy")) {
        tg_npy_kind k;
        tg_tensor *t = tg_npy_read(ctx, path, TG_F64, &k);
        if (!t) {
            fprintf(stderr, "tgrad info: %s\n", tg_ctx_message(ctx));
            goto out;
        }
        printf("%s: .npy %s array %s, %lld elements\n", path,
               k == TG_NPY_BOOL ? "bool" : k == TG_NPY_INT ? "integer" : "float",
               tg_tensor_shape_str(t, b, sizeof b), (long long)tg_tensor_numel(t));
        rc = 0;
        goto out;
    }
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    if (!st) {
        fprintf(stderr, "tgrad info: %s\n", tg_ctx_message(ctx));
        goto out;
    }
    long long total = 0;
    printf("%s: safetensors, %lld tensors\n", path, (long long)tg_safetensors_count(st));
    for (int64_t i = 0; i < tg_safetensors_count(st); i++) {
        tg_tensor *t = tg_safetensors_tensor(st, i);
        total += tg_tensor_numel(t);
        printf("  %-40s %-4s %s\n", tg_safetensors_name(st, i), tg_safetensors_file_dtype(st, i),
               tg_tensor_shape_str(t, b, sizeof b));
    }
    printf("  %lld elements in all\n", total);
    if (tg_safetensors_meta_count(st)) {
        printf("metadata:\n");
        for (int64_t i = 0; i < tg_safetensors_meta_count(st); i++) {
            const char *v = tg_safetensors_meta_value(st, i);
            printf("  %-24s %.*s%s\n", tg_safetensors_meta_key(st, i), 72, v,
                   strlen(v) > 72 ? "..." : "");
        }
    }
    rc = 0;
out:
    tg_ctx_free(ctx);
    return rc;
}
