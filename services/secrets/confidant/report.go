package confidant

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Report is what an import did, for the terminal (WriteText) and for machines (JSON). It names
// records by id, revision and name, and reasons in words: never a secret value, nor a digest of one
// (a digest of a short secret can be brute-forced).
type Report struct {
	Table string `json:"table"`
	// ArchiveTable is DYNAMODB_TABLE_ARCHIVE, when given.
	ArchiveTable string `json:"archive_table,omitempty"`
	DryRun       bool   `json:"dry_run"`
	// Items is how many items the table held (every page of the scan).
	Items       int    `json:"items"`
	Credentials Counts `json:"credentials"`
	// ArchivedCredentials are the archive table's: imported with every revision, then moved into
	// gantry's archive area (Archived).
	ArchivedCredentials Counts `json:"archived_credentials"`
	Services            Counts `json:"services"`
	BlindCredentials    Counts `json:"blind_credentials"`
	// Skipped are records left out on purpose, each with the reason; Failures are records that
	// should have been imported and were not (or do not read back as they should).
	Skipped  []Entry `json:"skipped"`
	Failures []Entry `json:"failures"`
	// OverLimits are records imported beyond the limits gantry's API holds writes to (the
	// max-credential-* and max-service-credentials settings): imported all the same, and listed,
	// because a write of one through the API is refused until it fits or the limit is raised.
	OverLimits []Entry `json:"over_limits"`
	// Verification is "passed", "failed", or "skipped (dry run)" / "skipped (interrupted)".
	Verification string `json:"verification"`
	Interrupted  bool   `json:"interrupted"`
}

// Counts are the numbers of one kind of record.
type Counts struct {
	// Found records (current ones) and their revisions in Confidant.
	Found     int `json:"found"`
	Revisions int `json:"revisions"`
	// Written revisions (in a dry run: the revisions a real run would write); Unchanged revisions
	// were in gantry already.
	Written   int `json:"written"`
	Unchanged int `json:"unchanged"`
	// Repaired revisions were in gantry without a mapping an earlier run left out, and now have it
	// (a dry run: would be repaired).
	Repaired int `json:"repaired"`
	// Missing revisions were damaged in Confidant's table and are recorded in gantry's history as
	// missing (-skip-damaged), each listed under skipped.
	Missing int `json:"missing,omitempty"`
	// Verified revisions were read back from gantry and matched Confidant's.
	Verified int `json:"verified"`
	Skipped  int `json:"skipped"`
	Failed   int `json:"failed"`
	// Archived credentials were moved into gantry's archive area by this run (a dry run: would be).
	Archived int `json:"archived,omitempty"`
}

// Entry is one skipped or failed record.
type Entry struct {
	Kind     string `json:"kind"`
	ID       string `json:"id"`
	Revision int32  `json:"revision,omitempty"`
	Name     string `json:"name,omitempty"`
	Reason   string `json:"reason"`
	// Retry marks a failure a later run may not meet again (another writer, the storage, a key
	// service that did not answer); every other failure comes back until what its reason names is
	// done.
	Retry bool `json:"retry,omitempty"`
}

// OK reports whether the import succeeded: no failure, not interrupted, and (unless a dry run) a
// passed verification.
func (r *Report) OK() bool {
	return len(r.Failures) == 0 && !r.Interrupted && (r.DryRun || r.Verification == "passed")
}

// NothingToDo reports a run that found every revision in gantry already.
func (r *Report) NothingToDo() bool {
	return r.OK() && r.Credentials.Written == 0 && r.Services.Written == 0 && r.Services.Repaired == 0 &&
		r.ArchivedCredentials.Written == 0 && r.ArchivedCredentials.Archived == 0
}

func (r *Report) sort() {
	by := func(a, b Entry) int {
		return cmpEntries(a, b)
	}
	slices.SortFunc(r.Skipped, by)
	slices.SortFunc(r.Failures, by)
	slices.SortFunc(r.OverLimits, by)
}

