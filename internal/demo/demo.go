// Package demo seeds an empty embedded store with demo data, so that a
// first run without settings has something to serve, and writes what a
// client needs to log in to it into the data directory. Seed runs once, at
// start, before the store is shared.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/upstream"
)

// CredentialsFile, in the data directory, holds what a client needs to
// log in to the demo data: the API key and password never reach the log.
const CredentialsFile = "demo-credentials.json"

// Seed fills an empty embedded store with a demo firm, two users (one
// with a password, one passwordless) and a few listings, and writes what a
// client needs to log in to CredentialsFile in dataDir, readable by
// the owner only. It never runs against PostgreSQL.
func Seed(ctx context.Context, store upstream.Store, dataDir string, log *slog.Logger) error {
	empty, err := store.Empty(ctx)
	if err != nil || !empty {
		return err
	}
	key, err := gateway.NewAPIKey()
	if err != nil {
		return err
	}
	password, err := newPassword()
	if err != nil {
		return err
	}
	firm, err := store.AddFirm(ctx, "Demo Realty", gateway.KeyDigest(key))
	if err != nil {
		return err
	}
	hash, err := gateway.HashPassword(password)
	if err != nil {
		return err
	}
	agent, err := store.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "agent@demo.example", PasswordHash: hash})
	if err != nil {
		return err
	}
	if _, err := store.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "otp@demo.example"}); err != nil {
		return err
	}
	if _, err := store.ImportListings(ctx, Listings(firm.ID, agent.ID)); err != nil {
		return err
	}
	creds, err := json.MarshalIndent(map[string]any{"firmId": firm.ID, "apiKey": key,
		"passwordUser": "agent@demo.example", "password": password, "passwordlessUser": "otp@demo.example"}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, CredentialsFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("demo credentials: %w", err)
	}
	if err := os.WriteFile(path, append(creds, '\n'), 0o600); err != nil {
		return fmt.Errorf("demo credentials: %w", err)
	}
	log.Warn("seeded the empty embedded store with demo data; do not use it in production", "credentials", path)
	return nil
}

// newPassword is 96 random bits, readable enough to type.
func newPassword() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("demo password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Listings are three demo listings of the firm's user, the last one
// passive.
func Listings(firmID, userID int64) []upstream.Listing {
	now := time.Now().UnixMilli()
	city, cityName := int64(34), "Istanbul"
	district, districtName := int64(1203), "Moda"
	lat, lon, near := 40.9847, 29.0265, true
	price, currency := 8_500_000.0, "TRY"
	rooms, sqm := 3.0, 120.0
	category := int64(1)
	url := "https://listings.demo.example/realty/"
	out := make([]upstream.Listing, 0, 3)
	for i, title := range []string{"Sea-view flat in Moda", "Garden duplex", "Studio near the ferry"} {
		detail := fmt.Sprintf("%s%d", url, i+1)
		out = append(out, upstream.Listing{
			Title: title, FirmID: firmID, FirmUserID: userID,
			CreatedDate: now, UpdatedDate: now, CategoryID: &category,
			Location: upstream.Location{
				CityID: &city, CityName: &cityName, DistrictID: &district, DistrictName: &districtName,
				Latitude: &lat, Longitude: &lon, NearLocation: &near,
			},
			RealtyDetailURL: &detail,
			IsActive:        i != 2,
			Attributes: upstream.Attributes{
				Price: &price, PriceCurrencyType: &currency, Room: &rooms, Sqm: &sqm,
			},
		})
	}
	return out
}
