#include "pg/guard.hpp"

namespace pgoutbox::pg {

void raise_copied_error(int sqlstate, const char *message, const char *hint) {
    ereport(ERROR,
            (errcode(sqlstate), errmsg("%s", message), hint[0] != '\0' ? errhint("%s", hint) : 0));
    pg_unreachable();
}

text *text_of(const std::string &s) {
    if (s.size() > MaxAllocSize - VARHDRSZ)
        throw std::bad_alloc();
    auto *result = (text *)palloc_extended(s.size() + VARHDRSZ, MCXT_ALLOC_NO_OOM);
    if (result == nullptr)
        throw std::bad_alloc();
    SET_VARSIZE(result, s.size() + VARHDRSZ);
    memcpy(VARDATA(result), s.data(), s.size());
    return result;
}

} // namespace pgoutbox::pg
