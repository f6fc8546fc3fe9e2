// Package upstream owns the listing domain: the Listing type in the exact
// shape of the spec, the strict decoding and the rules of a listing body,
// the accounts that log in, the Store and change feed contracts that every
// storage engine implements, the domain errors, and Guarded, the store
// behind a deadline, a bulkhead and a breaker.
//
// Concurrency: the types here are plain values. Store implementations and
// Guarded are safe for concurrent use.
package upstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Domain errors. Adapters translate their own errors into these at the
// boundary; the gateway maps them to HTTP status codes.
var (
	ErrNotFound    = errors.New("not found")
	ErrUnavailable = errors.New("store unavailable")
	ErrConflict    = errors.New("conflict")
	ErrInvalid     = errors.New("invalid")
)

// Firm is a customer company. Its API key is kept only as a SHA-256 digest.
type Firm struct {
	ID   int64
	Name string
}

// User is a firm's user. An empty PasswordHash marks a passwordless
// (OTP-verified) account.
type User struct {
	ID           int64
	FirmID       int64
	Email        string
	PasswordHash string
}

// Revocation says that tokens issued to a firm's user, or with UserID 0 to
// any user of the firm, at or before At are no longer valid. At has
// millisecond resolution.
type Revocation struct {
	FirmID int64
	UserID int64
	At     time.Time
}

// SigningKey is the public half of a token-signing key and its role in the
// fleet's key set. Every gateway reads the set from the store, so that all
// of them publish and accept the same keys; the private half never enters
// the store (see package signing). Times have millisecond resolution.
type SigningKey struct {
	ID  string // the kid
	Alg string // pinned: SigningAlgEdDSA or SigningAlgES256
	// PublicKey is the key in PKIX, ASN.1 DER form.
	PublicKey []byte
	AddedAt   time.Time
	// SignsFrom is when the key was made the signer; zero: never. Of the
	// keys in force, the one made signer last signs.
	SignsFrom time.Time
	// VerifiesUntil is when a retired key stops verifying; zero: in force.
	VerifiesUntil time.Time
}

// The algorithms a SigningKey may pin.
const (
	SigningAlgEdDSA = "EdDSA"
	SigningAlgES256 = "ES256"
)

// Check reports what makes k unfit for the key set: no kid, an algorithm
// other than EdDSA and ES256, or a public key that is not a PKIX key of
// the algorithm's type (Ed25519, ECDSA on P-256).
func (k SigningKey) Check() error {
	if k.ID == "" {
		return errors.New("no kid")
	}
	pub, err := x509.ParsePKIXPublicKey(k.PublicKey)
	if err != nil {
		return fmt.Errorf("public key: %w", err)
	}
	switch p := pub.(type) {
	case ed25519.PublicKey:
		if k.Alg == SigningAlgEdDSA {
			return nil
		}
	case *ecdsa.PublicKey:
		if k.Alg == SigningAlgES256 && p.Curve == elliptic.P256() {
			return nil
		}
	}
	return fmt.Errorf("a %T key cannot verify %q (want Ed25519 for EdDSA, P-256 for ES256)", pub, k.Alg)
}

// Retired reports whether k was retired: it signs no more, and verifies
// until VerifiesUntil.
func (k SigningKey) Retired() bool { return !k.VerifiesUntil.IsZero() }

// ActiveSigningKey is the key of keys that signs: of those in force (not
// retired), the one made signer last, the greater kid on a tie. ok is false
// when no key in force was ever made signer.
func ActiveSigningKey(keys []SigningKey) (active SigningKey, ok bool) {
	for _, k := range keys {
		if k.Retired() || k.SignsFrom.IsZero() {
			continue
		}
		if !ok || k.SignsFrom.After(active.SignsFrom) || (k.SignsFrom.Equal(active.SignsFrom) && k.ID > active.ID) {
			active, ok = k, true
		}
	}
	return active, ok
}

// NormalizeEmail is the one form in which e-mails are stored and compared.
func NormalizeEmail(email string) string {
	return strings.ToLower(strings.TrimSpace(email))
}

