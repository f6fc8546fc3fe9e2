package gateway

import (
	"bytes"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// An answer's Date is fasthttp's: a clock it refreshes about once a
// second and reads when the answer is written, which lags the clock the
// handlers read (requestTime) by up to a second, more on a busy machine.
// fasthttp keeps Date to itself (a handler's Date is dropped). A listing's
// Last-Modified must not be later than the Date (RFC 9110 §8.8.2.1), so it
// is checked with servedDates.reached against the Date fasthttp's answers
// carry now, which an answer written later can only equal or pass.

// servedDates remembers the Date fasthttp's answers carried when last
// read.
type servedDates struct{ last atomic.Pointer[servedDate] }

type servedDate struct {
	sec      int64 // the second of fasthttp's Date
	nextRead int64 // the request time, in Unix nanoseconds, to read it again
}

// datePoll is how often the Date is read again while it lags the clock.
const datePoll = 50 * time.Millisecond

// reached reports whether every answer written from now on carries a
// Date at or after second sec. A Date never goes back, so a second the
// last read Date has reached costs an atomic load.
func (d *servedDates) reached(sec int64, now time.Time) bool {
	if last := d.last.Load(); last != nil && sec <= last.sec {
		return true
	}
	return sec <= d.second(now)
}

// second returns a second no later than the Date of an answer written
// from now on, reading the Date again at most once per datePoll.
func (d *servedDates) second(now time.Time) int64 {
	last := d.last.Load()
	if last != nil && (last.sec >= now.Unix() || now.UnixNano() < last.nextRead) {
		return last.sec
	}
	sec, ok := fasthttpDate()
	if !ok {
		sec = 0 // unreadable: no Last-Modified passes
	}
	if last != nil {
		sec = max(sec, last.sec)
	}
	d.last.CompareAndSwap(last, &servedDate{sec: sec, nextRead: now.Add(datePoll).UnixNano()})
	return sec
}

// fasthttpDate reads the second of the Date that fasthttp writes on
// answers now, from a header it serializes.
func fasthttpDate() (int64, bool) {
	var h fasthttp.ResponseHeader
	var buf [192]byte
	b := h.AppendBytes(buf[:0])
	_, line, ok := bytes.Cut(b, []byte("\r\nDate: "))
	if !ok {
		return 0, false
	}
	line, _, _ = bytes.Cut(line, []byte("\r\n"))
	t, err := http.ParseTime(string(line))
	if err != nil {
		return 0, false
	}
	return t.Unix(), true
}
