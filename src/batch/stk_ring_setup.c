/*
 * stk_ring_setup.c: the ring's memory and its device side, set up once when its owner (the
 * loader) creates it and torn down with its last reference (docs/gpu.md): open the device (for
 * pinning or copies), place the transform's finishing (on the device when the kernel loads, else
 * on the CPU), lay out the host slot (the layout, flip flags, CPU finishing output), create the
 * device ring, allocate the slots (pinned within the cap). What could not be had is noted in
 * r->dev_reason (the stats' device_reason), never an error.
 */
#include "batch/stk_pinned.h"
#include "batch/stk_ring.h"

#include <inttypes.h>
#include <string.h>

int64_t stk__fresh_budget_test_ns = -1;

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

/* Take the transform's finishing (none when a->finish is off): check the field it finishes and
 * prepare the kernel arguments and CPU tables. */
static stk_status finish_setup(stk__ring *r, const stk__ring_args *a, char *err, size_t err_size)
{
    stk__devcopy *dc = &r->dc;
    dc->fin_t = -1;
    const stk__finish f = a->finish;
    if (!f.on)
        return STK_OK;
    if (a->sample_fn)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "a transform with finish_on_device cannot be combined with "
                              "sample_fn (the callback sees the finished sample)");
    int ti = -1;
    for (size_t i = 0; i + 1 < r->lay.n_tensors; i++)
        if (r->lay.t[i].transformed)
            ti = (int)i;
    const stk__tlayout *t = &r->lay.t[ti];
    char desc[96];
    if (ti < 0 || t->dtype != STK_DTYPE_UINT8 || t->ndim != 3 || t->shape[2] != 3)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "finishing needs the transform's uint8 [H, W, 3] output, not %s",
                              ti < 0 ? "none" : tensor_desc(t, desc, sizeof(desc)));
    stk_status rc = stk__finish_init(dc, &f, (uint32_t)t->shape[0], (uint32_t)t->shape[1],
                                     r->lay.batch_size, err, err_size);
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
static void dev_note(stk__ring *r, const char *what, const char *why)
{
    const char *parts[4] = {r->dev_reason[0] ? "; " : "", what, ": ", why};
    size_t n = strlen(r->dev_reason);
    for (int i = 0; i < 4; i++) {
        size_t k = STK_MIN(strlen(parts[i]), sizeof(r->dev_reason) - 1 - n);
        memcpy(r->dev_reason + n, parts[i], k);
        n += k;
    }
    r->dev_reason[n] = '\0';
}

