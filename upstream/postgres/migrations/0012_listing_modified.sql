-- Step 12: each listing's Last-Modified. modified_at is when, by the
-- database's clock in milliseconds, the gateway recorded the listing's
-- current revision: its insert (this column's default), a write of the
-- gateway, or the first read of a revision that another writer made (the
-- read that makes its response body; see sqlstore.nextModified). A new
-- revision's time is always in a later second than the one before it,
-- so that an HTTP date, which has whole seconds, tells any two revisions
-- apart. Rows that exist now take the time of this step: none was ever
-- answered with a Last-Modified. Adding the column with a constant
-- default rewrites no row; the default for later inserts is then the
-- clock, and setting it rewrites nothing either.
DO $do$
BEGIN
    EXECUTE format('ALTER TABLE listings ADD COLUMN modified_at BIGINT NOT NULL DEFAULT %s',
                   floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
END
$do$;

ALTER TABLE listings ALTER COLUMN modified_at SET DEFAULT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
