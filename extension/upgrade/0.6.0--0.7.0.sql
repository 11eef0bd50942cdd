-- pg_outbox 0.6.0 to 0.7.0: what changes in tables, types and other state.
-- make appends extension/functions/*.sql, which replaces every function,
-- view and event trigger and grants the privileges again.
\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- The options are C (src/options/option_functions.cpp); their value check
-- with them.
DROP FUNCTION outbox._check_option(text, jsonb, text);
