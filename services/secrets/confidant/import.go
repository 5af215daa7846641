package confidant

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/fernet"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Scanner is the one DynamoDB call the import makes: it reads, and cannot write, Confidant's table.
type Scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Target is where the import writes and reads back: *secrets.Importer.
type Target interface {
	PutCredentialRevision(ctx context.Context, rec *store.CredentialRecord, pairs credpair.Map) error
	PutServiceRevision(ctx context.Context, rec *store.ServiceRecord) error
	// ReplaceServiceRevision rewrites a service revision gantry holds, where it is still prev: a later
	// run puts back a mapping an earlier one left out.
	ReplaceServiceRevision(ctx context.Context, rec, prev *store.ServiceRecord) error
	CurrentCredentialRevision(ctx context.Context, id string) (int32, error)
	CurrentServiceRevision(ctx context.Context, id string) (int32, error)
	CredentialRevision(ctx context.Context, id string, revision int32) (*store.CredentialRecord, credpair.Map, error)
	ServiceRevision(ctx context.Context, id string, revision int32) (*store.ServiceRecord, error)
	// EnsureServiceGrants gives an imported service the KMS grants Confidant gave it at creation.
	EnsureServiceGrants(ctx context.Context, serviceID string) error
	// ArchiveCredential moves an imported credential into gantry's archive area, stamped with at.
	ArchiveCredential(ctx context.Context, id string, revision int32, at time.Time) error
	// ArchivedCredential reads an archived credential back (store.ErrNotFound: not archived).
	ArchivedCredential(ctx context.Context, id string) (*store.CredentialRecord, credpair.Map, error)
}

// Options of one import run.
type Options struct {
	Table string
	// ArchiveTable is Confidant's DYNAMODB_TABLE_ARCHIVE (empty: none): its credentials are imported
	// with every revision, then moved into gantry's archive area.
	ArchiveTable string
	Workers      int
	// DryRun reads and decrypts everything and writes nothing.
	DryRun bool
	// SkipDamaged imports what is intact of a credential with a damaged or missing revision before
	// its last (an item that cannot be read, pairs that do not decrypt): that revision is recorded
	// in gantry's history as missing (a placeholder without pairs, see placeholderCredential), and a
	// service mapping a credential that cannot be imported at all is imported without the mapping.
	// Each one is listed under skipped; a later run without it repairs nothing of a placeholder.
	SkipDamaged bool
	// Limits, when set, are the limits gantry's API holds writes to (secrets.Limits): a record beyond
	// them is imported all the same (its history must be whole, and Confidant served it), and
	// reported under over_limits, since a write of it through the API would be refused as it is.
	Limits Limits
	// Progress receives the progress of each phase (reading the tables, importing, verifying): done
	// of the total, the rate and the time left; nil for none.
	Progress io.Writer
	// ProgressRedraw rewrites one line in place every 200ms (Progress is a terminal); otherwise a
	// plain line is written every ProgressInterval (a log; 0: every 200ms too).
	ProgressRedraw   bool
	ProgressInterval time.Duration
	// KMSRate caps the KMS Decrypt calls of the import per second (0: no cap), so that the import
	// takes a known share of the account's KMS request quota, which production shares.
	KMSRate float64
	Logger  *zap.Logger
	// OnWrite, when set, is called after each revision is written (tests interrupt a run with it).
	OnWrite func(kind, id string, revision int32)
}

// Limits checks records against the limits of gantry's API (secrets.Limits).
type Limits interface {
	CheckCredential(pairs credpair.Map, metadata map[string]string) error
	CheckService(credentials, blindCredentials []string) error
}

const (
	kindCredential = "credential"
	// kindArchived is a credential of the archive table (DYNAMODB_TABLE_ARCHIVE).
	kindArchived        = "archived-credential"
	kindService         = "service"
	kindBlindCredential = "blind-credential"
	kindItem            = "item"
)

// history is one Confidant record, credential or service: its current item and its archive items
// by revision, and what the import made of them.
type history[R any] struct {
	id      string
	current *R
	revs    map[int32]*R
	// chain is revisions 1..N to write (prepareHistory), failed whether the record failed (then no
	// service can map a credential that did), stored the last revision gantry holds after the
	// import (what the verification reads).
	chain  []*R
	failed bool
	stored int32
}

// head is an item's id, revision and dates (both kinds of revision embed a header).
func head[R any](rev *R) *header { return any(rev).(interface{ head() *header }).head() }

// add files one item: the current one, or the archive item of its revision.
func (h *history[R]) add(rev *R, isCurrent bool) {
	if isCurrent {
		h.current = rev
	} else {
		h.revs[head(rev).Revision] = rev
	}
}

// credential is one Confidant credential.
type credential struct {
	history[credentialRevision]
	// archived: read from the archive table; it goes to gantry's archive area once its revisions and
	// the service history that names it are written (archiveCredentials). inArchive: gantry has it
	// archived (an earlier run, or archiveEarly).
	archived, inArchive bool
	// digests are of each revision's pairs, for the verification.
	digests [][32]byte
}

type service struct {
	history[serviceRevision]
	// gantryCurrent is gantry's current revision of the service (after this run's writes): the one
	// revision whose mappings must be current credentials.
	gantryCurrent int32
	// unrepaired are revisions that differ from Confidant's and were reported by repairService.
	unrepaired map[int32]bool
}

// run is the state of one import.
type run struct {
	opts   Options
	keys   kms.Provider
	dst    Target
	logger *zap.Logger

	mu     sync.Mutex
	report Report

	credentials map[string]*credential
	services    map[string]*service
	blind       map[string]*blindCredential
	// blindArchives are the archive items of blind credentials, by blind credential id.
	blindArchives map[string]*blindCredential
	// archiveTable are the credentials of the archive table, until merged into credentials.
	archiveTable map[string]*credential
	// damaged are the ids of credentials with an item the import cannot read: they are in Confidant's
	// table, so a service mapping one fails with it instead of losing the mapping.
	damaged map[string]bool
	// damagedItems are why each damaged credential item cannot be read, by credential id and
	// revision (0: the current item whose revision is unknown).
	damagedItems map[string]map[int32]string

	// limiter paces the Decrypt calls (Options.KMSRate); nil: not paced.
	limiter *rate.Limiter
	// progress is the meter of the phase running (credentials and services: one revision each).
	progress *meter
}

