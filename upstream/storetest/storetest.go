// Package storetest is the conformance suite of upstream.Store: every
// storage engine runs it from its own tests, so all engines behave alike.
//
// Concurrency: Run runs its subtests in parallel, each on a store of its
// own; one subtest also uses a store from several goroutines at once.
package storetest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Run runs the suite. open returns a fresh, empty store and closes it when
// the test ends (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) upstream.Store) {
	suite := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) upstream.Store)
	}{
		{"Empty", testEmpty},
		{"Ping", testPing},
		{"AddFirm", testAddFirm},
		{"FirmByKeyDigest", testFirmByKeyDigest},
		{"AddUser", testAddUser},
		{"UserByEmail", testUserByEmail},
		{"RotateFirmKey", testRotateFirmKey},
		{"DisableUser", testDisableUser},
		{"EnableUser", testEnableUser},
		{"RevokeTokens", testRevokeTokens},
		{"SigningKeys", testSigningKeys},
		{"NotFound", testNotFound},
		{"FullListingRoundTrip", testFullListingRoundTrip},
		{"MinimalListing", testMinimalListing},
		{"ImportAssigns", testImportAssigns},
		{"ImportDates", testImportDates},
		{"ImportRejects", testImportRejects},
		{"ImportAllOrNothing", testImportAllOrNothing},
		{"ImportNothing", testImportNothing},
		{"ImportStream", testImportStream},
		{"ImportStreamRejects", testImportStreamRejects},
		{"ImportStreamSkipsNumbersGivenBefore", testImportStreamSkipsNumbersGivenBefore},
		{"NumberLimits", testNumberLimits},
		{"NumberCounter", testNumberCounter},
		{"ConcurrentImports", testConcurrentImports},
		{"ConcurrentAutoNumbers", testConcurrentAutoNumbers},
		{"UpdateListing", testUpdateListing},
		{"UpdateRejects", testUpdateRejects},
		{"DeleteListing", testDeleteListing},
		{"DeleteKeepsIDs", testDeleteKeepsIDs},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"ConditionalUpdate", testConditionalUpdate},
		{"ConditionalDelete", testConditionalDelete},
		{"ConcurrentConditionalUpdates", testConcurrentConditionalUpdates},
		{"ConcurrentResponses", testConcurrentResponses},
		{"CanceledContext", testCanceledContext},
	}
	for _, tt := range suite {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, open)
		})
	}
}

// Opened takes the results of an engine's Open: it fails the test on err,
// and closes s when the test ends, failing the test if that fails.
func Opened[S upstream.Store](t *testing.T, s S, err error) S {
	t.Helper()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	CloseAtEnd(t, "store", s.Close)
	return s
}

// ImportOne stores l as the only listing of a new firm's new user, by
// import, and returns it as stored.
func ImportOne(t *testing.T, s upstream.Store, l upstream.Listing) upstream.Listing {
	t.Helper()
	ctx := context.Background()
	firm, err := s.AddFirm(ctx, "Firm A", []byte("digest"))
	if err != nil {
		t.Fatal(err)
	}
	user, err := s.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	l.FirmID, l.FirmUserID = firm.ID, user.ID
	stored, err := s.ImportListings(ctx, []upstream.Listing{l})
	if err != nil {
		t.Fatal(err)
	}
	return stored[0]
}

// CloseAtEnd closes what when the test ends, failing the test if that
// fails: a store, or a connection that a test opens beside it.
func CloseAtEnd(t *testing.T, what string, close func() error) {
	t.Cleanup(func() {
		if err := close(); err != nil {
			t.Errorf("close %s: %v", what, err)
		}
	})
}

// fixture is the seed most subtests start from: firm A with users alice and
// otp (passwordless), firm B with its own alice.
type fixture struct {
	firmA, firmB         upstream.Firm
	alice, otp, aliceOfB upstream.User
	digestA, digestB     []byte
	unknownID, unknownNo int64
}

func digest(key string) []byte {
	d := sha256.Sum256([]byte(key))
	return d[:]
}

