package standby

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A body the first worker read only in part (it failed mid-request) is sent
// whole to the next: what was read is replayed and the rest read from the
// client. A body the first read whole is replayed as it was.
func TestReqBodyReplaysAfterAPartialSend(t *testing.T) {
	want := make([]byte, 300_000)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for _, firstReads := range []int{0, 1, 4096, 123_457, len(want)} {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", bytes.NewReader(want))
		b, err := newReqBody(httptest.NewRecorder(), r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		first, n, err := b.reader(context.Background())
		if err != nil || n != int64(len(want)) {
			t.Fatalf("first reader: %d bytes, %v", n, err)
		}
		got, _ := io.ReadAll(io.LimitReader(first, int64(firstReads)))
		if !bytes.Equal(got, want[:firstReads]) {
			t.Fatalf("the first send read other bytes than the client's")
		}
		first.Close()
		again, n, err := b.reader(context.Background())
		if err != nil || n != int64(len(want)) {
			t.Fatalf("second reader after %d bytes: %d bytes, %v", firstReads, n, err)
		}
		if all, _ := io.ReadAll(again); !bytes.Equal(all, want) {
			t.Errorf("after a first send of %d bytes the second sent %d bytes, not the body", firstReads, len(all))
		}
		again.Close()
		b.release()
	}
}

// A body over the limit is refused before it is read, with or without a
// Content-Length.
func TestReqBodyLimit(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(make([]byte, 2048)))
	if _, err := newReqBody(httptest.NewRecorder(), r, 1024); err != errTooLarge {
		t.Errorf("Content-Length over the limit: %v", err)
	}
	r = httptest.NewRequest(http.MethodPost, "/", io.MultiReader(bytes.NewReader(make([]byte, 2048))))
	r.ContentLength = -1
	if _, err := newReqBody(httptest.NewRecorder(), r, 1024); err != errTooLarge {
		t.Errorf("chunked over the limit: %v", err)
	}
}
