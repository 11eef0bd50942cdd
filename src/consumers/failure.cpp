// outbox.fail() (docs/consumers.md): a claim taken back (claims.hpp), its
// messages before the failed one delivered, the failed one backed off as
// after a handler's failure.  Runs as the extension's owner.  Plain C-style
// code: PostgreSQL errors unwind through it.
#include "consumers/claims.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/builtins.h"
}

using namespace pgoutbox;

// outbox.fail(claim, message_number, error): the messages before it were
// delivered; it failed with error, as after a handler's failure.
OUTBOX_FUNCTION(outbox_fail) {
    for (int i = 0; i < 3; i++)
        if (PG_ARGISNULL(i))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", i == 0   ? "claim"
                                                          : i == 1 ? "message_number"
                                                                   : "error")));
    int64 token = PG_GETARG_INT64(0);
    int32 number = PG_GETARG_INT32(1);
    char *error = text_to_cstring(PG_GETARG_TEXT_PP(2));
    if (number < 1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("message_number must be 1 or more, not %d", number)));
    if (error[0] == '\0')
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("error must not be empty"),
                        errhint("It is what outbox.shard_depth shows as the shard's last error.")));
    Oid role = GetUserId();
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Claim *claim = take_claims(&token, 1, role);
    if (number > claim->nmessages)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("message_number is %d, but claim " INT64_FORMAT " holds %d messages",
                               number, token, claim->nmessages)));
    deliver_claimed(claim, number - 1, GetCurrentTimestamp());
    ClaimedRows failing = claimed_rows(claim, number - 1, number);
    fail_claimed_message(&failing, claim->message_categories[number - 1],
                         claim->objects[number - 1], error);
    pg::run_as_end(&scope);
    SPI_finish();
    PG_RETURN_VOID();
}