func seed(t *testing.T, s upstream.Store) fixture {
	t.Helper()
	ctx := context.Background()
	f := fixture{digestA: digest("key-a"), digestB: digest("key-b"), unknownID: 999_999, unknownNo: 999_999}
	f.firmA = mustAddFirm(t, s, "Firm A", f.digestA)
	f.firmB = mustAddFirm(t, s, "Firm B", f.digestB)
	var err error
	if f.alice, err = s.AddUser(ctx, upstream.User{FirmID: f.firmA.ID, Email: "alice@example.com", PasswordHash: "hash-a"}); err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	if f.otp, err = s.AddUser(ctx, upstream.User{FirmID: f.firmA.ID, Email: "otp@example.com"}); err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	if f.aliceOfB, err = s.AddUser(ctx, upstream.User{FirmID: f.firmB.ID, Email: "alice@example.com", PasswordHash: "hash-b"}); err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	return f
}

func mustAddFirm(t *testing.T, s upstream.Store, name string, keyDigest []byte) upstream.Firm {
	t.Helper()
	f, err := s.AddFirm(context.Background(), name, keyDigest)
	if err != nil {
		t.Fatalf("AddFirm(%q): %v", name, err)
	}
	return f
}

func mustImport(t *testing.T, s upstream.Store, ls []upstream.Listing) []upstream.Listing {
	t.Helper()
	got, err := s.ImportListings(context.Background(), ls)
	if err != nil {
		t.Fatalf("ImportListings: %v", err)
	}
	return got
}

// listing is a minimal listing of firm A by alice.
func (f fixture) listing(id, no int64) upstream.Listing {
	return upstream.Listing{ID: id, No: no, Title: "Flat", FirmID: f.firmA.ID, FirmUserID: f.alice.ID}
}

// listingOfB is a minimal listing of firm B.
func (f fixture) listingOfB(id, no int64) upstream.Listing {
	return upstream.Listing{ID: id, No: no, Title: "Flat", FirmID: f.firmB.ID, FirmUserID: f.aliceOfB.ID}
}

func testEmpty(t *testing.T, open func(t *testing.T) upstream.Store) {
	ctx := context.Background()
	s := open(t)
	if empty, err := s.Empty(ctx); err != nil || !empty {
		t.Fatalf("Empty() of a new store = %v, %v; want true, nil", empty, err)
	}
	mustAddFirm(t, s, "Firm A", digest("key-a"))
	if empty, err := s.Empty(ctx); err != nil || empty {
		t.Fatalf("Empty() with a firm = %v, %v; want false, nil", empty, err)
	}
}

func testPing(t *testing.T, open func(t *testing.T) upstream.Store) {
	if err := open(t).Ping(context.Background()); err != nil {
		t.Fatalf("Ping() = %v", err)
	}
}

func testAddFirm(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name       string
		giveName   string
		giveDigest []byte
		wantErr    error
	}{
		{name: "new", giveName: "Firm C", giveDigest: digest("key-c")},
		{name: "digest taken", giveName: "Firm C", giveDigest: digest("key-a"), wantErr: upstream.ErrConflict},
		{name: "blank name", giveName: "  ", giveDigest: digest("key-c"), wantErr: upstream.ErrInvalid},
		{name: "no digest", giveName: "Firm C", wantErr: upstream.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			f := seed(t, s)
			got, err := s.AddFirm(context.Background(), tt.giveName, tt.giveDigest)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("AddFirm() error = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("AddFirm() error = %v", err)
			}
			if got.ID <= 0 || got.ID == f.firmA.ID || got.ID == f.firmB.ID || got.Name != tt.giveName {
				t.Fatalf("AddFirm() = %+v; want a new id and name %q (others: %d, %d)",
					got, tt.giveName, f.firmA.ID, f.firmB.ID)
			}
			found, err := s.FirmByKeyDigest(context.Background(), tt.giveDigest)
			if err != nil || found != got {
				t.Fatalf("FirmByKeyDigest() = %+v, %v; want %+v", found, err, got)
			}
		})
	}
}

func testFirmByKeyDigest(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	tests := []struct {
		name    string
		give    []byte
		want    upstream.Firm
		wantErr error
	}{
		{name: "firm A", give: f.digestA, want: f.firmA},
		{name: "firm B", give: f.digestB, want: f.firmB},
		{name: "unknown", give: digest("key-x"), wantErr: upstream.ErrNotFound},
		{name: "empty", give: nil, wantErr: upstream.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.FirmByKeyDigest(context.Background(), tt.give)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("FirmByKeyDigest() error = %v; want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("FirmByKeyDigest() = %+v; want %+v", got, tt.want)
			}
		})
	}
}

