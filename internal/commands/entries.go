package commands

import (
	"errors"
	"fmt"
	"io"
)

// arrayScanner frames the entries of a JSON array read as a stream: it
// finds where each ends by its strings, brackets and braces alone, a tenth
// of what a json.Decoder's full check costs, and leaves checking an entry
// to json.Valid, which the decoders run in parallel. It is not safe for
// concurrent use.
type arrayScanner struct {
	r     io.Reader
	buf   []byte
	start int   // buf[start:end] is read and not framed yet
	end   int   //
	rerr  error // r's error once met, io.EOF at the end
	begun bool  // the '[' was read
	n     int   // entries framed so far
}

// Reading: the buffer's first size, and the largest entry taken, far
// above any listing (a listing is a few KB; an HTTP write is refused past
// 64 KiB), so that a file without an end to its first string does not
// fill the memory.
const (
	scanBuffer = 1 << 16
	maxEntry   = 4 << 20
)

func newArrayScanner(r io.Reader) *arrayScanner {
	return &arrayScanner{r: r, buf: make([]byte, scanBuffer)}
}

// errNotArray starts every framing error.
var errNotArray = errors.New("import file: want a JSON array of listings")

// next returns the next entry, valid until the following call, or done
// at the array's end, after which only whitespace may follow.
func (s *arrayScanner) next() (entry []byte, done bool, err error) {
	c, err := s.nonSpace()
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", errNotArray, err)
	case !s.begun && c != '[':
		return nil, false, fmt.Errorf("%w: found %q", errNotArray, c)
	case !s.begun:
		s.begun = true
		s.start++
		if c, err = s.nonSpace(); err != nil {
			return nil, false, fmt.Errorf("%w: %w", errNotArray, err)
		}
		if c != ']' {
			return s.value()
		}
	case c == ',' && s.n > 0:
		s.start++
		return s.value()
	case c != ']':
		return nil, false, fmt.Errorf("%w: after entry %d: found %q, want , or ]", errNotArray, s.n-1, c)
	}
	s.start++ // the ']'
	switch c, err := s.nonSpace(); {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", errNotArray, err)
	default:
		return nil, false, fmt.Errorf("%w: found %q after it", errNotArray, c)
	}
}

// value frames the entry that starts at the next byte that is not
// whitespace.
func (s *arrayScanner) value() ([]byte, bool, error) {
	if _, err := s.nonSpace(); err != nil {
		return nil, false, fmt.Errorf("%w: entry %d: %w", errNotArray, s.n, err)
	}
	f := framing{scalar: !opens[s.buf[s.start]] && s.buf[s.start] != '"'}
	for i := 0; ; {
		k, ended := f.scan(s.buf[s.start+i : s.end])
		if ended {
			return s.take(i + k)
		}
		i += k
		if err := s.fill(); err != nil {
			if f.scalar && errors.Is(err, io.ErrUnexpectedEOF) {
				return s.take(i) // the file ends with it: json.Valid judges
			}
			return nil, false, fmt.Errorf("%w: entry %d: %w", errNotArray, s.n, err)
		}
	}
}

// framing is how far value got in an entry: within a string or not, and
// how deep in brackets and braces; a scalar ends at its first delimiter.
type framing struct {
	depth    int
	inString bool
	scalar   bool
}

// scan reads b, the entry's bytes that follow those scanned before, and
// returns how many of them it took and whether the entry ends after them.
// Where it does not, the entry goes on past b (an escape may be cut in
// two: its backslash is left for the next call).
func (f *framing) scan(b []byte) (int, bool) {
	depth, inString, scalar := f.depth, f.inString, f.scalar // locals on the hot path
	k := 0
scan:
	for k < len(b) {
		switch {
		case inString:
			for k < len(b) && !stringSpecial[b[k]] {
				k++
			}
			if k == len(b) {
				break scan
			}
			if b[k] == '\\' {
				if k+1 == len(b) {
					break scan // the escaped byte is not read yet
				}
				k += 2
				continue
			}
			inString = false
			k++
			if depth == 0 {
				return k, true
			}
		case scalar:
			for k < len(b) && !ends[b[k]] {
				k++
			}
			if k < len(b) {
				return k, true
			}
		default:
			for k < len(b) && !structural[b[k]] {
				k++
			}
			if k == len(b) {
				break scan
			}
			switch b[k] {
			case '"':
				inString = true
			case '{', '[':
				depth++
			default: // '}' or ']'
				depth--
			}
			k++
			if depth <= 0 && !inString {
				return k, true
			}
		}
	}
	f.depth, f.inString = depth, inString
	return k, false
}

// take frames the next n bytes as an entry.
func (s *arrayScanner) take(n int) ([]byte, bool, error) {
	entry := s.buf[s.start : s.start+n : s.start+n]
	s.start += n
	s.n++
	return entry, false, nil
}

// nonSpace skips whitespace and returns the byte after it, unread:
// io.ErrUnexpectedEOF where the input ends first.
func (s *arrayScanner) nonSpace() (byte, error) {
	for {
		for s.start < s.end {
			if c := s.buf[s.start]; !space[c] {
				return c, nil
			}
			s.start++
		}
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
}

// fill reads more after buf[start:end], which it moves to the front:
// io.ErrUnexpectedEOF at the end of the input, r's error, or an error for
// an entry past maxEntry.
func (s *arrayScanner) fill() error {
	if s.start > 0 {
		s.end = copy(s.buf, s.buf[s.start:s.end])
		s.start = 0
	}
	if s.end == len(s.buf) {
		if len(s.buf) >= maxEntry {
			return fmt.Errorf("longer than %d bytes", maxEntry)
		}
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	for s.rerr == nil {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		s.rerr = err
		if n > 0 {
			return nil
		}
	}
	if errors.Is(s.rerr, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read: %w", s.rerr)
}

// Byte classes: JSON's whitespace; what opens an array or object; what
// the framing stops at outside strings, inside them, and after a scalar.
var (
	space         = byteSet(" \t\r\n")
	opens         = byteSet("{[")
	structural    = byteSet(`"{}[]`)
	stringSpecial = byteSet(`"\`)
	ends          = byteSet(" \t\r\n,]}")
)

func byteSet(bytes string) (set [256]bool) {
	for _, b := range []byte(bytes) {
		set[b] = true
	}
	return set
}