// Run imports Confidant's table into gantry: every credential with every revision, then every
// service with every revision (their mappings name the credentials), then reads each imported
// revision back and compares it with Confidant's. keys decrypts Confidant's data keys (the AWS KMS
// Confidant used). The returned error is only for a run that could not start (the table could not
// be read); every other problem is in the report, whose OK says whether the import succeeded.
func Run(ctx context.Context, src Scanner, keys kms.Provider, dst Target, opts Options) (*Report, error) {
	r := &run{opts: opts, keys: keys, dst: dst, logger: opts.Logger,
		credentials: map[string]*credential{}, services: map[string]*service{}, blind: map[string]*blindCredential{},
		blindArchives: map[string]*blindCredential{}, archiveTable: map[string]*credential{}, damaged: map[string]bool{}, damagedItems: map[string]map[int32]string{}}
	if r.logger == nil {
		r.logger = zap.NewNop()
	}
	r.opts.Workers = max(r.opts.Workers, 1)
	if opts.KMSRate > 0 {
		r.limiter = rate.NewLimiter(rate.Limit(opts.KMSRate), 1)
	}
	r.report = Report{Table: opts.Table, ArchiveTable: opts.ArchiveTable, DryRun: opts.DryRun}
	if err := r.scan(ctx, src, opts.Table, r.classify); err != nil {
		return &r.report, err
	}
	if opts.ArchiveTable != "" {
		if err := r.scan(ctx, src, opts.ArchiveTable, r.classifyArchive); err != nil {
			return &r.report, err
		}
		r.mergeArchive()
	}
	r.reportUnreadable()
	r.progress = r.meter("importing", "revisions", r.revisionsToImport())
	shared := r.sharedNames()
	var credIDs, namedIDs []string
	for _, id := range slices.Sorted(maps.Keys(r.credentials)) {
		if shared[id] {
			namedIDs = append(namedIDs, id)
		} else {
			credIDs = append(credIDs, id)
		}
	}
	r.parallel(ctx, credIDs, func(id string) {
		r.importCredential(ctx, r.credentials[id])
		r.progress.add(revisionCount(&r.credentials[id].history))
	})
	r.importNamed(ctx, namedIDs)
	svcIDs := slices.Sorted(maps.Keys(r.services))
	r.parallel(ctx, svcIDs, func(id string) {
		r.importService(ctx, r.services[id])
		r.progress.add(revisionCount(&r.services[id].history))
	})
	r.progress.end()
	r.reportBlind()
	switch {
	case ctx.Err() != nil:
		r.report.Interrupted = true
		r.report.Verification = "skipped (interrupted)"
	case opts.DryRun:
		r.archiveCredentials(ctx)
		r.report.Verification = "skipped (dry run)"
	default:
		// Every written revision is read back while it is current, then archive-table credentials
		// move to the archive area, where their last revision is read back once more.
		r.verify(ctx)
		r.archiveCredentials(ctx)
		r.finishVerification(ctx)
	}
	r.report.sort()
	return &r.report, nil
}

func (r *run) skip(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Skipped = append(r.report.Skipped, e)
	switch e.Kind {
	case kindCredential:
		r.report.Credentials.Skipped++
	case kindArchived:
		r.report.ArchivedCredentials.Skipped++
	case kindService:
		r.report.Services.Skipped++
	case kindBlindCredential:
		r.report.BlindCredentials.Skipped++
	}
}

// overLimits lists a record imported beyond the limits of gantry's API (Options.Limits).
func (r *run) overLimits(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.OverLimits = append(r.report.OverLimits, e)
}

func (r *run) fail(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Failures = append(r.report.Failures, e)
	switch e.Kind {
	case kindCredential:
		r.report.Credentials.Failed++
	case kindArchived:
		r.report.ArchivedCredentials.Failed++
	case kindService:
		r.report.Services.Failed++
	}
	r.logger.Warn("import failure", zap.String("kind", e.Kind), zap.String("id", e.ID), zap.Int32("revision", e.Revision), zap.String("reason", e.Reason))
}

func (r *run) count(f func(*Report)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.report)
}