func testAddUser(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name    string
		give    func(f fixture) upstream.User
		want    func(f fixture) upstream.User // ID is not compared
		wantErr error
	}{
		{
			name: "new, e-mail normalized",
			give: func(f fixture) upstream.User {
				return upstream.User{FirmID: f.firmA.ID, Email: "  Bob@Example.COM ", PasswordHash: "hash"}
			},
			want: func(f fixture) upstream.User {
				return upstream.User{FirmID: f.firmA.ID, Email: "bob@example.com", PasswordHash: "hash"}
			},
		},
		{
			name: "passwordless",
			give: func(f fixture) upstream.User { return upstream.User{FirmID: f.firmA.ID, Email: "carol@example.com"} },
			want: func(f fixture) upstream.User { return upstream.User{FirmID: f.firmA.ID, Email: "carol@example.com"} },
		},
		{
			name: "same e-mail in another firm",
			give: func(f fixture) upstream.User {
				return upstream.User{FirmID: f.firmB.ID, Email: "otp@example.com", PasswordHash: "x"}
			},
			want: func(f fixture) upstream.User {
				return upstream.User{FirmID: f.firmB.ID, Email: "otp@example.com", PasswordHash: "x"}
			},
		},
		{
			name:    "e-mail taken in the firm",
			give:    func(f fixture) upstream.User { return upstream.User{FirmID: f.firmA.ID, Email: " ALICE@example.com"} },
			wantErr: upstream.ErrConflict,
		},
		{
			name:    "unknown firm",
			give:    func(f fixture) upstream.User { return upstream.User{FirmID: f.unknownID, Email: "dan@example.com"} },
			wantErr: upstream.ErrInvalid,
		},
		{
			name:    "blank e-mail",
			give:    func(f fixture) upstream.User { return upstream.User{FirmID: f.firmA.ID, Email: "   "} },
			wantErr: upstream.ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			got, err := s.AddUser(ctx, tt.give(f))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("AddUser() error = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("AddUser() error = %v", err)
			}
			want := tt.want(f)
			want.ID = got.ID
			if got.ID <= 0 || got != want {
				t.Fatalf("AddUser() = %+v; want %+v with a new id", got, want)
			}
			found, err := s.UserByEmail(ctx, got.FirmID, got.Email)
			if err != nil || found != got {
				t.Fatalf("UserByEmail() = %+v, %v; want %+v", found, err, got)
			}
		})
	}
}

func testUserByEmail(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	tests := []struct {
		name      string
		giveFirm  int64
		giveEmail string
		want      upstream.User
		wantErr   error
	}{
		{name: "exact", giveFirm: f.firmA.ID, giveEmail: "alice@example.com", want: f.alice},
		{name: "case and spaces", giveFirm: f.firmA.ID, giveEmail: "  Alice@Example.COM ", want: f.alice},
		{name: "same e-mail, other firm", giveFirm: f.firmB.ID, giveEmail: "alice@example.com", want: f.aliceOfB},
		{name: "passwordless", giveFirm: f.firmA.ID, giveEmail: "OTP@example.com", want: f.otp},
		{name: "user of another firm", giveFirm: f.firmB.ID, giveEmail: "otp@example.com", wantErr: upstream.ErrNotFound},
		{name: "unknown e-mail", giveFirm: f.firmA.ID, giveEmail: "nobody@example.com", wantErr: upstream.ErrNotFound},
		{name: "unknown firm", giveFirm: f.unknownID, giveEmail: "alice@example.com", wantErr: upstream.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.UserByEmail(context.Background(), tt.giveFirm, tt.giveEmail)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("UserByEmail() error = %v; want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("UserByEmail() = %+v; want %+v", got, tt.want)
			}
		})
	}
	if f.otp.PasswordHash != "" || f.alice.PasswordHash != "hash-a" {
		t.Fatalf("stored hashes = %q, %q; want \"\", \"hash-a\"", f.otp.PasswordHash, f.alice.PasswordHash)
	}
}

