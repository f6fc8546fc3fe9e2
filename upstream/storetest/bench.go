package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// BenchRead measures what a cache miss asks of the store, on a listing of
// a real page's size: the kept response body (EncodedByID), against
// reading the listing and encoding it on every read (ListingByID and
// upstream.Encode, what a miss did before bodies were kept).
func BenchRead(b *testing.B, s upstream.Store) {
	ctx := context.Background()
	firm, err := s.AddFirm(ctx, "Bench", digest("bench"))
	if err != nil {
		b.Fatal(err)
	}
	user, err := s.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "bench@example.com"})
	if err != nil {
		b.Fatal(err)
	}
	l, err := upstream.DecodeListing([]byte(pageSizedListing), true)
	if err != nil {
		b.Fatal(err)
	}
	l.FirmID, l.FirmUserID = firm.ID, user.ID
	stored, err := s.ImportListings(ctx, []upstream.Listing{l})
	if err != nil {
		b.Fatal(err)
	}
	id := stored[0].ID
	b.Run("kept-body", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.EncodedByID(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode-each-read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := s.ListingByID(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := upstream.Encode(l); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// pageSizedListing is a listing as big as a real listing page's (about
// 2.3 KB as a response): twelve photos, a location and attributes.
var pageSizedListing = func() string {
	var b strings.Builder
	b.WriteString(`{"id":4242,"no":4242,"title":"Sea-view flat","categoryId":1,"subCategoryId":4,` +
		`"createdDate":1700000000000,"updatedDate":1700000100000,"endDate":1800000000000,"note":"Viewing by appointment",` +
		`"realtyDetailUrl":"https://example.com/realty/4242","realtyIdentificationNo":"TR-34-1203-4242","energyDocumentNo":"E-2024-0077",` +
		`"location":{"cityId":34,"cityName":"Istanbul","countyId":12,"countyName":"Kadikoy","districtId":1203,"districtName":"Moda","latitude":40.98,"longitude":29.02,"nearLocation":true},` +
		`"attributes":{"description":"Bright three-room flat, renovated in 2023, close to the ferry.","price":8500000,"priceCurrencyType":"TRY","room":3,"livingRoom":1,"bathRoom":2,"sqm":120,"netSqm":105,"age":12,"floorCount":6,"heatingId":2,"floorId":4,"furnished":false,"sideIdList":[1,2,3],"selectedAttributeList":[{"groupId":1,"selectedIds":[3,4]},{"groupId":2,"selectedIds":[7]}]},` +
		`"realtyFiles":[`)
	for n := 1; n <= 12; n++ {
		if n > 1 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"imageUrl":"https://img.example.com/4242/photo-%d.jpg","sortOrder":%d,"imageType":"IMAGE","status":"APPROVED"}`, n, n, n)
	}
	b.WriteString("]}")
	return b.String()
}()