// Listing is one realty listing in the spec's response shape. Dates are
// epoch milliseconds. Pointers are members that may be null.
type Listing struct {
	ID                     int64        `json:"id"`
	ListingID              string       `json:"listingId"`
	Title                  string       `json:"title"`
	FirmID                 int64        `json:"firmId"`
	FirmUserID             int64        `json:"firmUserId"`
	No                     int64        `json:"no"`
	CreatedDate            int64        `json:"createdDate"`
	UpdatedDate            int64        `json:"updatedDate"`
	EndDate                *int64       `json:"endDate"`
	CategoryID             *int64       `json:"categoryId"`
	SubCategoryID          *int64       `json:"subCategoryId"`
	Location               Location     `json:"location"`
	RealtyFiles            []RealtyFile `json:"realtyFiles"`
	Note                   *string      `json:"note"`
	RealtyDetailURL        *string      `json:"realtyDetailUrl"`
	IsActive               bool         `json:"isActive"`
	RealtyIdentificationNo *string      `json:"realtyIdentificationNo"`
	EnergyDocumentNo       *string      `json:"energyDocumentNo"`
	Attributes             Attributes   `json:"attributes"`

	// Revision is assigned by the store and grows with every write of the
	// listing. It is not part of the response.
	Revision int64 `json:"-"`
	// Modified is when the store recorded this revision, in unix
	// milliseconds by the database's clock, always in a later second than
	// the revision before (the listing's Last-Modified); 0 where not known.
	// It is not part of the response.
	Modified int64 `json:"-"`
}

// Location is the address of a listing, including the coordinates.
type Location struct {
	CityID       *int64   `json:"cityId"`
	CityName     *string  `json:"cityName"`
	CountyID     *int64   `json:"countyId"`
	CountyName   *string  `json:"countyName"`
	DistrictID   *int64   `json:"districtId"`
	DistrictName *string  `json:"districtName"`
	Latitude     *float64 `json:"latitude"`
	Longitude    *float64 `json:"longitude"`
	NearLocation *bool    `json:"nearLocation"`
}

// RealtyFile is one uploaded file of a listing.
type RealtyFile struct {
	ID        int64   `json:"id"`
	ImageURL  *string `json:"imageUrl"`
	SortOrder *int64  `json:"sortOrder"`
	ImageType *string `json:"imageType"`
	Status    *string `json:"status"`
}

// SelectedAttribute is one group of chosen attribute options.
type SelectedAttribute struct {
	GroupID     int64   `json:"groupId"`
	SelectedIDs []int64 `json:"selectedIds"`
}

// Attributes are the detail attributes of a listing. Every member is
// returned; those without a value are null.
type Attributes struct {
	Title                 *string             `json:"title"`
	Description           *string             `json:"description"`
	Note                  *string             `json:"note"`
	HousingComplexName    *string             `json:"housingComplexName"`
	PriceCurrencyType     *string             `json:"priceCurrencyType"`
	FeeCurrencyType       *string             `json:"feeCurrencyType"`
	RentalCurrencyType    *string             `json:"rentalCurrencyType"`
	DepositCurrencyType   *string             `json:"depositCurrencyType"`
	Price                 *float64            `json:"price"`
	Fee                   *float64            `json:"fee"`
	Rental                *float64            `json:"rental"`
	Deposit               *float64            `json:"deposit"`
	Room                  *float64            `json:"room"`
	LivingRoom            *float64            `json:"livingRoom"`
	BathRoom              *float64            `json:"bathRoom"`
	Sqm                   *float64            `json:"sqm"`
	NetSqm                *float64            `json:"netSqm"`
	Age                   *float64            `json:"age"`
	FloorCount            *float64            `json:"floorCount"`
	HeatingID             *int64              `json:"heatingId"`
	CreditID              *int64              `json:"creditId"`
	ResidenceID           *int64              `json:"residenceId"`
	FloorID               *int64              `json:"floorId"`
	FuelID                *int64              `json:"fuelId"`
	BuildID               *int64              `json:"buildId"`
	BuildStateID          *int64              `json:"buildStateId"`
	UsageID               *int64              `json:"usageId"`
	RegisterID            *int64              `json:"registerId"`
	BarterID              *int64              `json:"barterId"`
	IsHousingComplex      *bool               `json:"isHousingComplex"`
	OnlineVisitAvailable  *bool               `json:"onlineVisitAvailable"`
	Furnished             *bool               `json:"furnished"`
	AuthorizedRealtor     *bool               `json:"authorizedRealtor"`
	SideIDList            []int64             `json:"sideIdList"`
	SelectedAttributeList []SelectedAttribute `json:"selectedAttributeList"`
}

// ListingNumber formats the listing number "<firmId>-<no>".
func ListingNumber(firmID, no int64) string {
	return strconv.FormatInt(firmID, 10) + "-" + strconv.FormatInt(no, 10)
}