func testNotFound(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	stored := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"ListingByID", func(ctx context.Context) error {
			_, err := s.ListingByID(ctx, stored.ID+1)
			return err
		}},
		{"ListingByNumber, unknown number", func(ctx context.Context) error {
			_, err := s.ListingByNumber(ctx, f.firmA.ID, stored.No+1)
			return err
		}},
		{"ListingByNumber, number of another firm", func(ctx context.Context) error {
			_, err := s.ListingByNumber(ctx, f.firmB.ID, stored.No)
			return err
		}},
		{"ListingByNumber, unknown firm", func(ctx context.Context) error {
			_, err := s.ListingByNumber(ctx, f.unknownID, stored.No)
			return err
		}},
		{"FirmByKeyDigest", func(ctx context.Context) error {
			_, err := s.FirmByKeyDigest(ctx, digest("key-x"))
			return err
		}},
		{"UserByEmail", func(ctx context.Context) error {
			_, err := s.UserByEmail(ctx, f.firmA.ID, "nobody@example.com")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(context.Background())
			if !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("error = %v; want ErrNotFound", err)
			}
			// pgx.ErrNoRows wraps sql.ErrNoRows too.
			if errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("error = %v; the driver's no-rows error leaks", err)
			}
		})
	}
}

// fullListing sets every member of a listing.
func fullListing(f fixture) upstream.Listing {
	return upstream.Listing{
		ID:            4101,
		Title:         "Sea view flat <3+1> & garden",
		FirmID:        f.firmA.ID,
		FirmUserID:    f.alice.ID,
		No:            17,
		CreatedDate:   1_700_000_000_000,
		UpdatedDate:   1_700_000_500_000,
		EndDate:       new(int64(1_800_000_000_000)),
		CategoryID:    new(int64(2)),
		SubCategoryID: new(int64(21)),
		Location: upstream.Location{
			CityID:       new(int64(34)),
			CityName:     new("İstanbul"),
			CountyID:     new(int64(3401)),
			CountyName:   new("Kadıköy"),
			DistrictID:   new(int64(340101)),
			DistrictName: new("Moda"),
			Latitude:     new(40.98215),
			Longitude:    new(29.02511),
			NearLocation: new(true),
		},
		RealtyFiles: []upstream.RealtyFile{
			{ID: 1, ImageURL: new("https://cdn.example.com/1.jpg"), SortOrder: new(int64(1)), ImageType: new("IMAGE"), Status: new("APPROVED")},
			{ID: 2, ImageURL: new("https://cdn.example.com/2.jpg"), SortOrder: new(int64(2)), ImageType: new("REALTY_IMAGE_360"), Status: new("PENDING")},
		},
		Note:                   new("Quiet street"),
		RealtyDetailURL:        new("https://example.com/realty/4101"),
		IsActive:               true,
		RealtyIdentificationNo: new("PN-123"),
		EnergyDocumentNo:       new("ED-456"),
		Attributes: upstream.Attributes{
			Title:                 new("Attribute title"),
			Description:           new("Three rooms\nand a \"view\""),
			Note:                  new("Attribute note"),
			HousingComplexName:    new("Moda Evleri"),
			PriceCurrencyType:     new("TRY"),
			FeeCurrencyType:       new("TRY"),
			RentalCurrencyType:    new("EUR"),
			DepositCurrencyType:   new("USD"),
			Price:                 new(12_500_000.0),
			Fee:                   new(1500.5),
			Rental:                new(45_000.0),
			Deposit:               new(90_000.0),
			Room:                  new(3.0),
			LivingRoom:            new(1.0),
			BathRoom:              new(2.0),
			Sqm:                   new(145.0),
			NetSqm:                new(120.25),
			Age:                   new(12.0),
			FloorCount:            new(7.0),
			HeatingID:             new(int64(1)),
			CreditID:              new(int64(2)),
			ResidenceID:           new(int64(3)),
			FloorID:               new(int64(4)),
			FuelID:                new(int64(5)),
			BuildID:               new(int64(6)),
			BuildStateID:          new(int64(7)),
			UsageID:               new(int64(8)),
			RegisterID:            new(int64(9)),
			BarterID:              new(int64(10)),
			IsHousingComplex:      new(true),
			OnlineVisitAvailable:  new(false),
			Furnished:             new(true),
			AuthorizedRealtor:     new(false),
			SideIDList:            []int64{1, 3},
			SelectedAttributeList: []upstream.SelectedAttribute{{GroupID: 5, SelectedIDs: []int64{51, 52}}, {GroupID: 6, SelectedIDs: []int64{61}}},
		},
	}
}