// scan reads every page of the table and sorts the items by kind. An item the import cannot read
// is reported, never dropped.
func (r *run) scan(ctx context.Context, src Scanner, table string, classify func(item)) error {
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
	// The scan is the count pass: the totals of the later phases are known once it ends, so this
	// phase shows a count and a rate only.
	m := r.meter("reading table "+table, "items", 0)
	defer m.end()
	for {
		out, err := src.Scan(ctx, in)
		if err != nil {
			return fmt.Errorf("reading DynamoDB table %s: %w", table, err)
		}
		for _, it := range out.Items {
			r.report.Items++
			classify(it)
		}
		m.add(len(out.Items))
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func (r *run) classify(it item) {
	itemID, _ := str(it, "id")
	dataType, _ := str(it, "data_type")
	bad := func(err error) {
		r.fail(Entry{Kind: kindItem, ID: itemID, Reason: fmt.Sprintf("%s item cannot be read: %v", dataType, err)})
	}
	switch dataType {
	case typeCredential, typeArchiveCredential:
		c, err := parseCredential(it, dataType == typeArchiveCredential)
		if err != nil {
			r.noteDamaged(it, itemID, dataType == typeArchiveCredential, err)
			if r.opts.SkipDamaged {
				r.skip(Entry{Kind: kindItem, ID: itemID, Reason: fmt.Sprintf("%s item cannot be read: %v; -skip-damaged: its credential is imported without it", dataType, err)})
				return
			}
			bad(err)
			return
		}
		addCredential(r.credentials, c, dataType == typeCredential, false)
	case typeService, typeArchiveService:
		s, err := parseService(it, dataType == typeArchiveService)
		if err != nil {
			bad(err)
			return
		}
		e := r.services[s.ID]
		if e == nil {
			e = &service{history: history[serviceRevision]{id: s.ID, revs: map[int32]*serviceRevision{}}, unrepaired: map[int32]bool{}}
			r.services[s.ID] = e
		}
		e.add(s, dataType == typeService)
	case typeBlindCredential:
		rev, _ := revisionOf(it)
		name, _ := str(it, "name")
		r.blind[itemID] = &blindCredential{ID: itemID, Revision: rev, Name: name}
	case typeArchiveBlindCredential:
		// Revisions of a blind credential: reported with it (below), as none of them is imported; one
		// whose current item is gone is reported on its own.
		rev, _ := revisionOf(it)
		name, _ := str(it, "name")
		if id, ok := archiveID(itemID, rev); ok {
			r.blindArchives[id] = &blindCredential{ID: id, Revision: rev, Name: name}
		}
	default:
		r.skip(Entry{Kind: kindItem, ID: itemID, Reason: fmt.Sprintf("unknown data_type %q: not a Confidant credential, blind credential or service", dataType)})
	}
}

// reportUnreadable fails each credential of which no item can be read at all: it is in Confidant's
// table, so it is a failure, not a record that vanished.
func (r *run) reportUnreadable() {
	for _, id := range slices.Sorted(maps.Keys(r.damaged)) {
		if r.credentials[id] == nil {
			r.fail(Entry{Kind: kindCredential, ID: id, Reason: "none of its items can be read (listed above): repair them in Confidant's table (or restore them from a backup) and run the import again"})
		}
	}
}

// noteDamaged records a credential item that cannot be read, with its revision when that can be
// told (the attribute, or an archive id's "-<revision>").
func (r *run) noteDamaged(it item, itemID string, archive bool, err error) {
	id, suffix, _ := strings.Cut(itemID, "-")
	r.damaged[id] = true
	rev := int32(0)
	if archive {
		if n, perr := revisionOf(it); perr == nil {
			rev = n
		} else if n, perr := strconv.ParseInt(suffix, 10, 32); perr == nil && n > 0 {
			rev = int32(n)
		}
		if rev == 0 {
			return // an archive item of no known revision: only the gap it leaves is seen
		}
	}
	if r.damagedItems[id] == nil {
		r.damagedItems[id] = map[int32]string{}
	}
	r.damagedItems[id][rev] = err.Error()
}

// addCredential files one item of a credential (its current item, or one revision's archive item).
func addCredential(into map[string]*credential, c *credentialRevision, isCurrent, archived bool) {
	e := into[c.ID]
	if e == nil {
		e = &credential{history: history[credentialRevision]{id: c.ID, revs: map[int32]*credentialRevision{}}, archived: archived}
		into[c.ID] = e
	}
	e.add(c, isCurrent)
}

// classifyArchive files an item of the archive table (DYNAMODB_TABLE_ARCHIVE). Confidant's
// archive_credentials copies there a credential's current item (data_type "credential", the bare
// id) and every revision ("archive-credential", "<id>-<revision>"), each with an archive_date.
func (r *run) classifyArchive(it item) {
	itemID, _ := str(it, "id")
	dataType, _ := str(it, "data_type")
	switch dataType {
	case typeCredential, typeArchiveCredential:
		c, err := parseCredential(it, dataType == typeArchiveCredential)
		if err != nil {
			r.fail(Entry{Kind: kindItem, ID: itemID, Reason: fmt.Sprintf("%s item of the archive table cannot be read: %v", dataType, err)})
			return
		}
		addCredential(r.archiveTable, c, dataType == typeCredential, true)
	default:
		r.skip(Entry{Kind: kindItem, ID: itemID, Reason: fmt.Sprintf("data_type %q in the archive table, which Confidant fills with credentials only: not imported", dataType)})
	}
}

// mergeArchive adds the archive table's credentials to the import. One that Confidant's main table
// still holds (an archive whose delete failed, or a restore) is served by Confidant from there, so
// it is imported from there, current.
func (r *run) mergeArchive() {
	for id, a := range r.archiveTable {
		if m := r.credentials[id]; m != nil && m.current != nil {
			r.skip(Entry{Kind: kindArchived, ID: id, Name: m.current.Name, Reason: "in both DYNAMODB_TABLE and DYNAMODB_TABLE_ARCHIVE (an archive whose delete failed, or a restore): Confidant serves it from DYNAMODB_TABLE, so it is imported from there and not archived"})
			continue
		}
		r.credentials[id] = a // revisions the main table kept without a current item are superseded
	}
	r.archiveTable = nil
}

// parallel runs f for every id on the configured workers, until ctx ends.
func (r *run) parallel(ctx context.Context, ids []string, f func(string)) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(r.opts.Workers, max(len(ids), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				f(id)
			}
		}()
	}
feed:
	for _, id := range ids {
		select {
		case work <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
}

// chain returns revisions 1..current of a record, the archive record of each (the current record
// for the last one if its archive record is missing), or the first revision that is missing. The
// archive record, not the current one, is a revision's lasting form: Confidant builds the current
// item apart, a few milliseconds later, and once a later revision replaces it only the archive
// record says what the revision was, so a run after a late write verifies against it.
func chain[T any](current *T, currentRev int32, revs map[int32]*T) ([]*T, int32) {
	out := make([]*T, 0, currentRev)
	for k := int32(1); k <= currentRev; k++ {
		rev := revs[k]
		if rev == nil && k == currentRev {
			rev = current
		}
		if rev == nil {
			return nil, k
		}
		out = append(out, rev)
	}
	return out, 0
}

// prepareHistory checks a record's items: its current item, no archive item after it (each such
// one reported), and every revision 1..current, which become h.chain. False when the record cannot
// be imported (reported). name gives a revision's name for the report ("" for services).
// fill, when set, gives a placeholder for a revision before the last whose item is missing
// (-skip-damaged), reporting it.
func prepareHistory[R any](r *run, h *history[R], kind string, counts func(*Report) *Counts, name func(*R) string, fill func(k int32) *R) bool {
	if h.current == nil {
		h.failed = true
		r.skip(Entry{Kind: kind, ID: h.id, Reason: fmt.Sprintf("%d archive revisions but no current record (deleted from Confidant's table): not imported", len(h.revs))})
		return false
	}
	n := head(h.current).Revision
	r.count(func(rep *Report) { counts(rep).Found++; counts(rep).Revisions += int(n) })
	for k, rev := range h.revs {
		if k > n {
			r.skip(Entry{Kind: kind, ID: h.id, Revision: k, Name: name(rev), Reason: fmt.Sprintf("archive revision after the current revision %d (a Confidant write that did not finish): not imported", n)})
		}
	}
	if fill != nil {
		for k := int32(1); k < n; k++ {
			if h.revs[k] == nil {
				h.revs[k] = fill(k)
			}
		}
	}
	revs, missing := chain(h.current, n, h.revs)
	if missing > 0 {
		h.failed = true
		reason := "this revision is missing from Confidant's table, so the history cannot be carried over"
		if kind != kindService {
			reason += ": restore its item in Confidant's table (a backup), or run with -skip-damaged to record it as missing"
			if missing == n {
				reason = "its last revision is missing from Confidant's table (neither its current nor its archive item can be read): restore it in Confidant's table (a backup); -skip-damaged cannot stand in for the value clients read"
			}
		}
		r.fail(Entry{Kind: kind, ID: h.id, Revision: missing, Name: name(h.current), Reason: reason})
		return false
	}
	h.chain = revs
	return true
}

// settleStored records what gantry holds of a record (have: its current revision there, read with
// err): revisions up to Confidant's last are unchanged, later ones are gantry's own (reported).
// False when gantry could not be read (reported).
func settleStored[R any](r *run, h *history[R], kind string, counts func(*Report) *Counts, name func(*R) string, have int32, err error) bool {
	if err != nil {
		h.failed = true
		r.fail(Entry{Kind: kind, ID: h.id, Name: name(h.current), Reason: "reading gantry's copy: " + err.Error(), Retry: true})
		return false
	}
	n := head(h.current).Revision
	if have > n {
		r.skip(Entry{Kind: kind, ID: h.id, Revision: have, Name: name(h.current), Reason: fmt.Sprintf("gantry has revisions after Confidant's last (%d): changed in gantry since, left alone", n)})
	}
	r.count(func(rep *Report) { counts(rep).Unchanged += int(min(have, n)) })
	h.stored = min(have, n)
	return true
}

func credentialName(c *credentialRevision) string { return c.Name }

func noName(*serviceRevision) string { return "" }

func servicesCounts(rep *Report) *Counts { return &rep.Services }

func (r *run) importCredential(ctx context.Context, c *credential) {
	pairs, have, ok := r.prepareCredential(ctx, c)
	if !ok {
		return
	}
	for k := have + 1; k <= c.current.Revision; k++ {
		if !r.writeCredentialRevision(ctx, c, k, pairs[k-1]) {
			return
		}
	}
}

// prepareCredential checks a credential's history, decrypts every revision, and reads how far gantry
// has it already. ok is false when the credential cannot be imported (reported).
func (r *run) prepareCredential(ctx context.Context, c *credential) (pairs []credpair.Map, have int32, ok bool) {
	if !r.recoverCurrent(c) {
		return nil, 0, false
	}
	var fill func(int32) *credentialRevision
	if r.opts.SkipDamaged {
		fill = func(k int32) *credentialRevision { return r.placeholder(c, k, c.neighbour(k), r.whyMissing(c.id, k)) }
	}
	if !prepareHistory(r, &c.history, c.kind(), c.counts, credentialName, fill) {
		return nil, 0, false
	}
	// Decrypt every revision first: a credential is written only when all of it can be.
	dataKeys := map[[32]byte]*fernet.Key{}
	pairs = make([]credpair.Map, len(c.chain))
	c.digests = make([][32]byte, len(c.chain))
	for i, rev := range c.chain {
		if rev.missing != "" {
			pairs[i], c.digests[i] = credpair.Map{}, digest(credpair.Map{})
			continue
		}
		p, err := r.decrypt(ctx, rev, dataKeys)
		if err != nil && r.opts.SkipDamaged && i < len(c.chain)-1 && isDamage(err) {
			// An older revision whose pairs do not open: recorded as missing, like an unreadable item.
			like := c.chain[i+1]
			if i > 0 {
				like = c.chain[i-1]
			}
			c.chain[i] = r.placeholder(c, rev.Revision, like, "its pairs do not decrypt: "+err.Error())
			pairs[i], c.digests[i] = credpair.Map{}, digest(credpair.Map{})
			continue
		}
		if err != nil {
			c.failed = true
			r.fail(Entry{Kind: c.kind(), ID: c.id, Revision: rev.Revision, Name: rev.Name, Reason: err.Error(), Retry: errors.As(err, new(retryable))})
			return nil, 0, false
		}
		pairs[i], c.digests[i] = p, digest(p)
		if r.opts.Limits != nil {
			if err := r.opts.Limits.CheckCredential(p, rev.Metadata); err != nil {
				r.overLimits(Entry{Kind: c.kind(), ID: c.id, Revision: rev.Revision, Name: rev.Name, Reason: err.Error()})
			}
		}
	}
	if c.archived && r.archivedAlready(ctx, c) {
		return nil, 0, false
	}
	have, err := r.dst.CurrentCredentialRevision(ctx, c.id)
	if !settleStored(r, &c.history, c.kind(), c.counts, credentialName, have, err) {
		return nil, 0, false
	}
	return pairs, have, true
}

// recoverCurrent handles a credential whose current item cannot be read (it is in the table: its
// services must not lose it as if it had vanished). With -skip-damaged its last archive item stands
// for it, when that is its last revision; otherwise it fails, reported. False when it cannot be
// imported.
func (r *run) recoverCurrent(c *credential) bool {
	if c.current != nil || !r.damaged[c.id] {
		return true
	}
	why, _ := r.damagedItems[c.id][0]
	last := int32(0)
	for k := range c.revs {
		last = max(last, k)
	}
	for k := range r.damagedItems[c.id] {
		if k > last {
			last = 0 // the last revision is itself damaged
		}
	}
	if !r.opts.SkipDamaged || last == 0 {
		c.failed = true
		reason := "its current item cannot be read (" + why + "): repair the item in Confidant's table (or restore it from a backup) and run the import again"
		if last > 0 {
			reason += ", or run with -skip-damaged to import it from its last archive item (revision " + strconv.Itoa(int(last)) + ")"
		}
		r.fail(Entry{Kind: c.kind(), ID: c.id, Reason: reason})
		return false
	}
	c.current = c.revs[last]
	r.skip(Entry{Kind: c.kind(), ID: c.id, Revision: last, Name: c.current.Name, Reason: "its current item cannot be read (" + why + "); -skip-damaged: imported from the archive item of its last revision, which holds the same revision"})
	return true
}

// neighbour is the revision a placeholder for revision k takes its name and dates from: the one
// before it, or for revision 1 the first one after it.
func (c *credential) neighbour(k int32) *credentialRevision {
	if k > 1 && c.revs[k-1] != nil {
		return c.revs[k-1]
	}
	for j := k + 1; j < head(c.current).Revision; j++ {
		if c.revs[j] != nil {
			return c.revs[j]
		}
	}
	return c.current
}

// whyMissing says why revision k of a credential has no item the import can use.
func (r *run) whyMissing(id string, k int32) string {
	if why, ok := r.damagedItems[id][k]; ok {
		return "its item cannot be read: " + why
	}
	return "its item is missing from Confidant's table"
}

// placeholderAuthor is the modified_by of a revision recorded as missing.
const placeholderAuthor = "gantry import -skip-damaged"

// placeholder stands in gantry's history for revision k of a credential that is damaged in
// Confidant's table (-skip-damaged): revision numbers stay Confidant's, and the history says what
// is missing. It has like's name and enabled state (the revision before it, for revision 1 the one
// after it: a name the credential held, so no other credential's name is taken), like's modified_date (the revision's own is unknown), no pairs, no
// metadata or tags, and a documentation and modified_by that say it is missing and why. Reported.
func (r *run) placeholder(c *credential, k int32, like *credentialRevision, why string) *credentialRevision {
	doc := fmt.Sprintf("revision %d was damaged in Confidant's table (%s): gantry import -skip-damaged recorded it as missing, without its pairs or fields", k, why)
	r.skip(Entry{Kind: c.kind(), ID: c.id, Revision: k, Name: like.Name, Reason: "damaged (" + why + "): recorded in gantry's history as a missing revision, without pairs (-skip-damaged); the rest of the credential is imported"})
	r.count(func(rep *Report) { c.counts(rep).Missing++ })
	return &credentialRevision{
		header: header{ID: c.id, Revision: k, ModifiedDate: like.ModifiedDate, ModifiedBy: placeholderAuthor},
		Name:   like.Name, Enabled: like.Enabled, Documentation: &doc, Metadata: map[string]string{}, CipherVersion: 2, missing: why,
	}
}

// isDamage reports a decryption failure that comes from the item itself (a data key or pairs that
// do not open), not from the key service (unavailable, access denied).
func isDamage(err error) bool {
	return !errors.As(err, new(retryable)) && !errors.As(err, new(accessDeniedError))
}

// writeCredentialRevision writes revision k (the one after c.stored); false when it failed (reported:
// the credential's later revisions must not be written).
func (r *run) writeCredentialRevision(ctx context.Context, c *credential, k int32, pairs credpair.Map) bool {
	if r.opts.DryRun {
		r.count(func(rep *Report) { c.counts(rep).Written++ })
		return true
	}
	rev := c.chain[k-1]
	err := r.dst.PutCredentialRevision(ctx, credentialRecord(rev), pairs)
	var taken *store.NameTakenError
	if errors.As(err, &taken) && r.archiveEarly(ctx, r.credentials[taken.ID]) {
		err = r.dst.PutCredentialRevision(ctx, credentialRecord(rev), pairs)
	}
	if err != nil {
		c.failed = k == 1 // with revision 1 stored the credential exists, and services may map it
		r.fail(Entry{Kind: c.kind(), ID: c.id, Revision: k, Name: rev.Name, Reason: writeError(err), Retry: isRetryable(err)})
		return false
	}
	c.stored = k
	r.count(func(rep *Report) { c.counts(rep).Written++ })
	if r.opts.OnWrite != nil {
		r.opts.OnWrite(kindCredential, c.id, k)
	}
	return true
}

func (c *credential) kind() string {
	if c.archived {
		return kindArchived
	}
	return kindCredential
}

// counts are the report's numbers of the credential's kind.
func (c *credential) counts(rep *Report) *Counts {
	if c.archived {
		return &rep.ArchivedCredentials
	}
	return &rep.Credentials
}

// archivedAlready reports whether gantry's archive holds an archive-table credential (a run before
// this one moved it): then nothing is written, and finishVerification reads it back.
func (r *run) archivedAlready(ctx context.Context, c *credential) bool {
	rec, _, err := r.dst.ArchivedCredential(ctx, c.id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false
	case err != nil:
		c.failed = true
		r.fail(Entry{Kind: kindArchived, ID: c.id, Name: c.current.Name, Reason: "reading gantry's archive: " + err.Error(), Retry: true})
		return true
	}
	c.inArchive = true
	if rec.Revision != c.current.Revision {
		c.failed = true
		r.skip(Entry{Kind: kindArchived, ID: c.id, Revision: rec.Revision, Name: c.current.Name, Reason: fmt.Sprintf("gantry's archive holds revision %d, Confidant's archive table revision %d: left alone", rec.Revision, c.current.Revision)})
		return true
	}
	r.count(func(rep *Report) { rep.ArchivedCredentials.Unchanged += int(rec.Revision) })
	return true
}

// sharedNames returns the credentials whose history shares a name with another credential's (one
// renamed, its old name later taken by another). gantry, like Confidant, refuses a name another
// current credential holds, so these are written in the order Confidant wrote them (importNamed).
func (r *run) sharedNames() map[string]bool {
	holders := map[string]map[string]bool{}
	note := func(name, id string) {
		if holders[name] == nil {
			holders[name] = map[string]bool{}
		}
		holders[name][id] = true
	}
	for id, c := range r.credentials {
		if c.current == nil {
			continue
		}
		note(c.current.Name, id)
		for _, rev := range c.revs {
			note(rev.Name, id)
		}
	}
	shared := map[string]bool{}
	for _, ids := range holders {
		if len(ids) > 1 {
			for id := range ids {
				shared[id] = true
			}
		}
	}
	return shared
}

// importNamed imports credentials that share names: each is prepared (decrypted) first, then every
// missing revision of all of them is written in the order of Confidant's modified_date, one at a
// time, so each name is free when a revision takes it, as it was in Confidant.
func (r *run) importNamed(ctx context.Context, ids []string) {
	type step struct {
		c     *credential
		k     int32
		pairs credpair.Map
	}
	var steps []step
	for _, id := range ids {
		c := r.credentials[id]
		pairs, have, ok := r.prepareCredential(ctx, c)
		r.progress.add(revisionCount(&c.history))
		if !ok {
			continue
		}
		for k := have + 1; k <= c.current.Revision; k++ {
			steps = append(steps, step{c, k, pairs[k-1]})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int {
		return a.c.chain[a.k-1].ModifiedDate.Compare(b.c.chain[b.k-1].ModifiedDate)
	})
	halted := map[*credential]bool{}
	for _, st := range steps {
		if ctx.Err() != nil {
			return
		}
		if !halted[st.c] && !r.writeCredentialRevision(ctx, st.c, st.k, st.pairs) {
			halted[st.c] = true
		}
	}
}

// decrypt opens one revision's pairs as Confidant does (Credential._get_decrypted_credential_pairs):
// KMS Decrypt of the data key with the encryption context {"id": <credential id>} — for an archive
// record, the part of its id before the first "-" — then Fernet with that key.
func (r *run) decrypt(ctx context.Context, rev *credentialRevision, cache map[[32]byte]*fernet.Key) (credpair.Map, error) {
	if strings.HasPrefix(rev.PairsToken, "DANGER_NOT_ENCRYPTED_") {
		return nil, errors.New("written by a Confidant with USE_ENCRYPTION=false (pairs stored unencrypted): not imported")
	}
	if rev.CipherVersion != 2 {
		return nil, fmt.Errorf("cipher_version %d is not 2 (Fernet), the only one Confidant implements", rev.CipherVersion)
	}
	contextID, _, _ := strings.Cut(rev.ID, "-")
	sum := sha256.Sum256(rev.DataKey)
	key := cache[sum]
	if key == nil {
		if r.limiter != nil {
			if err := r.limiter.Wait(ctx); err != nil {
				return nil, retryable{fmt.Errorf("waiting for the KMS call rate (-import-kms-rate): %w", err)}
			}
		}
		plain, _, err := r.keys.Decrypt(ctx, rev.DataKey, map[string]string{"id": contextID})
		switch {
		case errors.Is(err, kms.ErrAccessDenied):
			// AWS's message names the key and the identity it refused; the grant is what to do.
			return nil, accessDeniedError{fmt.Errorf("AWS KMS denied access to decrypt the data key (encryption context id=%s): grant the identity the import runs as kms:Decrypt on Confidant's master key (KMS_MASTER_KEY in Confidant's settings), with no encryption-context condition or one allowing {\"id\": <credential id>}, then run the import again: %v", contextID, err)}
		case errors.Is(err, kms.ErrUnavailable) && strings.Contains(err.Error(), "ThrottlingException"):
			// Retried with backoff already (KMSRetryer): the quota stayed full for all of it.
			return nil, retryable{fmt.Errorf("AWS KMS kept throttling the decryption of the data key (encryption context id=%s) through %d tries: the account's KMS request quota is in use (production shares it); lower -import-kms-rate or -import-workers, or ask AWS for a higher quota, and run the import again: %v", contextID, KMSMaxAttempts, err)}
		case errors.Is(err, kms.ErrUnavailable):
			return nil, retryable{fmt.Errorf("KMS did not answer the decryption of the data key (encryption context id=%s): %v", contextID, err)}
		case err != nil:
			return nil, fmt.Errorf("KMS could not decrypt the data key (encryption context id=%s): %v", contextID, err)
		}
		if key, err = fernet.ParseKey(string(plain)); err != nil {
			return nil, errors.New("the data key is not a Fernet key")
		}
		cache[sum] = key
	}
	plain, err := key.Decrypt(rev.PairsToken)
	if err != nil {
		return nil, errors.New("credential_pairs do not open with the data key (invalid Fernet token)")
	}
	// Errors below never quote the plaintext: json's messages can hold a character of it.
	// Every value keeps its JSON type and a number its digits, as Confidant serves them.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(plain, &raw); err != nil || raw == nil {
		return nil, errors.New("the decrypted credential_pairs are not a JSON object")
	}
	out := make(credpair.Map, len(raw))
	for k, v := range raw {
		var val credpair.Value
		if err := val.UnmarshalJSON(v); err != nil {
			return nil, fmt.Errorf("the value of pair %q is not a string, number, boolean or null", k)
		}
		out[k] = val
	}
	return out, nil
}

// digest identifies a revision's pairs for the verification (kept in memory only). Values are
// encoded with their JSON type: 5432 and "5432" differ.
func digest(pairs credpair.Map) [32]byte {
	data, _ := json.Marshal(pairs) // map keys are sorted: one encoding per set of pairs
	return sha256.Sum256(data)
}

func credentialRecord(rev *credentialRevision) *store.CredentialRecord {
	return &store.CredentialRecord{
		ID: rev.ID, Revision: rev.Revision, Name: rev.Name, Enabled: rev.Enabled, Documentation: rev.Documentation,
		Metadata: rev.Metadata, Tags: rev.Tags, ModifiedDate: rev.ModifiedDate, ModifiedBy: rev.ModifiedBy,
		LastRotationDate: rev.LastRotationDate, LastDecryptedDate: rev.LastDecryptedDate,
	}
}

func serviceRecord(rev *serviceRevision) *store.ServiceRecord {
	return &store.ServiceRecord{
		ID: rev.ID, Revision: rev.Revision, Enabled: rev.Enabled, Account: rev.Account,
		Credentials: rev.Credentials, BlindCredentials: rev.BlindCredentials,
		ModifiedDate: rev.ModifiedDate, ModifiedBy: rev.ModifiedBy,
	}
}

// accessDeniedError is KMS refusing the import's identity: a permission to grant, not damage.
type accessDeniedError struct{ error }

// retryable marks an error a later run may not meet again (the key service did not answer).
type retryable struct{ error }

// isRetryable reports an error that a later run may not meet again: another writer, the storage, an
// interruption. A refusal of the data itself (a name taken, an unknown mapping) comes back every run.
func isRetryable(err error) bool {
	return errors.Is(err, store.ErrRevisionConflict) || errors.Is(err, store.ErrStorage) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// writeError says why gantry refused a revision, in terms of the import.
func writeError(err error) string {
	var taken *store.NameTakenError
	switch {
	case errors.Is(err, store.ErrRevisionConflict):
		return "gantry's copy changed during the import (another writer): run the import again"
	case errors.As(err, &taken):
		return fmt.Sprintf("the name is used by gantry credential %s (a credential created in gantry, or renamed in Confidant's history); rename one and run again", taken.ID)
	}
	return "writing to gantry: " + err.Error()
}

func (r *run) importService(ctx context.Context, s *service) {
	if !prepareHistory(r, &s.history, kindService, servicesCounts, noName, nil) {
		return
	}
	n := s.current.Revision
	have, err := r.dst.CurrentServiceRevision(ctx, s.id)
	if !settleStored(r, &s.history, kindService, servicesCounts, noName, have, err) {
		return
	}
	s.gantryCurrent = have
	r.reportVanished(s)
	if r.opts.Limits != nil {
		for _, rev := range s.chain {
			if err := r.opts.Limits.CheckService(rev.Credentials, rev.BlindCredentials); err != nil {
				r.overLimits(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: err.Error()})
			}
		}
	}
	for k := have + 1; k <= n; k++ {
		// Written while it is gantry's current revision, whose mappings the store requires current:
		// repairService puts back what it leaves out once a later revision makes it history.
		rev := r.mapped(s.chain[k-1], true)
		if r.opts.DryRun {
			// What a real run would refuse: a mapping of a credential that is not imported.
			if unknown := r.notImported(rev.Credentials); len(unknown) > 0 {
				s.failed = true
				r.fail(Entry{Kind: kindService, ID: s.id, Revision: k, Reason: "maps credentials that are not imported: " + strings.Join(unknown, ", ")})
				return
			}
			r.count(func(rep *Report) { rep.Services.Written++ })
			continue
		}
		if err := r.dst.PutServiceRevision(ctx, serviceRecord(rev)); err != nil {
			s.failed = true
			reason, retry := writeError(err), isRetryable(err)
			var unknown *store.UnknownCredentialsError
			if errors.As(err, &unknown) {
				reason, retry = "maps credentials that are not imported: "+strings.Join(unknown.IDs, ", "), false
			}
			r.fail(Entry{Kind: kindService, ID: s.id, Revision: k, Reason: reason, Retry: retry})
			return
		}
		s.stored, s.gantryCurrent = k, k
		r.count(func(rep *Report) { rep.Services.Written++ })
		if r.opts.OnWrite != nil {
			r.opts.OnWrite(kindService, s.id, k)
		}
	}
	r.repairService(ctx, s)
	if !r.opts.DryRun {
		if err := r.dst.EnsureServiceGrants(ctx, s.id); err != nil {
			r.fail(Entry{Kind: kindService, ID: s.id, Reason: "recording its KMS grants: " + err.Error(), Retry: true})
		}
	}
}

// mapped is a service revision as gantry should hold it: Confidant's, without the credentials
// Confidant's tables no longer hold at all (archived to DYNAMODB_TABLE_ARCHIVE without it given, or
// deleted: Confidant itself skips them when it reads the service, and gantry stores no mapping to a
// credential it does not have) and, when the revision is gantry's current one, without the
// credentials gantry holds archived (a current service maps current credentials only; an older
// revision is history and keeps them). A credential that is in the table but failed to import is
// kept, so the service fails with it rather than silently losing the mapping.
func (r *run) mapped(rev *serviceRevision, isCurrent bool) *serviceRevision {
	kept := slices.DeleteFunc(slices.Clone(rev.Credentials), func(id string) bool {
		return r.vanished(id) || r.leftOutDamaged(id) || (isCurrent && r.credentials[id] != nil && r.credentials[id].inArchive)
	})
	if len(kept) == len(rev.Credentials) {
		return rev
	}
	cp := *rev
	cp.Credentials = kept
	return &cp
}

// vanished reports a credential id that neither of Confidant's tables holds (a damaged item of it
// is not vanished: its credential is there, and failed).
func (r *run) vanished(id string) bool {
	c := r.credentials[id]
	return (c == nil || c.current == nil) && !r.damaged[id]
}

// leftOutDamaged reports a credential that is in Confidant's table and that gantry does not hold
// (damaged, or failed), which -skip-damaged leaves out of the services mapping it.
func (r *run) leftOutDamaged(id string) bool {
	return r.opts.SkipDamaged && !r.vanished(id) && len(r.notImported([]string{id})) > 0
}

// notImported returns the ids of ids that gantry does not hold, current or archived.
func (r *run) notImported(ids []string) []string {
	var out []string
	for _, id := range ids {
		if c := r.credentials[id]; c == nil || c.current == nil || c.failed && c.stored == 0 && !c.inArchive {
			out = append(out, id)
		}
	}
	return out
}

// reportVanished lists, every run, each revision of a service whose mapping of a vanished
// credential is left out.
func (r *run) reportVanished(s *service) {
	for _, rev := range s.chain {
		gone := slices.DeleteFunc(slices.Clone(rev.Credentials), func(id string) bool { return !r.vanished(id) })
		if len(gone) > 0 {
			r.skip(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "maps credentials that are no longer in Confidant's table" + r.vanishedWhy() + ", left out of this revision: " + strings.Join(gone, ", ")})
		}
		if damaged := slices.DeleteFunc(slices.Clone(rev.Credentials), func(id string) bool { return !r.leftOutDamaged(id) }); len(damaged) > 0 {
			r.skip(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "maps credentials that could not be imported (listed with them), left out of this revision (-skip-damaged); once they import, a run repairs it: " + strings.Join(damaged, ", ")})
		}
	}
}

