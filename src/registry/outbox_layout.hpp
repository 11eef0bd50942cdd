// The outbox row's layout (extension/tables/20_outbox.sql), for every
// reader and writer of the outbox: column indexes, 0-based as in a tuple's
// values array (attribute number = index + 1).  cell_outbox's columns end
// before OUTBOX_CELL_NAME; control_outbox adds cell_name.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

enum OutboxColumn {
    OUTBOX_ID,
    OUTBOX_SHARD_SCOPE,
    OUTBOX_SHARD_IDENTIFIER,
    OUTBOX_CATEGORY,
    OUTBOX_OBJECT_IDENTIFIER,
    OUTBOX_PAYLOAD,
    OUTBOX_SCHEDULED_FROM,
    OUTBOX_SCHEDULED_FOR,
    OUTBOX_DATE_ADDED,
    OUTBOX_CELL_NAME,
};

constexpr int outbox_natts(bool control) {
    return control ? OUTBOX_CELL_NAME + 1 : OUTBOX_CELL_NAME;
}

constexpr AttrNumber outbox_attnum(OutboxColumn column) {
    return (AttrNumber)(column + 1);
}

} // namespace pgoutbox