// requireNoNil fails when any pointer, slice or map reachable from v is nil,
// so that a member added to Listing later is not left out of fullListing.
func requireNoNil(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if v.IsNil() {
			t.Fatalf("fullListing leaves %s nil", path)
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		requireNoNil(t, path, v.Elem())
	case reflect.Slice:
		if v.Len() == 0 {
			t.Fatalf("fullListing leaves %s empty", path)
		}
		for i := range v.Len() {
			requireNoNil(t, fmt.Sprintf("%s[%d]", path, i), v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			requireNoNil(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	}
}

func requireSameListing(t *testing.T, what string, got, want upstream.Listing) {
	t.Helper()
	// Modified is the store's clock: the Modified test checks it.
	got.Modified, want.Modified = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s (revision %d)\nwant %s (revision %d)",
			what, mustJSON(t, got), got.Revision, mustJSON(t, want), want.Revision)
	}
}

// mustJSON is v in encoding/json's form, the one the stores keep as a
// listing's document.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	return b
}

func testFullListingRoundTrip(t *testing.T, open func(t *testing.T) upstream.Store) {
	ctx := context.Background()
	s := open(t)
	f := seed(t, s)
	give := fullListing(f)
	requireNoNil(t, "Listing", reflect.ValueOf(give))

	want := fullListing(f)
	want.ListingID = fmt.Sprintf("%d-17", f.firmA.ID)
	want.Revision = 1

	stored := mustImport(t, s, []upstream.Listing{give})
	if len(stored) != 1 {
		t.Fatalf("ImportListings() returned %d listings; want 1", len(stored))
	}
	requireSameListing(t, "ImportListings()", stored[0], want)

	byID, err := s.ListingByID(ctx, want.ID)
	if err != nil {
		t.Fatalf("ListingByID() error = %v", err)
	}
	requireSameListing(t, "ListingByID()", byID, want)

	byNumber, err := s.ListingByNumber(ctx, want.FirmID, want.No)
	if err != nil {
		t.Fatalf("ListingByNumber() error = %v", err)
	}
	requireSameListing(t, "ListingByNumber()", byNumber, want)

	// The body kept at the import is what a read encodes afresh.
	for _, l := range []upstream.Listing{want, {Title: "Minimal", FirmID: f.firmA.ID, FirmUserID: f.alice.ID}} {
		if l.ID == 0 {
			l = mustImport(t, s, []upstream.Listing{l})[0]
		}
		requireFreshResponse(t, s, l.ID)
	}
}

func testMinimalListing(t *testing.T, open func(t *testing.T) upstream.Store) {
	ctx := context.Background()
	s := open(t)
	f := seed(t, s)
	before := time.Now().UnixMilli()
	stored := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]
	after := time.Now().UnixMilli()

	got, err := s.ListingByID(ctx, stored.ID)
	if err != nil {
		t.Fatalf("ListingByID() error = %v", err)
	}
	requireSameListing(t, "ListingByID() against ImportListings()", got, stored)

	if got.ID != 1 || got.No != 1 || got.Revision != 1 {
		t.Errorf("id, no, revision = %d, %d, %d; want 1, 1, 1", got.ID, got.No, got.Revision)
	}
	if want := fmt.Sprintf("%d-%d", f.firmA.ID, got.No); got.ListingID != want {
		t.Errorf("ListingID = %q; want %q", got.ListingID, want)
	}
	if got.CreatedDate < before || got.CreatedDate > after || got.UpdatedDate != got.CreatedDate {
		t.Errorf("createdDate, updatedDate = %d, %d; want both within [%d, %d]",
			got.CreatedDate, got.UpdatedDate, before, after)
	}

	doc := mustJSON(t, got)
	for _, want := range []string{
		`"realtyFiles":[]`,
		`"sideIdList":[]`,
		`"selectedAttributeList":[]`,
		`"endDate":null`,
		`"categoryId":null`,
		`"note":null`,
		`"cityId":null`,
		`"price":null`,
		`"attributes":{"title":"Flat"`,
		`"isActive":false`,
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("listing JSON lacks %s: %s", want, doc)
		}
	}
}

// idNo is what an import assigned to one entry.
type idNo struct{ ID, No int64 }

