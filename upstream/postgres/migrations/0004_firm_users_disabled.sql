-- Step 4: disabled users. An operator's `gateway user disable` sets
-- disabled; the lookup that login uses skips such a user, so that it
-- answers as for an unknown e-mail. The row stays: its listings keep their
-- owner, and the e-mail stays taken within the firm. Existing users are
-- enabled.
ALTER TABLE firm_users ADD COLUMN disabled BOOLEAN NOT NULL DEFAULT false;
