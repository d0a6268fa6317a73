/* intake.h - the intake actor: validates a parsed request against the model, tokenizes its prompt,
 * creates its sampler and hands it to kvmem (MN_MSG_ENQUEUE), or answers it at once with an error.
 * Its handler is mn_intake_handle (declared in engine_impl.h); it keeps no state of its own.
 * Thread: the engine's loop. */
#ifndef MN_INTAKE_H
#define MN_INTAKE_H
#include "serve/engine_impl.h"
#endif
