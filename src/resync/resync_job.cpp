// Reading a re-sync job and the SQL of its rows (resync_job.hpp).  Plain
// C-style code: PostgreSQL errors unwind through it.
#include "resync/resync_job.hpp"

#include "pg/spi.hpp"

namespace pgoutbox {

void load_resync_job(int64 id, ResyncJob *job) {
    Oid types[1] = {INT8OID};
    Datum args[1] = {Int64GetDatum(id)};
    static SPIPlanPtr plan = nullptr;
    uint64 n = pg::spi_run_kept(
        &plan, "reading the re-sync job",
        "SELECT j.target, j.relid, j.low, j.up, j.shard_identifier,"
        " j.organization, j.state OPERATOR(pg_catalog.=) 'running', j.rows_done, j.rows_total"
        " FROM outbox.resync_jobs j WHERE j.id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
        1, types, args, nullptr, false, SPI_OK_SELECT);
    if (n == 0)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("re-sync job %lld does not exist", (long long)id)));
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    bool isnull;
    const char *target = SPI_getvalue(row, desc, 1);
    job->id = id;
    job->target = strcmp(target, "ids") == 0     ? ResyncTarget::Ids
                  : strcmp(target, "range") == 0 ? ResyncTarget::Range
                  : strcmp(target, "shard") == 0 ? ResyncTarget::Shard
                                                 : ResyncTarget::Organization;
    Datum relid = SPI_getbinval(row, desc, 2, &isnull);
    job->relid = isnull ? InvalidOid : DatumGetObjectId(relid);
    auto int8_or_zero = [&](int column) {
        Datum value = SPI_getbinval(row, desc, column, &isnull);
        return isnull ? (int64)0 : DatumGetInt64(value);
    };
    job->low = int8_or_zero(3);
    job->up = int8_or_zero(4);
    job->shard_identifier = int8_or_zero(5);
    job->organization = int8_or_zero(6);
    job->running = DatumGetBool(SPI_getbinval(row, desc, 7, &isnull));
    job->rows_done = int8_or_zero(8);
    job->rows_total = int8_or_zero(9);
}

const char *resync_span_condition(Relation rel, const TableMeta *meta, const ResyncJob &job,
                                  int64 *low, int64 *up) {
    if (job.target == ResyncTarget::Range) {
        *low = job.low;
        *up = job.up;
        return "t.id OPERATOR(pg_catalog.>=) $1 AND t.id OPERATOR(pg_catalog.<=) $2";
    }
    *low = PG_INT64_MIN;
    *up = PG_INT64_MAX;
    // A table without a shard column is sharded by its id.
    AttrNumber shard =
        meta->shard_attnum != InvalidAttrNumber ? meta->shard_attnum : meta->id_attnum;
    return psprintf(
        "t.id OPERATOR(pg_catalog.>=) $1 AND t.id OPERATOR(pg_catalog.<=) $2"
        " AND t.%s OPERATOR(pg_catalog.=) $3",
        quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), shard - 1)->attname)));
}

bool resync_table_registered(Oid relid) {
    Oid types[1] = {OIDOID};
    Datum args[1] = {ObjectIdGetDatum(relid)};
    static SPIPlanPtr plan = nullptr;
    return pg::spi_run_kept(&plan, "reading the registration",
                            "SELECT FROM outbox.registered_tables r"
                            " WHERE r.relid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass",
                            1, types, args, nullptr, true, SPI_OK_SELECT) == 1;
}

} // namespace pgoutbox
