package images

// Exported for tests.
var (
	MirrorFromDeb822 = mirrorFromDeb822
	MirrorFromList   = mirrorFromList
)
