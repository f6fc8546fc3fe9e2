-- Step 3: listing numbers start at 1. Every row written so far has one (the
-- store never stores 0 or less), tombstones included, so the check holds
-- for existing rows; a row that breaks it stops the upgrade here.
ALTER TABLE listings ADD CONSTRAINT listings_no_positive CHECK (no > 0);
