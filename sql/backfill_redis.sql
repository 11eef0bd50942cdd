-- Backfill with outbox.cursor_store = redis.
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'redis';
-- A fresh key namespace in Redis for this run, and a schema for its tables.
SELECT set_config('outbox.redis_key_prefix', 'regress:' || txid_current() || ':', false) <> '' AS prefixed;
CREATE SCHEMA backfill_redis;
SET search_path = backfill_redis, public;
\i test/scenarios/backfill_scenarios.sql
