// Command jwksverify checks a gateway token as an outside service would:
// with go-jose (not the JWT library the gateway signs with), the keys of a
// JWKS fetched over HTTP, ES256 only, and the token's expiry. It is the
// JWKS step of deploy/compose/check.sh:
//
//	go run ./deploy/compose/jwksverify -jwks http://127.0.0.1:8080/.well-known/jwks.json TOKEN...
//
// It prints one line per token (its kid and subject) and exits non-zero
// when any token does not verify.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

func main() {
	jwksURL := flag.String("jwks", "", "the JWKS URL")
	flag.Parse()
	if *jwksURL == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: jwksverify -jwks URL TOKEN...")
		os.Exit(2)
	}
	set, err := fetch(*jwksURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jwksverify:", err)
		os.Exit(1)
	}
	failed := false
	for _, tok := range flag.Args() {
		kid, sub, err := verify(set, tok)
		if err != nil {
			fmt.Fprintf(os.Stderr, "jwksverify: token of kid %q: %v\n", kid, err)
			failed = true
			continue
		}
		fmt.Printf("verified: kid=%s alg=ES256 sub=%s\n", kid, sub)
	}
	if failed {
		os.Exit(1)
	}
}

func fetch(url string) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return set, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return set, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		return set, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(set.Keys) == 0 {
		return set, fmt.Errorf("GET %s: no keys", url)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return set, fmt.Errorf("GET %s: key %q is not a public key", url, k.KeyID)
		}
	}
	return set, nil
}

func verify(set jose.JSONWebKeySet, tok string) (kid, sub string, err error) {
	parsed, err := josejwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return "", "", err
	}
	kid = parsed.Headers[0].KeyID
	keys := set.Key(kid)
	if len(keys) != 1 {
		return kid, "", errors.New("kid not in the JWKS")
	}
	if keys[0].Algorithm != string(jose.ES256) {
		return kid, "", fmt.Errorf("the JWKS pins %q, not ES256", keys[0].Algorithm)
	}
	var claims josejwt.Claims
	if err := parsed.Claims(keys[0].Key, &claims); err != nil {
		return kid, "", err
	}
	if err := claims.ValidateWithLeeway(josejwt.Expected{Time: time.Now()}, time.Minute); err != nil {
		return kid, "", err
	}
	return kid, claims.Subject, nil
}
