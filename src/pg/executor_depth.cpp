// Plain C-style code (PG_TRY): PostgreSQL errors unwind through it.
#include "pg/executor_depth.hpp"

#include "pg/postgres.hpp"

extern "C" {
#include "executor/executor.h"
}

namespace {

int depth = 0;
ExecutorRun_hook_type previous_run = nullptr;
ExecutorFinish_hook_type previous_finish = nullptr;

void counted_run(QueryDesc *query, ScanDirection direction, uint64 count, bool execute_once) {
    int outer = depth++;
    PG_TRY();
    {
        if (previous_run != nullptr)
            previous_run(query, direction, count, execute_once);
        else
            standard_ExecutorRun(query, direction, count, execute_once);
    }
    PG_FINALLY();
    { depth = outer; }
    PG_END_TRY();
}

void counted_finish(QueryDesc *query) {
    int outer = depth++;
    PG_TRY();
    {
        if (previous_finish != nullptr)
            previous_finish(query);
        else
            standard_ExecutorFinish(query);
    }
    PG_FINALLY();
    { depth = outer; }
    PG_END_TRY();
}

} // namespace

int pgoutbox::pg::executor_depth() {
    return depth;
}

void pgoutbox::pg::install_executor_depth() {
    previous_run = ExecutorRun_hook;
    ExecutorRun_hook = counted_run;
    previous_finish = ExecutorFinish_hook;
    ExecutorFinish_hook = counted_finish;
}
