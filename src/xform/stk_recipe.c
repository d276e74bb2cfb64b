/*
 * stk_recipe.c: the named recipes, owned here once: "imagenet-train" (RandomResizedCrop(224) +
 * RandomHorizontalFlip + Normalize(ImageNet mean/std)) and "imagenet-val" (Resize(256) +
 * CenterCrop(224) + Normalize), exactly torchvision's reference recipes, each op at stk_op_init's
 * torchvision defaults (the ImageNet sizes) and Normalize at STK_IMAGENET_MEAN/STD; and the
 * keyword-spotting recipes of the speech-commands articles (docs/audio.md): "kws-train"
 * (Resample to 16 kHz + audio.RandomCrop(1 s) + MelSpectrogram(16000, n_mels=64) +
 * FrequencyMasking(8) + TimeMasking(20)) and "kws-val" (Resample + audio.CenterCrop(1 s) +
 * MelSpectrogram). The Python
 * package and the CLI take the names, the ops and the constants from here (stk_n_recipes,
 * stk_recipe_op; stoker._core.recipes/recipe_ops/IMAGENET_MEAN).
 */
#include "xform/stk_xform.h"

#include <stdio.h>
#include <string.h>

typedef struct recipe {
    const char *name;
    size_t n_ops;
    stk_op_kind kind[5];
} recipe;

static const recipe recipes[] = {
    {"imagenet-train",
     3,
     {STK_OP_RANDOM_RESIZED_CROP, STK_OP_RANDOM_HORIZONTAL_FLIP, STK_OP_NORMALIZE}},
    {"imagenet-val", 3, {STK_OP_RESIZE, STK_OP_CENTER_CROP, STK_OP_NORMALIZE}},
    {"kws-train",
     5,
     {STK_OP_RESAMPLE, STK_OP_AUDIO_RANDOM_CROP, STK_OP_MEL_SPECTROGRAM, STK_OP_FREQUENCY_MASKING,
      STK_OP_TIME_MASKING}},
    {"kws-val", 3, {STK_OP_RESAMPLE, STK_OP_AUDIO_CENTER_CROP, STK_OP_MEL_SPECTROGRAM}},
};
#define N_RECIPES (sizeof(recipes) / sizeof(recipes[0]))

static const recipe *find(const char *name)
{
    for (size_t i = 0; name && i < N_RECIPES; i++)
        if (strcmp(recipes[i].name, name) == 0)
            return &recipes[i];
    return NULL;
}

size_t stk_n_recipes(void)
{
    return N_RECIPES;
}

const char *stk_recipe_name(size_t i)
{
    return i < N_RECIPES ? recipes[i].name : NULL;
}

size_t stk_recipe_n_ops(const char *name)
{
    const recipe *r = find(name);
    return r ? r->n_ops : 0;
}

/* Op i of recipe r at the library's size. */
static void recipe_op(const recipe *r, size_t i, stk_op *op)
{
    static const float mean[3] = STK_IMAGENET_MEAN, std[3] = STK_IMAGENET_STD;
    stk_op_init(op, r->kind[i]);
    if (r->kind[i] == STK_OP_NORMALIZE) {
        memcpy(op->mean, mean, sizeof(mean));
        memcpy(op->std, std, sizeof(std));
    }
    if (r->kind[i] == STK_OP_MEL_SPECTROGRAM)
        op->n_mels =
            64; /* Resample's new_freq, the crops' 1 s, MelSpectrogram's 16 kHz: defaults */
    if (r->kind[i] == STK_OP_FREQUENCY_MASKING)
        op->mask_param = 8;
    if (r->kind[i] == STK_OP_TIME_MASKING)
        op->mask_param = 20;
}

/* "imagenet-train, imagenet-val, ..." */
static const char *names(void)
{
    static char buf[256];
    size_t at = 0;
    for (size_t i = 0; i < N_RECIPES && at < sizeof(buf); i++)
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%s", i ? ", " : "", recipes[i].name);
    return buf;
}

stk_status stk_recipe_op(const char *name, size_t i, stk_op *out)
{
    const recipe *r = find(name);
    if (!r || i >= r->n_ops || !out)
        return stk__set_last_error(STK_EINVAL, "recipe '%s' has no op %zu (recipes: %s)",
                                   name ? name : "(null)", i, names());
    stk_op full;
    recipe_op(r, i, &full);
    return stk__out_store(out, &full, sizeof(full)) ? STK_OK : STK_EINVAL; /* the caller's size */
}

stk_status stk_transform_recipe(const char *name, bool exact, stk_transform **out)
{
    if (out)
        *out = NULL;
    const recipe *r = find(name);
    if (!r)
        return stk__set_last_error(STK_EINVAL, "unknown transform recipe '%s' (known: %s)",
                                   name ? name : "(null)", names());
    stk_op ops[5];
    for (size_t i = 0; i < r->n_ops; i++)
        recipe_op(r, i, &ops[i]);
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.exact = exact;
    o.ops = ops;
    o.n_ops = r->n_ops;
    return stk_transform_create(&o, out);
}
