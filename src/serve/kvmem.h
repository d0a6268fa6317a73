/* kvmem.h - the KV-memory actor: the only code that changes block tables.
 *
 * It keeps the pending queue (FIFO, bounded by cfg.max_queue: past it a request gets `busy`) and the
 * running set (at most the live batch.max_sequences). Admission reserves KV for a request's known
 * tokens and starts it in the verifier (MN_MSG_START). Before each step the verifier asks for the
 * positions it will write (MN_MSG_GROW); when the pool runs dry kvmem preempts the newest running
 * request (frees its blocks, puts it back at the head of the queue to be recomputed) instead of
 * failing. MN_MSG_FINISH frees a request's blocks and passes it to net. With nothing running and
 * nothing queued, every block is free again.
 * Thread: the engine's loop. Handler: mn_kvmem_handle (engine_impl.h).
 */
#ifndef MN_KVMEM_H
#define MN_KVMEM_H
#include "serve/engine_impl.h"
#endif
