/*
 * stk_ring_setup.c: the ring's memory and the GPU path, set up once at create (docs/gpu.md):
 * open the device (for pinning or copies), place the transform's finishing (on the device when
 * the kernel loads, else on the CPU), lay out the host slot (the layout, flip flags, CPU
 * finishing output), create the device ring, allocate the slots (pinned within the cap). What
 * could not be had is noted in the stats' device_reason, never an error.
 */
#include "batch/stk_pinned.h"
#include "loader/stk_loader_int.h"

#include <inttypes.h>
#include <string.h>

/* "uint8 [224, 224, 3]" for error messages. */
static const char *tensor_desc(const stk__tlayout *t, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s [", stk_dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->ndim && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
    return buf;
}

/* Take the transform's finishing (none without one): check the field it finishes and prepare the
 * kernel arguments and CPU tables. */
static stk_status finish_setup(core *c, char *err, size_t err_size)
{
    stk__devcopy *dc = &c->dc;
    dc->fin_t = -1;
    stk__finish f = {.on = false};
    if (c->transform)
        stk__transform_finish(c->transform, &f);
    if (!f.on)
        return STK_OK;
    if (stk__sampled(c))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "a transform with finish_on_device cannot be combined with "
                              "sample_fn (the callback sees the finished sample)");
    int ti = -1;
    for (size_t i = 0; i + 1 < c->r.lay.n_tensors; i++)
        if (c->r.lay.t[i].transformed)
            ti = (int)i;
    const stk__tlayout *t = &c->r.lay.t[ti];
    char desc[96];
    if (ti < 0 || t->dtype != STK_DTYPE_UINT8 || t->ndim != 3 || t->shape[2] != 3)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "finishing needs the transform's uint8 [H, W, 3] output, not %s",
                              ti < 0 ? "none" : tensor_desc(t, desc, sizeof(desc)));
    stk_status rc = stk__finish_init(dc, &f, (uint32_t)t->shape[0], (uint32_t)t->shape[1],
                                     c->r.lay.batch_size, err, err_size);
    if (rc < 0)
        return rc;
    dc->fin_t = ti;
    dc->fin_in_offset = t->offset;
    return STK_OK;
}

/* Make tensor t of a view the finishing output at `offset`. */
static void finished_tensor(const stk__devcopy *dc, stk__tlayout *t, size_t offset)
{
    t->dtype = (stk_dtype)dc->fin.dtype;
    t->ndim = 3;
    stk__finish_shape(dc, t->shape);
    t->offset = offset;
    t->row_size = dc->fin_row;
}

/* Note why part of the GPU path is off: "what: why", "; "-separated when there are several;
 * cut at the size of the stats field. */
static void dev_note(core *c, const char *what, const char *why)
{
    const char *parts[4] = {c->dev_reason[0] ? "; " : "", what, ": ", why};
    size_t n = strlen(c->dev_reason);
    for (int i = 0; i < 4; i++) {
        size_t k = STK_MIN(strlen(parts[i]), sizeof(c->dev_reason) - 1 - n);
        memcpy(c->dev_reason + n, parts[i], k);
        n += k;
    }
    c->dev_reason[n] = '\0';
}

