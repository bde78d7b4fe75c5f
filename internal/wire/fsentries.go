package wire

import "github.com/hotcell/hotcell/internal/errdefs"

// FileEntry is a FileInfo with its owner, as the agent's
// GET /v1/fs/entries streams it (the E2B front's EntryInfo needs owner and
// group; hotcell's own FileInfo stays as it is).
type FileEntry struct {
	FileInfo
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Owner and Group are the names in the sandbox's /etc/passwd and
	// /etc/group, or the numbers when they have none.
	Owner string `json:"owner"`
	Group string `json:"group"`
	// Metadata is the file's user.e2b.* extended attributes, when asked
	// for (metadata=true).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// FileEntryLine is one line of GET /v1/fs/entries: an entry, or the last
// line, which is End or Error. A stream without either was cut short.
type FileEntryLine struct {
	Entry *FileEntry      `json:"entry,omitempty"`
	End   bool            `json:"end,omitempty"`
	Error *errdefs.Detail `json:"error,omitempty"`
}

// Account is a user of the sandbox's image, from its /etc/passwd
// (GET /v1/users/lookup).
type Account struct {
	Name string `json:"name"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home"`
}