// repairService compares every revision gantry holds of a service (up to Confidant's last) with the
// form mapped gives it now, and rewrites the ones that differ only in their mappings: a run before
// this one wrote them without a credential it could not import then (DYNAMODB_TABLE_ARCHIVE not
// given, a damaged item since repaired in Confidant's table, or a credential gantry archived before
// the revision was written). Any other difference is reported, never rewritten: gantry's copy or
// Confidant's item changed after the import, and only a person can say which is right.
func (r *run) repairService(ctx context.Context, s *service) {
	for _, rev := range s.chain[:s.stored] {
		isCurrent := rev.Revision == s.gantryCurrent
		want := r.mapped(rev, isCurrent)
		if isCurrent {
			if archived := slices.DeleteFunc(slices.Clone(rev.Credentials), func(id string) bool {
				return r.vanished(id) || r.credentials[id] == nil || !r.credentials[id].inArchive
			}); len(archived) > 0 {
				r.skip(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "maps credentials that gantry holds archived, left out of gantry's current revision (a current service maps current credentials only): " + strings.Join(archived, ", ")})
			}
		}
		got, err := r.dst.ServiceRevision(ctx, s.id, rev.Revision)
		if err != nil {
			r.fail(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "reading gantry's copy: " + err.Error(), Retry: true})
			return
		}
		if serviceDiff(want, got) == "" {
			continue
		}
		if diff := serviceDiff(want, withCredentials(got, want.Credentials)); diff != "" {
			s.unrepaired[rev.Revision] = true
			r.fail(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "gantry's revision differs from Confidant's (" + diff + "), and the import rewrites only mappings it left out" + changedAfterImport})
			continue
		}
		// The import only ever puts back what it left out; it never takes a mapping away.
		if extra := slices.DeleteFunc(slices.Clone(got.Credentials), func(id string) bool { return slices.Contains(rev.Credentials, id) }); len(extra) > 0 {
			s.unrepaired[rev.Revision] = true
			r.fail(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "gantry's revision maps credentials Confidant's does not: " + strings.Join(extra, ", ") + changedAfterImport})
			continue
		}
		if kept := slices.DeleteFunc(slices.Clone(got.Credentials), func(id string) bool { return slices.Contains(want.Credentials, id) }); len(kept) > 0 {
			s.unrepaired[rev.Revision] = true
			r.fail(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "gantry's revision maps credentials that this run could not import (each listed with its reason), and the import never removes a mapping: " + strings.Join(kept, ", ")})
			continue
		}
		if unknown := r.notImported(want.Credentials); len(unknown) > 0 {
			s.unrepaired[rev.Revision] = true
			r.fail(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "gantry's revision lacks mappings of credentials that are not imported: " + strings.Join(unknown, ", ") + "; once they import, the next run repairs it"})
			continue
		}
		if !r.opts.DryRun {
			if err := r.dst.ReplaceServiceRevision(ctx, serviceRecord(want), got); err != nil {
				s.unrepaired[rev.Revision] = true
				r.fail(Entry{Kind: kindService, ID: s.id, Revision: rev.Revision, Reason: "repairing its mappings: " + writeError(err), Retry: isRetryable(err)})
				continue
			}
		}
		r.count(func(rep *Report) { rep.Services.Repaired++ })
	}
}

