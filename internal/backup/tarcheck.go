package backup

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hotcell/hotcell/internal/sparsetar"
)

// tarChecker reads a tar stream as it is written to it, without writing
// anything anywhere: it checks that the archive is whole (it ends with the
// end-of-archive marker, which archive/tar alone does not insist on) and
// that no entry name leaves the directory it is extracted into. The agent
// checks names again, fully (links included), when it extracts.
type tarChecker struct {
	pw   *io.PipeWriter
	done chan error
	err  error // first error the parser reported
}

func newTarChecker() *tarChecker { return startChecker(false) }

func newGzipTarChecker() *tarChecker { return startChecker(true) }

func startChecker(gz bool) *tarChecker {
	pr, pw := io.Pipe()
	c := &tarChecker{pw: pw, done: make(chan error, 1)}
	go func() {
		err := checkTar(pr, gz)
		// Keep reading so writers never block on a parser that stopped.
		_, _ = io.Copy(io.Discard, pr)
		c.done <- err
	}()
	return c
}

// Write never fails: a bad archive is reported by finish, so that the
// copy it rides along with is not cut short by it.
func (c *tarChecker) Write(p []byte) (int, error) {
	_, _ = c.pw.Write(p)
	return len(p), nil
}

// finish ends the stream and returns what the parser found.
func (c *tarChecker) finish() error {
	_ = c.pw.Close()
	if c.done != nil {
		c.err = <-c.done
		c.done = nil
	}
	return c.err
}

// close releases the parser when the stream is abandoned.
func (c *tarChecker) close() {
	_ = c.pw.CloseWithError(errors.New("abandoned"))
	if c.done != nil {
		<-c.done
		c.done = nil
	}
}

// countingReader counts the bytes read through it, and how many of the
// last ones are zeros.
type countingReader struct {
	r     io.Reader
	n     int64
	zeros int64 // trailing zero bytes of what was read
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	i := n
	for i > 0 && p[i-1] == 0 {
		i--
	}
	if i == 0 {
		c.zeros += int64(n)
	} else {
		c.zeros = int64(n - i)
	}
	return n, err
}

// checkTar parses r (gzip-compressed when gz) to its end.
func checkTar(r io.Reader, gz bool) error {
	if gz {
		zr, err := gzip.NewReader(bufio.NewReader(r))
		if err != nil {
			return fmt.Errorf("read gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	// The counter sees exactly what the tar reader consumes (it neither
	// buffers nor seeks a plain reader), which is how a missing end marker
	// shows: the last Next reads fewer than its two zero blocks.
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	entries := 0
	sparse := false // the last entry was sparse: its stored bytes were skipped, not read
	for {
		before := cr.n
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// After a sparse entry the count includes its stored bytes;
			// the marker's two zero blocks must end what was read.
			if cr.n-before < 2*512 || (sparse && cr.zeros < 2*512) {
				return fmt.Errorf("the archive ends without its end-of-archive marker after %d entries (truncated?)", entries)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar after %d entries: %w", entries, err)
		}
		if err := checkName(hdr.Name); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		// A sparse entry's stored bytes are left for the next Next to
		// skip (a short one shows there): reading them through tr would
		// expand its holes, and a few bytes of header claiming an exabyte
		// of zeros would keep the daemon busy for ever.
		sparse = sparsetar.IsSparse(hdr)
		if !sparse {
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return fmt.Errorf("read tar entry %q: %w", hdr.Name, err)
			}
		}
		entries++
	}
}

// checkName rejects the names that plainly leave the extraction directory.
func checkName(name string) error {
	if strings.HasPrefix(name, "/") {
		return errors.New("absolute name")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return errors.New("name contains a .. component")
		}
	}
	return nil
}

// peekReader tells a gzip stream from a plain one by its first bytes.
type peekReader struct{ *bufio.Reader }

func newPeekReader(r io.Reader) peekReader { return peekReader{bufio.NewReaderSize(r, 64<<10)} }

func (p peekReader) isGzip() (bool, error) {
	b, err := p.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return len(b) == 2 && b[0] == 0x1f && b[1] == 0x8b, nil
}

// gzipWriter compresses for speed: backups are taken while users wait.
type gzipWriter = gzip.Writer

func newGzipWriter(w io.Writer) *gzipWriter {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return zw
}
