package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
)

// ListingImport imports a JSON array of listings from a file or standard
// input, all or none, through the cache, so that no gateway serves a
// cached absence of an imported listing. The file is read as a stream: the
// command's memory does not grow with it. Where stderr is a terminal it
// shows the progress there; stdout gets the one JSON line.
func ListingImport(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return UsageError("usage: gateway listing import FILE|-")
	}
	in := &countingReader{r: stdin}
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in.r = f
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			in.size = fi.Size()
		}
	}
	var show func(done int)
	if terminal(stderr) {
		p := &progress{w: stderr, in: in, began: time.Now()}
		show = p.add
		defer p.end()
	}
	imported := func(n int, err error) error {
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		return printJSON(stdout, map[string]any{"imported": n})
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		if si, ok := s.(upstream.StreamImporter); ok && cfg.Redis.URL == "" {
			// No tier that another process reads: the command's own
			// would hold the new listings' floors for nobody (6 % of the
			// import's time, after its commit), and the gateways hear of
			// them from the change feed.
			return imported(si.ImportStream(ctx, importEntries(in), func(stored []upstream.Listing) error {
				if show != nil {
					show(len(stored))
				}
				return nil
			}))
		}
		return withCache(ctx, cfg, s, log, func(listings *cache.Cache) error {
			n, err := listings.ImportStream(ctx, importEntries(in), show)
			if inc := listings.Stats().Incoherent; err == nil && inc > 0 {
				return fmt.Errorf("imported %d listings, but %d cache keys could be neither written nor cleared; they expire within the negative TTL", n, inc)
			}
			return imported(n, err)
		})
	})
}

// terminal reports whether w is a terminal.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// importEntries reads a JSON array of listings, each through the same
// decoding and validation as POST /realty, keeping the given id, firm,
// user and dates, and yields them in file order. One goroutine reads the
// entries in chunks of decodeChunk; the chunks are decoded in parallel, at
// most decodeAhead of them ahead of the consumer, so that memory stays
// flat. A malformed file or entry ends it with the error, an entry's
// naming it as an *upstream.ImportError.
func importEntries(r io.Reader) iter.Seq2[upstream.Listing, error] {
	return func(yield func(upstream.Listing, error) bool) {
		done := make(chan struct{})
		defer close(done)
		chunks := make(chan chan decoded, decodeAhead)
		go readChunks(r, chunks, done)
		for c := range chunks {
			d := <-c
			for _, l := range d.ls {
				if !yield(l, nil) {
					return
				}
			}
			if d.err != nil {
				yield(upstream.Listing{}, d.err)
				return
			}
		}
	}
}

// Decoding ahead of the store: entries per chunk, chunks in flight.
const (
	decodeChunk = 256
	decodeAhead = 8
)

// decoded is a chunk's listings, and the error that ended the file there.
type decoded struct {
	ls  []upstream.Listing
	err error
}

// readChunks splits the array into chunks of raw entries and starts the
// decoding of each, handing out its result in file order.
func readChunks(r io.Reader, out chan<- chan decoded, done <-chan struct{}) {
	defer close(out)
	send := func(d func() decoded) bool {
		c := make(chan decoded, 1)
		select {
		case out <- c:
		case <-done:
			return false
		}
		go func() { c <- d() }()
		return true
	}
	sc := newArrayScanner(r)
	slabSize := 0
	for base := 0; ; base += decodeChunk {
		// A chunk's entries share one slab, sized as the last chunk's.
		slab := make([]byte, 0, slabSize)
		var (
			ends []int
			end  bool
			err  error
		)
		for len(ends) < decodeChunk {
			var entry []byte
			if entry, end, err = sc.next(); end || err != nil {
				break
			}
			slab = append(slab, entry...)
			ends = append(ends, len(slab))
		}
		slabSize = len(slab)
		raws := make([][]byte, len(ends))
		from := 0
		for i, e := range ends {
			raws[i] = slab[from:e:e]
			from = e
		}
		if len(raws) > 0 || err != nil {
			if !send(func() decoded { return decodeEntries(base, raws, err) }) {
				return
			}
		}
		if end || err != nil {
			return
		}
	}
}

// decodeEntries checks and decodes the entries from index base on; err,
// when set, follows them.
func decodeEntries(base int, raws [][]byte, err error) decoded {
	ls := make([]upstream.Listing, 0, len(raws))
	for i, raw := range raws {
		if !json.Valid(raw) {
			var v any
			return decoded{ls: ls, err: fmt.Errorf("%w: entry %d: %w", errNotArray, base+i, json.Unmarshal(raw, &v))}
		}
		l, derr := upstream.DecodeValidListing(raw, true)
		if derr != nil {
			var id struct {
				ID int64 `json:"id"`
			}
			_ = json.Unmarshal(raw, &id)
			return decoded{ls: ls, err: &upstream.ImportError{Index: base + i, ID: id.ID, Err: derr}}
		}
		ls = append(ls, l)
	}
	return decoded{ls: ls, err: err}
}

// countingReader counts the bytes read, for the progress.
type countingReader struct {
	r    io.Reader
	n    atomic.Int64
	size int64 // 0: unknown (a pipe)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// progress writes one line, redrawn in place, at most every
// progressEvery: listings stored so far (before the commit), the rate, and
// where the input's size is known the time left, from the share read.
type progress struct {
	w     io.Writer
	in    *countingReader
	began time.Time
	shown time.Time
	done  int
}

const progressEvery = 250 * time.Millisecond

func (p *progress) add(n int) {
	p.done += n
	if now := time.Now(); now.Sub(p.shown) >= progressEvery {
		p.shown = now
		p.draw(now)
	}
}

func (p *progress) draw(now time.Time) {
	elapsed := now.Sub(p.began)
	rate := float64(p.done) / max(elapsed.Seconds(), 1e-3)
	line := fmt.Sprintf("\r%d listings, %.0f/s", p.done, rate)
	if read := p.in.n.Load(); p.in.size > 0 && read > 0 {
		share := min(float64(read)/float64(p.in.size), 1)
		left := time.Duration(float64(elapsed) * (1 - share) / share).Round(time.Second)
		line += fmt.Sprintf(", %.0f%%, %v left", 100*share, left)
	}
	fmt.Fprintf(p.w, "%s\x1b[K", line)
}

// end draws the last line and ends it.
func (p *progress) end() {
	if p.done > 0 {
		p.draw(time.Now())
		fmt.Fprintln(p.w)
	}
}