// withCredentials is rec with another mapping, for comparing everything else.
func withCredentials(rec *store.ServiceRecord, ids []string) *store.ServiceRecord {
	cp := *rec
	cp.Credentials = ids
	return &cp
}

// vanishedWhy says where credentials missing from Confidant's table may be.
func (r *run) vanishedWhy() string {
	if r.opts.ArchiveTable == "" {
		return " (archived to DYNAMODB_TABLE_ARCHIVE: set it to import them into gantry's archive; or deleted)"
	}
	return " nor in its archive table " + r.opts.ArchiveTable + " (deleted)"
}

// reportBlind lists every blind credential as skipped, with the services whose current revision
// maps it: those mappings are kept in the services' records (history), and nothing serves them.
func (r *run) reportBlind() {
	mappedBy := map[string][]string{}
	for _, s := range r.services {
		if s.current != nil {
			for _, id := range s.current.BlindCredentials {
				mappedBy[id] = append(mappedBy[id], s.id)
			}
		}
	}
	for id, b := range r.blindArchives {
		if r.blind[id] == nil {
			r.skip(Entry{Kind: kindBlindCredential, ID: id, Revision: b.Revision, Name: b.Name, Reason: "archive revision of a blind credential whose current item is gone: not imported (gantry serves no blind credentials)"})
		}
	}
	for _, b := range r.blind {
		r.count(func(rep *Report) { rep.BlindCredentials.Found++; rep.BlindCredentials.Revisions += int(b.Revision) })
		reason := "blind credential: not imported (its pairs were encrypted by its clients under their own KMS keys, so gantry cannot re-seal them, and gantry serves no blind credentials); move it to a regular credential"
		if ids := mappedBy[b.ID]; len(ids) > 0 {
			slices.Sort(ids)
			reason += "; mapped by services " + strings.Join(ids, ", ") + " (their records keep the id)"
		}
		r.skip(Entry{Kind: kindBlindCredential, ID: b.ID, Revision: b.Revision, Name: b.Name, Reason: reason})
	}
}

