package standby

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"sync"
)

// reqBody is a request's body on its way through the supervisor: the first
// send to a worker streams it from the client as the worker reads it (the
// two transfers overlap) and keeps every byte, so that the request can be
// sent again to the next worker. Bodies with a Content-Length stream into a
// pooled buffer of that size; the others are read whole first.
type reqBody struct {
	src  io.Reader // the client's body, bounded by the body limit
	buf  []byte    // what was read so far
	size int       // the whole body's length
	pool bool      // buf comes from bufPools
	// sent is closed when the transport has closed the last send's
	// reader: until then it may still read buf. mu orders the sends
	// (a hedged request has two).
	mu   sync.Mutex
	sent chan struct{}
}

// errTooLarge is a body over the limit.
var errTooLarge = errors.New("over the body limit")

// newReqBody prepares r's body (nil for a request without one).
func newReqBody(w http.ResponseWriter, r *http.Request, limit int64) (*reqBody, error) {
	if r.Body == nil || r.Body == http.NoBody || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	src := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 {
		return &reqBody{src: src, buf: getBuf(int(n))[:0], size: int(n), pool: true}, nil
	}
	all, err := io.ReadAll(src)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, errTooLarge
		}
		return nil, err
	}
	return &reqBody{buf: all, size: len(all)}, nil
}

// reader is the body for one send, and its length. The first streams from
// the client; a later one (after a worker failed under the first) waits
// until the transport let go of the previous one, reads what the client
// has not sent yet, and replays the whole.
func (b *reqBody) reader(ctx context.Context) (io.ReadCloser, int64, error) {
	if b == nil {
		return http.NoBody, 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.sent == nil
	if !first {
		select {
		case <-b.sent:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		if n := len(b.buf); n < b.size {
			b.buf = b.buf[:b.size]
			if _, err := io.ReadFull(b.src, b.buf[n:]); err != nil {
				return nil, 0, fmt.Errorf("reading the rest of the request body to send it again: %w", err)
			}
		}
	}
	b.sent = make(chan struct{})
	s := &send{b: b, done: b.sent}
	if first && len(b.buf) < b.size {
		s.tee = true
	} else {
		s.rd = bytes.NewReader(b.buf)
	}
	return s, int64(b.size), nil
}

// release returns the buffer to the pool once no send reads it.
func (b *reqBody) release() {
	if b == nil || !b.pool {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent != nil {
		select {
		case <-b.sent:
		default:
			return // still in a transport's hands: left to the GC
		}
	}
	putBuf(b.buf)
	b.buf = nil
}

// send is one send's reader of a reqBody.
type send struct {
	b    *reqBody
	tee  bool          // read from the client, keeping what is read
	rd   *bytes.Reader // replay of what was kept
	once sync.Once
	done chan struct{}
}

func (s *send) Read(p []byte) (int, error) {
	if !s.tee {
		return s.rd.Read(p)
	}
	b := s.b
	if len(b.buf) == b.size {
		return 0, io.EOF
	}
	k := min(len(p), b.size-len(b.buf))
	n, err := b.src.Read(b.buf[len(b.buf) : len(b.buf)+k])
	copy(p, b.buf[len(b.buf):len(b.buf)+n])
	b.buf = b.buf[:len(b.buf)+n]
	if err == io.EOF && len(b.buf) < b.size {
		err = io.ErrUnexpectedEOF
	} else if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (s *send) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

// bufPools hold request buffers by capacity, powers of two up to 64 MiB.
var bufPools [27]sync.Pool

func getBuf(n int) []byte {
	c := bits.Len(uint(n - 1))
	if c >= len(bufPools) {
		return make([]byte, n)
	}
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<c)
}

func putBuf(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	if c < len(bufPools) && cap(b) == 1<<c {
		b = b[:0]
		bufPools[c].Put(&b)
	}
}
