-- Step 7: token revocations. A row says that the tokens of one user of a
-- firm (firm_user_id > 0), or of every user of the firm (firm_user_id = 0),
-- issued at or before revoked_at are no longer valid. revoked_at is in
-- milliseconds since 1970, by the clock of the process that revoked (the
-- gateway's CLI), which must agree with the gateways' clocks. Written by
-- `gateway user disable`, `gateway firm rotate-key` and `gateway token
-- revoke`; a later revocation of the same scope keeps the later time. Every
-- gateway loads the rows still in force when it starts and polls the table
-- (the index); a row older than the longest token lifetime plus the leeway
-- names only expired tokens and is pruned.

CREATE TABLE token_revocations (
    firm_id      INTEGER NOT NULL REFERENCES firms (id),
    firm_user_id INTEGER NOT NULL DEFAULT 0 CHECK (firm_user_id >= 0),
    revoked_at   INTEGER NOT NULL,
    PRIMARY KEY (firm_id, firm_user_id)
);

CREATE INDEX token_revocations_revoked_at ON token_revocations (revoked_at);