// verify reads every revision of every imported record back from gantry and compares it with
// Confidant's: the digest of the decrypted pairs and every field the import carries.
func (r *run) verify(ctx context.Context) {
	total := int64(0)
	for _, c := range r.credentials {
		if !c.inArchive {
			total += int64(c.stored)
		}
	}
	for _, s := range r.services {
		total += int64(s.stored)
	}
	m := r.meter("verifying", "revisions", total)
	defer m.end()
	credIDs := slices.Sorted(maps.Keys(r.credentials))
	r.parallel(ctx, credIDs, func(id string) {
		if c := r.credentials[id]; !c.inArchive { // one archived early was verified then
			r.verifyCredential(ctx, c)
			m.add(int(c.stored))
		}
	})
	svcIDs := slices.Sorted(maps.Keys(r.services))
	r.parallel(ctx, svcIDs, func(id string) {
		s := r.services[id]
		defer m.add(int(s.stored))
		for _, rev := range s.chain[:s.stored] {
			if s.unrepaired[rev.Revision] {
				continue // its difference is reported already
			}
			want := r.mapped(rev, rev.Revision == s.gantryCurrent)
			got, err := r.dst.ServiceRevision(ctx, s.id, want.Revision)
			if err != nil {
				r.fail(Entry{Kind: kindService, ID: s.id, Revision: want.Revision, Reason: "verification: reading it back from gantry: " + err.Error(), Retry: true})
				return
			}
			if reason := serviceDiff(want, got); reason != "" {
				r.fail(Entry{Kind: kindService, ID: s.id, Revision: want.Revision, Reason: "verification: " + reason + changedAfterImport})
				return
			}
			r.count(func(rep *Report) { rep.Services.Verified++ })
		}
	})
}