func testImportAssigns(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name     string
		giveSeed func(f fixture) []upstream.Listing
		give     func(f fixture) []upstream.Listing
		want     []idNo
	}{
		{
			name: "zero ids and numbers in an empty store",
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(0, 0), f.listing(0, 0), f.listingOfB(0, 0)}
			},
			want: []idNo{{1, 1}, {2, 2}, {3, 1}},
		},
		{
			name:     "after stored listings",
			giveSeed: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(5, 9)} },
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(0, 0), f.listingOfB(0, 0)}
			},
			want: []idNo{{6, 1}, {7, 1}}, // numbers come from the firm's counter, not max + 1
		},
		{
			name: "given ids count for later zero ones; numbers skip those in use",
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(10, 0), f.listing(0, 0), f.listing(3, 7), f.listing(0, 0)}
			},
			want: []idNo{{10, 1}, {11, 2}, {3, 7}, {12, 3}},
		},
		{
			name:     "given values below the stored maximum",
			giveSeed: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(50, 50)} },
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(7, 4), f.listing(0, 0)}
			},
			want: []idNo{{7, 4}, {51, 1}},
		},
		{
			name:     "numbers skip those in use",
			giveSeed: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(5, 2)} },
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(0, 0), f.listing(0, 0)}
			},
			want: []idNo{{6, 1}, {7, 3}},
		},
		{
			name: "numbers are per firm",
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(0, 1), f.listingOfB(0, 1), f.listingOfB(0, 0)}
			},
			want: []idNo{{1, 1}, {2, 1}, {3, 2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			if tt.giveSeed != nil {
				mustImport(t, s, tt.giveSeed(f))
			}
			give := tt.give(f)
			stored := mustImport(t, s, give)
			if len(stored) != len(give) {
				t.Fatalf("ImportListings() returned %d listings; want %d", len(stored), len(give))
			}
			got := make([]idNo, len(stored))
			for i, l := range stored {
				got[i] = idNo{l.ID, l.No}
				if want := upstream.ListingNumber(l.FirmID, l.No); l.ListingID != want || l.Revision != 1 {
					t.Errorf("entry %d: ListingID, Revision = %q, %d; want %q, 1", i, l.ListingID, l.Revision, want)
				}
				if l.FirmID != give[i].FirmID || l.FirmUserID != give[i].FirmUserID {
					t.Errorf("entry %d: firm, user = %d, %d; want %d, %d",
						i, l.FirmID, l.FirmUserID, give[i].FirmID, give[i].FirmUserID)
				}
				read, err := s.ListingByNumber(ctx, l.FirmID, l.No)
				if err != nil {
					t.Fatalf("ListingByNumber(%s) error = %v", l.ListingID, err)
				}
				requireSameListing(t, "ListingByNumber()", read, l)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("assigned (id, no) = %v; want %v", got, tt.want)
			}
		})
	}
}

func testImportDates(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name        string
		giveCreated int64
		giveUpdated int64
		wantCreated int64 // 0: now
		wantUpdated int64 // 0: now
	}{
		{name: "both given", giveCreated: 1000, giveUpdated: 2000, wantCreated: 1000, wantUpdated: 2000},
		{name: "updated defaults to created", giveCreated: 1000, wantCreated: 1000, wantUpdated: 1000},
		{name: "only updated given", giveUpdated: 2000, wantUpdated: 2000},
		{name: "none given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			f := seed(t, s)
			give := f.listing(0, 0)
			give.CreatedDate, give.UpdatedDate = tt.giveCreated, tt.giveUpdated
			before := time.Now().UnixMilli()
			stored := mustImport(t, s, []upstream.Listing{give})[0]
			after := time.Now().UnixMilli()
			got, err := s.ListingByID(context.Background(), stored.ID)
			if err != nil {
				t.Fatalf("ListingByID() error = %v", err)
			}
			check := func(what string, got, want int64) {
				t.Helper()
				if want == 0 && (got < before || got > after) {
					t.Errorf("%s = %d; want now, within [%d, %d]", what, got, before, after)
				}
				if want != 0 && got != want {
					t.Errorf("%s = %d; want %d", what, got, want)
				}
			}
			check("createdDate", got.CreatedDate, tt.wantCreated)
			check("updatedDate", got.UpdatedDate, tt.wantUpdated)
		})
	}
}

