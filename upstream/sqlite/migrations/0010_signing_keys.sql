-- Step 10: the token-signing keys' public halves and their roles, one set
-- for every gateway of a deployment. A key is added (published: it verifies
-- and the JWKS lists it), made the signer (signs_from, milliseconds since
-- 1970; of the keys in force the one made signer last signs) and retired
-- (verifies_until: it verifies until then, and no more). The private halves
-- stay in files on the gateways (package signing); public_key is PKIX DER.
-- Written by the gateways at start (their own keys) and by `gateway
-- signing-key`; read by every gateway at start and polled.

CREATE TABLE signing_keys (
    kid            TEXT    PRIMARY KEY CHECK (kid <> ''),
    alg            TEXT    NOT NULL CHECK (alg IN ('EdDSA', 'ES256')),
    public_key     BLOB    NOT NULL CHECK (length(public_key) > 0),
    added_at       INTEGER NOT NULL,
    signs_from     INTEGER,
    verifies_until INTEGER
);