// changedAfterImport is what to do about a revision gantry holds that differs from Confidant's in
// what the import never rewrites (a credential revision, or a service's fields besides mappings).
const changedAfterImport = "; the import does not rewrite it, so a re-run changes nothing: gantry's copy or Confidant's item was changed after the import; compare the two and correct the wrong one (in gantry: write the record again)"

// verifyCredential reads every written revision of a current credential back (revisions after
// c.stored were not written: their failure is reported already); false on a difference (reported).
func (r *run) verifyCredential(ctx context.Context, c *credential) bool {
	for i, want := range c.chain[:c.stored] {
		got, pairs, err := r.dst.CredentialRevision(ctx, c.id, want.Revision)
		if err != nil {
			r.fail(Entry{Kind: c.kind(), ID: c.id, Revision: want.Revision, Name: want.Name, Reason: "verification: reading it back from gantry: " + err.Error(), Retry: true})
			return false
		}
		reason := credentialDiff(want, got)
		if digest(pairs) != c.digests[i] {
			reason = "its pairs in gantry differ from Confidant's"
		}
		if reason != "" {
			r.fail(Entry{Kind: c.kind(), ID: c.id, Revision: want.Revision, Name: want.Name, Reason: "verification: " + reason + changedAfterImport})
			return false
		}
		r.count(func(rep *Report) { c.counts(rep).Verified++ })
	}
	return true
}

