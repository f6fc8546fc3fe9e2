package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

const signingKeyColumns = `kid, alg, public_key, added_at, signs_from, verifies_until`

// AddSigningKey inserts the key, or finds it stored: a gateway publishes
// its keys at every start, and two may start at once.
func (s *Store) AddSigningKey(ctx context.Context, k upstream.SigningKey, at time.Time) (upstream.SigningKey, error) {
	if err := k.Check(); err != nil {
		return upstream.SigningKey{}, fmt.Errorf("signing key %q: %w: %w", k.ID, err, upstream.ErrInvalid)
	}
	err := s.e.DB.Exec(ctx,
		`INSERT INTO signing_keys (kid, alg, public_key, added_at) VALUES ($1, $2, $3, $4) ON CONFLICT (kid) DO NOTHING`,
		k.ID, k.Alg, k.PublicKey, at.UnixMilli())
	if err != nil {
		return upstream.SigningKey{}, fmt.Errorf("add signing key %q: %w", k.ID, err)
	}
	stored, err := s.signingKey(ctx, k.ID)
	if err != nil {
		return upstream.SigningKey{}, err
	}
	if stored.Alg != k.Alg || !bytes.Equal(stored.PublicKey, k.PublicKey) {
		return upstream.SigningKey{}, fmt.Errorf("signing key %q: the kid names another key: %w", k.ID, upstream.ErrConflict)
	}
	return stored, nil
}

func (s *Store) SigningKeys(ctx context.Context) ([]upstream.SigningKey, error) {
	rows, err := s.e.DB.Query(ctx, `SELECT `+signingKeyColumns+` FROM signing_keys ORDER BY kid`)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	defer rows.Close()
	var out []upstream.SigningKey
	for rows.Next() {
		k, err := scanSigningKey(rows)
		if err != nil {
			return nil, fmt.Errorf("signing keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	return out, nil
}

// ActivateSigningKey writes the later of at and the signs_from of every
// key, so that the key made signer last is the one that signs even where
// clocks disagree.
func (s *Store) ActivateSigningKey(ctx context.Context, kid string, at time.Time) (upstream.SigningKey, error) {
	k, err := scanSigningKey(s.e.DB.QueryRow(ctx,
		`UPDATE signing_keys SET signs_from = (
		   SELECT CASE WHEN MAX(o.signs_from) >= $2 THEN MAX(o.signs_from) + 1 ELSE $2 END FROM signing_keys o)
		 WHERE kid = $1 AND verifies_until IS NULL
		 RETURNING `+signingKeyColumns, kid, at.UnixMilli()))
	switch {
	case err == nil:
		return k, nil
	case !errors.Is(err, sql.ErrNoRows):
		return upstream.SigningKey{}, fmt.Errorf("activate signing key %q: %w", kid, err)
	}
	if _, err := s.signingKey(ctx, kid); err != nil {
		return upstream.SigningKey{}, err
	}
	return upstream.SigningKey{}, fmt.Errorf("activate signing key %q: retired: %w", kid, upstream.ErrConflict)
}

// RetireSigningKey refuses the active key in the same statement that
// retires, so that a key made signer meanwhile is never retired.
func (s *Store) RetireSigningKey(ctx context.Context, kid string, until time.Time) (upstream.SigningKey, error) {
	k, err := scanSigningKey(s.e.DB.QueryRow(ctx,
		`UPDATE signing_keys SET verifies_until = $2
		 WHERE kid = $1 AND verifies_until IS NULL AND (signs_from IS NULL OR EXISTS (
		   SELECT 1 FROM signing_keys o WHERE o.verifies_until IS NULL AND o.signs_from IS NOT NULL AND o.kid <> $1
		     AND (o.signs_from > signing_keys.signs_from OR (o.signs_from = signing_keys.signs_from AND o.kid > $1))))
		 RETURNING `+signingKeyColumns, kid, until.UnixMilli()))
	switch {
	case err == nil:
		return k, nil
	case !errors.Is(err, sql.ErrNoRows):
		return upstream.SigningKey{}, fmt.Errorf("retire signing key %q: %w", kid, err)
	}
	stored, err := s.signingKey(ctx, kid)
	switch {
	case err != nil:
		return upstream.SigningKey{}, err
	case stored.Retired():
		return stored, nil
	}
	return upstream.SigningKey{}, fmt.Errorf("retire signing key %q: it signs; make another the signer first: %w", kid, upstream.ErrConflict)
}

func (s *Store) signingKey(ctx context.Context, kid string) (upstream.SigningKey, error) {
	k, err := scanSigningKey(s.e.DB.QueryRow(ctx, `SELECT `+signingKeyColumns+` FROM signing_keys WHERE kid = $1`, kid))
	if err != nil {
		return upstream.SigningKey{}, fmt.Errorf("signing key %q: %w", kid, notFound(err))
	}
	return k, nil
}

func scanSigningKey(r Row) (upstream.SigningKey, error) {
	var (
		k                        upstream.SigningKey
		added                    int64
		signsFrom, verifiesUntil *int64
	)
	if err := r.Scan(&k.ID, &k.Alg, &k.PublicKey, &added, &signsFrom, &verifiesUntil); err != nil {
		return upstream.SigningKey{}, err
	}
	k.AddedAt = time.UnixMilli(added)
	if signsFrom != nil {
		k.SignsFrom = time.UnixMilli(*signsFrom)
	}
	if verifiesUntil != nil {
		k.VerifiesUntil = time.UnixMilli(*verifiesUntil)
	}
	return k, nil
}
