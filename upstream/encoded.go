package upstream

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// Encoded is a listing as a read answers it: the response body (the
// Listing's JSON) and its strong entity tag, with what a cache needs to
// key and guard it. Stores keep the body and the tag with the listing, so
// a read of a listing that was written since does no JSON work.
type Encoded struct {
	ID, FirmID, No int64
	Revision       int64
	// Modified is the revision's Last-Modified (Listing.Modified); 0: none.
	Modified int64
	Active   bool
	Body     []byte
	ETag     []byte
}

// Encode returns l's response body and entity tag.
func Encode(l Listing) (Encoded, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return Encoded{}, fmt.Errorf("encode listing %d: %w", l.ID, err)
	}
	return Encoded{ID: l.ID, FirmID: l.FirmID, No: l.No, Revision: l.Revision, Modified: l.Modified, Active: l.IsActive,
		Body: body, ETag: ETag(body)}, nil
}

// ETag returns the strong entity tag of a response body: a quoted digest
// of its bytes.
func ETag(body []byte) []byte {
	sum := sha256.Sum256(body)
	tag := make([]byte, 0, 2+base64.RawURLEncoding.EncodedLen(16))
	tag = append(tag, '"')
	tag = base64.RawURLEncoding.AppendEncode(tag, sum[:16])
	return append(tag, '"')
}
