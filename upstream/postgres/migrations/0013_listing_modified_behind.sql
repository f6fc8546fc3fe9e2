-- Step 13: an inserted listing's Last-Modified is two seconds behind the
-- clock, as every later revision's is (sqlstore.nextModified): the first
-- two revisions within any second then both have dates that the Date of
-- an answer, which lags the clock by up to a second, has already passed,
-- and the gateway sends them at once (RFC 9110 §8.8.2.1: never a date
-- later than the answer's). Setting a default rewrites no row.
ALTER TABLE listings ALTER COLUMN modified_at SET DEFAULT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 2000;
