-- Schema step 6: each listing keeps its response body (the Listing's JSON
-- as a read answers it) and that body's entity tag, made from revision
-- body_revision. A read serves them while body_revision = revision, and
-- otherwise encodes the row again and stores the result; writers other
-- than the gateway need not know of these columns. Filling them names no
-- column that the change feed watches, so the trigger now fires only for
-- writes that name one of those.

ALTER TABLE listings
    ADD COLUMN body          BYTEA,
    ADD COLUMN etag          TEXT,
    ADD COLUMN body_revision BIGINT;

DROP TRIGGER listings_change_feed ON listings;
CREATE TRIGGER listings_change_feed
    BEFORE INSERT OR DELETE OR UPDATE OF id, firm_id, no, firm_user_id, is_active, revision, document, deleted
    ON listings
    FOR EACH ROW EXECUTE FUNCTION listings_change_feed();
