// The cross-silo cascade (cascade.cpp): one step of a registered reference.
#pragma once

namespace pgoutbox {

// Child rows one step deletes or updates at most (outbox.cascade_chunk_size).
extern int cascade_chunk_size;

} // namespace pgoutbox