// archiveEarly frees a name for a later credential of Confidant's: the archive-table credential
// holding it, all of it written, is verified and moved to gantry's archive now, before the
// services (Confidant let a new credential take an archived one's name; gantry, like Confidant,
// refuses a name a current credential holds). Service history that names it then leaves it out
// (withoutVanished reports each revision). False when it cannot be.
func (r *run) archiveEarly(ctx context.Context, holder *credential) bool {
	if holder == nil || !holder.archived || holder.inArchive || holder.failed || holder.current == nil ||
		holder.stored != holder.current.Revision || r.opts.DryRun {
		return false
	}
	if !r.verifyCredential(ctx, holder) {
		holder.failed = true
		return false
	}
	if err := r.dst.ArchiveCredential(ctx, holder.id, holder.current.Revision, holder.archiveDate()); err != nil {
		holder.failed = true
		r.fail(Entry{Kind: kindArchived, ID: holder.id, Name: holder.current.Name, Reason: "moving it to gantry's archive to free its name: " + err.Error()})
		return false
	}
	holder.inArchive = true
	r.count(func(rep *Report) { rep.ArchivedCredentials.Archived++ })
	return true
}

// archiveCredentials moves the archive table's credentials, written as current with their whole
// history, into gantry's archive area, stamped with Confidant's archive_date: after the services,
// so the service history that names them keeps the ids. One that a service whose import failed
// still has to name stays current until a run imports that service.
func (r *run) archiveCredentials(ctx context.Context) {
	waiting := map[string][]string{}
	for _, s := range r.services {
		if !s.failed {
			continue
		}
		named := map[string]bool{}
		for _, rev := range s.revs {
			for _, id := range rev.Credentials {
				named[id] = true
			}
		}
		if s.current != nil {
			for _, id := range s.current.Credentials {
				named[id] = true
			}
		}
		for id := range named {
			waiting[id] = append(waiting[id], s.id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.credentials)) {
		c := r.credentials[id]
		if !c.archived || c.inArchive || c.failed || c.current == nil || ctx.Err() != nil {
			continue
		}
		if !r.opts.DryRun && c.stored != c.current.Revision {
			continue // a revision failed to write: reported
		}
		if ids := waiting[id]; len(ids) > 0 {
			slices.Sort(ids)
			r.fail(Entry{Kind: kindArchived, ID: id, Name: c.current.Name, Reason: "kept current, not moved to gantry's archive: the history of services " + strings.Join(ids, ", ") + " names it and did not import; it moves once they do"})
			continue
		}
		if !r.opts.DryRun {
			if err := r.dst.ArchiveCredential(ctx, id, c.current.Revision, c.archiveDate()); err != nil {
				reason := "moving it to gantry's archive: " + err.Error()
				if errors.Is(err, store.ErrStillMapped) {
					reason = "not moved to gantry's archive: a current gantry service maps it (mapped in gantry since the last run?)"
				}
				r.fail(Entry{Kind: kindArchived, ID: id, Name: c.current.Name, Reason: reason})
				continue
			}
			c.inArchive = true
		}
		r.count(func(rep *Report) { rep.ArchivedCredentials.Archived++ })
	}
}

// archiveDate is when Confidant archived the credential (its current item's archive_date).
func (c *credential) archiveDate() time.Time {
	if c.current.ArchiveDate != nil {
		return *c.current.ArchiveDate
	}
	return c.current.ModifiedDate
}

// finishVerification reads every archived credential back from gantry's archive (its last revision,
// the one an archive keeps readable) and settles the verification.
func (r *run) finishVerification(ctx context.Context) {
	for _, id := range slices.Sorted(maps.Keys(r.credentials)) {
		c := r.credentials[id]
		if !c.archived || !c.inArchive || c.failed || len(c.chain) == 0 || ctx.Err() != nil {
			continue
		}
		want := c.chain[len(c.chain)-1]
		got, pairs, err := r.dst.ArchivedCredential(ctx, id)
		reason := ""
		switch {
		case err != nil:
			reason = "reading it back from gantry's archive: " + err.Error()
		case digest(pairs) != c.digests[len(c.digests)-1]:
			reason = "its pairs in gantry's archive differ from Confidant's"
		default:
			reason = credentialDiff(want, got)
		}
		if reason != "" {
			r.fail(Entry{Kind: kindArchived, ID: id, Revision: want.Revision, Name: want.Name, Reason: "verification: " + reason})
		} else if c.stored == 0 {
			r.count(func(rep *Report) { rep.ArchivedCredentials.Verified++ }) // archived by an earlier run
		}
	}
	// Passed means gantry holds everything of Confidant's as Confidant serves it: any failure, a
	// record not imported as much as a revision that reads back wrong, is a difference.
	r.report.Verification = "passed"
	if n := len(r.report.Failures); n > 0 {
		r.report.Verification = fmt.Sprintf("failed (%d %s: gantry does not hold Confidant's data as Confidant serves it)", n, plural(n, "failure", "failures"))
	}
	if ctx.Err() != nil {
		r.report.Verification = "failed (interrupted)"
		r.report.Interrupted = true
	}
}

// credentialDiff names the first field of a stored revision that differs from Confidant's.
func credentialDiff(want *credentialRevision, got *store.CredentialRecord) string {
	switch {
	case got.Name != want.Name:
		return "name differs"
	case got.Enabled != want.Enabled:
		return "enabled differs"
	case !strPtrEqual(got.Documentation, want.Documentation):
		return "documentation differs"
	case !maps.Equal(got.Metadata, want.Metadata) && (len(got.Metadata)+len(want.Metadata)) > 0:
		return "metadata differs"
	case !slices.Equal(sorted(got.Tags), want.Tags):
		return "tags differ"
	case got.ModifiedBy != want.ModifiedBy:
		return "modified_by differs"
	case !got.ModifiedDate.Equal(want.ModifiedDate):
		return "modified_date differs"
	case !timePtrEqual(got.LastRotationDate, want.LastRotationDate):
		return "last_rotation_date differs"
	case !timePtrEqual(got.LastDecryptedDate, want.LastDecryptedDate):
		return "last_decrypted_date differs"
	}
	return ""
}

func serviceDiff(want *serviceRevision, got *store.ServiceRecord) string {
	switch {
	case got.Enabled != want.Enabled:
		return "enabled differs"
	case !strPtrEqual(got.Account, want.Account):
		return "account differs"
	case !slices.Equal(sorted(got.Credentials), want.Credentials):
		return "credentials differ"
	case !slices.Equal(sorted(got.BlindCredentials), want.BlindCredentials):
		return "blind_credentials differ"
	case got.ModifiedBy != want.ModifiedBy:
		return "modified_by differs"
	case !got.ModifiedDate.Equal(want.ModifiedDate):
		return "modified_date differs"
	}
	return ""
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}

func strPtrEqual(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func timePtrEqual(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }

// revisionCount is the revisions of a record the import goes through: its current item's, or the
// archive items found when it has none.
func revisionCount[R any](h *history[R]) int {
	if h.current != nil {
		return int(head(h.current).Revision)
	}
	return len(h.revs)
}

// revisionsToImport is the total of the import phase, for its progress.
func (r *run) revisionsToImport() int64 {
	n := 0
	for _, c := range r.credentials {
		n += revisionCount(&c.history)
	}
	for _, s := range r.services {
		n += revisionCount(&s.history)
	}
	return int64(n)
}
