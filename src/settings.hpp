// GUC-backed settings shared by the modules (defined in pg_outbox.cpp).
#pragma once

namespace pgoutbox {

enum SiloMode { SILO_MODE_MONOLITH = 0, SILO_MODE_CELL = 1, SILO_MODE_CONTROL = 2 };

extern int silo_mode; // outbox.silo_mode

enum CursorStore { CURSOR_STORE_REDIS = 0, CURSOR_STORE_TABLE = 1 };
extern int cursor_store; // outbox.cursor_store

extern char *redis_host;
extern int redis_port;
extern char *redis_password_file;
extern int redis_db;
extern int redis_connect_timeout_ms;
extern int redis_command_timeout_ms;
extern char *redis_key_prefix;
extern int backfill_rate_per_minute;
extern int backfill_min_rate_per_minute;
extern int backfill_max_shard_depth;
extern int handler_timeout_ms; // outbox.handler_timeout; 0: none
extern char *database_name;    // outbox.database_name: where the worker runs
extern bool worker_enabled;
extern bool notify_consumers; // outbox.notify_consumers
extern bool wake_on_commit;   // outbox.wake_on_commit
extern int inbox_retention_s; // outbox.inbox_retention
extern int link_batch_size;   // outbox.link_batch_size
extern int link_timeout_ms;   // outbox.link_timeout
extern int max_lease_s;       // outbox.max_lease: a claim's lease, at most
extern int naptime_ms;
extern bool self_hosted; // the worker backfills with force_synchronous

const char *silo_mode_name(int mode);

} // namespace pgoutbox
