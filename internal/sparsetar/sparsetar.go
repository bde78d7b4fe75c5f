// Package sparsetar writes and extracts sparse files in tar streams.
//
// Sparse files travel as PAX entries in the GNU sparse 1.0 format (what
// `tar --sparse --format=pax` writes and archive/tar, GNU tar and bsdtar
// read): only the data regions are stored, after a map of where they go. A
// 2 GiB file that is all hole costs a few blocks in a backup, not 2 GiB of
// zeros. archive/tar reads these entries but cannot write them, so Write
// writes the entry's blocks itself.
package sparsetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Extent is one data region of a file.
type Extent struct{ Off, Len int64 }

// DataExtents lists the data regions of f's first size bytes with
// SEEK_DATA/SEEK_HOLE. ok is false when the file is not worth storing
// sparse (no holes, or a filesystem that cannot tell).
func DataExtents(f *os.File, size int64) (ext []Extent, ok bool) {
	fd := int(f.Fd())
	var stored int64
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil || d >= size {
			if err != nil {
				return nil, false
			}
			break
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return nil, false
		}
		h = min(h, size)
		ext = append(ext, Extent{d, h - d})
		stored += h - d
		off = h
	}
	if stored >= size {
		return nil, false
	}
	// A file that ends in a hole ends its map with an empty region at its
	// size, as GNU tar does, so every reader gets the size right.
	if n := len(ext); n == 0 || ext[n-1].Off+ext[n-1].Len < size {
		ext = append(ext, Extent{size, 0})
	}
	return ext, true
}

// Write writes hdr's file f, whose data regions are ext, to w as a
// GNU sparse 1.0 PAX entry. tw is flushed first and not used for the entry:
// it must not be mid-entry.
func Write(tw *tar.Writer, w io.Writer, hdr *tar.Header, f *os.File, ext []Extent) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	var m strings.Builder
	m.WriteString(strconv.Itoa(len(ext)) + "\n")
	var data int64
	for _, e := range ext {
		m.WriteString(strconv.FormatInt(e.Off, 10) + "\n" + strconv.FormatInt(e.Len, 10) + "\n")
		data += e.Len
	}
	sparseMap := padBlock([]byte(m.String()))
	physical := int64(len(sparseMap)) + data

	recs := [][2]string{
		{"GNU.sparse.major", "1"},
		{"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", hdr.Name},
		{"GNU.sparse.realsize", strconv.FormatInt(hdr.Size, 10)},
		{"mtime", strconv.FormatInt(hdr.ModTime.Unix(), 10)},
	}
	if physical > maxOctal(12) {
		recs = append(recs, [2]string{"size", strconv.FormatInt(physical, 10)})
	}
	if hdr.Uname != "" {
		recs = append(recs, [2]string{"uname", hdr.Uname})
	}
	if hdr.Gname != "" {
		recs = append(recs, [2]string{"gname", hdr.Gname})
	}
	var pax bytes.Buffer
	for _, r := range recs {
		pax.WriteString(paxRecord(r[0], r[1]))
	}
	base := "GNUSparseFile.0/" + shortName(path.Base(strings.TrimSuffix(hdr.Name, "/")), 100-len("GNUSparseFile.0/"))
	paxHdr := ustarBlock("PaxHeaders.0/"+shortName(path.Base(hdr.Name), 100-len("PaxHeaders.0/")), 0o644, 0, 0, int64(pax.Len()), hdr.ModTime.Unix(), tar.TypeXHeader, "", "")
	fileHdr := ustarBlock(base, hdr.Mode, hdr.Uid, hdr.Gid, min(physical, maxOctal(12)), hdr.ModTime.Unix(), tar.TypeReg, hdr.Uname, hdr.Gname)
	for _, b := range [][]byte{paxHdr, padBlock(pax.Bytes()), fileHdr, sparseMap} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	buf := make([]byte, 256<<10)
	for _, e := range ext {
		if e.Len == 0 {
			continue
		}
		n, err := io.CopyBuffer(w, io.NewSectionReader(f, e.Off, e.Len), buf)
		if err != nil {
			return err
		}
		if n < e.Len {
			// The file shrank while we read it: pad, as for a plain entry.
			if _, err := io.Copy(w, io.LimitReader(zeros{}, e.Len-n)); err != nil {
				return err
			}
		}
	}
	if pad := (512 - data%512) % 512; pad > 0 {
		if _, err := w.Write(make([]byte, pad)); err != nil {
			return err
		}
	}
	return nil
}

// paxRecord formats one record: "<len> key=value\n", len counting itself.
func paxRecord(k, v string) string {
	const padding = 3 // space, '=' and newline
	size := len(k) + len(v) + padding
	size += len(strconv.Itoa(size))
	rec := strconv.Itoa(size) + " " + k + "=" + v + "\n"
	if len(rec) != size { // the length's own digits pushed it over
		size = len(rec)
		rec = strconv.Itoa(size) + " " + k + "=" + v + "\n"
	}
	return rec
}

func padBlock(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// maxOctal is the largest number an n-byte octal header field holds.
func maxOctal(n int) int64 { return 1<<(3*(n-1)) - 1 }

// shortName cuts s to at most n bytes, not inside a UTF-8 sequence.
func shortName(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// ustarBlock builds one ustar header block. Numbers that do not fit their
// octal fields are written as 0 (a PAX record carries the real value) —
// except uid/gid, which are clamped: the entry's owner is only a hint.
func ustarBlock(name string, mode int64, uid, gid int, size, mtime int64, typ byte, uname, gname string) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	octal(b[100:108], mode&0o7777)
	octal(b[108:116], int64(uid))
	octal(b[116:124], int64(gid))
	octal(b[124:136], size)
	octal(b[136:148], mtime)
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	copy(b[265:297], shortName(uname, 31))
	copy(b[297:329], shortName(gname, 31))
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// octal writes v into field as zero-padded octal digits and a NUL; a
// value that does not fit (or is negative) becomes 0.
func octal(field []byte, v int64) {
	if v < 0 || v > maxOctal(len(field)) {
		v = 0
	}
	s := strconv.FormatInt(v, 8)
	s = strings.Repeat("0", len(field)-1-len(s)) + s
	copy(field, s)
	field[len(field)-1] = 0
}

// HoleWriter writes a sparse entry's content to a new file F at increasing
// offsets, skipping all-zero blocks so that the entry's holes stay holes;
// Close sets the file's size, which a trailing hole leaves short otherwise
// (it does not close F).
type HoleWriter struct {
	F   *os.File
	off int64
}

var zeroBlock = make([]byte, 64<<10)

func (w *HoleWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		// Steps end at 4 KiB boundaries of the file, so holes line up
		// with its blocks.
		step := min(len(p), 4096-int(w.off%4096))
		if !bytes.Equal(p[:step], zeroBlock[:step]) {
			// Write the whole run of data steps at once.
			for step < len(p) {
				next := min(len(p)-step, 4096)
				if bytes.Equal(p[step:step+next], zeroBlock[:next]) {
					break
				}
				step += next
			}
			if _, err := w.F.WriteAt(p[:step], w.off); err != nil {
				return n - len(p), err
			}
		}
		w.off += int64(step)
		p = p[step:]
	}
	return n, nil
}

func (w *HoleWriter) Close() error { return w.F.Truncate(w.off) }

// IsSparse reports whether archive/tar reads hdr's entry as a sparse file.
func IsSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
