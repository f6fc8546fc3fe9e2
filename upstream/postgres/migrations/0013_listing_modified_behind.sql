-- Step 13: an inserted listing's Last-Modified is a second behind the
-- clock, as every later revision's is (sqlstore.nextModified): the first
-- two revisions within any second then both have dates already past, and
-- the gateway sends them at once (RFC 9110 §8.8.2.1: never a date later
-- than the answer's). Setting a default rewrites no row.
ALTER TABLE listings ALTER COLUMN modified_at SET DEFAULT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1000;
