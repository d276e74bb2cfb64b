/*
 * _procwire.h: the process executor's wire format, spoken by the loader's side (_procpool.c)
 * and by a worker process's ticket loop (_ticketloop.c; its Python rest in
 * python/stoker/_procpool.py, whose HDR and REPLY structs spell the same bytes).
 *
 * Parent -> worker: a 40-byte msg_hdr, then for a ticket `n` 64-bit offsets into the ring's memfd
 * (one per fixed leaf; an OP_TICKET_HELD's last is its row's object key, where the worker writes
 * the sample's seed once the leaves are in). Worker -> parent: a 32-byte reply_hdr, then
 * `payload` bytes (the pickled object leaves, or an error). Little-endian hosts only, as the
 * ring itself.
 */
#ifndef STK_PY_PROCWIRE_H
#define STK_PY_PROCWIRE_H

#include <stdint.h>

/* OP_TICKET_HELD: a ticket whose reply the worker may hold back while more tickets wait in its
 * socket (sent when no timeout= runs): its offsets end with that of the row's object key, where
 * the worker writes the sample's seed once the sample is in its rows (held_done) */
enum { OP_INIT = 1, OP_ARENA = 2, OP_TICKET = 3, OP_PROBE = 4, OP_TICKET_HELD = 6 };
/* ST_STARTED: the probe began a sample; ST_READY: a new worker finished starting (its set-up and
 * worker_init_fn), sent once before it reads its first request */
enum { ST_OK = 0, ST_ERROR = 1, ST_STARTED = 2, ST_READY = 3 };

typedef struct msg_hdr { /* parent -> worker, 40 bytes */
    uint32_t op, n;
    uint64_t a, b, c, d;
} msg_hdr;

typedef struct reply_hdr { /* worker -> parent, 32 bytes */
    uint32_t status, payload;
    uint64_t python_ns, mask, cpu_ns;
} reply_hdr;

#endif