stk_status stk__ring_setup(stk__ring *r, const stk__ring_args *a, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    stk__devcopy *dc = &r->dc;
    char why[STK_ERRMSG_SIZE];
    dc->pid = r->pid;
    dc->device = -1;
    dc->flags_offset = dc->fin_host_offset = dc->fin_dev_offset = SIZE_MAX;
    if ((rc = finish_setup(r, a, err, err_size)) < 0)
        return rc;
    bool finishing = dc->fin_t >= 0;
    size_t host = r->lay.slot_size, fsize = 0;
    if (finishing && dc->flip > 0) {
        dc->flags_offset = (size_t)STK_ALIGN_UP(host, 64);
        host = dc->flags_offset + r->lay.batch_size;
    }
    host = (size_t)STK_ALIGN_UP(host, 64);
    if (finishing && !stk__mul_ok(dc->fin_row, r->lay.batch_size, &fsize))
        return stk__set_error(err, err_size, STK_ELIMIT, "finishing output too large");
    bool want_pinned = a->want_pinned || a->device >= 0;
    if (want_pinned) {
        if (stk__cudev_open(a->device >= 0 ? a->device : 0, &r->cudev, why, sizeof(why)) ==
            STK_OK) {
            r->cudev_open = true;
        } else {
            dev_note(r,
                     a->device >= 0 ? "no device copy and pageable ring"
                                    : "pageable ring (pinned memory needs CUDA)",
                     why);
            want_pinned = false;
        }
    }
    bool pushed = r->cudev_open && stk__cudev_push(&r->cudev, err, err_size) == STK_OK;
    if (r->cudev_open && !pushed) {
        rc = STK_EIO;
        goto fail;
    }
    if (a->device >= 0 && r->cudev_open) {
        why[0] = '\0';
        if ((rc = stk__devring_create(&r->cudev, a->n_slots, host, fsize, &dc->dev, why,
                                      sizeof(why), err, err_size)) < 0)
            goto fail;
        dc->device = a->device;
        if (finishing) {
            dc->finish = stk__devring_can_finish(dc->dev) && !a->batch_ops ? STK_FINISH_DEVICE
                                                                           : STK_FINISH_CPU;
            if (a->batch_ops) /* MixUp/CutMix mix the finished batch on the host, before the copy */
                dev_note(r, "finishing on the CPU", "batch transforms run on the host");
            else if (dc->finish == STK_FINISH_CPU)
                dev_note(r, "finishing on the CPU", why);
        }
    } else if (finishing) {
        dc->finish = STK_FINISH_CPU;
    }
    r->view = r->lay;
    if (dc->finish == STK_FINISH_CPU) {
        /* The output follows the slot on the host; the device buffer has the same layout. */
        dc->fin_host_offset = host;
        if (__builtin_add_overflow(host, fsize, &host)) {
            rc = stk__set_error(err, err_size, STK_ELIMIT, "batch slot too large");
            goto fail;
        }
        finished_tensor(dc, &r->view.t[dc->fin_t], dc->fin_host_offset);
    } else if (dc->finish == STK_FINISH_DEVICE) {
        dc->fin_dev_offset = host; /* the kernel's output, past the slot in the device buffer */
    }

    uint64_t limit = !want_pinned      ? 0
                     : a->pinned_limit ? a->pinned_limit
                                       : stk__pinned_limit_default();
    uint64_t ring = (uint64_t)STK_ALIGN_UP(host, 64) * a->n_slots, held = stk__pinned_total();
    if (want_pinned && (held > limit || ring > limit - held)) {
        char msg[STK_ERRMSG_SIZE];
        snprintf(msg, sizeof(msg),
                 "%u slots of %zu bytes would take pinned memory to %" PRIu64
                 " bytes, over the %" PRIu64 "-byte cap (opts.pinned_limit or STOKER_PINNED_LIMIT)",
                 a->n_slots, host, held + ring, limit);
        dev_note(r, "pageable ring", msg);
        want_pinned = false;
    }
    why[0] = '\0';
    rc = stk__ring_alloc(r, a->n_slots, host, want_pinned, limit, a->shared, dc, why, sizeof(why),
                         err, err_size);
    if (why[0])
        dev_note(r, "pageable ring", why);
    /* A batch opened takes the memory freed last, still in the cache (bench/RESULTS.md, rawpc:
     * raw records +15-28% per CPU second). Not with a device ring or pinned slots, whose
     * device buffer, pending copy and pinned flag belong to the slot. */
    r->reuse_hot = rc == STK_OK && !dc->dev && r->pinned_bytes == 0;
    /* What waiting for used memory may cost in all (stk_ring.h): as long as writing one slot at
     * 0.5 GB/s takes, about what its first touch costs on this project's VM (0.1-0.6 GB/s,
     * bench/RESULTS.md issue 29); where the kernel zeroes fresh pages at memory speed (4-10 GB/s)
     * the waits cost at most that much more than the touch they may save. */
    if (r->reuse_hot)
        r->fresh_budget_ns =
            stk__fresh_budget_test_ns >= 0
                ? stk__fresh_budget_test_ns
                : (int64_t)STK_MIN((uint64_t)r->slot_alloc * 2, (uint64_t)INT64_MAX);
fail:
    if (pushed)
        stk__cudev_pop(&r->cudev);
    return rc;
}

void stk__ring_teardown(stk__ring *r)
{
    char err[STK_ERRMSG_SIZE];
    /* Device buffers and pinned memory are freed with the device context current. */
    bool pushed = r->cudev_open && stk__cudev_push(&r->cudev, err, sizeof(err)) == STK_OK;
    stk__devring_destroy(r->dc.dev);
    stk__ring_free(r);
    if (pushed)
        stk__cudev_pop(&r->cudev);
    if (r->cudev_open)
        stk__cudev_close(&r->cudev);
}
