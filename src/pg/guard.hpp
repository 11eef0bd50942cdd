// The C++/PostgreSQL boundary, guarded both ways.
//
// 1. No C++ exception may reach PostgreSQL: every extern "C" entry point runs
//    its body inside cpp_entry(), which catches everything and raises the SQL
//    error only after the catch block has been left (so the exception object
//    is destroyed before the longjmp).
// 2. No PostgreSQL error may unwind through a C++ frame that owns objects
//    with destructors. Code that holds such objects calls PostgreSQL through
//    pg_call(), which catches the longjmp and rethrows it as PgError; the
//    entry wrapper turns PgError back into the original error (same SQLSTATE,
//    message, detail and hint). Code that holds no such objects (the capture
//    hot path is written that way on purpose) may call PostgreSQL directly.
#pragma once

#include "pg/postgres.hpp"

#include <exception>
#include <new>
#include <type_traits>
#include <string>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace pgoutbox::pg {

// PostgreSQL leaves frames by siglongjmp.  Under AddressSanitizer loaded with
// the library rather than preloaded (test/sanitize.sh), that siglongjmp is
// libc's, not ASan's, so the frames it abandoned keep their poisoned
// redzones, and code that later runs at those addresses would be reported.
// Called where pg_outbox's code starts running (entry points) and where it
// resumes after a longjmp (PG_CATCH): it clears the stack below.
inline void forget_abandoned_frames() {
#if defined(__SANITIZE_ADDRESS__)
    __asan_handle_no_return();
#endif
}

// A PostgreSQL error caught by pg_call(), carried as a C++ exception.
class PgError : public std::exception {
  public:
    explicit PgError(ErrorData *edata) : edata_(edata) {}
    const char *what() const noexcept override {
        return edata_->message ? edata_->message : "PostgreSQL error";
    }
    ErrorData *edata() const {
        return edata_;
    }

  private:
    ErrorData *edata_;
};

// An error raised from C++ code with its own SQLSTATE.
class SqlError : public std::exception {
  public:
    SqlError(int sqlstate, std::string message, std::string hint = {})
        : sqlstate_(sqlstate), message_(std::move(message)), hint_(std::move(hint)) {}
    const char *what() const noexcept override {
        return message_.c_str();
    }
    int sqlstate() const {
        return sqlstate_;
    }
    const std::string &hint() const {
        return hint_;
    }

  private:
    int sqlstate_;
    std::string message_;
    std::string hint_;
};

// Raises the SQL error described by the pieces copied out of a C++ exception.
[[noreturn]] void raise_copied_error(int sqlstate, const char *message, const char *hint);

// s as a palloc'd text, in a way that cannot raise a PostgreSQL error
// (std::bad_alloc instead): for a C++ frame that still owns s.
text *text_of(const std::string &s);

// Runs a PostgreSQL call; a PostgreSQL error comes back as PgError.
template <typename Fn> void pg_call_void(Fn &&fn) {
    MemoryContext caller_context = CurrentMemoryContext;
    ErrorData *volatile edata = nullptr;
    PG_TRY();
    { fn(); }
    PG_CATCH();
    {
        forget_abandoned_frames();
        MemoryContextSwitchTo(caller_context);
        edata = CopyErrorData();
        FlushErrorState();
    }
    PG_END_TRY();
    if (edata != nullptr)
        throw PgError(edata);
}

template <typename Fn> auto pg_call(Fn &&fn) -> decltype(fn()) {
    using Result = decltype(fn());
    if constexpr (std::is_void_v<Result>) {
        pg_call_void(std::forward<Fn>(fn));
    } else {
        Result result{};
        pg_call_void([&] { result = fn(); });
        return result;
    }
}

// Body of every extern "C" entry point.
template <typename Fn> Datum cpp_entry(Fn &&fn) noexcept {
    ErrorData *pg_error = nullptr;
    int sqlstate = ERRCODE_INTERNAL_ERROR;
    // Fixed buffers: nothing that needs a destructor may outlive the catch.
    char message[1024] = "unknown C++ exception";
    char hint[512] = "";
    try {
        return fn();
    } catch (const PgError &e) {
        pg_error = e.edata();
    } catch (const SqlError &e) {
        sqlstate = e.sqlstate();
        strlcpy(message, e.what(), sizeof message);
        strlcpy(hint, e.hint().c_str(), sizeof hint);
    } catch (const std::bad_alloc &) {
        sqlstate = ERRCODE_OUT_OF_MEMORY;
        strlcpy(message, "out of memory in pg_outbox", sizeof message);
    } catch (const std::exception &e) {
        strlcpy(message, e.what(), sizeof message);
    } catch (...) {
    }
    if (pg_error != nullptr)
        ReThrowError(pg_error);
    raise_copied_error(sqlstate, message, hint);
}

} // namespace pgoutbox::pg

// Declares the fmgr entry point NAME, whose body is NAME_impl(fcinfo) run
// inside cpp_entry().
#define OUTBOX_FUNCTION(NAME)                                                                      \
    static Datum NAME##_impl(FunctionCallInfo fcinfo);                                             \
    extern "C" {                                                                                   \
    PG_FUNCTION_INFO_V1(NAME);                                                                     \
    Datum NAME(PG_FUNCTION_ARGS) {                                                                 \
        pgoutbox::pg::forget_abandoned_frames();                                                   \
        return pgoutbox::pg::cpp_entry([fcinfo] { return NAME##_impl(fcinfo); });                  \
    }                                                                                              \
    }                                                                                              \
    static Datum NAME##_impl([[maybe_unused]] FunctionCallInfo fcinfo)
