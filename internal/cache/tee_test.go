package cache

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// failAfter is a writer that fails once it has taken n bytes (a disk that fills up).
type failAfter struct {
	n   int
	buf bytes.Buffer
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.buf.Len()+len(p) > f.n {
		return 0, errors.New("no space left on device")
	}
	return f.buf.Write(p)
}

// TestTeeToFile: a restore from S3 reaches the client whole, and the local copy is the same bytes;
// a local copy that fails (a full disk) leaves the client's copy whole and says so.
func TestTeeToFile(t *testing.T) {
	t.Parallel()
	src := bytes.Repeat([]byte("0123456789abcdef"), (5*teeChunk+123)/16)
	for _, tc := range []struct {
		name     string
		diskRoom int
		wantFerr bool
	}{
		{"the disk takes it all", len(src), false},
		{"the disk fills up", 2*teeChunk + 7, true},
		{"empty entry", len(src), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := src
			if tc.name == "empty entry" {
				in = nil
			}
			var client bytes.Buffer
			disk := &failAfter{n: tc.diskRoom}
			n, ferr, err := teeToFile(&client, disk, bytes.NewReader(in))
			if err != nil || n != int64(len(in)) || !bytes.Equal(client.Bytes(), in) {
				t.Fatalf("teeToFile = %d, %v; client got %d of %d bytes", n, err, client.Len(), len(in))
			}
			if got := ferr != nil; got != tc.wantFerr {
				t.Fatalf("local copy error %v, want an error: %v", ferr, tc.wantFerr)
			}
			if !tc.wantFerr && !bytes.Equal(disk.buf.Bytes(), in) {
				t.Errorf("local copy has %d bytes, want the %d sent", disk.buf.Len(), len(in))
			}
		})
	}
}

// A client that goes away ends the copy with its error.
func TestTeeToFileClientGone(t *testing.T) {
	t.Parallel()
	client := &failAfter{n: teeChunk}
	_, _, err := teeToFile(client, io.Discard, bytes.NewReader(make([]byte, 3*teeChunk)))
	if err == nil {
		t.Fatal("teeToFile with a client gone returned no error")
	}
}
