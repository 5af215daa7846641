package main

import (
	"fmt"
	"strings"
)

// suggestion is ` (did you mean "x"?)` for the command nearest to word, when one is near enough to
// be a typo; "" otherwise, since suggesting a far command would only mislead.
func suggestion(word string) string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if best := nearest(word, names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// nearest is the candidate nearest to word when it is near enough to be a typo of it (a prefix of
// two letters or more counts as one edit), else "".
func nearest(word string, candidates []string) string {
	best, bestDistance := "", len(word)
	for _, c := range candidates {
		d := editDistance(word, c)
		if strings.HasPrefix(c, word) && len(word) >= 2 {
			d = min(d, 1)
		}
		if d < bestDistance {
			best, bestDistance = c, d
		}
	}
	if best == "" || bestDistance > max(2, len(word)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, where a swap of two neighbours counts one.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