// Normalize fills the derived members, gives files without an id the next
// free one, and turns absent arrays into empty ones, so that every member
// of the spec is present in the response.
// attributes.title and attributes.note mirror the top-level members when
// they are not given on their own.
func (l *Listing) Normalize() {
	l.ListingID = ListingNumber(l.FirmID, l.No)
	if l.RealtyFiles == nil {
		l.RealtyFiles = []RealtyFile{}
	}
	var maxFileID int64
	for _, f := range l.RealtyFiles {
		maxFileID = max(maxFileID, f.ID)
	}
	for i := range l.RealtyFiles {
		if l.RealtyFiles[i].ID == 0 {
			maxFileID++
			l.RealtyFiles[i].ID = maxFileID
		}
	}
	if l.Attributes.Title == nil {
		title := l.Title
		l.Attributes.Title = &title
	}
	if l.Attributes.Note == nil && l.Note != nil {
		note := *l.Note
		l.Attributes.Note = &note
	}
	if l.Attributes.SideIDList == nil {
		l.Attributes.SideIDList = []int64{}
	}
	if l.Attributes.SelectedAttributeList == nil {
		l.Attributes.SelectedAttributeList = []SelectedAttribute{}
	}
	for i := range l.Attributes.SelectedAttributeList {
		if l.Attributes.SelectedAttributeList[i].SelectedIDs == nil {
			l.Attributes.SelectedAttributeList[i].SelectedIDs = []int64{}
		}
	}
}

// Replaced returns next as the version of stored written at now (epoch
// ms): id, firm, number, user and createdDate are the stored ones, and
// updatedDate and revision grow. A different non-zero number is a
// *ValidationError for field "no".
func (stored Listing) Replaced(next Listing, now int64) (Listing, error) {
	if next.No != 0 && next.No != stored.No {
		return Listing{}, Invalid("no", "cannot be changed")
	}
	next.ID, next.FirmID, next.No = stored.ID, stored.FirmID, stored.No
	next.FirmUserID, next.CreatedDate = stored.FirmUserID, stored.CreatedDate
	next.UpdatedDate = max(now, stored.UpdatedDate+1)
	next.Revision = stored.Revision + 1
	next.Normalize()
	return next, nil
}

// ImportError names the entry of an import file that rejected the whole
// file. Err is one of the domain errors.
type ImportError struct {
	Index int
	ID    int64
	Err   error
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("entry %d (id %d): %v", e.Index, e.ID, e.Err)
}

func (e *ImportError) Unwrap() error { return e.Err }

// StreamImporter is a Store that imports a stream of listings: as
// ImportListings, all or none in one transaction, but read from next a
// batch at a time and handed to stored, when set, a batch at a time as
// written (before the commit), so that a file of any length takes the
// memory of a few batches. An error of next ends the import and is
// returned as it is; one of stored ends it too, and nothing is stored. It
// returns how many listings it stored. Both SQL engines are
// StreamImporters.
type StreamImporter interface {
	ImportStream(ctx context.Context, next iter.Seq2[Listing, error], stored func([]Listing) error) (int, error)
}