stk_status stk__ring_setup(core *c, const stk_loader_opts *o, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    stk__devcopy *dc = &c->dc;
    char why[STK_ERRMSG_SIZE];
    dc->pid = c->r.pid;
    dc->device = -1;
    dc->flags_offset = dc->fin_host_offset = dc->fin_dev_offset = SIZE_MAX;
    if ((rc = finish_setup(c, err, err_size)) < 0)
        return rc;
    bool finishing = dc->fin_t >= 0;
    size_t host = c->r.lay.slot_size, fsize = 0;
    if (finishing && dc->flip > 0) {
        dc->flags_offset = (size_t)STK_ALIGN_UP(host, 64);
        host = dc->flags_offset + c->r.lay.batch_size;
    }
    host = (size_t)STK_ALIGN_UP(host, 64);
    if (finishing && !stk__mul_ok(dc->fin_row, c->r.lay.batch_size, &fsize))
        return stk__set_error(err, err_size, STK_ELIMIT, "finishing output too large");
    bool want_pinned = (o->flags & STK_LOADER_PINNED) || o->device >= 0;
    if (want_pinned) {
        if (stk__cudev_open(o->device >= 0 ? o->device : 0, &c->cudev, why, sizeof(why)) ==
            STK_OK) {
            c->cudev_open = true;
        } else {
            dev_note(c,
                     o->device >= 0 ? "no device copy and pageable ring"
                                    : "pageable ring (pinned memory needs CUDA)",
                     why);
            want_pinned = false;
        }
    }
    bool pushed = c->cudev_open && stk__cudev_push(&c->cudev, err, err_size) == STK_OK;
    if (c->cudev_open && !pushed) {
        rc = STK_EIO;
        goto fail;
    }
    if (o->device >= 0 && c->cudev_open) {
        why[0] = '\0';
        if ((rc = stk__devring_create(&c->cudev, c->n_slots, host, fsize, &dc->dev, why,
                                      sizeof(why), err, err_size)) < 0)
            goto fail;
        dc->device = o->device;
        if (finishing) {
            dc->finish =
                stk__devring_can_finish(dc->dev) && !c->bops.n ? STK_FINISH_DEVICE : STK_FINISH_CPU;
            if (c->bops.n) /* MixUp/CutMix mix the finished batch on the host, before the copy */
                dev_note(c, "finishing on the CPU", "batch transforms run on the host");
            else if (dc->finish == STK_FINISH_CPU)
                dev_note(c, "finishing on the CPU", why);
        }
    } else if (finishing) {
        dc->finish = STK_FINISH_CPU;
    }
    c->r.view = c->r.lay;
    if (dc->finish == STK_FINISH_CPU) {
        /* The output follows the slot on the host; the device buffer has the same layout. */
        dc->fin_host_offset = host;
        if (__builtin_add_overflow(host, fsize, &host)) {
            rc = stk__set_error(err, err_size, STK_ELIMIT, "batch slot too large");
            goto fail;
        }
        finished_tensor(dc, &c->r.view.t[dc->fin_t], dc->fin_host_offset);
    } else if (dc->finish == STK_FINISH_DEVICE) {
        dc->fin_dev_offset = host; /* the kernel's output, past the slot in the device buffer */
    }

    uint64_t limit = !want_pinned      ? 0
                     : o->pinned_limit ? o->pinned_limit
                                       : stk__pinned_limit_default();
    uint64_t ring = (uint64_t)STK_ALIGN_UP(host, 64) * c->n_slots, held = stk__pinned_total();
    if (want_pinned && (held > limit || ring > limit - held)) {
        char msg[STK_ERRMSG_SIZE];
        snprintf(msg, sizeof(msg),
                 "%u slots of %zu bytes would take pinned memory to %" PRIu64
                 " bytes, over the %" PRIu64 "-byte cap (opts.pinned_limit or STOKER_PINNED_LIMIT)",
                 c->n_slots, host, held + ring, limit);
        dev_note(c, "pageable ring", msg);
        want_pinned = false;
    }
    why[0] = '\0';
    rc = stk__ring_alloc(&c->r, c->n_slots, host, want_pinned, limit,
                         (o->flags & STK_LOADER_SHARED_RING) != 0, dc, why, sizeof(why), err,
                         err_size);
    if (why[0])
        dev_note(c, "pageable ring", why);
    /* A batch opened takes the memory freed last, still in the cache (bench/RESULTS.md, rawpc:
     * raw records +15-28% per CPU second). Not with a device ring or pinned slots, whose
     * device buffer, pending copy and pinned flag belong to the slot. */
    c->r.reuse_hot = rc == STK_OK && !dc->dev && c->r.pinned_bytes == 0;
fail:
    if (pushed)
        stk__cudev_pop(&c->cudev);
    return rc;
}
