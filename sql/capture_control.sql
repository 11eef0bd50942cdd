-- Control-silo tables fan out: one row per target cell.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('USER_SCOPE', 1);
SELECT outbox.register_category('API_TOKEN_UPDATE', 'USER_SCOPE', 20);
SELECT outbox.register_category('USER_UPDATE', 'USER_SCOPE', 21);

-- No cell column: every registered cell.
CREATE TABLE users (id int PRIMARY KEY, name text);
SELECT outbox.register_table('users', 'USER_UPDATE', 'control', payload_columns => '{name}');
-- With none registered, a write is a clear error, not a silent drop.
INSERT INTO users VALUES (1, 'nobody to tell');
SELECT count(*) AS users_rows FROM users;

SELECT outbox.register_cell('us');
SELECT outbox.register_cell('de');
INSERT INTO users VALUES (1, 'alice');
-- A cell registered later is a target for later writes.
SELECT outbox.register_cell('eu2');
UPDATE users SET name = 'alice2';
SELECT outbox.unregister_cell('eu2');
DELETE FROM users;

-- A cell column: that one cell; moving to another cell writes both.
CREATE TABLE api_tokens (id bigint PRIMARY KEY, user_id int NOT NULL, cell varchar(20) NOT NULL,
                         token text);
SELECT outbox.register_table('api_tokens', 'API_TOKEN_UPDATE', 'control', shard_column => 'user_id',
                             cell_column => 'cell');
INSERT INTO api_tokens VALUES (1, 7, 'us', 't1'), (2, 7, 'de', 't2');
UPDATE api_tokens SET cell = 'de' WHERE id = 1;
UPDATE api_tokens SET token = 't2b' WHERE id = 2;
TRUNCATE api_tokens;

SELECT shard_scope AS scope, shard_identifier AS shard, category AS cat,
       object_identifier AS object, cell_name, payload
  FROM outbox.control_outbox ORDER BY id;
SELECT count(*) AS cell_outbox_rows FROM outbox.cell_outbox;