func cmpEntries(a, b Entry) int {
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := strings.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return int(a.Revision) - int(b.Revision)
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	if r.Skipped == nil {
		r.Skipped = []Entry{}
	}
	if r.Failures == nil {
		r.Failures = []Entry{}
	}
	if r.OverLimits == nil {
		r.OverLimits = []Entry{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for a person.
func (r *Report) WriteText(w io.Writer) {
	mode := ""
	written := "written"
	if r.DryRun {
		mode = " (dry run: nothing written)"
		written = "to write"
	}
	tables := r.Table
	if r.ArchiveTable != "" {
		tables += " and archive table " + r.ArchiveTable
	}
	fmt.Fprintf(w, "gantry import confidant: table %s%s\n", tables, mode)
	fmt.Fprintf(w, "items read:        %d\n", r.Items)
	line := func(kind string, c Counts, more string) {
		fmt.Fprintf(w, "%-18s %d found, %d revisions: %d %s, %d unchanged, %d verified, %d skipped, %d failed%s\n",
			kind+":", c.Found, c.Revisions, c.Written, written, c.Unchanged, c.Verified, c.Skipped, c.Failed, more)
	}
	repaired := "repaired"
	if r.DryRun {
		repaired = "to repair"
	}
	missing := func(c Counts) string {
		if c.Missing == 0 {
			return ""
		}
		return fmt.Sprintf("; %d recorded as missing (damaged in Confidant's table, -skip-damaged)", c.Missing)
	}
	line("credentials", r.Credentials, missing(r.Credentials))
	if r.ArchiveTable != "" {
		moved := "moved to gantry's archive"
		if r.DryRun {
			moved = "to move to gantry's archive"
		}
		line("archived", r.ArchivedCredentials, fmt.Sprintf("; %d %s", r.ArchivedCredentials.Archived, moved)+missing(r.ArchivedCredentials))
	}
	line("services", r.Services, fmt.Sprintf("; %d %s (mappings an earlier run left out)", r.Services.Repaired, repaired))
	fmt.Fprintf(w, "%-18s %d found, not imported (each one is listed under skipped)\n", "blind credentials:", r.BlindCredentials.Found)
	for _, list := range []struct {
		title   string
		entries []Entry
	}{{"skipped", r.Skipped}, {"imported beyond gantry's limits (a write of these through the API is refused until it fits or the setting named is raised)", r.OverLimits}, {"failures", r.Failures}} {
		if len(list.entries) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s (%d):\n", list.title, len(list.entries))
		for _, e := range list.entries {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	verification := r.Verification
	if n := r.Credentials.Missing + r.ArchivedCredentials.Missing; n > 0 && verification == "passed" {
		verification += fmt.Sprintf(" (but for %d damaged %s recorded as missing: listed under skipped)", n, plural(n, "revision", "revisions"))
	}
	fmt.Fprintf(w, "verification:      %s\n", verification)
	switch {
	case !r.OK() && r.Interrupted:
		fmt.Fprintln(w, "result:            FAILED: interrupted; run the import again: it continues where it stopped")
	case !r.OK() && r.retryHelps():
		fmt.Fprintln(w, "result:            FAILED (see above): run the import again, it continues where it stopped; failures marked [run again] may pass then, the others need what their reason says done first")
	case !r.OK():
		fmt.Fprintln(w, "result:            FAILED (see above): running the import again alone changes nothing; do what each failure's reason says (in Confidant's table, gantry, or the import's settings), then run it again: it repairs and continues from there")
	case r.DryRun:
		fmt.Fprintln(w, "result:            ok (dry run)")
	case r.NothingToDo():
		fmt.Fprintln(w, "result:            ok, nothing to do: every revision was imported already")
	default:
		fmt.Fprintln(w, "result:            ok")
	}
}

// retryHelps reports whether any failure may pass on a later run as it is.
func (r *Report) retryHelps() bool {
	for _, f := range r.Failures {
		if f.Retry {
			return true
		}
	}
	return false
}

func (e Entry) String() string {
	s := e.Kind + " " + e.ID
	if e.Revision > 0 {
		s += fmt.Sprintf(" revision %d", e.Revision)
	}
	if e.Name != "" {
		s += fmt.Sprintf(" (%q)", e.Name)
	}
	s += ": " + e.Reason
	if e.Retry {
		s += " [run again]"
	}
	return s
}