// Store is the contract of a storage engine. Every engine passes the
// conformance suite in package storetest.
type Store interface {
	// ListingByID and ListingByNumber return ErrNotFound when there is no
	// such listing.
	ListingByID(ctx context.Context, id int64) (Listing, error)
	ListingByNumber(ctx context.Context, firmID, no int64) (Listing, error)
	// EncodedByID and EncodedByNumber return what a read answers: the
	// stored response body where it is current, else the listing encoded
	// afresh and written to its row with its Last-Modified, best effort
	// (where that write fails, Encoded.Modified is 0). A missing listing
	// is ErrNotFound. Concurrent reads may share one query.
	EncodedByID(ctx context.Context, id int64) (Encoded, error)
	EncodedByNumber(ctx context.Context, firmID, no int64) (Encoded, error)

	// FirmByKeyDigest finds the firm whose API key has this SHA-256
	// digest; an unknown digest is ErrNotFound.
	FirmByKeyDigest(ctx context.Context, digest []byte) (Firm, error)
	// UserByEmail finds an enabled user of the firm; the e-mail is
	// normalized first. A disabled user is ErrNotFound, as an unknown one
	// is, so that login answers both alike.
	UserByEmail(ctx context.Context, firmID int64, email string) (User, error)

	// AddFirm stores a firm with the digest of its API key. A blank name
	// or an empty digest is ErrInvalid; a digest another firm has,
	// ErrConflict.
	AddFirm(ctx context.Context, name string, keyDigest []byte) (Firm, error)
	// AddUser stores a user, its e-mail normalized first. An empty e-mail
	// or an unknown firm is ErrInvalid; a taken e-mail within the firm is
	// ErrConflict, whether its user is enabled or disabled.
	AddUser(ctx context.Context, u User) (User, error)
	// RotateFirmKey replaces the digest of firm firmID's API key and
	// returns the firm: from then on FirmByKeyDigest finds it by the new
	// digest only. An unknown firm is ErrNotFound, an empty digest
	// ErrInvalid, and a digest that another firm has ErrConflict.
	RotateFirmKey(ctx context.Context, firmID int64, keyDigest []byte) (Firm, error)
	// DisableUser disables the firm's user with this e-mail (normalized
	// first) and returns it: from then on UserByEmail does not find it. The
	// user's row, listings and e-mail stay. Disabling a disabled user
	// changes nothing and succeeds; an unknown user is ErrNotFound.
	DisableUser(ctx context.Context, firmID int64, email string) (User, error)
	// EnableUser enables the firm's user with this e-mail (normalized
	// first) and returns it: from then on UserByEmail finds it again.
	// Tokens revoked while it was disabled stay revoked. Enabling an
	// enabled user changes nothing and succeeds; an unknown user is
	// ErrNotFound.
	EnableUser(ctx context.Context, firmID int64, email string) (User, error)

	// RevokeTokens records that the tokens issued at or before at to the
	// firm's user with this e-mail (normalized first), or with an empty
	// e-mail to any user of the firm, are no longer valid, and returns the
	// revocation in force for that scope: of two for the same scope, the
	// later time stays. at is kept to the millisecond. An unknown firm, or
	// an e-mail that is no user of the firm (enabled or disabled), is
	// ErrNotFound.
	RevokeTokens(ctx context.Context, firmID int64, email string, at time.Time) (Revocation, error)
	// Revocations returns every recorded revocation whose time is after
	// since.
	Revocations(ctx context.Context, since time.Time) ([]Revocation, error)
	// PruneRevocations removes the revocations whose time is before
	// before, and returns how many it removed.
	PruneRevocations(ctx context.Context, before time.Time) (int64, error)

	// AddSigningKey publishes a key, added at at: from then on it
	// verifies, and it can be made the signer. Adding a key
	// whose kid, algorithm and public key are all stored already changes
	// nothing and returns the stored key, so that a gateway may publish its
	// keys at every start; a kid stored with another key or algorithm is
	// ErrConflict, and a key that SigningKey.Check refuses ErrInvalid.
	AddSigningKey(ctx context.Context, k SigningKey, at time.Time) (SigningKey, error)
	// SigningKeys returns every key ever added, retired ones too, by kid.
	SigningKeys(ctx context.Context) ([]SigningKey, error)
	// ActivateSigningKey makes key kid the signer from at, or from just
	// after the latest SignsFrom of any key where that is later (see
	// ActiveSigningKey), and returns it with the time it stored. An unknown kid is ErrNotFound, a
	// retired key ErrConflict.
	ActivateSigningKey(ctx context.Context, kid string, at time.Time) (SigningKey, error)
	// RetireSigningKey retires key kid: it verifies until until, then no
	// more, and returns it. Retiring a retired key changes nothing and
	// returns it; an unknown kid is ErrNotFound; the key that signs is
	// ErrConflict (another must be made signer first).
	RetireSigningKey(ctx context.Context, kid string, until time.Time) (SigningKey, error)

	// ImportListings stores new listings atomically: all or none. It keeps
	// the given id and no, assigns those that are zero, and returns the
	// stored listings. Ids are assigned above the largest one so far;
	// numbers from the firm's counter, which starts at 1 and skips every
	// number in use, so that a given number never leaves the firm without
	// numbers to assign. A bad entry is reported as *ImportError. A given
	// id or no outside [1, MaxNumber], a zero id when the largest so far is
	// MaxNumber, or a zero no when every number of the firm is in use, is a
	// *ValidationError for field "id" or "no" (so ErrInvalid); a taken one
	// is ErrConflict; an unknown firm, or a user of another firm,
	// ErrInvalid. A listing under the id of a removed one is stored and
	// returned one revision above the removal's. The stored listings'
	// Modified is set for a few (64 at most), else 0. It is also the
	// create path of POST /realty, with one listing.
	ImportListings(ctx context.Context, ls []Listing) ([]Listing, error)
	// UpdateListing replaces the listing l.ID of firm l.FirmID. It keeps
	// no, firmUserId and createdDate, sets updatedDate to now (or 1 ms
	// after the stored one, where that is later), raises the revision by
	// one, keeps the new response body and returns the stored listing. A listing that does
	// not exist, is deleted or belongs to another firm is ErrNotFound; a
	// non-zero l.No that differs from the stored one is a
	// *ValidationError for field "no".
	// A precondition that does not hold against the stored listing is
	// ErrPreconditionFailed, and nothing is written.
	UpdateListing(ctx context.Context, l Listing, cond Precondition) (Listing, error)
	// DeleteListing deletes listing id of firm firmID, leaving a tombstone
	// so that its id and number are never used again, and returns the
	// deleted listing with its revision raised by one. Later reads are
	// ErrNotFound; so is a missing, deleted or foreign listing.
	// A precondition that does not hold is ErrPreconditionFailed, as for
	// UpdateListing.
	DeleteListing(ctx context.Context, firmID, id int64, cond Precondition) (Listing, error)

	// Empty reports whether the store holds no firm at all.
	Empty(ctx context.Context) (bool, error)
	Ping(ctx context.Context) error
	Close() error
}