func testImportRejects(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name      string
		giveSeed  func(f fixture) []upstream.Listing
		give      func(f fixture) []upstream.Listing
		wantIndex int
		wantID    int64
		wantErr   error
	}{
		{
			name: "unknown firm",
			give: func(f fixture) []upstream.Listing {
				l := f.listing(1, 1)
				l.FirmID = f.unknownID
				return []upstream.Listing{l}
			},
			wantIndex: 0, wantID: 1, wantErr: upstream.ErrInvalid,
		},
		{
			name: "user of another firm",
			give: func(f fixture) []upstream.Listing {
				l := f.listing(2, 2)
				l.FirmUserID = f.aliceOfB.ID
				return []upstream.Listing{f.listing(1, 1), l}
			},
			wantIndex: 1, wantID: 2, wantErr: upstream.ErrInvalid,
		},
		{
			name: "unknown user",
			give: func(f fixture) []upstream.Listing {
				l := f.listing(1, 1)
				l.FirmUserID = f.unknownID
				return []upstream.Listing{l}
			},
			wantIndex: 0, wantID: 1, wantErr: upstream.ErrInvalid,
		},
		{
			name: "no user",
			give: func(f fixture) []upstream.Listing {
				l := f.listing(1, 1)
				l.FirmUserID = 0
				return []upstream.Listing{l}
			},
			wantIndex: 0, wantID: 1, wantErr: upstream.ErrInvalid,
		},
		{
			name:      "negative id",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(-1, 1)} },
			wantIndex: 0, wantID: -1, wantErr: upstream.ErrInvalid,
		},
		{
			name:      "id stored",
			giveSeed:  func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(5, 5)} },
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(6, 6), f.listing(5, 0)} },
			wantIndex: 1, wantID: 5, wantErr: upstream.ErrConflict,
		},
		{
			name:      "id repeated in the file",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(7, 0), f.listing(7, 0)} },
			wantIndex: 1, wantID: 7, wantErr: upstream.ErrConflict,
		},
		{
			name:      "id assigned earlier in the file",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, 0), f.listing(1, 0)} },
			wantIndex: 1, wantID: 1, wantErr: upstream.ErrConflict,
		},
		{
			name:      "number stored",
			giveSeed:  func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(5, 3)} },
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, 3)} },
			wantIndex: 0, wantID: 0, wantErr: upstream.ErrConflict,
		},
		{
			name:      "number repeated in the file",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(8, 4), f.listing(9, 4)} },
			wantIndex: 1, wantID: 9, wantErr: upstream.ErrConflict,
		},
		{
			name:      "number assigned earlier in the file",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(8, 0), f.listing(9, 1)} },
			wantIndex: 1, wantID: 9, wantErr: upstream.ErrConflict,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			var seeded []upstream.Listing
			if tt.giveSeed != nil {
				seeded = mustImport(t, s, tt.giveSeed(f))
			}
			give := tt.give(f)
			got, err := s.ImportListings(ctx, give)
			var ie *upstream.ImportError
			if !errors.As(err, &ie) {
				t.Fatalf("ImportListings() = %v, %v; want an *ImportError", got, err)
			}
			if ie.Index != tt.wantIndex || ie.ID != tt.wantID || !errors.Is(err, tt.wantErr) {
				t.Fatalf("ImportListings() error = %#v (%v); want index %d, id %d, %v",
					ie, err, tt.wantIndex, tt.wantID, tt.wantErr)
			}
			if got != nil {
				t.Errorf("ImportListings() returned %v with the error; want nil", got)
			}
			requireUnchanged(t, s, seeded, give)
		})
	}
}

// requireUnchanged checks that the store holds the seeded listings as they
// were and none of those of a rejected file.
func requireUnchanged(t *testing.T, s upstream.Store, seeded, rejected []upstream.Listing) {
	t.Helper()
	ctx := context.Background()
	kept := map[int64]bool{}
	for _, want := range seeded {
		kept[want.ID] = true
		got, err := s.ListingByID(ctx, want.ID)
		if err != nil {
			t.Fatalf("seeded listing %d: %v", want.ID, err)
		}
		requireSameListing(t, "seeded listing", got, want)
	}
	for _, l := range rejected {
		if l.ID <= 0 || kept[l.ID] {
			continue
		}
		if _, err := s.ListingByID(ctx, l.ID); !errors.Is(err, upstream.ErrNotFound) {
			t.Errorf("listing %d of the rejected file: error = %v; want ErrNotFound", l.ID, err)
		}
	}
}

