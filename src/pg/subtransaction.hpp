// A piece of work whose failure is the caller's to handle: it runs in an
// internal subtransaction of its own, as PL/pgSQL's exception blocks do, so
// that rolling it back restores the user, the security context, the GUC
// nest level and the locks it took (PLATFORM-NOTES: a bare PG_CATCH that
// goes on would leave them as the failed code set them).
#pragma once

#include "pg/guard.hpp"

namespace pgoutbox::pg {

// Runs fn in a subtransaction.  An ERROR for which caught(error) is true is
// rolled back and returned (a copy in the caller's memory context); any
// other is raised again.  NULL when fn finished.  fn must write nothing
// that needs a subtransaction XID to be cheap (reads take none).
template <typename Fn, typename Caught> ErrorData *in_subtransaction(Fn &&fn, Caught &&caught) {
    MemoryContext caller = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    ErrorData *volatile failure = nullptr;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(caller);
    PG_TRY();
    {
        fn();
        ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(caller);
        CurrentResourceOwner = owner;
    }
    PG_CATCH();
    {
        forget_abandoned_frames();
        MemoryContextSwitchTo(caller);
        ErrorData *error = CopyErrorData();
        if (!caught(error))
            PG_RE_THROW();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(caller);
        CurrentResourceOwner = owner;
        failure = error;
    }
    PG_END_TRY();
    return failure;
}

} // namespace pgoutbox::pg
