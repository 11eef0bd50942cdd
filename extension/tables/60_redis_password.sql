------------------------------------------------------------------------------
-- The Redis password is no longer a setting
------------------------------------------------------------------------------
-- 0.4.0 had outbox.redis_password; a copy set with ALTER DATABASE or ALTER
-- ROLE ... SET stays readable by every role in pg_db_role_setting, also
-- after the extension was dropped and created again.  ALTER ... RESET cannot
-- name it any more (outbox is a reserved prefix), so the entries go directly.
UPDATE pg_catalog.pg_db_role_setting s
   SET setconfig = ARRAY(SELECT c FROM unnest(s.setconfig) c
                          WHERE c NOT LIKE 'outbox.redis\_password=%')
 WHERE EXISTS (SELECT FROM unnest(s.setconfig) c WHERE c LIKE 'outbox.redis\_password=%');
DELETE FROM pg_catalog.pg_db_role_setting s WHERE s.setconfig = '{}';