func testImportAllOrNothing(t *testing.T, open func(t *testing.T) upstream.Store) {
	ctx := context.Background()
	s := open(t)
	f := seed(t, s)
	bad := f.listing(0, 0)
	bad.FirmID = f.unknownID
	give := []upstream.Listing{f.listing(0, 0), f.listing(0, 0), bad, f.listing(0, 0)}

	_, err := s.ImportListings(ctx, give)
	var ie *upstream.ImportError
	if !errors.As(err, &ie) || ie.Index != 2 || !errors.Is(err, upstream.ErrInvalid) {
		t.Fatalf("ImportListings() error = %v; want entry 2 rejected as ErrInvalid", err)
	}
	for _, id := range []int64{1, 2} {
		if _, err := s.ListingByID(ctx, id); !errors.Is(err, upstream.ErrNotFound) {
			t.Errorf("ListingByID(%d) error = %v; want ErrNotFound", id, err)
		}
	}
	for _, no := range []int64{1, 2} {
		if _, err := s.ListingByNumber(ctx, f.firmA.ID, no); !errors.Is(err, upstream.ErrNotFound) {
			t.Errorf("ListingByNumber(%d) error = %v; want ErrNotFound", no, err)
		}
	}

	// The same entries without the bad one get the same ids.
	stored := mustImport(t, s, []upstream.Listing{give[0], give[1]})
	if stored[0].ID != 1 || stored[1].ID != 2 || stored[0].No != 1 || stored[1].No != 2 {
		t.Fatalf("after the rejected import, (id, no) = (%d, %d), (%d, %d); want (1, 1), (2, 2)",
			stored[0].ID, stored[0].No, stored[1].ID, stored[1].No)
	}
}

func testImportNothing(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	seed(t, s)
	tests := []struct {
		name string
		give []upstream.Listing
	}{
		{name: "nil", give: nil},
		{name: "empty", give: []upstream.Listing{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ImportListings(context.Background(), tt.give)
			if err != nil || len(got) != 0 {
				t.Fatalf("ImportListings() = %v, %v; want none, nil", got, err)
			}
		})
	}
}

func testConcurrentImports(t *testing.T, open func(t *testing.T) upstream.Store) {
	const importers, perFile = 4, 5
	s := open(t)
	f := seed(t, s)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards ids, nos and errs
		ids  = map[int64]bool{}
		nos  = map[int64]bool{}
		errs []error
	)
	for range importers {
		wg.Go(func() {
			file := make([]upstream.Listing, perFile)
			for i := range file {
				file[i] = f.listing(0, 0)
			}
			stored, err := s.ImportListings(context.Background(), file)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, l := range stored {
				ids[l.ID] = true
				nos[l.No] = true
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent ImportListings() errors: %v", errors.Join(errs...))
	}
	if len(ids) != importers*perFile || len(nos) != importers*perFile {
		t.Fatalf("%d distinct ids and %d distinct numbers; want %d of each", len(ids), len(nos), importers*perFile)
	}
	for id := range ids {
		if _, err := s.ListingByID(context.Background(), id); err != nil {
			t.Errorf("ListingByID(%d) error = %v", id, err)
		}
	}
}

func testCanceledContext(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		call func() error
	}{
		{"ListingByID", func() error { _, err := s.ListingByID(ctx, 1); return err }},
		{"ListingByNumber", func() error { _, err := s.ListingByNumber(ctx, f.firmA.ID, 1); return err }},
		{"FirmByKeyDigest", func() error { _, err := s.FirmByKeyDigest(ctx, f.digestA); return err }},
		{"UserByEmail", func() error { _, err := s.UserByEmail(ctx, f.firmA.ID, "alice@example.com"); return err }},
		{"AddFirm", func() error { _, err := s.AddFirm(ctx, "Firm C", digest("key-c")); return err }},
		{"AddUser", func() error {
			_, err := s.AddUser(ctx, upstream.User{FirmID: f.firmA.ID, Email: "c@example.com"})
			return err
		}},
		{"ImportListings", func() error {
			_, err := s.ImportListings(ctx, []upstream.Listing{f.listing(0, 0)})
			return err
		}},
		{"UpdateListing", func() error {
			_, err := s.UpdateListing(ctx, f.listing(1, 0), upstream.Precondition{})
			return err
		}},
		{"DeleteListing", func() error { _, err := s.DeleteListing(ctx, f.firmA.ID, 1, upstream.Precondition{}); return err }},
		{"Empty", func() error { _, err := s.Empty(ctx); return err }},
		{"Ping", func() error { return s.Ping(ctx) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, context.Canceled) {
				t.Fatalf("error = %v; want context.Canceled", err)
			}
		})
	}
}
