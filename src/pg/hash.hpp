// A backend-local hash table keyed by the bytes of a plain struct.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::pg {

// Entries of entrysize bytes that begin with their key of keysize bytes,
// allocated in context; nelem is the expected count.
inline HTAB *blob_hash(const char *name, long nelem, Size keysize, Size entrysize,
                       MemoryContext context) {
    HASHCTL ctl;
    memset(&ctl, 0, sizeof ctl);
    ctl.keysize = keysize;
    ctl.entrysize = entrysize;
    ctl.hcxt = context;
    return hash_create(name, nelem, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

} // namespace pgoutbox::pg
