package agent

import (
	"io"
	"sync"
)

// copyBufSize is the size of pooled copy buffers: large enough for pipe and
// file throughput, small enough that an idle agent holds almost nothing.
const copyBufSize = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// copyBuffered copies with a pooled buffer; io.CopyBuffer may still use
// ReaderFrom/WriterTo when dst or src offer them, which is as good.
func copyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	bp := getBuf()
	defer putBuf(bp)
	return io.CopyBuffer(dst, src, *bp)
}
