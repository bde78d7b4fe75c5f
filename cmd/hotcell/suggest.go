package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// suggestFlag adds the nearest known flag to an unknown-flag error: cobra
// suggests commands but not flags.
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok || cmd == nil {
		return err
	}
	best, bestDist := "", 3 // farther than 2 edits is no longer a typo
	visit := func(f *pflag.Flag) {
		if d := editDistance(name, f.Name); d < bestDist || (d == bestDist && best != "" && f.Name < best) {
			best, bestDist = f.Name, d
		}
		if strings.HasPrefix(f.Name, name) && best == "" {
			best = f.Name
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	if best == "" {
		return err
	}
	return errors.Join(err, fmt.Errorf("did you mean --%s?", best))
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
